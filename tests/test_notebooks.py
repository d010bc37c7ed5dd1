"""The four notebooks: committed clean, parameterised with literals that papermill can override (and a typo
never silently ignored), executed for real, rendered to self-contained HTML that escapes everything a case
or an answer brought in, and drawn from a saved record without calling anything."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import papermill
import pytest
from conftest import GOLDEN, ROOT
from helpers import without_explorer
from papermill.exceptions import PapermillExecutionError

from qaeval import api
from qaeval.cli import main
from qaeval.core import params as P
from qaeval.reports.render import NOTEBOOKS, notebook_path, run_papermill

TESTS = str(ROOT / "tests")


@pytest.fixture(autouse=True)
def kernel_sees_test_plugins(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("QAEVAL_PROGRESS", "0")


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    path = tmp_path_factory.mktemp("nb") / "b.json"
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(path)]) == 0
    return str(path)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_committed_clean_with_one_literal_parameters_cell(name):
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code), "strip outputs before committing"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    names = []
    for stmt in ast.parse(tagged[0].source).body:
        assert isinstance(stmt, ast.Assign), "parameters are plain assignments"
        ast.literal_eval(stmt.value)  # literals only
        names.append(stmt.targets[0].id)
    assert names == P.names_for(name), "the parameters cell lists exactly the command's parameters"
    after = code[code.index(tagged[0]) + 1].source
    assert f'nb.parameters("{name}", globals())' in after, "the cell after the parameters validates them"
    for cell in code:
        tree = ast.parse(cell.source)
        assert not any(isinstance(n, (ast.For, ast.While, ast.If, ast.FunctionDef)) for n in ast.walk(tree)), (
            "notebooks hold library calls and displays; logic belongs in qaeval/"
        )


@pytest.mark.parametrize("name", ["gate", "calibrate", "drift"])
def test_verdict_notebooks_end_with_raise_for_status(name):
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    assert nb.cells[-1].source.strip() == "result.raise_for_status()"


def execute(tmp_path, name, **parameters):
    out = tmp_path / f"{name}-out.ipynb"
    run_papermill(
        notebook_path(name), out, parameters=parameters, kernel_name="python3", progress_bar=False, cwd=str(ROOT)
    )
    return nbformat.read(out, as_version=4)


def outputs_text(nb) -> str:
    return json.dumps([c.get("outputs", []) for c in nb.cells])


def test_run_notebook_executes_and_shows_the_scoreboard(tmp_path):
    text = outputs_text(execute(tmp_path, "run", data=str(GOLDEN)))
    assert "deterministic_pass_rate" in text and "image/png" in text and "GREEN" in text
    assert 'details class=\\"case fail\\"' in text, "every case has a drill-down"


def test_calibrate_notebook_raises_its_refusal(tmp_path, strict_labels):
    with pytest.raises(PapermillExecutionError) as info:
        execute(tmp_path, "calibrate", data=str(GOLDEN), labels=str(strict_labels))
    assert info.value.ename == "JudgeNotTrusted" and "answer_correctness" in info.value.evalue
    text = outputs_text(nbformat.read(tmp_path / "calibrate-out.ipynb", as_version=4))
    assert "RETUNE JUDGE" in text


def test_drift_notebook_executes_and_appends_once(tmp_path):
    series = tmp_path / "series.jsonl"
    text = outputs_text(execute(tmp_path, "drift", data=str(GOLDEN), timeseries=str(series)))
    assert "history too short" in text and len(series.read_text().splitlines()) == 1


def test_drift_notebook_raises_on_an_alarm(tmp_path):
    series = tmp_path / "series.jsonl"
    for _ in range(3):
        assert main(["drift", "--data", str(GOLDEN), "--timeseries", str(series), "--quiet"]) == 0
    with pytest.raises(PapermillExecutionError) as info:
        execute(
            tmp_path, "drift", data=str(GOLDEN), timeseries=str(series), adapter="qaeval.system.saboteur:make_adapter"
        )
    assert info.value.ename == "DriftAlarm"


def test_gate_notebook_fails_under_papermill_on_block(tmp_path, baseline):
    with pytest.raises(PapermillExecutionError) as info:
        execute(tmp_path, "gate", data=str(GOLDEN), adapter="qaeval.system.saboteur:make_adapter", baseline=baseline)
    assert info.value.ename == "GateBlocked"
    execute(tmp_path, "gate", data=str(GOLDEN), baseline=baseline)  # and passes on golden


def test_a_misspelt_parameter_is_a_usage_error_not_the_default_adapter(tmp_path, baseline):
    with pytest.raises(PapermillExecutionError) as info:
        execute(tmp_path, "gate", data=str(GOLDEN), adpter="qaeval.system.saboteur:make_adapter", baseline=baseline)
    assert info.value.ename == "UsageError"
    assert "no parameter 'adpter'" in info.value.evalue and "adapter" in info.value.evalue


def test_a_crash_and_a_block_say_which_they_are(tmp_path, baseline):
    with pytest.raises(PapermillExecutionError) as info:
        execute(tmp_path, "gate", data=str(tmp_path / "no-such-folder"), baseline=baseline)
    assert info.value.ename == "DatasetError", "a bad data path is not a BLOCK"


def test_a_tolerance_given_as_one_string_is_one_item(tmp_path, baseline):
    nb = execute(tmp_path, "gate", data=str(GOLDEN), baseline=baseline, tolerance="faithfulness_rate=0.5")
    assert "PASS" in outputs_text(nb), "read as one tolerance, not one character at a time"
    from qaeval import api

    result = api.gate(str(GOLDEN), baseline=baseline, tolerance="faithfulness_rate=0.5")
    assert result.metric_deltas.set_index("metric").at["faithfulness_rate", "tolerance"] == 0.5


def test_a_misspelt_api_keyword_is_a_usage_error():
    from qaeval import UsageError, api

    with pytest.raises(UsageError, match="no parameter 'adaptr'.*adapter"):
        api.gate(str(GOLDEN), baseline="x.json", adaptr="qaeval.system.saboteur:make_adapter")
    with pytest.raises(UsageError, match="no parameter 'concurency'"):
        api.run(str(GOLDEN), concurency=4)


def test_an_adapter_defined_in_a_notebook_cell_runs_in_the_workers(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import os\n"
            "import time\n"
            "import qaeval.api as qa\n"
            "from qaeval import SUTOutput, Citation\n\n"
            "class QuoteFirst:\n"
            "    def answer(self, case):\n"
            "        best = case.sources[0]\n"
            "        time.sleep(0.1)\n"
            "        print('worker', os.getpid())\n"
            "        return SUTOutput(answer=best.text, citations=[Citation(best.id, best.text)], retrieved_ids=[best.id],\n"
            "                         model_was_called=True, prompt_to_model=case.question + '\\n' + best.text)\n\n"
            f"result = qa.run({str(GOLDEN)!r}, adapter=QuoteFirst(), concurrency=4)\n"
            "pids = {line for logs in result.outputs['logs'] for line in logs.splitlines()}\n"
            "assert result.outputs['error'].isna().all(), result.outputs['error']\n"
            "assert f'worker {os.getpid()}' not in pids and len(pids) > 1, pids\n"
            "print('cases', len(result.per_case), 'workers', len(pids), result.meta.isolation)"
        )
    ]
    path = tmp_path / "adapter-in-a-cell.ipynb"
    nbformat.write(nb, path)
    run_papermill(path, tmp_path / "out.ipynb", kernel_name="python3", progress_bar=False, cwd=str(ROOT))
    text = outputs_text(nbformat.read(tmp_path / "out.ipynb", as_version=4))
    assert "cases 15 workers" in text and "process" in text


def test_gate_html_report_blocks_with_embedded_figures_and_same_exit_code(tmp_path, capsys, baseline):
    report = tmp_path / "reports" / "gate.html"
    code = main(
        [
            "gate",
            "--data",
            str(GOLDEN),
            "--adapter",
            "qaeval.system.saboteur:make_adapter",
            "--baseline",
            baseline,
            "--html",
            str(report),
        ]
    )
    assert code == 1 and "GATE: BLOCK" in capsys.readouterr().out
    page = report.read_text()
    assert "BLOCK" in page and "data:image/png;base64," in page
    assert "<script" not in without_explorer(page), "no script but the explorer's"
    assert "Traceback" not in page and "GateBlocked" not in page
    assert not re.search(r'<(script|link)[^>]+(src|href)="https?://', page), "self-contained: nothing fetched"
    assert 'class="qaeval-code"' not in page, "code is hidden by default"
    for case_id in ("single-0002", "abstain-0001", "agg-0002", "multi-0003"):
        assert page.count(f'id="case-{case_id}"') == 1, "each blocking case is drawn once"
    assert "<mark>" in page
    shown = tmp_path / "shown.html"
    main(["run", "--data", str(GOLDEN), "--html", str(shown), "--show-code"])
    assert 'class="qaeval-code"' in shown.read_text() and "nb.parameters" in shown.read_text()


def test_html_of_a_missing_baseline_is_exit_65_before_any_kernel(tmp_path):
    code = main(
        ["gate", "--data", str(GOLDEN), "--baseline", str(tmp_path / "nope.json"), "--html", str(tmp_path / "g.html")]
    )
    assert code == 65 and not (tmp_path / "g.html").exists()


def test_reports_show_markup_from_cases_and_answers_as_text(hostile_reports):
    for report in hostile_reports:
        page = report.read_text()
        assert "<script" not in without_explorer(page), "no script but the explorer's"
        assert "<img src=x" not in page and "&lt;img src=x onerror=" in page
        assert "&lt;script&gt;" in page, "the markup is shown, escaped"
        assert "xss-&lt;i&gt;0001&lt;/i&gt;" in page


def test_golden_run_report_is_light(tmp_path):
    report = tmp_path / "run.html"
    assert main(["run", "--data", str(GOLDEN), "--html", str(report), "--quiet"]) == 0
    assert report.stat().st_size < 175_000, f"{report.stat().st_size} bytes"  # the explorer: ~20 kB of it
    page = report.read_text()
    assert "qaeval run report" in page and "qaeval.core.params" not in page, "notebook plumbing is not for reviewers"


def test_nbconvert_template_qaeval_renders_papermill_output(tmp_path, baseline):
    """What a CI user tries first: papermill, then jupyter nbconvert --template qaeval."""
    executed = tmp_path / "gate-out.ipynb"
    with pytest.raises(PapermillExecutionError):
        execute(tmp_path, "gate", data=str(GOLDEN), adapter="qaeval.system.saboteur:make_adapter", baseline=baseline)
    jupyter = Path(sys.executable).with_name("jupyter")
    if not jupyter.exists():
        pytest.skip("jupyter is not installed next to this interpreter")
    done = subprocess.run(
        [str(jupyter), "nbconvert", "--to", "html", "--template", "qaeval", str(executed), "--output", "page"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "page.html").read_text()
    assert "BLOCK" in page and "An Exception was encountered" not in page and "Traceback" not in page
    assert "nb.parameters" not in page, "code cells are hidden"
    assert page.count("data = ") == 0, "the parameters are not shown twice (or at all)"


def test_a_failed_papermill_run_leads_with_the_error_not_a_traceback(tmp_path, baseline):
    from qaeval.reports.render import export_html

    with pytest.raises(PapermillExecutionError):
        execute(tmp_path, "gate", data=str(tmp_path / "missing"), baseline=baseline)
    page = export_html(tmp_path / "gate-out.ipynb", tmp_path / "crash.html").read_text()
    assert page.index("This report is incomplete") < page.index("qaeval gate report") + 2000
    assert "DatasetError" in page and "Traceback" not in page and "An Exception was encountered" not in page


def test_report_from_a_record_calls_nothing(tmp_path, monkeypatch):
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("QAEVAL_TEST_CALLS", str(calls))
    record = tmp_path / "run.json"
    assert (
        main(
            [
                "run",
                "--data",
                str(GOLDEN),
                "--adapter",
                "plugins:make_counting",
                "--save",
                str(record),
                "--html",
                str(tmp_path / "first.html"),
            ]
        )
        == 0
    )
    assert len(calls.read_text().splitlines()) == 15, "--html draws the run it made: one call per case"
    assert main(["report", str(record), "--html", str(tmp_path / "again.html")]) == 0
    assert len(calls.read_text().splitlines()) == 15, "report called the adapter again"
    assert "GREEN" in (tmp_path / "again.html").read_text()


def test_a_kernel_that_dies_before_it_answers_is_started_again(monkeypatch, tmp_path):
    """CI failed once: two test workers' kernels were handed the same free port and one died
    ("Kernel died before replying to kernel_info"). Such a start is tried again; a cell's error is not."""
    calls = []

    def flaky(source, output, **options):
        calls.append(source)
        if len(calls) == 1:
            raise RuntimeError("Kernel died before replying to kernel_info")
        return "executed"

    monkeypatch.setattr(papermill, "execute_notebook", flaky)
    assert run_papermill("nb.ipynb", tmp_path / "out.ipynb") == "executed" and len(calls) == 2

    def broken(source, output, **options):
        calls.append(source)
        raise RuntimeError("something else")

    calls.clear()
    monkeypatch.setattr(papermill, "execute_notebook", broken)
    with pytest.raises(RuntimeError, match="something else"):
        run_papermill("nb.ipynb", tmp_path / "out.ipynb")
    assert len(calls) == 1


