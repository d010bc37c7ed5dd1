"""A team's own checks and metrics (issue 21, item 3): registered by name, run in their own process, and
carried everywhere the built-in ones are (scoreboard, slices, gate, drift, reports, record, pytest).

The acceptance case: the shipped e-mail check blocks a gate on a golden copy where one answer carries an
address, and says so in the scoreboard, the report and the pytest plugin's failure message."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import GOLDEN, ROOT

from qaeval import FailReason, RecordError, api, load_run
from qaeval.cli import main
from qaeval.core.errors import UsageError
from qaeval.verdicts.gate import GateResult

BASELINE = str(GOLDEN / "ci-baseline.json")
EMAIL = "examples.custom_checks:no_email_address"
LENGTH = "examples.custom_checks:answer_length"
ADDRESS = "help@harborlibrary.org"


@pytest.fixture(scope="module")
def email_copy(tmp_path_factory) -> Path:
    """The golden cases, where every passage of single-0001 (so the one the reference system quotes as
    its answer) carries an e-mail address."""
    folder = tmp_path_factory.mktemp("email") / "golden"
    folder.mkdir()
    for name in ("frozen.jsonl", "living.jsonl"):
        shutil.copy(GOLDEN / name, folder / name)
    lines = (folder / "frozen.jsonl").read_text().splitlines()
    case = json.loads(lines[0])
    assert case["id"] == "single-0001"
    for source in case["sources"]:
        source["text"] += f" Write to {ADDRESS}."
    lines[0] = json.dumps(case)
    (folder / "frozen.jsonl").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture(scope="module")
def email_run(email_copy):
    return api.run(str(email_copy), check=[EMAIL], metric=[LENGTH])


def test_the_email_check_fails_the_answer_that_carries_an_address_and_joins_the_scoreboard(email_run):
    pc = email_run.per_case.set_index("case_id")
    assert not pc.at["single-0001", "no_email_address"] and pc["no_email_address"].sum() == len(pc) - 1
    assert (
        FailReason("check", f"no_email_address: the answer carries an e-mail address ({ADDRESS})", "no_email_address")
        in pc.at["single-0001", "fail_reasons"]
    )
    assert email_run.tier_one_failures == ["single-0001"] and not email_run.ok
    board = email_run.scoreboard.set_index("metric")
    assert board.at["no_email_address", "value"] == pytest.approx((len(pc) - 1) / len(pc))
    assert board.at["answer_length_ok", "n"] == int((~pc["abstained"]).sum())  # over answered cases
    assert set(email_run.slices["metric"]) >= {"no_email_address", "answer_length_ok"}
    text = email_run.summary_text()
    assert "no_email_address" in text and "answer_length_ok" in text and "TIER 1: RED" in text


def test_the_email_check_blocks_the_gate_and_is_named_in_its_report(email_copy, tmp_path, capsys):
    html, saved = tmp_path / "gate.html", tmp_path / "gate.json"
    code = main(
        [
            "gate",
            "--data",
            str(email_copy),
            "--baseline",
            BASELINE,
            "--check",
            EMAIL,
            "--metric",
            LENGTH,
            "--html",
            str(html),
            "--save",
            str(saved),
            "--quiet",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1 and "GATE: BLOCK" in out
    assert "no_email_address failed on 1" in out and "cases: single-0001" in out
    assert "registered checks and metrics changed since the baseline (+no_email_address, +answer_length_ok)" in out
    page = html.read_text()
    assert f"the answer carries an e-mail address ({ADDRESS})" in page
    assert "no email address" in page and "answer_length_ok" in page  # the drill-down and the scoreboard
    assert "no_email_address (tier 1, " in page  # what ran, with its code's hash
    record = json.loads(saved.read_text())
    assert [c["name"] for c in record["custom"]["checks"]] == ["no_email_address"]
    assert record["custom"]["checks"][0]["tier"] == 1 and len(record["custom"]["checks"][0]["sha256"]) == 64
    assert record["custom"]["metrics"][0]["name"] == "answer_length_ok"
    again = load_run(saved)
    assert (
        isinstance(again, GateResult)
        and not again.ok
        and again.run.registered.names == ["no_email_address", "answer_length_ok"]
    )


def test_without_the_check_the_same_copy_passes_the_gate(email_copy, capsys):
    assert main(["gate", "--data", str(email_copy), "--baseline", BASELINE, "--quiet"]) == 0, capsys.readouterr().out


def test_the_pytest_plugin_fails_the_case_with_the_checks_reason(email_copy):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--qaeval-data",
            str(email_copy),
            "-m",
            "qaeval",
            "--qaeval-check",
            EMAIL,
            "-k",
            "single-0001",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "QAEVAL_PROGRESS": "0"},
    )
    assert done.returncode == 1, done.stdout[-2000:]
    assert f"no_email_address: the answer carries an e-mail address ({ADDRESS})" in done.stdout, done.stdout[-2000:]


def test_a_check_that_patches_the_verdict_classes_still_gets_block(email_copy, tmp_path, capsys):
    """Its module patches GateResult and RunResult when imported and on every call: in its own process."""
    code = main(
        [
            "gate",
            "--data",
            str(email_copy),
            "--baseline",
            BASELINE,
            "--check",
            EMAIL,
            "--check",
            "patching_checks:patches_the_verdicts",
            "--quiet",
        ]
    )
    assert code == 1 and "GATE: BLOCK" in capsys.readouterr().out
    assert "patching_checks" not in sys.modules and isinstance(GateResult.__dict__["ok"], property)
    assert GateResult.__dict__["ok"].fget.__qualname__ == "GateResult.ok"


HOSTILE = {
    "hostile_checks:raises": "check raises raised RuntimeError: rule engine down",
    "hostile_checks:returns_garbage": "check garbage returned str, not True/False or (passed, reason)",
    "hostile_checks:calls_sys_exit": "check calls_sys_exit called sys.exit(0)",
}


def test_checks_that_raise_exit_or_return_garbage_fail_every_case_with_the_reason():
    run = api.run(str(GOLDEN), check=list(HOSTILE), concurrency=2)
    for name, why in zip(("raises", "garbage", "calls_sys_exit"), HOSTILE.values()):
        rows = run.custom[run.custom["name"] == name]
        assert len(rows) == len(run.suite) and not rows["passed"].any(), name
        assert rows["reason"].str.contains(why, regex=False).all(), rows["reason"].iloc[0]
    assert run.tier_one_failures == run.per_case["case_id"].tolist()  # raises is tier 1: every case blocked
    assert run.scoreboard.set_index("metric").at["garbage", "value"] == 0.0


def test_a_check_that_exits_or_hangs_costs_its_case_only():
    """exits ends its process on single-0001, hangs never answers on single-0002: each case fails every
    registered check with the reason; a fresh process checks the next case."""
    run = api.run(str(GOLDEN), check=["hostile_checks:exits", "hostile_checks:hangs"], check_timeout=2.0)
    reasons = run.custom.groupby("case_id")["reason"].apply(set).to_dict()
    assert reasons["single-0001"] == {"the check runner's process exited with code 3 while checking"}
    assert reasons["single-0002"] == {
        "the checks and metrics did not finish within 2 s (--check-timeout) (its process was killed)"
    }
    rest = run.custom[~run.custom["case_id"].isin(["single-0001", "single-0002"])]
    assert rest["passed"].all() and len(rest) == 2 * (len(run.suite) - 2)
    assert run.tier_one_failures == ["single-0001", "single-0002"]


def test_metrics_that_return_garbage_or_raise_count_their_worst_value_and_fail_the_case():
    run = api.run(
        str(GOLDEN), metric=["hostile_checks:nan_metric", "hostile_checks:above_one", "hostile_checks:raising_metric"]
    )
    board = run.scoreboard.set_index("metric")
    assert board.at["nan_metric", "value"] == 0.0 and board.at["above_one", "value"] == 1.0  # lower is better
    assert board.at["raising_metric", "value"] == 0.0
    reasons = run.per_case.set_index("case_id").at["single-0001", "fail_reasons"]
    assert (
        FailReason(
            "metric",
            "metric raising_metric failed: metric raising_metric raised ZeroDivisionError: division by zero",
            "raising_metric",
        )
        in reasons
    )
    assert any(
        r.code == "metric"
        and r.name == "nan_metric"
        and "metric nan_metric failed: metric nan_metric returned (nan, 1.0), not (numerator" in r.message
        for r in reasons
    )
    assert not run.per_case["case_passed"].any() and run.ok  # they fail cases; tier 1 is for tier-1 checks


@pytest.mark.parametrize(
    "name, why",
    [
        ("hostile_checks:no_such", "has no attribute 'no_such'"),
        ("hostile_checks:takes_a_builtin_name", "faithfulness_rate: a name taken by a built-in"),
        # issue 40: it was accepted, and MLflow logged its n (0.0) over the built-in faithfulness_rate_n (12)
        (
            "hostile_checks:takes_a_logged_key",
            "faithfulness_rate_n: a name taken by a built-in check, metric, column or logged key",
        ),
    ],
)
def test_a_check_that_does_not_resolve_or_takes_a_builtin_name_is_a_usage_error(name, why):
    with pytest.raises(UsageError, match=why):
        api.run(str(GOLDEN), check=[name])


def test_a_metric_that_is_not_a_metric_is_a_usage_error(capsys):
    assert main(["run", "--data", str(GOLDEN), "--metric", "hostile_checks:not_a_metric", "--quiet"]) == 64
    assert "hostile_checks:not_a_metric is a int, not a qaeval.Metric" in capsys.readouterr().err


def test_in_process_checks_agree_with_out_of_process_ones(email_copy, email_run):
    here = api.run(str(email_copy), check=[EMAIL], metric=[LENGTH], isolation="none")
    cols = ["case_id", "name", "passed", "reason", "num", "den"]
    assert here.custom[cols].equals(email_run.custom[cols])


def test_a_registered_metric_with_a_tolerance_is_gated(tmp_path, monkeypatch, capsys):
    base = tmp_path / "base.json"
    assert (
        main(
            [
                "baseline",
                "--data",
                str(GOLDEN),
                "--out",
                str(base),
                "--metric",
                "hostile_checks:gated_length",
                "--quiet",
            ]
        )
        == 0
    )
    monkeypatch.setenv("QAEVAL_TEST_WORDS", "20")  # now some answers are too long
    code = main(
        ["gate", "--data", str(GOLDEN), "--baseline", str(base), "--metric", "hostile_checks:gated_length", "--quiet"]
    )
    out = capsys.readouterr().out
    assert code == 1 and "gated_length 1.000 -> " in out and "tolerance 0)" in out
    assert (
        main(
            [
                "gate",
                "--data",
                str(GOLDEN),
                "--baseline",
                str(base),
                "--metric",
                "hostile_checks:gated_length",
                "--tolerance",
                "gated_length=1",
                "--quiet",
            ]
        )
        == 0
    )


def _edit(path: Path, target: Path, edit) -> Path:
    data = json.loads(path.read_text())
    edit(data)
    target.write_text(json.dumps(data))
    return target


def test_a_hand_edited_record_of_registered_outcomes_is_caught(email_run, tmp_path):
    saved = email_run.save(tmp_path / "run.json")

    def flip_passed(d):
        d["cases"][0]["custom"][0][1] = True

    def flip_everything(d):  # a check's outcome and unit together are taken as stored ...
        d["cases"][0]["custom"][0][1] = True
        d["cases"][0]["units"]["no_email_address"] = [1.0, 1.0]

    def edit_board(d):
        next(r for r in d["scoreboard"] if r["metric"] == "answer_length_ok")["value"] = 0.5

    def drop_outcomes(d):
        del d["cases"][3]["custom"]

    for edit, field in (
        (flip_passed, "cases[0].units.no_email_address"),
        (edit_board, "scoreboard"),
        (drop_outcomes, "cases[3].custom"),
    ):
        with pytest.raises(RecordError, match=field.replace("[", r"\[").replace("]", r"\]")):
            load_run(_edit(saved, tmp_path / "edited.json", edit))
    with pytest.raises(RecordError, match=r"cases\[0\].passed \(single-0001\) says false"):
        load_run(_edit(saved, tmp_path / "edited.json", flip_everything))  # ... but what they add up to is not


def test_drift_bands_registered_metrics(tmp_path):
    series = tmp_path / "history.jsonl"
    for _ in range(4):
        result = api.drift(str(GOLDEN), timeseries=str(series), metric=[LENGTH])
    bands = result.bands.set_index("metric")
    assert bands.at["answer_length_ok", "window_n"] == 3 and not result.alarms
    assert "answer_length_ok" in json.loads(series.read_text().splitlines()[-1])["metrics"]
    assert isinstance(load_run(result.save(tmp_path / "drift.json")), type(result))


def test_checks_and_metrics_installed_as_entry_points_run_without_flags(tmp_path, monkeypatch):
    dist = tmp_path / "team_rules-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: team-rules\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[qaeval.checks]\nemail = {EMAIL}\n\n[qaeval.metrics]\nlength = {LENGTH}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = api.run(str(GOLDEN))
    assert run.registered.names == ["no_email_address", "answer_length_ok"]
    assert run.registered.checks[0].source == EMAIL


def test_a_check_that_never_answers_costs_three_deadlines_then_is_not_asked():
    run = api.run(str(GOLDEN), check=["hostile_checks:hangs_always"], check_timeout=0.5)
    reasons = run.custom["reason"].tolist()
    assert all("did not finish within 0.5 s" in r for r in reasons[:3])
    assert all(r.startswith("not asked: 3 cases in a row were lost") for r in reasons[3:]) and len(reasons) == 15
    assert run.tier_one_failures == run.per_case["case_id"].tolist()


def test_a_bad_check_is_refused_before_the_system_is_called(capsys):
    code = main(
        [
            "run",
            "--data",
            str(GOLDEN),
            "--adapter",
            "no_such_module:make",
            "--check",
            "hostile_checks:no_such",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 64 and "no_such" in err and "no_such_module" not in err  # the adapter was never started


def test_the_api_takes_functions_and_metric_objects():
    from qaeval import Metric, check

    @check(tier=1, name="not_abstained")
    def not_abstained(case, output, passages):
        return not output.abstained or case.must_abstain, "abstained on an answerable case"

    cited = Metric(
        "cites_two",
        True,
        "answered cases",
        "answers citing two passages or more",
        unit=lambda s: (float(len(s.output.citations) >= 2), 1.0) if s.facts.answered else (0.0, 0.0),
    )
    run = api.run(str(GOLDEN), check=[not_abstained], metric=[cited])
    board = run.scoreboard.set_index("metric")
    assert board.at["not_abstained", "value"] == 1.0 and board.at["cites_two", "value"] == 0.0
    assert board.at["cites_two", "n"] == board.at["faithfulness_rate", "n"]


def test_compare_names_a_registered_check_that_flipped_and_not_one_only_one_run_ran():
    """The reference system abstains where it must; the saboteur never does. A registered check that fails
    abstentions flips on those cases, and compare says so beside the built-in checks that flipped."""
    before = api.run(str(GOLDEN), check=["plugins:abstains_never"], metric=[LENGTH])
    after = api.run(str(GOLDEN), adapter="qaeval.system.saboteur:make_adapter", check=["plugins:abstains_never"])
    comparison = api.compare(before, after)
    cases = comparison.cases.set_index("case_id")
    must = [c.id for c in before.suite if c.must_abstain]
    assert must and all("abstains_never" in cases.at[c, "checks_flipped"] for c in must)
    assert all("abstains_never" not in cases.at[c.id, "checks_flipped"] for c in before.suite if not c.must_abstain)
    plain = api.run(str(GOLDEN), adapter="qaeval.system.saboteur:make_adapter")
    assert not any("abstains_never" in f for f in api.compare(before, plain).cases["checks_flipped"])


def test_compare_says_a_case_now_fails_a_registered_metric_or_an_adapter_error_and_not_every_check():
    """Found by a new user: a regression caused by a registered metric was shown as just "matched", and a
    case whose adapter now raises was listed as flipping every check (passage_fidelity included)."""
    before = api.run(str(GOLDEN))
    with_metric = api.run(str(GOLDEN), metric=["hostile_checks:raising_metric"])
    cases = api.compare(before, with_metric).cases.set_index("case_id")
    assert cases.at["single-0001", "change"] == "regressed"
    assert cases.at["single-0001", "new_reasons"] == ["metric raising_metric"]
    assert "now metric raising_metric" in str(api.compare(before, with_metric))
    broken = api.compare(before, api.run(str(GOLDEN), adapter="plugins:make_raising")).cases.set_index("case_id")
    assert broken.at["single-0001", "new_reasons"] == ["adapter error"]
    assert broken.at["single-0001", "checks_flipped"] == [] and broken.at["single-0001", "scores_changed"] == []


def test_compare_names_a_check_only_the_second_run_ran_when_it_fails_a_case():
    """An adversarial review: a regression caused by a newly registered check gave no reason."""
    before = api.run(str(GOLDEN))
    after = api.run(str(GOLDEN), check=["plugins:abstains_never"])
    assert not api.compare(before, after).cases["checks_flipped"].map(bool).any(), "the first run did not run it"
    cases = api.compare(before, after).cases.set_index("case_id")
    must = next(c.id for c in before.suite if c.must_abstain)
    assert cases.at[must, "new_reasons"] == ["check abstains_never"]


def test_a_metric_whose_units_are_near_the_largest_float_scores_instead_of_crashing(capsys):
    """Issue 40: (1e308, 1e308) is a valid unit (finite, 0 <= num <= den), but two of them sum to inf and
    `run` and `gate` exited 70 (OverflowError rounding n). The metric is 1.0 over them."""
    from qaeval.cli import main

    assert main(["run", "--data", str(GOLDEN), "--metric", "hostile_checks:huge_units", "--isolation", "none"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("huge_units"))
    assert row.split()[1] == "1.000", row


def test_a_check_that_forks_never_gets_one_cases_verdict_recorded_for_another():
    """Issue 40: the check process's replies did not name the case they answered, so a check that
    forked (its child replied too) had 11 to 14 of 15 cases carry another case's verdict. Now every
    reply names its request; a stray one fails that case and replaces the process, and no case
    carries a verdict that is not its own."""
    run = api.run(str(GOLDEN), check=["hostile_checks:forks"])
    rows = run.custom.set_index("case_id")
    pc = run.per_case.set_index("case_id")
    for cid, passed, reason in zip(rows.index, rows["passed"], rows["reason"]):
        if reason in ("answered", "abstained"):  # a verdict of the check: it must be this case's
            assert passed == (reason == "answered") == (not pc.at[cid, "abstained"]), (cid, reason)
        else:  # the process misbehaved on this case: it fails, with why
            assert not passed and (
                "where one was expected" in reason or "not asked now" in reason or "not asked:" in reason
            ), (cid, reason)
    assert any(r not in ("answered", "abstained") for r in rows["reason"]), "the stray replies were noticed"
