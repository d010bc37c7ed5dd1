"""The regression gate: tiers, tolerances at their edges, regressions, new cases, bad baselines."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from conftest import GOLDEN

from qaeval import BaselineError, GateBlocked, UsageError, api
from qaeval.baseline import Baseline, baseline_dict, read_baseline, write_baseline
from qaeval.cli import main
from qaeval.gate import DEFAULT_TOLERANCES, gate, load_tolerances, paired_bootstrap

BUGGY = "qaeval.buggy_hub:make_adapter"


@pytest.fixture(scope="module")
def baseline_file(tmp_path_factory, golden_run):
    return str(write_baseline(golden_run, tmp_path_factory.mktemp("b") / "baseline.json"))


def with_metric(golden_run, **values) -> Baseline:
    data = copy.deepcopy(baseline_dict(golden_run))
    for name, value in values.items():
        data["metrics"][name]["value"] = value
    return Baseline("edited.json", data)


def test_golden_passes_against_its_own_baseline(golden_run, baseline_file):
    result = gate(golden_run, read_baseline(baseline_file))
    assert result.passed and result.verdict == "PASS"
    result.raise_for_status()


def test_saboteur_blocks_naming_every_buggy_case_and_every_failed_tier(baseline_file, capsys):
    code = main(["gate", "--data", str(GOLDEN / "buggy"), "--adapter", BUGGY, "--baseline", baseline_file])
    out = capsys.readouterr().out
    assert code == 1
    assert "GATE: BLOCK" in out
    for tier in ("tier 1: deterministic checks", "tier 2: metrics vs baseline", "tier 2: new cases pass"):
        assert f"[FAIL] {tier}" in out
    for case_id in ("buggy-leak-0001", "buggy-cite-0002", "buggy-refuse-0003", "buggy-stale-0004"):
        assert case_id in out
    assert "citation_precision 1.000 -> 0.375" in out


def test_time_sensitive_trap_catches_even_the_clean_hub(baseline_file):
    result = api.gate_run(str(GOLDEN / "buggy"), baseline_file)
    assert not result.passed
    assert "buggy-stale-0004" in result.tiers.iloc[0]["case_ids"]


def test_crashing_adapter_blocks_without_traceback(baseline_file, capsys):
    assert main(["gate", "--data", str(GOLDEN), "--adapter", "plugins:make_raising", "--baseline", baseline_file]) == 1
    captured = capsys.readouterr()
    assert "adapter error on 15" in captured.out and "Traceback" not in captured.err


def test_metric_drop_exactly_at_tolerance_passes(golden_run):
    base = with_metric(golden_run, faithfulness_rate=1.01, retrieval_recall_at_k=0.958333 + 0.02)
    deltas = gate(golden_run, base).metric_deltas.set_index("metric")
    assert deltas.at["faithfulness_rate", "passed"] and deltas.at["retrieval_recall_at_k", "passed"]


def test_metric_drop_just_past_tolerance_blocks(golden_run):
    result = gate(golden_run, with_metric(golden_run, faithfulness_rate=1.0101))
    assert not result.passed
    assert "faithfulness_rate 1.010 -> 1.000" in result.tiers.set_index("tier").at["tier 2: metrics vs baseline", "detail"]


def test_zero_tolerance_metrics_block_on_any_drop(golden_run):
    result = gate(golden_run, with_metric(golden_run, multi_step_task_success=0.2))
    assert not result.metric_deltas.set_index("metric").at["multi_step_task_success", "passed"]


def test_over_refusal_may_not_rise(golden_run, baseline_file):
    result = api.gate_run(str(GOLDEN), baseline_file, adapter="plugins:make_abstain_on_dvd")
    deltas = result.metric_deltas.set_index("metric")
    assert not deltas.at["over_refusal_rate", "passed"] and deltas.at["over_refusal_rate", "delta"] > 0
    assert list(result.regressed["case_id"]) == ["single-0001"]
    assert "wrongly abstained" in result.regressed["why"].item()
    with pytest.raises(GateBlocked) as info:
        result.raise_for_status()
    assert info.value.result is result


def test_new_and_changed_cases_must_pass(golden_run, tmp_path):
    data = baseline_dict(golden_run)
    del data["cases"]["agg-0001"]  # agg-0001 is new to this baseline, and fails its trajectory
    data["cases"]["single-0002"]["fingerprint"] = "0" * 16  # single-0002 changed under the same id
    result = gate(golden_run, Baseline("b.json", data))
    new = result.new_failing.set_index("case_id")
    assert new.at["agg-0001", "status"] == "new"
    assert result.changed_cases == ["single-0002"] and "single-0002" not in new.index  # it passes
    assert not result.tiers.set_index("tier").at["tier 2: new cases pass", "passed"]


def test_paired_test_says_when_a_movement_is_noise():
    low, high, p = paired_bootstrap(np.array([-1.0] * 30))
    assert (low, high, p) == (-1.0, -1.0, 0.0)
    low, high, p = paired_bootstrap(np.array([0, 0, -1, 0, 1, 0, 0, -1.0]))
    assert low < 0 < high and p > 0.05


def test_missing_baseline_exits_65(capsys, tmp_path):
    assert main(["gate", "--data", str(GOLDEN), "--baseline", str(tmp_path / "none.json")]) == 65
    assert "baseline not found" in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"format": "other"}', "not a qaeval baseline"),
    ('{"format": "qaeval-baseline/1", "metrics": {}, "cases": {}, "judge": {}, "dataset_fingerprint": "x"}',
     "metric 'deterministic_pass_rate' missing"),
])
def test_corrupt_baseline_exits_65(tmp_path, capsys, content, message):
    path = tmp_path / "b.json"
    path.write_text(content)
    assert main(["gate", "--data", str(GOLDEN), "--baseline", str(path)]) == 65
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    with pytest.raises(BaselineError):
        read_baseline(path)


def test_tolerances_from_file_and_flags(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"rerank_mrr": 0.05}))
    tol = load_tolerances(path, ["faithfulness_rate=0"])
    assert tol["rerank_mrr"] == 0.05 and tol["faithfulness_rate"] == 0 and tol["abstention_recall"] == 0
    assert set(tol) == set(DEFAULT_TOLERANCES)
    with pytest.raises(UsageError, match="no gated metric"):
        load_tolerances(None, ["answer_correctness=0.1"])
    with pytest.raises(UsageError):
        load_tolerances(None, ["rerank_mrr=-1"])


def test_tolerance_flags_do_not_excuse_a_regressed_case(golden_run, baseline_file, capsys):
    args = ["gate", "--data", str(GOLDEN), "--adapter", "plugins:make_abstain_on_dvd", "--baseline", baseline_file]
    assert main(args) == 1
    assert main([*args, "--tolerance", "over_refusal_rate=0.1", "--tolerance", "rerank_mrr=0.2",
                 "--tolerance", "retrieval_recall_at_k=0.2"]) == 1, "the regressed case still blocks"
    assert "single-0001" in capsys.readouterr().out


def test_a_different_judge_than_the_baseline_is_noted(golden_run):
    data = copy.deepcopy(baseline_dict(golden_run))
    data["judge"]["model"] = "another-model"
    result = gate(golden_run, Baseline("b.json", data))
    assert not result.judge_match and "the baseline by offline:another-model" in result.summary_text()
    assert gate(golden_run, Baseline("b.json", baseline_dict(golden_run))).judge_match


def test_unwritable_output_is_a_clear_error_not_a_traceback(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(blocker / "b.json")]) == 74
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(blocker) in err
