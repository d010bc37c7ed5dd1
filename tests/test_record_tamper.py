"""A saved record is checked against itself when it is loaded (issue 17, item 6).

Every verdict and figure that follows from a record's per-case layers is derived again on load; a
record edited so that what it says disagrees with its own data is a RecordError (exit 65) naming the
field, by every path that loads one: report, compare, gate --baseline, the verbs' ``record=``,
load_run and label export. The records here are real (the golden set and the saboteur), edited the
way an attacker would edit them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import GOLDEN

from qaeval import RecordError, api, load_run
from qaeval.cli import main
from qaeval.core.errors import BaselineError
from qaeval.scoring.metrics import METRIC_NAMES
from qaeval.scoring.outcomes import FAIL_CODES

SABOTEUR = "qaeval.system.saboteur:make_adapter"
CI_BASELINE = GOLDEN / "ci-baseline.json"


def edited(source: Path, target: Path, edit: Callable[[dict[str, Any]], Any]) -> Path:
    data = json.loads(source.read_text())
    edit(data)
    target.write_text(json.dumps(data))
    return target


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> dict[str, Path]:
    """The saboteur gated against the committed baseline (BLOCK), the golden run, the saboteur's run."""
    tmp = tmp_path_factory.mktemp("records")
    paths = {name: tmp / f"{name}.json" for name in ("gate", "good", "bad")}
    assert (
        main(
            [
                "gate",
                "--data",
                str(GOLDEN),
                "--adapter",
                SABOTEUR,
                "--baseline",
                str(CI_BASELINE),
                "--save",
                str(paths["gate"]),
                "--quiet",
            ]
        )
        == 1
    )
    assert main(["run", "--data", str(GOLDEN), "--save", str(paths["good"]), "--quiet"]) == 0
    assert main(["run", "--data", str(GOLDEN), "--adapter", SABOTEUR, "--save", str(paths["bad"]), "--quiet"]) == 0
    return paths


def every_tier_passed(data: dict[str, Any]) -> None:
    for tier in data["gate"]["tiers"]:
        tier["passed"] = True


# --------------------------------------------------------------------------- the gate


def test_a_gate_record_whose_tiers_all_say_passed_draws_no_pass_page(records, tmp_path, capsys):
    forged = edited(records["gate"], tmp_path / "forged.json", every_tier_passed)
    html = tmp_path / "forged.html"
    capsys.readouterr()
    assert main(["report", str(forged), "--html", str(html)]) == 65
    err = capsys.readouterr().err
    assert "record gate.tiers[0].passed says true but its cases give false" in err
    assert "record gate.tiers[2].passed says true but its cases give false" in err
    assert "Traceback" not in err
    assert not html.exists(), "no page is drawn from a record that disagrees with itself"


def test_gate_run_with_a_forged_record_raises(records, tmp_path):
    forged = edited(records["gate"], tmp_path / "forged.json", every_tier_passed)
    with pytest.raises(RecordError, match=r"gate\.tiers\[1\]\.passed says true but its cases give false"):
        api.gate(record=str(forged))


def test_a_record_from_another_version_that_disagrees_says_so(records, tmp_path):
    """A definition may change between versions: the message says which wrote the record."""

    def forge(data: dict[str, Any]) -> None:
        every_tier_passed(data)
        data["meta"]["qaeval_version"] = "0.0.1"

    with pytest.raises(RecordError) as caught:
        load_run(edited(records["gate"], tmp_path / "old.json", forge))
    assert "the record was written by qaeval 0.0.1 and this is" in str(caught.value)
    with pytest.raises(RecordError) as caught:
        load_run(edited(records["gate"], tmp_path / "forged.json", every_tier_passed))
    assert "written by" not in str(caught.value)


