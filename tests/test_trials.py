"""Trials (--trials K): every case run K times, each an independent call; the record holds every trial; the
figures average trials per case; the gate tells a flaky case from a regression."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pandas as pd
import pytest
from conftest import GOLDEN, ROOT

from qaeval import api
from qaeval.cli import main
from qaeval.commands.pipeline import evaluate
from qaeval.core.errors import RecordError
from qaeval.core.settings import RunSettings
from qaeval.data.cases import load_suite
from qaeval.judges.offline import OfflineJudge
from qaeval.record.read import load_run, read_baseline
from qaeval.scoring.trials import pass_at_k, pass_hat_k
from qaeval.verdicts.gate import gate
from qaeval.verdicts.noise import fisher_drop_p, tarone_level

TESTS = str(ROOT / "tests")


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("QAEVAL_PROGRESS", "0")


def test_pass_hat_k_and_pass_at_k_follow_their_formulas():
    assert pass_hat_k(3, 5, 2) == pytest.approx(3 / 10)  # C(3,2)/C(5,2)
    assert pass_at_k(3, 5, 2) == pytest.approx(1 - 1 / 10)  # 1 - C(2,2)/C(5,2)
    assert pass_hat_k(5, 5, 5) == 1.0 and pass_at_k(0, 5, 5) == 0.0
    assert math.isnan(pass_hat_k(2, 3, 4)) and math.isnan(pass_at_k(2, 3, 0))


def test_the_fisher_drop_test_and_tarones_level():
    p, floor = fisher_drop_p(5, 5, 0, 5)
    assert p == pytest.approx(1 / 252) and floor == pytest.approx(1 / 252)
    assert fisher_drop_p(5, 5, 5, 5) == (1.0, 1.0)  # a case that never moved cannot be tested at all
    assert fisher_drop_p(3, 3, 0, 3)[0] == pytest.approx(1 / 20)
    # cases that can never reach significance do not count against the level
    assert tarone_level([1.0] * 100 + [1 / 252], 0.05) == (0.05, 1)
    level, m = tarone_level([0.001] * 3 + [0.5] * 50, 0.05)
    assert m == 3 and level == pytest.approx(0.05 / 3)


def test_each_trial_is_its_own_call_and_results_come_back_in_suite_order(tmp_path, monkeypatch):
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("QAEVAL_TEST_CALLS", str(calls))
    monkeypatch.syspath_prepend(TESTS)
    run = api.run(str(GOLDEN), adapter="plugins:make_call_counter", trials=3, concurrency=4)
    suite = load_suite(GOLDEN)
    assert len(calls.read_text().splitlines()) == 3 * len(suite)
    assert run.trials == 3 and len(run.trial_runs) == 3
    for trial in run.trial_runs:
        assert trial.outputs["case_id"].tolist() == [c.id for c in suite]
    frame = run.trial_frame("outputs")
    assert frame["trial"].tolist() == [t for t in range(3) for _ in suite]


@pytest.mark.parametrize("isolation", ["process", "none"])
def test_outputs_differ_between_trials_when_the_system_varies(isolation, monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    run = api.run(str(GOLDEN), adapter="plugins:make_varying", trials=2, isolation=isolation, concurrency=2)
    answered = [cid for cid, a in zip(run.per_case["case_id"], run.per_case["abstained"]) if not a]
    first, second = (r.outputs.set_index("case_id") for r in run.trial_runs)
    assert all(first.at[c, "answer"] != second.at[c, "answer"] for c in answered)


class CountingJudge(OfflineJudge):
    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def judge(self, requests):
        self.asked += len(requests)
        return super().judge(requests)


def test_a_deterministic_system_costs_one_judge_call_per_answered_case_whatever_k():
    suite = load_suite(GOLDEN)
    once, thrice = CountingJudge(), CountingJudge()
    one = evaluate(suite, "qaeval.system.reference:make_adapter", once, RunSettings(isolation="none"))
    three = evaluate(suite, "qaeval.system.reference:make_adapter", thrice, RunSettings(isolation="none", trials=3))
    answered = int((~one.per_case["abstained"]).sum())
    assert once.asked == thrice.asked == answered > 0
    usage = three.judge_usage
    assert usage["calls"] - usage["cached"] == answered and usage["cached"] == 2 * answered
    # the figures of a deterministic system do not move with K
    assert three.scoreboard.set_index("metric")["value"].drop(["pass_hat_k", "pass_at_k"]).to_dict() == pytest.approx(
        one.scoreboard.set_index("metric")["value"].to_dict(), nan_ok=True
    )


def test_a_flaky_case_is_counted_per_trial_and_its_metrics_are_means(monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    run = api.run(str(GOLDEN), adapter="plugins:make_abstain_every_other", trials=4, isolation="none", concurrency=1)
    pc = run.per_case.set_index("case_id")
    dvd = next(c.id for c in load_suite(GOLDEN) if "DVD" in c.question)
    assert (pc.at[dvd, "passes"], pc.at[dvd, "trials"], pc.at[dvd, "flaky"]) == (2, 4, True)
    assert not pc.at[dvd, "case_passed"] and pc.at[dvd, "pass_rate"] == 0.5
    assert any("wrongly abstained [trials 2, 4 of 4]" == str(r) for r in pc.at[dvd, "fail_reasons"])
    units = run.units.set_index("case_id")
    assert units.at[dvd, "over_refusal_rate__num"] == 0.5 and units.at[dvd, "over_refusal_rate__den"] == 1.0
    board = run.scoreboard.set_index("metric")
    answerable = int(board.at["over_refusal_rate", "n"])
    assert board.at["over_refusal_rate", "value"] == pytest.approx(0.5 / answerable)
    assert "flaky (some trials pass): 1" in run.summary_text()


def test_a_multi_step_case_whose_trajectory_fails_in_one_trial_has_not_succeeded(tmp_path, monkeypatch):
    """trajectory_success was trial 0's alone (a nullable column the combination skipped)."""
    monkeypatch.syspath_prepend(TESTS)
    run = api.run(
        str(GOLDEN),
        adapter="plugins:make_trajectory_every_other",
        trials=2,
        isolation="none",
        concurrency=1,
        save=str(tmp_path / "r.json"),
    )
    pc = run.per_case.set_index("case_id")
    first = run.trial_runs[0].per_case.set_index("case_id")
    assert bool(first.at["multi-0001", "trajectory_success"]) is True, "trial 0 reached the answer"
    assert bool(pc.at["multi-0001", "trajectory_success"]) is False and pc.at["multi-0001", "flaky"]
    assert pd.isna(pc.at["single-0001", "trajectory_success"]), "not multi-step: not assessed"
    back = load_run(tmp_path / "r.json").per_case.set_index("case_id")
    assert bool(back.at["multi-0001", "trajectory_success"]) is False


