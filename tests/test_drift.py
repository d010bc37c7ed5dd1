"""Drift: bands over a trailing window, direction rules, an append-only series that survives abuse."""

from __future__ import annotations

import json
import multiprocessing

from conftest import GOLDEN

import plugins
from qaeval.cli import main
from qaeval.drift import append_record, compare, drift, read_history
from qaeval.metrics import METRIC_NAMES


def record(**values) -> dict:
    metrics = {m: 0.9 for m in METRIC_NAMES}
    metrics["over_refusal_rate"] = 0.1
    metrics.update(values)
    return {"metrics": metrics}


HISTORY = [record(), record(), record(), record()]


def alarms_for(**values):
    _, alarms, notes = compare(HISTORY, record(**values))
    return {a["metric"] for a in alarms}, notes


def test_steady_metrics_raise_no_alarm():
    assert alarms_for() == (set(), [])


def test_higher_is_better_alarms_only_on_a_drop():
    assert alarms_for(faithfulness_rate=0.5)[0] == {"faithfulness_rate"}
    assert alarms_for(faithfulness_rate=1.0)[0] == set()


def test_over_refusal_alarms_in_both_directions():
    assert alarms_for(over_refusal_rate=0.5)[0] == {"over_refusal_rate"}
    assert alarms_for(over_refusal_rate=0.0)[0] == {"over_refusal_rate"}


def test_band_has_a_minimum_width_for_perfectly_steady_series():
    assert alarms_for(faithfulness_rate=0.885)[0] == set()  # within 0.02 of a zero-variance mean
    assert alarms_for(faithfulness_rate=0.87)[0] == {"faithfulness_rate"}


def test_too_short_a_history_never_alarms_and_says_so():
    _, alarms, notes = compare(HISTORY[:2], record(faithfulness_rate=0.0))
    assert alarms == [] and "history too short" in notes[0]


def test_window_only_looks_at_trailing_runs():
    old = [record(faithfulness_rate=0.2)] * 5
    _, alarms, _ = compare(old + HISTORY, record(faithfulness_rate=0.5), window=4)
    assert {a["metric"] for a in alarms} == {"faithfulness_rate"}


def test_torn_last_line_is_survived(tmp_path):
    path = tmp_path / "series.jsonl"
    append_record(path, record())
    with open(path, "a") as f:
        f.write('{"metrics": {"faithful')  # a writer killed mid-line
    append_record(path, record())
    records, notes = read_history(path)
    assert len(records) == 2 and len(notes) == 1 and "line 2" in notes[0]
    assert all(json.loads(line) for i, line in enumerate(path.read_text().splitlines()) if i != 1)


def _writer(path: str, n: int) -> None:
    for i in range(n):
        append_record(path, {"metrics": {"x": i}, "pad": "y" * 5000})


def test_two_writers_at_once_never_interleave(tmp_path):
    path = str(tmp_path / "series.jsonl")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, 60)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    records, notes = read_history(path)
    assert len(records) == 120 and notes == []


def test_drift_command_appends_and_alarms_with_notify(tmp_path, capsys):
    series = tmp_path / "series.jsonl"
    for _ in range(3):
        assert main(["drift", "--data", str(GOLDEN), "--timeseries", str(series), "--quiet"]) == 0
    assert "history too short" in capsys.readouterr().out
    plugins.ALARMS.clear()
    code = main(["drift", "--data", str(GOLDEN), "--timeseries", str(series), "--quiet",
                 "--adapter", "qaeval.buggy_hub:make_adapter", "--notify", "plugins:notify"])
    out = capsys.readouterr().out
    assert code == 3 and "DRIFT: ALARM" in out and "abstention_recall dropped below its band" in out
    assert {a["metric"] for a in plugins.ALARMS} >= {"abstention_recall", "citation_precision"}
    records, _ = read_history(series)
    assert len(records) == 4
    assert records[-1]["cases"] == 10, "drift re-runs the frozen split only"
    assert {"time", "metrics", "n", "adapter", "judge", "dataset_fingerprint", "git_commit"} <= set(records[-1])


def test_notify_hook_that_raises_is_noted_not_fatal(golden_run, tmp_path):
    def broken(alarms):
        raise RuntimeError("pager down")

    series = tmp_path / "s.jsonl"
    for _ in range(3):
        append_record(series, record(answer_correctness=0.9))  # the hub scores 0.0 now: an alarm
    result = drift(golden_run, series, notify=broken)
    assert result.alarmed and "answer_correctness" in {a["metric"] for a in result.alarms}
    assert any("notify hook raised RuntimeError: pager down" in n for n in result.notes)


def test_unknown_notify_hook_is_a_usage_error(tmp_path, capsys):
    assert main(["drift", "--data", str(GOLDEN), "--timeseries", str(tmp_path / "s"), "--notify", "plugins:nope"]) == 64


def test_a_sustained_drop_keeps_alarming():
    bad = record(faithfulness_rate=0.5)
    bad["alarms"] = ["faithfulness_rate"]
    _, alarms, _ = compare(HISTORY + [bad], record(faithfulness_rate=0.5))
    assert {a["metric"] for a in alarms} == {"faithfulness_rate"}