def test_a_forged_gate_that_also_rewrites_the_verdict_and_case_lines_is_caught(records, tmp_path):
    """Clearing the tiers' cases, the regressed list and every case's own pass/fail does not help: the
    case lines still hold the outputs and checks that fail."""

    def forge(data: dict[str, Any]) -> None:
        every_tier_passed(data)
        for tier in data["gate"]["tiers"]:
            tier["case_ids"] = []
        data["gate"]["regressed"] = []
        data["green"] = True
        for line in data["cases"]:
            line["passed"], line["fail_reasons"] = True, []

    forged = edited(records["gate"], tmp_path / "forged.json", forge)
    with pytest.raises(RecordError) as caught:
        load_run(forged)
    message = str(caught.value)
    assert "record cases[0].passed (single-0001) says true but its layers give false" in message
    assert "record green says true but its cases give false" in message


def test_a_gate_record_with_a_case_moved_out_of_the_matched_list_is_caught(records, tmp_path):
    def forge(data: dict[str, Any]) -> None:
        data["gate"]["match"]["matched"].remove("single-0001")
        data["gate"]["match"]["removed"].append("single-0001")

    forged = edited(records["gate"], tmp_path / "forged.json", forge)
    with pytest.raises(RecordError, match=r"gate\.match\.matched says .* but its cases give"):
        load_run(forged)


def test_a_gate_record_with_a_metric_movement_edited_is_caught(records, tmp_path):
    def forge(data: dict[str, Any]) -> None:
        row = next(r for r in data["gate"]["metric_deltas"] if r["metric"] == "citation_precision")
        row["current"], row["delta"], row["passed"] = 1.0, 0.0, True

    forged = edited(records["gate"], tmp_path / "forged.json", forge)
    with pytest.raises(RecordError) as caught:
        load_run(forged)
    message = str(caught.value)
    assert "gate.metric_deltas[1].current (citation_precision) says 1.0 but its cases give 0.4" in message
    assert "gate.metric_deltas[1].passed (citation_precision) says true but its cases give false" in message


def test_the_committed_baseline_still_gates_and_the_saboteur_still_blocks(records):
    assert main(["gate", "--data", str(GOLDEN), "--baseline", str(CI_BASELINE), "--quiet"]) == 0
    again = load_run(records["gate"])
    assert (again.verdict, again.exit_code) == ("BLOCK", 1)
    assert len(again.blocking_cases) == 15


def test_an_edited_baseline_is_refused_before_the_gate_runs(tmp_path, capsys):
    def forge(data: dict[str, Any]) -> None:
        row = next(r for r in data["scoreboard"] if r["metric"] == "faithfulness_rate")
        row["value"] = 0.0  # a baseline that was never any good lets every later run through

    forged = edited(CI_BASELINE, tmp_path / "baseline.json", forge)
    capsys.readouterr()
    assert main(["gate", "--data", str(GOLDEN), "--baseline", str(forged), "--quiet"]) == 65
    assert "scoreboard[1].value (faithfulness_rate) says 0.0 but its cases give 1.0" in capsys.readouterr().err
    with pytest.raises(BaselineError):
        api.gate(str(GOLDEN), baseline=str(forged))


# --------------------------------------------------------------------------- compare and the run layers


