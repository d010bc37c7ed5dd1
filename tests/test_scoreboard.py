"""The scoreboard: the honest profile of the hub, n = 0 is NaN, intervals, slices, commands."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import GOLDEN, make_case
from helpers import frames, output

from qaeval.cli import main
from qaeval.judges.offline import OfflineJudge
from qaeval.scoring.evaluate import score_outputs
from qaeval.scoring.metrics import METRIC_NAMES, METRICS, ratio_with_interval


def test_reference_hub_shows_the_honest_profile(golden_run):
    board = golden_run.scoreboard.set_index("metric")["value"]
    assert board["deterministic_pass_rate"] == 1.0
    assert board["faithfulness_rate"] == 1.0
    assert board["citation_precision"] == 1.0
    assert board["abstention_recall"] == 1.0
    assert board["over_refusal_rate"] == 0.0
    assert board["multi_step_task_success"] == 0.0
    assert board["answer_correctness"] == pytest.approx(8 / 12), "the eight answers that quote the gold answer"


def test_scoreboard_has_every_metric_with_interval_n_and_direction(golden_run):
    board = golden_run.scoreboard
    assert list(board["metric"]) == list(METRIC_NAMES)
    assert (board["ci_low"] <= board["value"] + 1e-12).all() and (board["value"] <= board["ci_high"] + 1e-12).all()
    assert board.set_index("metric").at["over_refusal_rate", "direction"] == "lower"
    assert board.set_index("metric").at["abstention_recall", "n"] == 3


def test_metric_with_nothing_to_average_is_nan_with_n_zero(tmp_path):
    suite, _, outs, _ = frames(tmp_path)  # one answerable single-hop case: no must-abstain, no multi-step
    board = score_outputs(suite, outs, OfflineJudge()).scoreboard.set_index("metric")
    for name in ("abstention_recall", "multi_step_task_success"):
        assert math.isnan(board.at[name, "value"]) and board.at[name, "n"] == 0
        assert math.isnan(board.at[name, "ci_low"])


def test_abstention_is_not_counted_as_a_faithful_answer(tmp_path):
    suite, _, outs, _ = frames(
        tmp_path,
        [make_case(id="a"), make_case(id="b")],
        [output("a"), output("b", abstained=True, answer="", citations=[])],
    )
    board = score_outputs(suite, outs, OfflineJudge()).scoreboard.set_index("metric")
    assert board.at["faithfulness_rate", "n"] == 1 and board.at["faithfulness_rate", "value"] == 1.0
    assert board.at["over_refusal_rate", "value"] == 0.5


def test_bootstrap_interval_is_reproducible_and_brackets_the_value():
    num = np.array([1, 0, 1, 1, 0, 1, 1, 1], dtype=float)
    den = np.ones(8)
    v, lo, hi, n = ratio_with_interval(num, den, seed=0)
    assert v == 0.75 and n == 8 and 0.3 < lo < 0.75 < hi <= 1.0
    assert (lo, hi) == ratio_with_interval(num, den, seed=0)[1:3]
    assert (lo, hi) != ratio_with_interval(num, den, seed=1)[1:3]


def test_every_metric_stays_in_zero_one(golden_run):
    board = golden_run.scoreboard
    assert ((board["value"] >= 0) & (board["value"] <= 1)).all()
    assert ((board["ci_low"] >= 0) & (board["ci_high"] <= 1)).all()


def test_each_metric_is_defined_once_with_direction_tolerance_and_drift_rule():
    names = [m.name for m in METRICS]
    assert len(set(names)) == len(names) == 10
    over = {m.name: m for m in METRICS}["over_refusal_rate"]
    assert not over.higher_is_better and over.drift == "both" and over.tolerance == 0.0
    assert {m.name for m in METRICS if m.label_axis} == {"faithfulness_rate", "answer_correctness"}


def test_slices_cover_difficulty_tag_and_split(golden_run):
    s = golden_run.slices
    assert set(s["slice"]) == {"difficulty", "adversarial", "split"}
    multi = s[(s["slice"] == "difficulty") & (s["group"] == "single-hop") & (s["metric"] == "multi_step_task_success")]
    assert multi["n"].item() == 0 and math.isnan(multi["value"].item())


def test_per_case_frame_joins_every_layer(golden_run):
    pc = golden_run.per_case
    for column in ("grounding_isolation", "recall_at_k", "faithfulness", "trajectory_success", "case_passed"):
        assert column in pc.columns
    assert len(pc) == len(golden_run.suite)
    assert "<table" in golden_run._repr_html_() and "GREEN" in golden_run._repr_html_()
    assert not [c for c in pc.columns if "__" in c], "bookkeeping lives in .units, not in the frame people read"
    assert list(golden_run.units.columns[:3]) == [
        "case_id",
        "deterministic_pass_rate__num",
        "deterministic_pass_rate__den",
    ]


def test_repr_is_short(golden_run):
    assert len(repr(golden_run)) < 200 and "GREEN" in repr(golden_run)


def test_run_command_prints_the_scoreboard(capsys):
    assert main(["run", "--data", str(GOLDEN), "--quiet"]) == 0
    out = capsys.readouterr().out
    for name in METRIC_NAMES:
        assert name in out
    assert "95% CI" in out and "judge calls" in out


def test_baseline_is_a_reviewable_run_record(tmp_path, capsys):
    path = tmp_path / "b.json"
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(path)]) == 0
    first = path.read_text()
    data = json.loads(first)
    assert data["format"] == "qaeval-record" and data["version"] == 3 and data["baseline"] is True
    assert [row["metric"] for row in data["scoreboard"]] == list(METRIC_NAMES)
    case = next(c for c in data["cases"] if c["case_id"] == "multi-0001")
    assert case["passed"] is False and [r["code"] for r in case["fail_reasons"]] == ["trajectory_failed"]
    assert case["fail_reasons"][0]["message"].startswith("trajectory failed (")
    assert "prompt_to_model" not in case["output"] and len(case["output"]["prompt_sha256"]) == 64
    assert data["meta"]["judge"]["name"] == "offline" and "created" not in data["meta"]
    lines = first.splitlines()
    assert sum(1 for line in lines if line.lstrip().startswith('{"case"')) == len(data["cases"]), "one case per line"
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(path)]) == 0
    assert path.read_text() == first, "an unchanged system re-baselines to an empty diff"


def test_failing_cases_frame_shows_answer_gold_and_cited_text(golden_run):
    failing = golden_run.failing_cases()
    assert set(failing.columns) == {"case_id", "why", "answer", "gold_answer", "cited"}
    row = failing.set_index("case_id").loc["agg-0002"]
    assert row["gold_answer"] == "860,000" and "[visits-fy2024]" in row["cited"]
    assert isinstance(failing, pd.DataFrame)


def test_failing_cases_show_their_whole_text_in_a_notebook(golden_run):
    failing = golden_run.failing_cases()
    import html

    longest = max(failing["why"], key=len)
    shown = html.unescape(failing._repr_html_())
    assert len(longest) > 60 and longest in shown, "not cut at pandas' column width"
    assert "white-space: pre-wrap" in failing._repr_html_()


def test_progress_falls_back_to_a_text_bar_without_ipywidgets(monkeypatch):
    import sys
    import types

    import tqdm
    import tqdm.notebook

    from qaeval.worker.plugins import _tqdm_class

    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    monkeypatch.setitem(sys.modules, "IPython", types.ModuleType("IPython"))
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # not installed
    assert _tqdm_class() is tqdm.tqdm
    monkeypatch.setitem(sys.modules, "ipywidgets", types.ModuleType("ipywidgets"))
    assert _tqdm_class() is tqdm.notebook.tqdm
