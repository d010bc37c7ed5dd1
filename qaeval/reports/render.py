"""Executing a report notebook under papermill and rendering it with nbconvert to one HTML file.

``render_record(RECORD, HTML)`` runs the notebook of the record's kind with ``record=RECORD`` (it only
loads and draws), on a kernel that is this very interpreter. The page is drawn by the ``qaeval``
nbconvert template (also installed as ``share/jupyter/nbconvert/templates/qaeval``): code cells hidden,
no traceback for a qaeval verdict, any other error announced at the top of the page.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qaeval.core.errors import QaevalError, ReportError
from qaeval.core.files import write_atomic

if TYPE_CHECKING:
    from qaeval.verdicts.compare import Comparison

NOTEBOOKS = ("run", "gate", "calibrate", "drift", "monitor")
TEMPLATES = Path(__file__).resolve().parent / "template"
VERDICT_ERRORS = {"GateBlocked", "JudgeNotTrusted", "DriftAlarm", "TierOneFailed", "BaselineRefused"}


def notebook_path(name: str) -> Path:
    """The notebook shipped in the package (a wheel), or the repository's ``notebooks/`` (a clone)."""
    if name not in NOTEBOOKS:
        raise ReportError(f"no notebook named {name!r}")
    package = Path(__file__).resolve().parents[1]
    for folder in (package / "notebooks", package.parent / "notebooks"):
        if (folder / f"{name}.ipynb").is_file():
            return folder / f"{name}.ipynb"
    raise ReportError(f"notebook {name}.ipynb is not installed (looked in {package / 'notebooks'})")


# The report kernel's own environment (it is a child process; this one's is left alone): no progress bars
# in the log, and no debugger warning about frozen modules.
KERNEL_ENV = {"QAEVAL_PROGRESS": "0", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}