def swap_in_the_good_run(good: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """The saboteur's record with the golden run's checks, outcomes and scoreboard pasted in."""

    def forge(data: dict[str, Any]) -> None:
        for line, honest in zip(data["cases"], good["cases"]):
            for key in ("checks", "passed", "fail_reasons", "units"):
                line[key] = honest[key]
        for key in ("scoreboard", "slices", "green"):
            data[key] = good[key]

    return forge


def test_compare_refuses_a_run_whose_checks_and_scoreboard_were_swapped(records, tmp_path, capsys):
    good = json.loads(records["good"].read_text())
    forged = edited(records["bad"], tmp_path / "after.json", swap_in_the_good_run(good))
    capsys.readouterr()
    assert main(["compare", str(records["good"]), str(forged)]) == 65
    captured = capsys.readouterr()
    assert "NO REGRESSION" not in captured.out
    assert (
        "record cases[0].checks[1] (single-0001, citation_resolvability) passed says true but its case and output "
        "give false" in captured.err
    )


def test_compare_refuses_an_edited_scoreboard_value(records, tmp_path, capsys):
    def forge(data: dict[str, Any]) -> None:
        data["scoreboard"][METRIC_NAMES.index("abstention_recall")]["value"] = 1.0

    forged = edited(records["bad"], tmp_path / "after.json", forge)
    capsys.readouterr()
    assert main(["compare", str(records["good"]), str(forged)]) == 65
    assert "record scoreboard[5].value (abstention_recall) says 1.0 but its cases give 0.0" in capsys.readouterr().err


def _line(data: dict[str, Any], case_id: str) -> dict[str, Any]:
    return next(line for line in data["cases"] if line["case_id"] == case_id)


def _flip_check(data: dict[str, Any]) -> None:
    _line(data, "single-0002")["checks"][1][1] = True


def _retrieval(data: dict[str, Any]) -> None:
    _line(data, "single-0002")["retrieval"]["recall_at_k"] = 1.0
    _line(data, "single-0002")["retrieval"]["mrr"] = 0.25


def _credit(data: dict[str, Any]) -> None:
    verdict = _line(data, "single-0002")["verdicts"][0]
    verdict["valid"], verdict["credit"], verdict["quote"] = True, True, "words that are in no source at all"


def _trajectory(data: dict[str, Any]) -> None:
    for step in _line(data, "multi-0001")["trajectory"]:
        step["passed"] = step["success"] = not step["success"]


def _units(data: dict[str, Any]) -> None:
    _line(data, "abstain-0001")["units"]["abstention_recall"] = [1.0, 1.0]


def _slice(data: dict[str, Any]) -> None:
    row = next(r for r in data["slices"] if r["metric"] == "abstention_recall" and r["slice"] == "split")
    row["value"] = 1.0


def _dropped_slice(data: dict[str, Any]) -> None:
    data["slices"] = [r for r in data["slices"] if not (r["metric"] == "citation_precision" and r["slice"] == "split")]


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            _flip_check,
            "record cases[1].checks[1] (single-0002, citation_resolvability) passed says true but its case and "
            "output give false",
        ),
        (_retrieval, "record cases[1].retrieval.mrr (single-0002) says 0.25 but its case and output give 1.0"),
        (
            _credit,
            "record cases[1].verdicts[0] (single-0002, faithfulness).valid says true but its quote and sources give false",
        ),
        (
            _trajectory,
            "record cases[4].trajectory[0].success (multi-0001) says true but its case and output give false",
        ),
        (
            _units,
            "record cases[8].units.abstention_recall (abstain-0001) says [1.0, 1.0] but its layers give [0.0, 1.0]",
        ),
        (_slice, "(split, frozen, abstention_recall) says 1.0 but its cases give 0.0"),
        (_dropped_slice, "record slices has no row for split, frozen, citation_precision"),
    ],
)
def test_an_edited_layer_of_a_run_record_is_named(records, tmp_path, edit, message):
    forged = edited(records["bad"], tmp_path / "bad.json", edit)
    with pytest.raises(RecordError) as caught:
        load_run(forged)
    assert message in str(caught.value)


def test_label_export_from_an_edited_record_exits_65(records, tmp_path, capsys):
    forged = edited(records["bad"], tmp_path / "bad.json", _credit)
    capsys.readouterr()
    assert main(["label", "export", str(forged), "--out", str(tmp_path / "sheet.csv")]) == 65
    assert "verdicts[0] (single-0002, faithfulness).credit says true" in capsys.readouterr().err
    assert not (tmp_path / "sheet.csv").exists()


def test_a_baseline_record_keeps_prompts_as_hashes_and_its_grounding_is_taken_as_recorded(tmp_path):
    """A baseline holds no prompts, so grounding_isolation cannot be derived again; every other check is.
    Hashing one prompt in a full run record (to hide a forged grounding check) is refused."""
    baseline = tmp_path / "b.json"
    shutil.copy(CI_BASELINE, baseline)
    assert load_run(baseline).ok

    def hide_one_prompt(data: dict[str, Any]) -> None:
        line = data["cases"][0]
        line["output"]["prompt_sha256"] = "0" * 64
        line["output"].pop("prompt_to_model")

    run = api.run(str(GOLDEN), save=str(tmp_path / "run.json"))
    forged = edited(tmp_path / "run.json", tmp_path / "forged.json", hide_one_prompt)
    with pytest.raises(RecordError, match=r"cases\[0\]\.output \(single-0001\) keeps its prompt as a hash"):
        load_run(forged)
    assert run.ok


