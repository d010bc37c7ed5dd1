"""The run record: one versioned file holding everything a run knew; saved, reloaded to equal frames,
re-rendered and compared without calling the system or the judge again."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import GOLDEN, LABELS
from helpers import without_explorer

from qaeval import RecordError, api, load_run
from qaeval.cli import main
from qaeval.record.write import FORMAT, VERSION
from qaeval.verdicts.calibration import CalibrationResult
from qaeval.verdicts.drift import DriftResult
from qaeval.verdicts.gate import GateResult

FRAMES = ("outputs", "checks", "retrieval", "verdicts", "trajectory", "per_case", "units", "scoreboard", "slices")


def calls(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def spy(tmp_path, monkeypatch):
    path = tmp_path / "calls.txt"
    monkeypatch.setenv("QAEVAL_TEST_CALLS", str(path))
    return path


def test_a_saved_run_reloads_to_equal_frames(golden_run, tmp_path):
    path = golden_run.save(tmp_path / "run.json")
    again = load_run(path)
    for name in FRAMES:
        pd.testing.assert_frame_equal(getattr(golden_run, name), getattr(again, name), obj=name)
    assert again.meta == golden_run.meta and again.suite.fingerprint == golden_run.suite.fingerprint
    assert again.summary_text() == golden_run.summary_text()


def test_the_record_holds_everything_a_run_knew(golden_run, tmp_path):
    data = json.loads(golden_run.save(tmp_path / "run.json").read_text())
    assert data["format"] == FORMAT and data["version"] == VERSION and data["kind"] == "run"
    meta = data["meta"]
    assert {
        "adapter",
        "judge",
        "isolation",
        "concurrency",
        "executor",
        "k",
        "timeout",
        "data",
        "created",
        "git_commit",
        "qaeval_version",
        "python",
    } <= set(meta)
    line = next(c for c in data["cases"] if c["case_id"] == "single-0002")
    assert set(line) == {
        "case_id",
        "case",
        "fingerprint",
        "output",
        "checks",
        "retrieval",
        "verdicts",
        "trajectory",
        "passed",
        "fail_reasons",
        "units",
    }
    assert line["output"]["prompt_to_model"].startswith("Answer the question")
    assert {"quote", "rationale", "decoy_id"} <= set(line["verdicts"][0])
    assert line["case"]["gold_answer"] == "$40"


def test_gate_calibrate_and_drift_results_round_trip(tmp_path):
    baseline = tmp_path / "b.json"
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(baseline)]) == 0
    gate = api.gate(
        str(GOLDEN),
        baseline=str(baseline),
        adapter="qaeval.system.saboteur:make_adapter",
        save=str(tmp_path / "gate.json"),
    )
    calibration = api.calibrate(str(GOLDEN), labels=str(LABELS), save=str(tmp_path / "cal.json"))
    drift = api.drift(str(GOLDEN), timeseries=str(tmp_path / "h.jsonl"), save=str(tmp_path / "drift.json"))
    for result, path, kind in (
        (gate, "gate.json", GateResult),
        (calibration, "cal.json", CalibrationResult),
        (drift, "drift.json", DriftResult),
    ):
        again = load_run(tmp_path / path)
        assert isinstance(again, kind)
        assert (again.ok, again.verdict, again.exit_code) == (result.ok, result.verdict, result.exit_code)
        assert again.summary_text() == result.summary_text()
    pd.testing.assert_frame_equal(load_run(tmp_path / "gate.json").metric_deltas, gate.metric_deltas)
    pd.testing.assert_frame_equal(load_run(tmp_path / "cal.json").pairs, calibration.pairs)
    pd.testing.assert_frame_equal(load_run(tmp_path / "drift.json").bands, drift.bands)


def test_baseline_with_html_calls_the_system_once_per_case(tmp_path, spy):
    code = main(
        [
            "baseline",
            "--data",
            str(GOLDEN),
            "--adapter",
            "plugins:make_counting",
            "--out",
            str(tmp_path / "b.json"),
            "--html",
            str(tmp_path / "run.html"),
            "--quiet",
        ]
    )
    assert code == 0 and len(calls(spy)) == 15, "once per case, not once for the baseline and again for the report"
    assert "GREEN" in (tmp_path / "run.html").read_text()


@pytest.mark.parametrize("command", ["gate", "calibrate", "drift"])
def test_every_html_command_calls_the_system_once_per_case(tmp_path, spy, command):
    baseline = tmp_path / "b.json"
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(baseline)]) == 0
    extra = {
        "gate": ["--baseline", str(baseline)],
        "calibrate": ["--labels", str(LABELS)],
        "drift": ["--timeseries", str(tmp_path / "h.jsonl")],
    }[command]
    main(
        [
            command,
            "--data",
            str(GOLDEN),
            "--adapter",
            "plugins:make_counting",
            *extra,
            "--html",
            str(tmp_path / "r.html"),
            "--quiet",
        ]
    )
    expected = 10 if command == "drift" else 15  # drift re-runs the frozen split only
    assert len(calls(spy)) == expected
    assert (tmp_path / "r.html").stat().st_size > 10_000


def test_report_renders_a_record_without_calling_anything(tmp_path, spy):
    record = tmp_path / "gate.json"
    baseline = tmp_path / "b.json"
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(baseline)]) == 0
    main(
        [
            "gate",
            "--data",
            str(GOLDEN),
            "--adapter",
            "plugins:make_counting",
            "--baseline",
            str(baseline),
            "--save",
            str(record),
            "--quiet",
        ]
    )
    before = len(calls(spy))
    assert main(["report", str(record), "--html", str(tmp_path / "gate.html")]) == 0
    assert len(calls(spy)) == before
    assert "PASS" in (tmp_path / "gate.html").read_text()


@pytest.mark.parametrize("command", ["run", "gate"])
def test_a_bad_labels_file_stops_before_the_system_is_called(tmp_path, spy, capsys, command):
    baseline = tmp_path / "b.json"
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(baseline)]) == 0
    bad = tmp_path / "labels.jsonl"
    bad.write_text('{"case_id": "no-such-case", "axis": "faithfulness", "score": 2}\n')
    extra = ["--baseline", str(baseline)] if command == "gate" else []
    capsys.readouterr()
    code = main([command, "--data", str(GOLDEN), "--adapter", "plugins:make_counting", "--labels", str(bad), *extra])
    assert code == 65 and "no-such-case" in capsys.readouterr().err
    assert calls(spy) == [], "the labels are checked against the suite before any case is answered"


def test_compare_names_every_changed_case_and_metric(tmp_path, capsys):
    baseline, after = tmp_path / "b.json", tmp_path / "after.json"
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(baseline)]) == 0
    main(["run", "--data", str(GOLDEN), "--adapter", "qaeval.system.saboteur:make_adapter", "--save", str(after)])
    capsys.readouterr()
    assert main(["compare", str(baseline), str(after), "--html", str(tmp_path / "compare.html")]) == 0
    out = capsys.readouterr().out
    comparison = api.compare(baseline, after)
    assert comparison.regressed == [
        "single-0001",
        "single-0002",
        "single-0003",
        "single-0004",
        "abstain-0001",
        "abstain-0002",
        "single-0005",
        "single-0006",
        "single-0007",
        "abstain-0003",
    ]
    for cid in comparison.changed["case_id"]:
        assert cid in out
    worse = set(comparison.worse_metrics)
    assert {"deterministic_pass_rate", "abstention_recall", "citation_precision"} <= worse
    for metric in worse:
        assert metric in out
    page = (tmp_path / "compare.html").read_text()
    assert "REGRESSED" in page and "Baseline answer" in page and "<script" not in without_explorer(page)


def test_compare_of_a_run_with_itself_finds_nothing(golden_run):
    comparison = api.compare(golden_run, golden_run)
    assert comparison.ok and comparison.changed.empty and comparison.exit_code == 0


def test_gate_report_shows_the_baseline_answer_beside_the_new_one(tmp_path):
    baseline = tmp_path / "b.json"
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(baseline)]) == 0
    main(
        [
            "gate",
            "--data",
            str(GOLDEN),
            "--adapter",
            "plugins:make_abstain_on_dvd",
            "--baseline",
            str(baseline),
            "--html",
            str(tmp_path / "gate.html"),
        ]
    )
    page = (tmp_path / "gate.html").read_text()
    block = page[page.index('id="case-single-0001"') :]
    block = block[: block.index("</details>")]
    assert "Baseline answer" in block and "passed in the baseline" in block and "Digital loans expire" in block
    assert "(abstained)" in block


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "not valid JSON"),
        ('{"format": "qaeval-record", "version": 4}', "record version 4 is not one this qaeval reads (3)"),
        ('{"format": "qaeval-record", "version": 1}', "version 1 was written before fail reasons carried codes"),
        ('{"format": "qaeval-record", "version": 3, "kind": "run"}', "field 'meta' missing"),
        ('{"format": "qaeval-baseline/1"}', "a qaeval 0.1 baseline"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_a_bad_record_exits_65(tmp_path, capsys, content, message):
    path = tmp_path / "r.json"
    path.write_text(content)
    assert main(["report", str(path), "--html", str(tmp_path / "r.html")]) == 65
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    with pytest.raises(RecordError):
        load_run(path)


def test_an_edited_record_case_is_caught(golden_run, tmp_path):
    path = golden_run.save(tmp_path / "run.json")
    data = json.loads(path.read_text())
    data["cases"][0]["case"]["split"] = "holdout"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordError, match="'split' is 'holdout'"):
        load_run(path)


def test_a_record_older_than_a_metric_still_loads_and_gates(golden_run, tmp_path):
    """Adding a metric must not break the baselines teams have committed."""
    path = golden_run.save(tmp_path / "old.json", baseline=True)
    data = json.loads(path.read_text())
    data["scoreboard"] = [r for r in data["scoreboard"] if r["metric"] != "rerank_mrr"]
    data["slices"] = [r for r in data["slices"] if r["metric"] != "rerank_mrr"]
    for line in data["cases"]:
        line["units"].pop("rerank_mrr")
    path.write_text(json.dumps(data))
    again = load_run(path)
    assert again.metric("rerank_mrr") == golden_run.metric("rerank_mrr"), "recomputed from the stored layers"
    assert any("predates rerank_mrr" in n for n in again.notes)
    assert api.gate(str(GOLDEN), baseline=str(path)).ok


def test_compare_report_says_a_passing_baseline_case_was_not_judged_correct(tmp_path):
    """single-0001 asks about DVDs and the reference system answers with the e-books sentence: it passed
    in the baseline (checks, faithfulness), which a reviewer read as "right"."""
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    assert main(["run", "--data", str(GOLDEN), "--save", str(before), "--quiet"]) == 0
    assert (
        main(
            ["run", "--data", str(GOLDEN), "--adapter", "plugins:make_abstain_on_dvd", "--save", str(after), "--quiet"]
        )
        == 0
    )
    assert main(["compare", str(before), str(after), "--html", str(tmp_path / "compare.html")]) == 0
    page = (tmp_path / "compare.html").read_text()
    block = page[page.index('id="case-single-0001"') :]
    block = block[: block.index("</details>")]
    assert (
        "passed in the baseline (checks, faithfulness, trajectory); answer judged not correct (answer "
        "correctness is not gated)"
    ) in block


def test_gate_drilldown_says_the_citation_moved_when_the_answer_did_not(tmp_path):
    """A cite-the-second-passage bug: the baseline's answer and the new one read the same, and nothing said
    the citation had moved."""
    page = tmp_path / "gate.html"
    assert (
        main(
            [
                "gate",
                "--data",
                str(GOLDEN),
                "--baseline",
                str(GOLDEN / "ci-baseline.json"),
                "--adapter",
                "plugins:make_cites_second",
                "--quiet",
                "--html",
                str(page),
            ]
        )
        == 1
    )
    text = page.read_text()
    block = text[text.index('id="case-single-0003"') :]
    block = block[: block.index("</details>")]
    assert "citation changed: eastside-profile → media-studio" in block
    assert "cited media-studio; gold eastside-profile" in block
