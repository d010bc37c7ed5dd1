"""The regression gate: tiers, tolerances at their edges, regressions, new cases, the noise test, baselines."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from conftest import GOLDEN
from monitor_logs import traffic, write_jsonl

from qaeval import BaselineError, GateBlocked, JudgeNotTrusted, UsageError, api
from qaeval.cli import main
from qaeval.record.read import read_baseline
from qaeval.record.write import write_record
from qaeval.scoring.outcomes import reasons_text
from qaeval.verdicts.baseline import BaselineCase, baseline_from_run
from qaeval.verdicts.gate import gate
from qaeval.verdicts.noise import noise_note, sign_flip_test
from qaeval.verdicts.tolerances import DEFAULT_TOLERANCES, load_tolerances

BUGGY = "qaeval.system.saboteur:make_adapter"


@pytest.fixture(scope="module")
def baseline_file(tmp_path_factory, golden_run):
    return str(write_record(golden_run, tmp_path_factory.mktemp("b") / "baseline.json", baseline=True))


def with_metric(golden_run, **values):
    base = baseline_from_run(golden_run, "edited.json")
    metrics = dict(base.metrics)
    for name, value in values.items():
        metrics[name] = (value, metrics[name][1])
    return replace(base, metrics=metrics)


def test_golden_passes_against_its_own_baseline(golden_run, baseline_file):
    result = gate(golden_run, read_baseline(baseline_file))
    assert result.ok and result.verdict == "PASS" and result.exit_code == 0
    result.raise_for_status()
    assert set(result.already_failing) == {"multi-0001", "multi-0002", "multi-0003", "agg-0001", "agg-0002"}, (
        "the five multi-step cases fail in the baseline too: they are named, not blocking"
    )


def test_saboteur_blocks_on_golden_naming_every_failed_tier(baseline_file, capsys):
    code = main(["gate", "--data", str(GOLDEN), "--adapter", BUGGY, "--baseline", baseline_file])
    out = capsys.readouterr().out
    assert code == 1
    assert "GATE: BLOCK" in out
    for tier in ("tier 1: deterministic checks", "tier 2: metrics vs baseline", "tier 2: no passing case regresses"):
        assert f"[FAIL] {tier}" in out
    assert "citation_resolvability failed on 15, fail_closed_abstention failed on 3" in out
    assert "citation_precision 1.000 -> 0.400" in out
    assert "10 previously passing case(s) now fail" in out


def test_a_baseline_of_another_golden_set_is_refused_before_the_system_runs(
    baseline_file, capsys, tmp_path, monkeypatch
):
    """The buggy split shares no case id with golden's baseline: every case would be new and every
    baseline case gone, so the gate refuses it (65) instead of blocking on '4 new, 15 no longer present'."""
    calls = tmp_path / "calls"
    monkeypatch.setenv("QAEVAL_TEST_CALLS", str(calls))
    argv = ["gate", "--data", str(GOLDEN / "buggy"), "--adapter", "plugins:make_counting", "--baseline", baseline_file]
    code = main(argv)
    err = capsys.readouterr().err
    assert not calls.exists(), "the system was asked before the baseline was refused"
    assert code == 65
    assert "a baseline of another golden set: it shares no case id with the 4 case(s) gated" in err
    assert "it holds 15 (abstain-0001, abstain-0002, abstain-0003 ...)" in err
    assert "Traceback" not in err
    assert main(["run", "--data", str(GOLDEN / "buggy"), "--adapter", "plugins:make_counting", "--quiet"]) == 0
    assert len(calls.read_text().split()) == 4, "the control: the same system, run, is asked once per case"


@pytest.mark.parametrize("kind", ["gate", "calibrate", "drift", "monitor"])
def test_a_record_that_is_not_a_runs_is_no_baseline_and_nothing_to_compare(kind, tmp_path, capsys, baseline_file):
    record = tmp_path / f"{kind}.json"
    golden = str(GOLDEN)
    made = {
        "gate": ["gate", "--data", golden, "--baseline", baseline_file, "--save", str(record)],
        "calibrate": [
            "calibrate",
            "--data",
            golden,
            "--labels",
            str(GOLDEN / "calibration" / "human_labels.jsonl"),
            "--save",
            str(record),
        ],
        "drift": ["drift", "--data", golden, "--timeseries", str(tmp_path / "h.jsonl"), "--save", str(record)],
        "monitor": ["monitor", "--logs", str(tmp_path / "log.jsonl"), "--save", str(record)],
    }[kind]
    write_jsonl(tmp_path / "log.jsonl", traffic(days=1, per_day=4))
    assert main([*made, "--quiet"]) in (0, 3), capsys.readouterr()
    assert json.loads(record.read_text())["kind"] == kind
    capsys.readouterr()
    assert main(["gate", "--data", golden, "--baseline", str(record), "--quiet"]) == 65
    err = capsys.readouterr().err
    assert f"a {kind} record, not a run's: a baseline is the record of a run" in err and "Traceback" not in err
    assert main(["compare", baseline_file, str(record)]) == 65
    err = capsys.readouterr().err
    assert f"a {kind} record, not a run's: compare takes the records of two runs" in err


def test_each_buggy_case_blocks_for_its_own_fault(baseline_file):
    """Not failed because everything failed: each case fails the check its tag names."""
    result = api.run(str(GOLDEN / "buggy"), adapter=BUGGY)
    per_case = result.per_case.set_index("case_id")["fail_reasons"]
    codes = per_case.map(lambda rs: [r.code for r in rs])
    assert "grounding_isolation" in codes["buggy-leak-0001"]
    assert "citation_resolvability" in codes["buggy-cite-0002"]
    assert (
        "fail_closed_abstention" in codes["buggy-refuse-0003"] and "fail_closed_abstention" in codes["buggy-stale-0004"]
    )
    reasons = per_case.map(reasons_text)
    assert "gold answer '249,000' appears in the prompt outside the retrieved sources" in reasons["buggy-leak-0001"]
    assert "hours-sunday (never retrieved)" in reasons["buggy-leak-0001"]
    assert "citation_resolvability: unresolvable citation" in reasons["buggy-cite-0002"]
    assert "fail_closed_abstention: must abstain but answered" in reasons["buggy-refuse-0003"]
    assert "fail_closed_abstention: must abstain but answered" in reasons["buggy-stale-0004"]  # a time-sensitive trap


def test_time_sensitive_trap_catches_even_the_clean_hub(baseline_file):
    result = api.run(str(GOLDEN / "buggy"))
    assert not result.ok
    assert result.tier_one_failures == ["buggy-stale-0004"], "the clean hub fails only the trap"


def test_crashing_adapter_blocks_without_traceback(baseline_file, capsys):
    assert main(["gate", "--data", str(GOLDEN), "--adapter", "plugins:make_raising", "--baseline", baseline_file]) == 1
    captured = capsys.readouterr()
    assert "adapter error on 15" in captured.out and "Traceback" not in captured.err


def test_metric_drop_exactly_at_tolerance_passes(golden_run):
    base = with_metric(
        golden_run, faithfulness_rate=1.01, retrieval_recall_at_k=golden_run.metric("retrieval_recall_at_k") + 0.02
    )
    deltas = gate(golden_run, base).metric_deltas.set_index("metric")
    assert deltas.at["faithfulness_rate", "passed"] and deltas.at["retrieval_recall_at_k", "passed"]


def test_metric_drop_just_past_tolerance_blocks(golden_run):
    result = gate(golden_run, with_metric(golden_run, faithfulness_rate=1.0101))
    assert not result.ok
    assert (
        "faithfulness_rate 1.010 -> 1.000" in result.tiers.set_index("tier").at["tier 2: metrics vs baseline", "detail"]
    )


def test_zero_tolerance_metrics_block_on_any_drop(golden_run):
    result = gate(golden_run, with_metric(golden_run, multi_step_task_success=0.2))
    assert not result.metric_deltas.set_index("metric").at["multi_step_task_success", "passed"]


def test_over_refusal_may_not_rise(golden_run, baseline_file):
    result = api.gate(str(GOLDEN), baseline=baseline_file, adapter="plugins:make_abstain_on_dvd")
    deltas = result.metric_deltas.set_index("metric")
    assert not deltas.at["over_refusal_rate", "passed"] and deltas.at["over_refusal_rate", "delta"] > 0
    assert list(result.regressed["case_id"]) == ["single-0001"]
    assert "wrongly abstained" in result.regressed["why"].item()
    with pytest.raises(GateBlocked) as info:
        result.raise_for_status()
    assert info.value.result is result


def test_new_and_changed_cases_must_pass(golden_run):
    base = baseline_from_run(golden_run, "b.json")
    cases = dict(base.cases)
    del cases["agg-0001"]  # agg-0001 is new to this baseline, and fails its trajectory
    cases["single-0002"] = replace(cases["single-0002"], fingerprint="0" * 16)  # changed under the same id
    result = gate(golden_run, replace(base, cases=cases))
    new = result.new_failing.set_index("case_id")
    assert new.at["agg-0001", "status"] == "new"
    assert result.changed_cases == ["single-0002"] and "single-0002" not in new.index  # it passes
    assert not result.tiers.set_index("tier").at["tier 2: new cases pass", "passed"]


# --------------------------------------------------------------------------- the noise test


def test_three_paired_cases_can_never_be_distinguishable_from_noise():
    p, floor, moved = sign_flip_test(np.array([-1.0, -1.0, -1.0]))
    assert (p, floor, moved) == (0.25, 0.25, 3), "exact: 2 of the 8 sign patterns are as extreme"
    distinguishable, note = noise_note(p, floor, moved, 3)
    assert not distinguishable and note.startswith("too few paired cases to tell")


def test_exact_sign_flip_p_values():
    assert sign_flip_test(np.array([1.0] * 8))[:2] == (2 / 256, 2 / 256)
    p, _, moved = sign_flip_test(np.array([0, 0, -1, 0, 1, 0, 0, -1.0]))
    assert moved == 3 and p == 1.0  # |sum| = 1 is matched or beaten by every pattern
    assert sign_flip_test(np.zeros(5)) == (1.0, 1.0, 0)


def test_monte_carlo_beyond_the_exact_limit_never_reports_zero():
    p, floor, moved = sign_flip_test(np.array([1.0] * 40))
    assert moved == 40 and p == floor == 1 / 10000
    assert noise_note(p, floor, moved, 40)[0]


def test_saboteur_on_golden_reports_honest_noise_notes(baseline_file):
    result = api.gate(str(GOLDEN), baseline=baseline_file, adapter=BUGGY)
    notes = result.metric_deltas.set_index("metric")["note"]
    assert notes["abstention_recall"].startswith("too few paired cases to tell (3 of 3 moved")
    assert "p=0.000" not in " ".join(notes)
    assert notes["citation_precision"] == "distinguishable from noise (p=4.9e-04, 12 of 12 paired cases moved)"


# --------------------------------------------------------------------------- baselines


def test_missing_baseline_exits_65(capsys, tmp_path):
    assert main(["gate", "--data", str(GOLDEN), "--baseline", str(tmp_path / "none.json")]) == 65
    assert "baseline not found" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        ('{"format": "other"}', "not a qaeval run record"),
        ('{"format": "qaeval-record", "version": 9}', "record version 9"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_corrupt_baseline_exits_65(tmp_path, capsys, content, message):
    path = tmp_path / "b.json"
    path.write_text(content)
    assert main(["gate", "--data", str(GOLDEN), "--baseline", str(path)]) == 65
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    with pytest.raises(BaselineError):
        read_baseline(path)


def test_a_qaeval_01_baseline_is_refused_by_name(tmp_path, capsys):
    """0.1 baselines held no outputs; 0.2 reads records only (the changelog says to write a new one)."""
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"format": "qaeval-baseline/1", "metrics": {}, "cases": {}}))
    assert main(["gate", "--data", str(GOLDEN), "--baseline", str(path)]) == 65
    err = capsys.readouterr().err
    assert "a qaeval 0.1 baseline" in err and "write a new one with `qaeval baseline`" in err


def test_a_failing_run_is_refused_as_baseline(tmp_path, capsys):
    out = tmp_path / "x.json"
    code = main(["baseline", "--data", str(GOLDEN / "buggy"), "--adapter", BUGGY, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and not out.exists()
    assert "not a green run, so not a baseline" in err and "--allow-failing" in err


def test_allow_failing_keeps_it_and_the_gate_says_so(tmp_path, capsys):
    out = tmp_path / "x.json"
    assert (
        main(["baseline", "--data", str(GOLDEN / "buggy"), "--adapter", BUGGY, "--out", str(out), "--allow-failing"])
        == 0
    )
    data = json.loads(out.read_text())
    assert data["green"] is False and data["allowed_failing"] is True
    capsys.readouterr()
    main(["gate", "--data", str(GOLDEN / "buggy"), "--adapter", BUGGY, "--baseline", str(out)])
    assert "the baseline was not green when it was written" in capsys.readouterr().out


def test_tolerances_from_file_and_flags(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"rerank_mrr": 0.05}))
    tol = load_tolerances(path, ["faithfulness_rate=0"])
    assert tol["rerank_mrr"] == 0.05 and tol["faithfulness_rate"] == 0 and tol["abstention_recall"] == 0
    assert set(tol) == set(DEFAULT_TOLERANCES)
    with pytest.raises(
        UsageError, match="no gated metric named 'citation_coverage'.*when given a tolerance: answer_correctness"
    ):
        load_tolerances(None, ["citation_coverage=0.1"])
    assert load_tolerances(None, ["answer_correctness=0.05"])["answer_correctness"] == 0.05
    assert "answer_correctness" not in load_tolerances(path), "gated only when asked for"
    with pytest.raises(UsageError):
        load_tolerances(None, ["rerank_mrr=-1"])
    path.write_text('{"rerank_mrr": 0.05, "rerank_mrr": 0.5}')
    with pytest.raises(Exception, match="appears twice"):
        load_tolerances(path)


def test_tolerance_flags_do_not_excuse_a_regressed_case(baseline_file, capsys):
    args = ["gate", "--data", str(GOLDEN), "--adapter", "plugins:make_abstain_on_dvd", "--baseline", baseline_file]
    assert main(args) == 1
    assert (
        main(
            [
                *args,
                "--tolerance",
                "over_refusal_rate=0.1",
                "--tolerance",
                "rerank_mrr=0.2",
                "--tolerance",
                "retrieval_recall_at_k=0.2",
            ]
        )
        == 1
    ), "the regressed case still blocks"
    assert "single-0001" in capsys.readouterr().out


def test_a_different_judge_than_the_baseline_is_noted(golden_run):
    base = baseline_from_run(golden_run, "b.json")
    other = replace(base, judge={**base.judge, "model": "another-model"})
    result = gate(golden_run, other)
    assert not result.judge_match
    assert (
        "note: judge differs from the baseline's: offline:another-model rubric=v2, now offline:token-overlap"
        in result.summary_text()
    )
    assert gate(golden_run, base).judge_match


def test_gate_with_labels_refuses_an_untrusted_judge_with_exit_2(baseline_file, capsys, strict_labels):
    code = main(["gate", "--data", str(GOLDEN), "--baseline", baseline_file, "--labels", str(strict_labels), "--quiet"])
    out = capsys.readouterr().out
    assert code == 2, "the tiers pass, but the judge that scored them is not trusted"
    assert "GATE: BLOCK" in out and "judge calibration: RETUNE JUDGE" in out and "answer_correctness" in out
    result = api.gate(str(GOLDEN), baseline=baseline_file, labels=str(strict_labels))
    assert result.tiers["passed"].all() and not result.ok
    with pytest.raises(JudgeNotTrusted):
        result.raise_for_status()


def test_regressed_case_keeps_its_baseline_answer(baseline_file):
    result = api.gate(str(GOLDEN), baseline=baseline_file, adapter="plugins:make_abstain_on_dvd")
    before = result.baseline.cases["single-0001"]
    assert isinstance(before, BaselineCase) and before.passed and "Digital loans expire" in before.answer
    assert result.run.per_case.set_index("case_id").at["single-0001", "abstained"]


def test_unwritable_output_is_a_clear_error_not_a_traceback(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(blocker / "b.json")]) == 74
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(blocker) in err


# --------------------------------------------------------------------------- what the verdict says it gated


@pytest.fixture(scope="module")
def dvd_baseline(tmp_path_factory) -> str:
    """A baseline recorded from another system than the default: one that abstains on DVD questions."""
    path = tmp_path_factory.mktemp("dvd") / "baseline.json"
    assert (
        main(
            [
                "baseline",
                "--data",
                str(GOLDEN),
                "--adapter",
                "plugins:make_abstain_on_dvd",
                "--out",
                str(path),
                "--quiet",
            ]
        )
        == 0
    )
    return str(path)


def test_a_gate_without_an_adapter_gates_the_system_its_baseline_records_and_says_so(dvd_baseline, capsys):
    assert main(["gate", "--data", str(GOLDEN), "--baseline", dvd_baseline, "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "note: no adapter given: gating plugins:make_abstain_on_dvd, the adapter the baseline records"
    assert not any("adapter differs" in line for line in lines)
    result = api.gate(str(GOLDEN), baseline=dvd_baseline)
    assert result.run.meta.adapter == "plugins:make_abstain_on_dvd" and result.adapter_match


def test_a_gate_of_another_adapter_or_judge_says_so_first_in_the_verdict_and_the_report(dvd_baseline, tmp_path, capsys):
    page = tmp_path / "gate.html"
    code = main(
        [
            "gate",
            "--data",
            str(GOLDEN),
            "--baseline",
            dvd_baseline,
            "--adapter",
            "qaeval.system.reference:make_adapter",
            "--judge",
            "constant_judge:make_judge",
            "--quiet",
            "--html",
            str(page),
        ]
    )
    assert code == 0, "the reference system answers the DVD question the baseline abstained on: nothing regressed"
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == (
        "note: adapter differs from the baseline's: plugins:make_abstain_on_dvd, now "
        "qaeval.system.reference:make_adapter"
    )
    assert lines[3].startswith(
        "note: judge differs from the baseline's: offline:token-overlap rubric=v2, now constant:always-2"
    )
    import html

    text = html.unescape(page.read_text())  # an apostrophe is &#x27; or &#39;, by nbconvert's version
    first = text.index(
        "adapter differs from the baseline's: plugins:make_abstain_on_dvd, now qaeval.system.reference:make_adapter"
    )
    assert first < text.index("judge differs from the baseline's") < text.index("<h2>Tiers</h2>")


def test_the_first_line_of_a_gate_says_what_was_checked_and_that_answer_correctness_is_not(capsys):
    assert main(["gate", "--data", str(GOLDEN), "--baseline", str(GOLDEN / "ci-baseline.json"), "--quiet"]) == 0
    first, means = capsys.readouterr().out.splitlines()[:2]
    assert first == (
        "GATE: PASS   deterministic checks green and every tier-2 rule held against the baseline; "
        "10 of 15 cases pass (5 fail as they did in the baseline); answer correctness is not gated   "
        "(baseline " + str(GOLDEN / "ci-baseline.json") + ")"
    )
    assert "faithfulness" in means and "trajectory" in means


def test_a_gate_without_labels_says_its_judge_was_not_calibrated_in_this_run(capsys, strict_labels):
    assert main(["gate", "--data", str(GOLDEN), "--baseline", str(GOLDEN / "ci-baseline.json"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert (
        "note: the judge (offline:token-overlap t=0 seed=0 rubric=v2) was not calibrated against human labels "
        "in this run (no labels given): faithfulness_rate, citation_precision gate on its word alone"
    ) in out
    labelled = api.gate(str(GOLDEN), baseline=str(GOLDEN / "ci-baseline.json"), labels=str(strict_labels))
    assert not any("not calibrated" in n for n in labelled.all_notes())


def test_a_baseline_sharing_under_half_the_cases_is_gated_with_a_note_naming_both_counts(tmp_path, capsys):
    from conftest import make_case, write_cases

    one = write_cases(tmp_path / "one", [make_case(id="case-a")])
    three = write_cases(tmp_path / "three", [make_case(id=f"case-{c}") for c in "abc"])
    two = write_cases(tmp_path / "two", [make_case(id=f"case-{c}") for c in "ab"])
    base = tmp_path / "b.json"
    assert main(["baseline", "--data", str(one), "--out", str(base), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["gate", "--data", str(three), "--baseline", str(base)]) == 0
    note = "the baseline shares only 1 of this suite's 3 case id(s) (it holds 1): most cases are gated as new"
    assert note in capsys.readouterr().out
    assert main(["gate", "--data", str(two), "--baseline", str(base)]) == 0
    assert "the baseline shares only" not in capsys.readouterr().out, "half shared is no warning"