# --------------------------------------------------------------------------- calibration and drift


@pytest.fixture(scope="module")
def calibration_record(tmp_path_factory, strict_labels) -> Path:
    path = tmp_path_factory.mktemp("cal") / "cal.json"
    api.calibrate(str(GOLDEN), labels=str(strict_labels), save=str(path))
    return path


def test_a_calibration_record_that_hides_disagreements_as_stale_is_caught(calibration_record, tmp_path):
    def forge(data: dict[str, Any]) -> None:
        for pair in data["calibration"]["pairs"]:
            if pair["status"] == "compared" and not pair["agree"]:
                pair["status"], pair["judge"], pair["agree"] = "stale", None, None

    forged = edited(calibration_record, tmp_path / "cal.json", forge)
    with pytest.raises(
        RecordError,
        match=r"calibration\.pairs\[\d+\]\.status \(.*\) says \"stale\" but its cases "
        r"give \"compared\"",
    ):
        load_run(forged)


def test_a_calibration_record_with_an_axis_edited_to_pass_is_caught(calibration_record, tmp_path):
    def forge(data: dict[str, Any]) -> None:
        for row in data["calibration"]["agreement"]:
            row["passed"] = True

    assert load_run(calibration_record).verdict == "RETUNE JUDGE", "the strict labels refuse the offline judge"
    forged = edited(calibration_record, tmp_path / "cal.json", forge)
    with pytest.raises(
        RecordError, match=r"calibration\.agreement\[\d\]\.passed \(\w+\) says true but its cases give false"
    ):
        api.calibrate(record=str(forged))


@pytest.fixture(scope="module")
def drift_record(tmp_path_factory, golden_run) -> Path:
    """The saboteur's frozen split after three honest runs: an alarm."""
    tmp = tmp_path_factory.mktemp("drift")
    series = tmp / "history.jsonl"
    board = golden_run.scoreboard.set_index("metric")
    line = {
        "metrics": {
            m: None if board.at[m, "value"] != board.at[m, "value"] else float(board.at[m, "value"])
            for m in METRIC_NAMES
        },
        "alarms": [],
        "time": "2026-01-01T00:00:00+00:00",
    }
    series.write_text("".join(json.dumps(line) + "\n" for _ in range(3)))
    result = api.drift(str(GOLDEN), timeseries=str(series), adapter=SABOTEUR, save=str(tmp / "drift.json"))
    assert not result.ok
    return tmp / "drift.json"


def test_a_drift_record_whose_alarms_were_removed_is_caught(drift_record, tmp_path):
    def forge(data: dict[str, Any]) -> None:
        data["drift"]["alarms"], data["drift"]["line"]["alarms"] = [], []
        for band in data["drift"]["bands"]:
            band["alarm"], band["low"] = False, 0.0

    forged = edited(drift_record, tmp_path / "drift.json", forge)
    with pytest.raises(RecordError) as caught:
        api.drift(record=str(forged))
    message = str(caught.value)
    assert "drift.line.alarms says [] but its cases give [" in message
    assert "drift.bands[3].alarm (citation_precision) says false but its cases give true" in message


def test_a_drift_record_whose_history_was_widened_is_caught(drift_record, tmp_path):
    """Earlier runs' values are what the band is made from: editing one moves the band the record says."""

    def forge(data: dict[str, Any]) -> None:
        row = next(r for r in data["drift"]["history"] if r["metric"] == "citation_precision" and r["run"] == 0)
        row["value"] = 0.0

    forged = edited(drift_record, tmp_path / "drift.json", forge)
    with pytest.raises(RecordError, match=r"drift\.bands\[3\]\.(mean|low) \(citation_precision\) says"):
        load_run(forged)


