"""The four notebooks: committed clean, parameterised with literals, executed for real under papermill,
rendered to self-contained HTML that escapes everything a case or an answer brought in."""

from __future__ import annotations

import ast
import json
import os
import re

import nbformat
import papermill
import pytest
from conftest import GOLDEN, LABELS, ROOT
from papermill.exceptions import PapermillExecutionError

from qaeval.cli import main
from qaeval.reports.render import NOTEBOOKS, notebook_path

TESTS = str(ROOT / "tests")


@pytest.fixture(autouse=True)
def kernel_sees_test_plugins(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("QAEVAL_PROGRESS", "0")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_committed_clean_with_one_literal_parameters_cell(name):
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code), "strip outputs before committing"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    for stmt in ast.parse(tagged[0].source).body:
        assert isinstance(stmt, ast.Assign), "parameters are plain assignments"
        ast.literal_eval(stmt.value)  # literals only
    after = code[code.index(tagged[0]) + 1].source
    assert "qa.check_parameters(" in after, "the cell after the parameters validates them"
    for cell in code:
        tree = ast.parse(cell.source)
        assert not any(isinstance(n, (ast.For, ast.While, ast.If, ast.FunctionDef)) for n in ast.walk(tree)), \
            "notebooks hold library calls and displays; logic belongs in qaeval/"


def test_gate_notebook_ends_with_raise_for_status():
    nb = nbformat.read(ROOT / "notebooks" / "gate.ipynb", as_version=4)
    assert nb.cells[-1].source.strip() == "result.raise_for_status()"


def execute(tmp_path, name, **parameters):
    out = tmp_path / f"{name}-out.ipynb"
    papermill.execute_notebook(str(notebook_path(name)), str(out), parameters=parameters, kernel_name="python3",
                               progress_bar=False, cwd=str(ROOT))
    return nbformat.read(out, as_version=4)


def outputs_text(nb) -> str:
    return json.dumps([c.get("outputs", []) for c in nb.cells])


def test_run_notebook_executes_and_shows_the_scoreboard(tmp_path):
    nb = execute(tmp_path, "run", data=str(GOLDEN))
    text = outputs_text(nb)
    assert "deterministic_pass_rate" in text and "image/png" in text and "Failing cases" in text


def test_calibrate_notebook_executes_and_refuses_the_offline_judge(tmp_path):
    text = outputs_text(execute(tmp_path, "calibrate", data=str(GOLDEN), labels=str(LABELS)))
    assert "RETUNE JUDGE" in text and "answer_correctness" in text


def test_drift_notebook_executes_and_appends_once(tmp_path):
    series = tmp_path / "series.jsonl"
    text = outputs_text(execute(tmp_path, "drift", data=str(GOLDEN), timeseries=str(series)))
    assert "history too short" in text and len(series.read_text().splitlines()) == 1


def test_gate_notebook_fails_under_papermill_on_block(tmp_path):
    baseline = tmp_path / "b.json"
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(baseline)]) == 0
    with pytest.raises(PapermillExecutionError) as info:
        execute(tmp_path, "gate", data=str(GOLDEN / "buggy"), adapter="qaeval.system.saboteur:make_adapter",
                baseline=str(baseline))
    assert info.value.ename == "GateBlocked"
    execute(tmp_path, "gate", data=str(GOLDEN), baseline=str(baseline))  # and passes on golden


def test_gate_html_report_blocks_with_embedded_figures_and_same_exit_code(tmp_path, capsys):
    baseline = tmp_path / "b.json"
    main(["baseline", "--data", str(GOLDEN), "--out", str(baseline)])
    report = tmp_path / "reports" / "gate.html"
    code = main(["gate", "--data", str(GOLDEN / "buggy"), "--adapter", "qaeval.system.saboteur:make_adapter",
                 "--baseline", str(baseline), "--html", str(report)])
    assert code == 1 and "GATE: BLOCK" in capsys.readouterr().out
    page = report.read_text()
    assert "BLOCK" in page and "data:image/png;base64," in page
    assert "<script" not in page
    assert not re.search(r'<(script|link)[^>]+(src|href)="https?://', page), "self-contained: nothing fetched"
    assert "class=\"jp-CodeMirrorEditor" not in page, "code is hidden by default"
    shown = tmp_path / "shown.html"
    main(["run", "--data", str(GOLDEN), "--html", str(shown), "--show-code"])
    assert "class=\"jp-CodeMirrorEditor" in shown.read_text() and "check_parameters" in shown.read_text()


def test_html_of_a_missing_baseline_is_exit_65_before_any_kernel(tmp_path, capsys):
    code = main(["gate", "--data", str(GOLDEN), "--baseline", str(tmp_path / "nope.json"),
                 "--html", str(tmp_path / "g.html")])
    assert code == 65 and not (tmp_path / "g.html").exists()


def test_reports_show_markup_from_cases_and_answers_as_text(hostile_reports):
    for report in hostile_reports:
        page = report.read_text()
        assert "<script" not in page
        assert "<img src=x" not in page and "&lt;img src=x onerror=" in page
        assert "&lt;script&gt;" in page, "the markup is shown, escaped"
        assert "xss-&lt;i&gt;0001&lt;/i&gt;" in page
