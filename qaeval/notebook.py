"""What the report notebooks and the HTML reports use: a notebook's parameters checked, the result it draws
(a saved record, or the command run afresh), and a result, a record or a folder of runs rendered as a page.

    import qaeval.notebook as nb
    params = nb.parameters("gate", globals())
    result = nb.result("gate", params)
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from qaeval import api
from qaeval.commands.common import check_parameters
from qaeval.core import params as P
from qaeval.core.errors import UsageError
from qaeval.core.files import check_writable, refuse_overwrite
from qaeval.core.results import Result
from qaeval.core.settings import Settings
from qaeval.record.read import load_run
from qaeval.record.runs import runs_table
from qaeval.record.write import write_record
from qaeval.verdicts.compare import Comparison


def parameters(command: str, namespace: Mapping[str, Any]) -> Settings:
    """Check a notebook's parameters, as papermill may have overridden them. A name papermill injected that
    the notebook does not know is a usage error (papermill only warns): ``-p adpter ...`` never runs the default.

    Args:
        command: The notebook's command (``run``, ``gate``, ``calibrate``, ``drift``, ``monitor``, ``propose``).
        namespace: The notebook's globals after its parameters cell.

    Returns:
        The command's checked settings (``qaeval.core.settings.Settings``), for ``result`` or ``propose``.

    Raises:
        UsageError: An injected name the notebook does not know, or a bad value (exit 64).
    """
    known = P.names_for(command)
    injected = _injected_names()
    unknown = sorted(n for n in injected if n not in known)
    if unknown:
        raise UsageError(
            f"the {command} notebook has no parameter {', '.join(repr(u) for u in unknown)}; "
            f"its parameters are: {', '.join(known)}"
        )
    given = {n: namespace[n] for n in known if n in namespace}
    return check_parameters(command, **_quiet_unless_asked(command, given))


def _quiet_unless_asked(command: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """A report draws no progress bar unless ``progress`` is True: a bar drawn into a report is noise."""
    quiet = "progress" in P.names_for(command) and given.get("progress") is None
    return {**given, "progress": False} if quiet else dict(given)


def _injected_names() -> list[str]:
    """Names assigned by papermill's injected-parameters cell in this kernel, if any."""
    import ast

    try:
        from IPython import get_ipython
    except ImportError:
        return []
    shell = get_ipython()
    history = list(shell.user_ns.get("In", [])) if shell is not None else []
    source = next((c for c in reversed(history) if isinstance(c, str) and c.lstrip().startswith("# Parameters")), "")
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return []
    return [t.id for node in body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)]


def result(command: str, p: Settings | Mapping[str, Any]) -> Result:
    """What a report notebook draws: the saved record it was given, or a fresh run of the command.

    Args:
        command: The notebook's command (``run``, ``gate``, ``calibrate``, ``drift``, ``monitor``).
        p: Its checked settings (``parameters``), not checked again; or its parameters by name, checked
            here. No progress bar is drawn unless ``progress`` is True.

    Returns:
        The command's result.
    """
    settings = p if isinstance(p, Settings) else check_parameters(command, **_quiet_unless_asked(command, p))
    if settings.command != command:
        raise UsageError(f"these are the {settings.command} notebook's settings, not the {command} notebook's")
    return api.perform(settings)


def propose(p: Settings | Mapping[str, Any]) -> Any:
    """The propose notebook's proposal (``qaeval.proposals.run.propose``), its sheet written.

    Args:
        p: The propose notebook's checked settings (``parameters``), or its parameters by name.

    Returns:
        The proposal.
    """
    return api.propose(**dict(p.params if isinstance(p, Settings) else p))  # it draws no progress bar


def runs_index(folder: str | Path, html: str | Path) -> tuple[Any, Path]:
    """``runs(folder)`` and its index page at ``html``: a row per run linking its report, each metric over time.

    Args:
        folder: The folder of saved records.
        html: Where to write the index page.

    Returns:
        (The runs table, the page's path.)
    """
    from qaeval.reports.runs import render_runs

    table = runs_table(folder)
    refuse_overwrite([("html", html, "report")], [("record", path) for path in table["path"]])
    check_writable([("html", html, "report")])
    return table, render_runs(table, html, folder=str(folder))


def render(result: Result, html: str | Path, *, show_code: bool = False) -> Path:
    """Render a result's report: saved as a record and drawn with its notebook (a comparison directly).

    Args:
        result: The result to render.
        html: Where to write the page.
        show_code: Keep the notebook's code cells in the page.

    Returns:
        The page's path.
    """
    from qaeval.reports.render import render_comparison, render_record

    if isinstance(result, Comparison):
        return render_comparison(result, html)
    with tempfile.TemporaryDirectory(prefix="qaeval-record-") as tmp:
        path = write_record(result, Path(tmp) / "record.json")
        return render_record(path, html, kind=result.kind, show_code=show_code)


def report(record: str | Path, html: str | Path, *, show_code: bool = False) -> tuple[Result, Path]:
    """Render a saved record with its notebook, calling neither the system nor the judge.

    Args:
        record: The saved record.
        html: Where to write the page.
        show_code: Keep the notebook's code cells in the page.

    Returns:
        (The result the record holds, the page's path.)
    """
    from qaeval.reports.render import render_record

    loaded = load_run(record)
    refuse_overwrite([("html", html, "report")], [("record", record)], data=api.as_run(loaded).meta.data)
    check_writable([("html", html, "report")])  # before the notebook runs, not after
    return loaded, render_record(record, html, kind=loaded.kind, show_code=show_code)