def test_honest_records_of_every_kind_load_as_they_were(records, calibration_record, drift_record):
    for path in (*records.values(), calibration_record, drift_record):
        assert load_run(path).summary_text()


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("meta", "k"), "five", "meta.k is str, not int"),
        (("meta", "concurrency"), True, "meta.concurrency is bool, not int"),
        (("meta", "judge", "temperature"), "hot", "meta.judge.temperature is str, not int or float"),
    ],
)
def test_a_meta_field_of_the_wrong_type_is_named(tmp_path, capsys, path, value, message):
    """A field of the wrong type is a RecordError naming it, not a crash somewhere later (exit 70)."""
    from qaeval.cli import main

    record = tmp_path / "r.json"
    assert main(["run", "--data", str(GOLDEN), "--save", str(record), "--quiet"]) == 0
    data = json.loads(record.read_text())
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    record.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["report", str(record), "--html", str(tmp_path / "r.html")]) == 65
    assert message in capsys.readouterr().err


# --------------------------------------------------------------------------- types before values (issue 18)


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("cases", 1, "verdicts", 0, "score"), "2", "cases[1].verdicts[0].score is str, not int or null"),
        (("cases", 2, "checks", 0), ["grounding_isolation", 1, "ok"], "cases[2].checks[0][1] is int, not bool"),
        (("cases", 0, "output", "abstained"), "no", "cases[0].output.abstained is str, not bool"),
        (("cases", 0, "retrieval", "k"), 5.5, "cases[0].retrieval.k is float, not int"),
        (("cases", 3, "trajectory"), {}, "cases[3].trajectory is dict, not a list"),
        (("scoreboard", 0, "n"), True, "scoreboard[0].n is bool, not int"),
        (("cases", 4), "a line", "cases[4] is str, not an object"),
    ],
)
def test_a_field_of_the_wrong_type_is_a_record_error_naming_it(records, tmp_path, capsys, path, value, named):
    bad = edited(records["good"], tmp_path / "typed.json", _set(path, value))
    capsys.readouterr()
    assert main(["report", str(bad), "--html", str(tmp_path / "typed.html")]) == 65
    assert named in capsys.readouterr().err


def test_a_bug_after_the_record_is_read_is_a_bug_not_a_malformed_record(records, tmp_path, capsys, monkeypatch):
    """Before, every KeyError or TypeError while building a run from a record read as "record is
    malformed" (exit 65), hiding qaeval's own bugs behind the user's file."""
    import qaeval.record.read

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug in assemble")

    monkeypatch.setattr(qaeval.record.read, "assemble", broken)
    capsys.readouterr()
    assert main(["report", str(records["good"]), "--html", str(tmp_path / "bug.html")]) == 70
    assert "malformed" not in capsys.readouterr().err


def test_a_fail_reason_whose_code_was_changed_is_caught_and_its_message_is_not_compared(records, tmp_path):
    """A failing case's reasons carry codes that the layers decide: a code changed in the file is named;
    the message is for people and may be reworded (another qaeval version words it differently)."""

    def recode(data: dict[str, Any]) -> None:
        line = next(c for c in data["cases"] if c["fail_reasons"])
        line["fail_reasons"][0]["code"] = "judge_error"

    with pytest.raises(RecordError) as caught:
        load_run(edited(records["bad"], tmp_path / "recoded.json", recode))
    assert "fail_reasons codes" in str(caught.value) and "judge_error" in str(caught.value)

    def reword(data: dict[str, Any]) -> None:
        for line in data["cases"]:
            for reason in line["fail_reasons"]:
                reason["message"] = "worded otherwise"

    reloaded = load_run(edited(records["bad"], tmp_path / "reworded.json", reword))
    assert not reloaded.per_case["case_passed"].all()


def test_a_fail_reason_that_is_not_a_code_and_message_is_named(records, tmp_path):
    def stringly(data: dict[str, Any]) -> None:
        line = next(c for c in data["cases"] if c["fail_reasons"])
        line["fail_reasons"][0] = "grounding_isolation: leak"

    with pytest.raises(RecordError) as caught:
        load_run(edited(records["bad"], tmp_path / "stringly.json", stringly))
    assert "fail_reasons[0] is str, not an object" in str(caught.value)