@contextmanager
def _this_interpreter() -> Iterator[type]:
    """A kernel manager class whose only kernelspec, ``python3``, is this very interpreter, whatever
    kernels the machine has registered: handed to papermill as an argument, so the kernels this process
    finds (``JUPYTER_PATH``) are not changed for anyone else."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    with tempfile.TemporaryDirectory(prefix="qaeval-kernel-") as tmp:
        spec = Path(tmp) / "kernels" / "python3"
        spec.mkdir(parents=True)
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}", "--IPKernelApp.log_level=ERROR"]
        kernel = {"argv": argv, "display_name": "Python 3 (qaeval)", "language": "python", "env": KERNEL_ENV}
        (spec / "kernel.json").write_text(json.dumps(kernel))
        kernels = str(spec.parent)

        class ThisInterpreter(AsyncKernelManager):
            def __init__(self, **kwargs: Any) -> None:
                super().__init__(kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels]), **kwargs)

        yield ThisInterpreter


KERNEL_STARTS = 3  # attempts to start a kernel that dies before it answers


def run_papermill(source: str | Path, output: str | Path, **options: Any) -> Any:
    """``papermill.execute_notebook``, started again when the kernel dies before it answers: kernels
    started at the same moment on one machine (parallel CI jobs, test workers) can be handed the same
    free port, and one then fails with "Address already in use". No cell has run at that point."""
    import papermill

    for attempt in range(1, KERNEL_STARTS + 1):
        try:
            return papermill.execute_notebook(str(source), str(output), **options)
        except RuntimeError as exc:  # jupyter_client's, from the kernel's start; a cell's error is not one
            if "kernel_info" not in str(exc) or attempt == KERNEL_STARTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def execute_notebook(
    name: str, parameters: dict[str, Any], output: str | Path, *, cwd: str | Path | None = None
) -> Exception | None:
    """Execute a notebook under papermill; returns the execution error (if a cell raised) instead of
    raising, because a failed notebook is still a report worth rendering."""
    from papermill.exceptions import PapermillExecutionError

    with _this_interpreter() as manager:
        try:
            run_papermill(
                notebook_path(name),
                output,
                parameters=parameters,
                kernel_name="python3",
                kernel_manager_class=manager,
                # the kernel's working directory, given to the kernel: papermill's own cwd= would change
                # this process's for the length of the run
                resources={"metadata": {"path": str(cwd or os.getcwd())}},
                progress_bar=False,
                log_output=False,
            )
        except PapermillExecutionError as exc:
            return exc
    return None


def exporter(*, show_code: bool = False) -> Any:
    from nbconvert import HTMLExporter

    html = HTMLExporter(template_name="qaeval", extra_template_basedirs=[str(TEMPLATES)])
    html.exclude_input_prompt = html.exclude_output_prompt = True
    html.exclude_anchor_links = True
    html.qaeval_show_code = show_code  # type: ignore[attr-defined]  # read by the qaeval template
    return html


def export_html(
    notebook: str | Path, html_path: str | Path, *, show_code: bool = False, title: str | None = None
) -> Path:
    """Render an executed notebook to one self-contained HTML file (figures embedded, no script but the
    case explorer's)."""
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    resources = {"metadata": {"name": title or Path(html_path).stem}, "qaeval_show_code": show_code}
    body, _ = exporter(show_code=show_code).from_notebook_node(nb, resources=resources)
    return write_atomic(html_path, body)


def render_record(record: str | Path, html_path: str | Path, *, kind: str, show_code: bool = False) -> Path:
    """Draw a saved run record with the notebook of its kind and render the page."""
    name = "run" if kind in ("run", "baseline") else kind
    with tempfile.TemporaryDirectory(prefix="qaeval-nb-") as tmp:
        executed = Path(tmp) / f"{name}.ipynb"
        error = execute_notebook(name, {"record": str(Path(record).resolve())}, executed)
        if not executed.exists():
            raise ReportError(f"the {name} notebook did not run: {error}")
        path = export_html(executed, html_path, show_code=show_code, title=f"qaeval {name} report")
    if error is not None and getattr(error, "ename", "") not in VERDICT_ERRORS:
        raise _kernel_error(error, path)
    return path


def _kernel_error(error: Any, report: Path) -> QaevalError:
    from qaeval.core import errors

    cls = getattr(errors, getattr(error, "ename", ""), None)
    message = f"{getattr(error, 'evalue', error)} (report with the failure: {report})"
    if isinstance(cls, type) and issubclass(cls, QaevalError) and not issubclass(cls, errors.VerdictError):
        if issubclass(cls, errors.DatasetError):
            return errors.DatasetError(message)
        if issubclass(cls, errors.FileAccessError):
            return errors.FileAccessError(report, message)
        return cls(message)
    return ReportError(f"the notebook raised {getattr(error, 'ename', 'an error')}: {message}")


def page(title: str, body: str) -> str:
    """A whole report page around already-escaped markup, with the template's stylesheet (for reports
    drawn without a notebook, such as ``qaeval compare``)."""
    from qaeval.reports.explorer import SCRIPT_HASH
    from qaeval.reports.html import esc

    css = (TEMPLATES / "qaeval" / "report.css").read_text("utf-8")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
        f"style-src 'unsafe-inline'; script-src {SCRIPT_HASH}\">"
        f'<title>{esc(title)}</title><style>{css}</style></head><body><main class="qaeval-report">'
        f"{body}</main></body></html>\n"
    )


def render_comparison(comparison: Comparison, html_path: str | Path) -> Path:
    from qaeval.reports.compare import compare_cases, compare_metrics
    from qaeval.reports.explorer import case_explorer
    from qaeval.reports.html import banner, facts_html

    body = (
        f"<h1>qaeval compare</h1>{banner(comparison).markup}"
        + facts_html(
            {
                "before": comparison.before_label,
                "after": comparison.after_label,
                "cases before": len(comparison.before.suite),
                "cases after": len(comparison.after.suite),
            }
        )
        + "<h2>Metrics</h2>"
        + compare_metrics(comparison).markup
        + "<h2>Every case</h2>"
        + case_explorer(comparison).markup
        + "<h2>What changed, case by case</h2>"
        + compare_cases(comparison).markup
    )
    return write_atomic(html_path, page("qaeval compare", body))


def render_proposal(proposal: Any, html_path: str | Path) -> Path:
    """The propose notebook's page, drawn directly: the candidates, what they were chosen from, the drops."""
    from qaeval.reports.html import esc
    from qaeval.reports.proposals import candidates_table, proposal_drops, proposal_pool

    body = (
        f"<h1>qaeval proposed cases</h1><pre>{esc(proposal.summary_text())}</pre>"
        + "<h2>What it chose from</h2>"
        + proposal_pool(proposal).markup
        + proposal_drops(proposal).markup
        + "<h2>The candidates, with their checks</h2>"
        + candidates_table(proposal).markup
    )
    return write_atomic(html_path, page("qaeval proposed cases", body))