def test_a_report_rendered_with_the_template_carries_no_plumbing(tmp_path, monkeypatch):
    """A notebook rendered with `nbconvert --template qaeval` opened with `TqdmWarning: IProgress not found`
    (or a progress bar), its headings carried nbconvert's ¶ anchors, and its case table had ids only."""
    jupyter = Path(sys.executable).with_name("jupyter")
    if not jupyter.exists():
        pytest.skip("jupyter is not installed next to this interpreter")
    monkeypatch.setenv("QAEVAL_PROGRESS", "1")  # as in a terminal: the run would draw its bar
    nb = execute(tmp_path, "run", data=str(GOLDEN))
    assert "cases:" not in outputs_text(nb), "no progress bar is drawn into a report notebook"
    warning = "TqdmWarning: IProgress not found. Please update jupyter and ipywidgets."
    nb.cells[-1].outputs.append(nbformat.v4.new_output("stream", name="stderr", text=warning))  # a library's
    nbformat.write(nb, tmp_path / "run-out.ipynb")
    done = subprocess.run(
        [
            str(jupyter),
            "nbconvert",
            "--to",
            "html",
            "--template",
            "qaeval",
            str(tmp_path / "run-out.ipynb"),
            "--output",
            "page",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "page.html").read_text()
    assert "TqdmWarning" not in page and "¶" not in page
    table = page[page.index("<caption>Every case (failing first)") :]
    table = table[: table.index("</table>")]
    assert "How many days can I keep a DVD I borrowed?" in table


def test_failing_cases_with_none_says_so(tmp_path):
    from conftest import make_case, write_cases

    write_cases(tmp_path / "d", [make_case()])
    result = api.run(str(tmp_path / "d"))
    assert result.ok and int(result.per_case["case_passed"].sum()) == 1
    none = result.failing_cases()
    assert none.empty and repr(none) == "No case fails." and "No case fails." in none._repr_html_()