# --------------------------------------------------------------------------- typed verdict sections (issue 18)


@pytest.fixture(scope="module")
def monitor_record(tmp_path_factory) -> Path:
    from monitor_logs import traffic, write_jsonl

    tmp = tmp_path_factory.mktemp("monitor")
    logs = write_jsonl(tmp / "logs.jsonl", traffic(days=2, per_day=30))
    api.monitor(str(logs), by=["system"], time_window="1D", sample=10, seed=3, save=str(tmp / "monitor.json"))
    return tmp / "monitor.json"


@pytest.fixture(scope="module")
def gate_labelled(tmp_path_factory, strict_labels) -> Path:
    """The golden run gated with labels: the gate record carries a calibration section of its own."""
    path = tmp_path_factory.mktemp("gate_labelled") / "gate.json"
    assert (
        main(
            [
                "gate",
                "--data",
                str(GOLDEN),
                "--baseline",
                str(CI_BASELINE),
                "--labels",
                str(strict_labels),
                "--save",
                str(path),
                "--quiet",
            ]
        )
        == 2
    )
    return path


def _first_kept_case(data: dict[str, Any]) -> str:
    return sorted(data["gate"]["baseline_cases"])[0]


def _drop(*path: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return edit


SECTION_EDITS = [  # (record, edit, the one problem the RecordError names)
    (
        "gate",
        lambda d: d["gate"]["baseline_cases"][_first_kept_case(d)].update(units=[]),
        "gate.baseline_cases.{case}.units is list, not an object",
    ),
    (
        "gate",
        lambda d: d["gate"]["tiers"][0].update(rule="everything passes"),
        "gate.tiers[0].rule is 'everything passes', not one of deterministic checks, metrics vs baseline, "
        "no passing case regresses, new cases pass",
    ),
    (
        "gate",
        lambda d: d["gate"]["baseline_cases"][_first_kept_case(d)].update(fail_reasons=["stale: text"]),
        "gate.baseline_cases.{case}.fail_reasons[0] is str, not an object",
    ),
    ("gate", _set(("gate", "tiers", 1, "passed"), "yes"), "gate.tiers[1].passed is str, not bool"),
    ("gate", _drop("gate", "match", "changed"), "gate.match.changed is missing"),
    (
        "gate_labelled",
        _set(("gate", "calibration", "axes"), "faithfulness"),
        "gate.calibration.axes is str, not a list",
    ),
    (
        "calibration",
        _set(("calibration", "confusion", "faithfulness"), [[1, 2], [3, 4]]),
        "calibration.confusion.faithfulness has 2 item(s), not 3",
    ),
    ("calibration", _set(("calibration", "min_labels"), "10"), "calibration.min_labels is str, not int"),
    ("calibration", _drop("calibration", "agreement", 0, "kappa"), "calibration.agreement[0].kappa is missing"),
    ("drift", _set(("drift", "bands", 0, "window_n"), "3"), "drift.bands[0].window_n is str, not int"),
    ("drift", _set(("drift", "alarms", 0), "citation_precision dropped"), "drift.alarms[0] is str, not an object"),
    ("drift", _drop("drift", "window"), "drift.window is missing"),
    (
        "drift",
        _set(("drift", "bands", 0, "current"), 10**400),
        "drift.bands[0].current is 10000000000000000..., out of range",
    ),
    (
        "drift",
        _set(("drift", "history", 0, "time"), "2026-13-01"),
        "drift.history[0].time is '2026-13-01', not an ISO 8601 date and time",
    ),
    (
        "monitor",
        _set(("monitor", "rows", 0, "timestamp"), "soon"),
        "monitor.rows[0].timestamp is 'soon', not an ISO 8601 date and time",
    ),
    ("monitor", _set(("monitor", "seed"), "3"), "monitor.seed is str, not int"),
    ("monitor", _drop("monitor", "slice_columns"), "monitor.slice_columns is missing"),
    (
        "monitor",
        lambda d: d["monitor"]["windows"].append(d["monitor"]["windows"][0]),
        "monitor.windows is not one row per window, slice, group and metric",
    ),
    (
        "monitor",
        lambda d: next(r for r in d["monitor"]["rows"] if r["sampled"]).update(row_id=None),
        "monitor.rows[{row}].row_id is NoneType, not str",
    ),
    (
        "gate",
        lambda d: d["gate"]["baseline_cases"][_first_kept_case(d)].update(
            fail_reasons=[{"code": "bogus", "message": "m"}]
        ),
        "gate.baseline_cases.{case}.fail_reasons[0].code is 'bogus', not one of " + ", ".join(FAIL_CODES),
    ),
]


@pytest.mark.parametrize(("kind", "edit", "named"), SECTION_EDITS)
def test_a_bad_field_in_a_verdict_section_is_a_record_error_naming_it(
    kind, edit, named, records, gate_labelled, calibration_record, drift_record, monitor_record, tmp_path, capsys
):
    """Before, the section was built under a broad except and any slip read "the gate section is
    malformed (KeyError: 'changed')", or was not noticed at all; now its fields are typed before anything
    is built from them, and the one field that is wrong is named (exit 65)."""
    source = {
        "gate": records["gate"],
        "gate_labelled": gate_labelled,
        "calibration": calibration_record,
        "drift": drift_record,
        "monitor": monitor_record,
    }[kind]
    data = json.loads(source.read_text())
    named = named.format(
        case=_first_kept_case(data) if kind == "gate" else "",
        row=next((i for i, r in enumerate(data["monitor"]["rows"]) if r["sampled"]), 0) if kind == "monitor" else "",
    )
    bad = edited(source, tmp_path / "typed.json", edit)
    with pytest.raises(RecordError) as caught:
        load_run(bad)
    assert str(caught.value).endswith(f"record is malformed: {named}")
    capsys.readouterr()
    assert main(["report", str(bad), "--html", str(tmp_path / "typed.html")]) == 65
    assert named in capsys.readouterr().err


@pytest.mark.parametrize("step", ["from_section", "audit_section"])
def test_a_bug_while_building_a_verdict_section_is_a_bug_not_a_malformed_record(
    records, tmp_path, capsys, monkeypatch, step
):
    """Once the section's fields are typed, an exception building the result from them is qaeval's bug:
    exit 70 with its trace, never "the gate section is malformed" (exit 65)."""
    from qaeval.verdicts.gate import GateResult

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug in the gate")

    monkeypatch.setattr(GateResult, step, broken)
    with pytest.raises(KeyError, match="a bug in the gate"):
        load_run(records["gate"])
    capsys.readouterr()
    assert main(["report", str(records["gate"]), "--html", str(tmp_path / "bug.html")]) == 70
    assert "malformed" not in capsys.readouterr().err


def test_a_monitor_record_whose_log_times_differ_in_precision_loads(tmp_path):
    """Before, a log with one time to the microsecond saved a record that could not be read back: the
    times were re-parsed with the format pandas guessed from the first row ("the monitor section is
    malformed", exit 65, for an honest record)."""
    from monitor_logs import traffic, write_jsonl

    rows = traffic(days=1, per_day=6)
    rows[3]["timestamp"] = "2026-02-01T03:00:00.250000+00:00"
    logs = write_jsonl(tmp_path / "logs.jsonl", rows)
    result = api.monitor(str(logs), time_window="1D", save=str(tmp_path / "monitor.json"))
    again = load_run(tmp_path / "monitor.json")
    assert again.rows["timestamp"].tolist() == result.rows["timestamp"].tolist()
    assert str(again.rows["timestamp"].iloc[3]) == "2026-02-01 03:00:00.250000+00:00"


def test_a_gate_tier_whose_rule_was_swapped_is_caught(records, tmp_path):
    """An adversarial review: a rule from the allowed list but not its tier's loaded, and the report then
    tagged the tier's cases with it."""

    def swap(data: dict[str, Any]) -> None:
        data["gate"]["tiers"][0]["rule"] = "new cases pass"

    with pytest.raises(RecordError) as caught:
        load_run(edited(records["gate"], tmp_path / "swapped.json", swap))
    assert "gate.tiers' rules" in str(caught.value)


def _first_checkpoint(data: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in data["cases"] if c["case"].get("checkpoints"))["case"]["checkpoints"][0]


@pytest.mark.parametrize(
    "edit, named",
    [
        (
            lambda d: d["cases"][0]["output"].update(prompt_to_model={"a": 1}),
            "cases[0].output.prompt_to_model is dict, not str or null",
        ),
        (lambda d: d["cases"][0]["output"].update(citations=1.5), "cases[0].output.citations is float, not a list"),
        (
            lambda d: d["cases"][0]["output"].update(citations=[{"claim": "x"}]),
            "cases[0].output.citations[0].source_id is missing",
        ),
        (lambda d: d["cases"][0]["output"].update(latency_s=[1]), "cases[0].output.latency_s is list"),
        (
            lambda d: d["cases"][0]["output"].update(passages=[{"id": 1, "text": "t"}]),
            "cases[0].output.passages[0].id is int, not str",
        ),
        (
            lambda d: d["cases"][0]["output"].update(computed_aggregate={"a": 1}),
            "cases[0].output.computed_aggregate is not a finite number, text or null",
        ),
        (lambda d: d["cases"][0]["case"].update(id=["x"]), "cases[0].case.id is not the line's case_id"),
        (lambda d: d["cases"][0]["verdicts"][0].update(cached=[1, 2]), "cases[0].verdicts[0].cached is list, not bool"),
        (
            lambda d: d["cases"][0]["verdicts"][0].update(completion_tokens=10**30),
            "cases[0].verdicts[0].completion_tokens is 10000000000000000..., out of range",
        ),
        (lambda d: d["meta"].update(k=10**30), "meta.k is out of range"),
        (lambda d: d.update(notes=1.5), "notes is float, not a list"),
        (lambda d: _first_checkpoint(d).update(kind=["x"]), "checkpoint kind ['x'] is not one of"),
    ],
)
def test_a_bad_field_in_a_run_is_exit_65_naming_it_not_an_internal_error(records, tmp_path, capsys, edit, named):
    """An adversarial review: each of these edits was a traceback and exit 70."""
    bad = edited(records["good"], tmp_path / "bad.json", edit)
    assert main(["report", str(bad), "--html", str(tmp_path / "bad.html")]) == 65
    err = capsys.readouterr().err
    assert named in err and "internal error" not in err


def _pass_hat_k_row(data: dict[str, Any]) -> None:
    data["scoreboard"].append({**data["scoreboard"][0], "metric": "pass_hat_k", "value": 1.0})


def _unknown_row(data: dict[str, Any]) -> None:
    data["scoreboard"].append({**data["scoreboard"][0], "metric": "vibes", "value": 1.0})


def _unknown_slice(data: dict[str, Any]) -> None:
    data["slices"].append({**data["slices"][0], "metric": "vibes", "value": 1.0})


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            _pass_hat_k_row,
            "scoreboard[10] (pass_hat_k) is a row for a metric of several trials, and the record has one trial",
        ),
        (_unknown_row, "scoreboard[10] (vibes) is a row for a metric its run does not compute"),
        (_unknown_slice, "slices[90] (difficulty, aggregation, vibes) is a row for a metric its run does not compute"),
    ],
)
def test_an_extra_scoreboard_row_is_refused_naming_it_not_a_crash_in_the_report(
    records, tmp_path, capsys, edit, message
):
    """Issue 49, item 14: a row for a metric the run does not compute was skipped by the check, and the
    report's notebook died on it with a KeyError (exit 70)."""
    forged = edited(records["good"], tmp_path / "extra.json", edit)
    capsys.readouterr()
    assert main(["report", str(forged), "--html", str(tmp_path / "extra.html")]) == 65
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    with pytest.raises(RecordError, match="does not compute|several trials"):
        load_run(forged)