def test_the_gates_tier_one_breakdown_counts_every_trial(monkeypatch):
    """A check that failed in trial 2 only was missing from the breakdown ("1 case(s) not green: ")."""
    monkeypatch.syspath_prepend(TESTS)
    result = api.gate(
        str(GOLDEN),
        baseline=str(GOLDEN / "ci-baseline.json"),
        trials=2,
        isolation="none",
        concurrency=1,
        adapter="plugins:make_miscites_every_other",
    )
    tier = next(t for t in result.tiers.to_dict("records") if t["rule"] == "deterministic checks")
    assert not tier["passed"] and "citation_resolvability failed on 1" in tier["detail"], tier["detail"]


def test_a_record_holds_every_trial_and_reads_back_the_same(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    run = api.run(
        str(GOLDEN),
        adapter="plugins:make_abstain_every_other",
        trials=3,
        isolation="none",
        concurrency=1,
        save=str(tmp_path / "r.json"),
    )
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["version"] == 3 and data["meta"]["trials"] == 3
    assert all(len(line["trials"]) == 2 for line in data["cases"])
    back = load_run(tmp_path / "r.json")
    assert back.trials == 3
    cols = ["case_id", "passes", "trials", "flaky", "case_passed"]
    assert back.per_case[cols].equals(run.per_case[cols])
    assert back.scoreboard["value"].tolist() == pytest.approx(run.scoreboard["value"].tolist(), nan_ok=True)


def test_a_record_of_one_trial_is_as_small_as_before(tmp_path):
    api.run(str(GOLDEN), isolation="none", save=str(tmp_path / "one.json"))
    data = json.loads((tmp_path / "one.json").read_text())
    assert "trials" not in data["meta"] and not any("trials" in line for line in data["cases"])


def test_a_forged_trial_is_refused(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    api.run(
        str(GOLDEN),
        adapter="plugins:make_abstain_every_other",
        trials=2,
        isolation="none",
        concurrency=1,
        save=str(tmp_path / "r.json"),
    )
    data = json.loads((tmp_path / "r.json").read_text())
    line = next(line for line in data["cases"] if not line["trials"][0]["passed"])
    line["trials"][0]["passed"] = True  # the second trial says it passed; its layers say it did not
    (tmp_path / "forged.json").write_text(json.dumps(data))
    with pytest.raises(RecordError, match=r"cases\[\d+\]\.passed"):
        load_run(tmp_path / "forged.json")
    del line["trials"][0]
    (tmp_path / "short.json").write_text(json.dumps(data))
    with pytest.raises(RecordError, match="holds 0 more trial"):
        load_run(tmp_path / "short.json")


def test_a_trial_that_names_another_case_is_refused(tmp_path, monkeypatch):
    """A trial entry's own case_id replaced its line's when the record was read: a trial moved cases."""
    monkeypatch.syspath_prepend(TESTS)
    api.run(
        str(GOLDEN),
        adapter="plugins:make_abstain_every_other",
        trials=2,
        isolation="none",
        concurrency=1,
        save=str(tmp_path / "r.json"),
    )
    data = json.loads((tmp_path / "r.json").read_text())
    data["cases"][0]["trials"][0]["case_id"] = data["cases"][1]["case_id"]
    (tmp_path / "moved.json").write_text(json.dumps(data))
    with pytest.raises(RecordError, match=r"cases\[0\]\.trials\[0\] has a field a trial does not hold: 'case_id'"):
        load_run(tmp_path / "moved.json")


def test_a_record_of_version_2_is_refused_by_name(tmp_path):
    api.run(str(GOLDEN), isolation="none", save=str(tmp_path / "r.json"))
    data = json.loads((tmp_path / "r.json").read_text())
    data["version"] = 2
    (tmp_path / "old.json").write_text(json.dumps(data))
    with pytest.raises(RecordError, match="version 2 was written before trials"):
        load_run(tmp_path / "old.json")


@pytest.fixture(scope="module")
def baseline_k4(tmp_path_factory):
    path = tmp_path_factory.mktemp("base") / "baseline.json"
    api.baseline(str(GOLDEN), out=str(path), trials=4, isolation="none", progress=False)
    return read_baseline(path)


def test_a_case_flaky_now_is_reported_flaky_not_regressed(baseline_k4, monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    run = api.run(str(GOLDEN), adapter="plugins:make_abstain_every_other", trials=4, isolation="none", concurrency=1)
    result = gate(run, baseline_k4)
    dvd = next(c.id for c in load_suite(GOLDEN) if "DVD" in c.question)
    assert result.ok, result.summary_text()
    assert result.flaky["case_id"].tolist() == [dvd] and result.regressed.empty
    row = result.flaky.iloc[0]
    assert (row.baseline_passes, row.baseline_trials, row.passes, row.trials) == (4, 4, 2, 4)
    # over_refusal_rate rose past its tolerance of 0, but one case moving is within noise
    deltas = result.metric_deltas.set_index("metric")
    assert deltas.at["over_refusal_rate", "delta"] > 0 and deltas.at["over_refusal_rate", "passed"]
    assert "flaky, not blocking (1)" in result.summary_text()


def test_a_gated_metric_whose_test_cannot_reach_the_level_costs_the_others_nothing(baseline_k4, monkeypatch):
    """Tarone over the gated metrics: a metric none of whose cases can move (every trial alike on both
    sides: min_p 1), or whose few moving cases could never reach the level, is not counted, so the others
    are held to alpha / 2 over their own number, not over all G. One case moved here, in 2 of its 4 trials,
    which no metric's test can tell from noise (min_p 0.214): none is counted and the level is alpha / 2."""
    from qaeval.verdicts.noise import metric_level

    monkeypatch.syspath_prepend(TESTS)
    run = api.run(str(GOLDEN), adapter="plugins:make_abstain_every_other", trials=4, isolation="none", concurrency=1)
    deltas = gate(run, baseline_k4).metric_deltas.set_index("metric")
    assert len(deltas) == 7 and (deltas.loc[deltas["n_moved"] == 0, "min_p"] == 1.0).all()
    assert deltas.at["over_refusal_rate", "min_p"] == pytest.approx(3 / 14)  # one case, 2 of 8 trials failing
    assert "against level 0.025 (trials test)" in deltas.at["over_refusal_rate", "note"]
    assert metric_level(deltas["min_p"].tolist(), 0.025) == 0.025
    assert metric_level([math.nan, 1.0, 1.0, 0.001], 0.025) == 0.025  # NaN: a metric with nothing to test
    assert metric_level([0.001] * 7, 0.025) == pytest.approx(0.025 / 7)  # all can: Bonferroni's
    assert metric_level([0.001] * 2 + [0.2] * 5, 0.025) == pytest.approx(0.025 / 2)


def test_a_case_that_fails_every_trial_after_passing_every_baseline_trial_blocks(baseline_k4, monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    run = api.run(str(GOLDEN), adapter="plugins:make_abstain_on_dvd", trials=3, isolation="none")
    result = gate(run, baseline_k4)
    dvd = next(c.id for c in load_suite(GOLDEN) if "DVD" in c.question)
    assert not result.ok and result.regressed["case_id"].tolist() == [dvd]
    assert result.regressed.iloc[0].baseline_state == "passed 4/4"
    assert result.regressed.iloc[0].current_state == "passed 0/3"
    assert "3 trial(s) per case against a baseline of 4" in result.summary_text()


def test_one_trial_each_side_decides_as_before(tmp_path, monkeypatch):
    """K=1 against K=1: a case that passed and fails now blocks, and a metric past its tolerance blocks
    without any noise test, as before trials."""
    monkeypatch.syspath_prepend(TESTS)
    api.baseline(str(GOLDEN), out=str(tmp_path / "b.json"), isolation="none")
    result = api.gate(
        str(GOLDEN), baseline=str(tmp_path / "b.json"), adapter="plugins:make_abstain_on_dvd", isolation="none"
    )
    deltas = result.metric_deltas.set_index("metric")
    assert not result.ok and not deltas.at["over_refusal_rate", "passed"]
    assert result.regressed.iloc[0].baseline_state == "passed" and result.regressed.iloc[0].current_state == "failed"


def test_a_gate_record_with_trials_reads_back_and_is_checked(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(TESTS)
    monkeypatch.chdir(tmp_path)
    assert (
        main(["baseline", "--data", str(GOLDEN), "--trials", "3", "--out", "b.json", "--isolation", "none", "--quiet"])
        == 0
    )
    code = main(
        [
            "gate",
            "--data",
            str(GOLDEN),
            "--trials",
            "3",
            "--baseline",
            "b.json",
            "--isolation",
            "none",
            "--adapter",
            "plugins:make_abstain_every_other",
            "--concurrency",
            "1",
            "--save",
            "g.json",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "flaky, not blocking (1)" in out, out
    back = load_run(tmp_path / "g.json")
    assert len(back.flaky) == 1 and back.ok


def test_the_pytest_plugin_runs_trials():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--qaeval-data",
            "golden",
            "-m",
            "qaeval",
            "--qaeval-trials",
            "2",
            "-k",
            "multi-0001",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "QAEVAL_PROGRESS": "0"},
    )
    assert done.returncode == 1, done.stdout[-2000:]
    assert "golden case multi-0001 failed (0 of 2 trials passed)" in done.stdout and "[all 2 trials]" in done.stdout


def test_the_gate_notebook_takes_trials(tmp_path, monkeypatch):
    """papermill -p trials 3: the gate notebook runs every case three times and passes against a baseline of
    three trials (the trials line shows in the report)."""
    import nbformat

    from qaeval.reports.render import notebook_path, run_papermill

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))
    api.baseline(str(GOLDEN), out=str(tmp_path / "b.json"), trials=3, isolation="none")
    out = tmp_path / "gate-out.ipynb"
    run_papermill(
        notebook_path("gate"),
        out,
        parameters=dict(data=str(GOLDEN), baseline=str(tmp_path / "b.json"), trials=3),
        kernel_name="python3",
        progress_bar=False,
        cwd=str(ROOT),
    )
    text = json.dumps([c.get("outputs", []) for c in nbformat.read(out, as_version=4).cells])
    assert "PASS" in text and "pass_hat_k" in text


def test_the_readme_trials_commands_pass_an_unchanged_flaky_system(tmp_path, monkeypatch, capsys):
    """The README's two commands: a baseline of the flaky stand-in with five trials, and a gate of the same
    system against it, which passes (its trials vary; the gate lists what varied as flaky)."""
    monkeypatch.chdir(ROOT)
    base = str(tmp_path / "flaky.json")
    assert (
        main(
            [
                "baseline",
                "--data",
                "golden",
                "--trials",
                "5",
                "--adapter",
                "qaeval.system.flaky:make_adapter",
                "--out",
                base,
                "--quiet",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "gate",
                "--data",
                "golden",
                "--trials",
                "5",
                "--adapter",
                "qaeval.system.flaky:make_adapter",
                "--baseline",
                base,
            ]
        )
        == 0
    )
    assert "GATE: PASS" in capsys.readouterr().out


def test_the_reports_draw_each_trial_and_list_flaky_cases_apart(baseline_k4, monkeypatch):
    """The run report's case table and drill-down draw a mark per trial, the drill-down shows the trials'
    differing outputs side by side (escaped), and the gate report lists the flaky case with its counts."""
    from qaeval import reports

    monkeypatch.syspath_prepend(TESTS)
    run = api.run(str(GOLDEN), adapter="plugins:make_abstain_every_other", trials=4, isolation="none", concurrency=1)
    dvd = next(c.id for c in load_suite(GOLDEN) if "DVD" in c.question)
    table = reports.cases_table(run).markup
    assert 'title="2 of 4 trials passed"' in table and "4 trials per case" in table
    page = reports.drilldown(run, [dvd]).markup
    assert "Trials: 2 of 4 passed" in page and "<b>trials 1, 3</b>" in page and "<b>trials 2, 4</b>" in page
    assert "(abstained)" in page and "wrongly abstained" in page
    flaky = reports.not_blocking(gate(run, baseline_k4)).markup
    assert "Flaky, not blocking" in flaky and "4 of 4" in flaky and "2 of 4" in flaky


def test_a_trial_answer_is_escaped_in_the_drilldown(monkeypatch):
    from qaeval import reports

    monkeypatch.syspath_prepend(TESTS)
    run = api.run(str(GOLDEN), adapter="plugins:make_hostile_varying", trials=2, isolation="none")
    page = reports.drilldown(run).markup
    assert "<b>trial 1</b>" in page and "<b>trial 2</b>" in page  # the trials differ, so both are drawn
    assert "<script>" not in page and "<img" not in page and "&lt;script&gt;" in page


def test_compare_tells_a_flaky_case_from_a_regressed_one(tmp_path, monkeypatch):
    from qaeval.verdicts.compare import compare

    monkeypatch.syspath_prepend(TESTS)
    before = api.run(str(GOLDEN), trials=4, isolation="none")
    flaky = api.run(str(GOLDEN), adapter="plugins:make_abstain_every_other", trials=4, isolation="none", concurrency=1)
    broken = api.run(str(GOLDEN), adapter="plugins:make_abstain_on_dvd", trials=4, isolation="none")
    dvd = next(c.id for c in load_suite(GOLDEN) if "DVD" in c.question)
    first = compare(before, flaky).cases.set_index("case_id")
    assert first.at[dvd, "change"] == "flaky" and first.at[dvd, "trials"] == "4/4 -> 2/4"
    assert compare(before, flaky).regressed == []
    second = compare(before, broken)
    assert second.regressed == [dvd] and "trials passed 4/4 -> 0/4" in second.summary_text()


def test_drift_bands_use_trial_averaged_figures_and_each_history_line_records_k(tmp_path):
    series = tmp_path / "series.jsonl"
    api.drift(str(GOLDEN), timeseries=str(series), trials=3, isolation="none")
    api.drift(str(GOLDEN), timeseries=str(series), isolation="none")
    first, second = (json.loads(line) for line in series.read_text().splitlines())
    assert (first["trials"], second["trials"]) == (3, 1)
    result = api.drift(str(GOLDEN), timeseries=str(series), trials=2, isolation="none")
    assert any("the series mixes trial counts" in n for n in result.notes)


def test_a_gate_record_whose_trial_verdicts_are_forged_is_refused(tmp_path, monkeypatch):
    """A review: a gate record's case_trials (the flaky list) and its baseline trial counts were not
    checked: a forged verdict loaded and showed; passes above trials crashed (exit 70)."""
    monkeypatch.syspath_prepend(TESTS)
    monkeypatch.chdir(tmp_path)
    assert (
        main(["baseline", "--data", str(GOLDEN), "--trials", "3", "--out", "b.json", "--isolation", "none", "--quiet"])
        == 0
    )
    assert (
        main(
            [
                "gate",
                "--data",
                str(GOLDEN),
                "--trials",
                "3",
                "--baseline",
                "b.json",
                "--isolation",
                "none",
                "--adapter",
                "plugins:make_abstain_every_other",
                "--concurrency",
                "1",
                "--save",
                "g.json",
            ]
        )
        == 0
    )
    data = json.loads((tmp_path / "g.json").read_text())
    forged = json.loads(json.dumps(data))
    forged["gate"]["case_trials"][0]["verdict"] = "steady"
    (tmp_path / "f1.json").write_text(json.dumps(forged))
    with pytest.raises(RecordError, match="case_trials"):
        load_run(tmp_path / "f1.json")
    forged = json.loads(json.dumps(data))
    case = next(iter(forged["gate"]["baseline_cases"].values()))
    case["passes"] = case["trials"] + 2
    (tmp_path / "f2.json").write_text(json.dumps(forged))
    with pytest.raises(RecordError, match="more than its 3 trial"):
        load_run(tmp_path / "f2.json")


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--trials", "2", "--pass-k", "3"], "needs at least that many --trials"),
        (["--pass-k", "2"], "needs at least that many --trials"),
        (["--keep-errors"], "give --resume too"),
    ],
)
def test_options_that_mean_nothing_together_are_usage_errors(flags, says, capsys):
    assert main(["run", "--data", str(GOLDEN), *flags]) == 64
    assert says in capsys.readouterr().err


def test_a_gate_record_whose_trials_test_was_edited_to_pass_is_refused(tmp_path, monkeypatch, capsys):
    """Issue 49, item 12: with trials the noise test decides a metric, and the record check decided again
    from the p-value the record itself stored. Edited p_value, passed and tier made `report` and
    load_run().exit_code say PASS / 0 for a gate that blocked; the p-values are now computed again from
    the trials."""
    monkeypatch.syspath_prepend(TESTS)
    monkeypatch.chdir(tmp_path)
    common = ["--data", str(GOLDEN), "--trials", "3", "--isolation", "none", "--quiet"]
    assert main(["baseline", *common, "--out", "b.json"]) == 0
    adapter = ["--adapter", "plugins:make_abstain_first_time_asked", "--concurrency", "1"]
    assert main(["gate", *common, *adapter, "--baseline", "b.json", "--save", "g.json"]) == 1
    data = json.loads((tmp_path / "g.json").read_text())
    tiers = {t["rule"]: t["passed"] for t in data["gate"]["tiers"]}
    assert tiers == {
        "deterministic checks": True,
        "metrics vs baseline": False,  # the trials test alone blocks: every case failed one trial of three
        "no passing case regresses": True,
        "new cases pass": True,
    }
    for row in data["gate"]["metric_deltas"]:
        if not row["passed"]:
            row["p_value"], row["passed"] = 0.9, True
    tier = next(t for t in data["gate"]["tiers"] if t["rule"] == "metrics vs baseline")
    tier["passed"], tier["case_ids"] = True, []
    (tmp_path / "forged.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["report", "forged.json", "--html", "forged.html"]) == 65
    err = capsys.readouterr().err
    assert "record gate.metric_deltas[3].p_value (over_refusal_rate) says 0.9 but its cases give 0.000244" in err
    assert not (tmp_path / "forged.html").exists()
    with pytest.raises(RecordError, match=r"gate.metric_deltas\[3\].passed \(over_refusal_rate\) says true"):
        load_run(tmp_path / "forged.json")
    assert load_run(tmp_path / "g.json").exit_code == 1  # the honest record loads, and blocks
    honest = json.loads((tmp_path / "g.json").read_text())
    del honest["gate"]["baseline_cases"]["single-0003"]  # as a record written before every case was kept
    (tmp_path / "older.json").write_text(json.dumps(honest))
    with pytest.raises(RecordError, match=r"lacks 1 baseline case\(s\) it names \(single-0003\), so its trials tests"):
        load_run(tmp_path / "older.json")


def test_adaptive_pass_at_k_is_estimated_over_every_case_and_pass_hat_k_is_not_estimable(tmp_path):
    """Issue 49, item 17: with --adaptive, pass^k and pass@k were averaged over the cases that got more
    trials, those whose first trial failed: the deterministic reference system showed pass^k 0.000 (n 5)
    where fixed K gives 0.667. Now pass@k is estimated over every case under the adaptive rule, and pass^k,
    which a single passing trial cannot estimate, is NaN with n 0, shown as such and saying why."""
    fixed = api.run(str(GOLDEN), trials=3, isolation="none").scoreboard.set_index("metric")
    adaptive = api.run(str(GOLDEN), trials=3, adaptive=True, isolation="none", save=str(tmp_path / "a.json"))
    board = adaptive.scoreboard.set_index("metric")
    cases = len(adaptive.per_case)
    assert fixed.at["pass_hat_k", "n"] == fixed.at["pass_at_k", "n"] == cases
    assert (board.at["pass_at_k", "value"], board.at["pass_at_k", "n"]) == (fixed.at["pass_at_k", "value"], cases)
    assert board.at["pass_at_k", "value"] == pytest.approx(10 / 15)  # the reference system: 10 of 15 cases pass
    assert math.isnan(board.at["pass_hat_k", "value"]) and board.at["pass_hat_k", "n"] == 0
    meaning = next(m.meaning for m in adaptive.metrics if m.name == "pass_hat_k")
    assert meaning == "chance that all 3 trials of a case pass (pass^3) (not estimable with adaptive trials: NaN)"
    assert any("pass_hat_k is not estimable (NaN): a case whose first trial passed" in n for n in adaptive.notes)
    back = load_run(tmp_path / "a.json").scoreboard.set_index("metric")  # the record says the same, and checks
    assert back.at["pass_at_k", "value"] == pytest.approx(10 / 15) and back.at["pass_hat_k", "n"] == 0


def test_adaptive_pass_at_k_uses_the_draws_that_hold_the_first_trial():
    from qaeval.scoring.trials import adaptive_pass_at_k

    assert adaptive_pass_at_k(True, 1, 1, 3) == 1.0  # its first passed: any draw holding it passes
    assert adaptive_pass_at_k(False, 0, 3, 3) == 0.0
    assert adaptive_pass_at_k(False, 1, 3, 3) == 1.0  # one of the later two passed; every draw holds all three
    assert adaptive_pass_at_k(False, 1, 5, 2) == pytest.approx(1 - 3 / 4)  # 1 - C(3, 1) / C(4, 1)
    assert math.isnan(adaptive_pass_at_k(False, 0, 2, 3))


@pytest.mark.parametrize("command", ["run", "baseline", "gate"])
def test_adaptive_trials_are_refused_while_the_boundary_is_enforced_saying_why(command, tmp_path, capsys):
    """Issue 49 (design): with --adaptive, being asked a case again told the system that its first answer
    failed, a verdict drawn from the gold labels the boundary keeps from it. Under the enforced boundary
    (--isolation process, the default) adaptive trials are refused before the system is called; with
    --isolation none (the boundary given up, and said so) they run."""
    out = ["--out", str(tmp_path / "b.json")] if command == "baseline" else []
    base = ["--baseline", str(GOLDEN / "ci-baseline.json")] if command == "gate" else []
    assert main([command, "--data", str(GOLDEN), "--trials", "3", "--adaptive", *out, *base]) == 64
    err = capsys.readouterr().err
    assert "--adaptive is refused while the boundary is enforced (--isolation process, the default)" in err
    assert "would tell the system that its first answer failed" in err and "Traceback" not in err
    assert not (tmp_path / "b.json").exists()


def test_each_later_trial_asks_for_the_cases_in_an_order_of_its_own_and_reads_back(tmp_path):
    """Trials went trial after trial in the suite's order, so where a question came told the system which
    trial it was in. Trial 1 keeps the suite's order; each later one has its own, fixed by the trial and
    the case ids; the record's audit learns each trial's prompt template in the same order. Failed before."""
    from qaeval import api
    from qaeval.data.cases import load_suite
    from qaeval.record.read import load_run
    from qaeval.system.reference import ReferenceHub

    asked: list[str] = []

    class Recording:
        def __init__(self):
            self.hub = ReferenceHub()

        def answer(self, case):
            asked.append(case.question)
            return self.hub.answer(case)

    suite = load_suite(GOLDEN)
    run = api.run(str(GOLDEN), adapter=Recording(), trials=3, isolation="none", concurrency=1)
    n = len(suite)
    questions = [c.question for c in suite.cases]
    first, second, third = asked[:n], asked[n : 2 * n], asked[2 * n :]
    assert first == questions
    assert sorted(second) == sorted(third) == sorted(questions)
    assert second != questions and third != questions and second != third
    run.save(tmp_path / "r.json")
    back = load_run(tmp_path / "r.json")  # the audit derives every check again, each trial's template too
    assert back.per_case["case_passed"].tolist() == run.per_case["case_passed"].tolist()
