"""Drift: bands over a trailing window, direction rules, an append-only series that survives abuse."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
from conftest import GOLDEN

from qaeval.cli import main
from qaeval.core.errors import FileAccessError
from qaeval.core.files import append_line
from qaeval.scoring.metrics import METRIC_NAMES
from qaeval.verdicts.drift import compare, drift
from qaeval.verdicts.history import read_history


def append_record(path, record: dict) -> None:
    append_line(path, json.dumps(record))


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


def test_drift_command_appends_and_alarms_with_notify(tmp_path, capsys, monkeypatch):
    series = tmp_path / "series.jsonl"
    for _ in range(3):
        assert main(["drift", "--data", str(GOLDEN), "--timeseries", str(series), "--quiet"]) == 0
    assert "history too short" in capsys.readouterr().out
    monkeypatch.setenv("QAEVAL_TEST_ALARMS", str(tmp_path / "alarms.jsonl"))  # the hook runs in its own process
    code = main(
        [
            "drift",
            "--data",
            str(GOLDEN),
            "--timeseries",
            str(series),
            "--quiet",
            "--adapter",
            "qaeval.system.saboteur:make_adapter",
            "--notify",
            "hostile_plugins:notify_to_file",
        ]
    )
    out = capsys.readouterr().out
    assert code == 3 and "DRIFT: ALARM" in out and "abstention_recall dropped below its band" in out
    alarms = json.loads((tmp_path / "alarms.jsonl").read_text())
    assert {a["metric"] for a in alarms} >= {"abstention_recall", "citation_precision"}
    records, _ = read_history(series)
    assert len(records) == 4
    assert records[-1]["cases"] == 10, "drift re-runs the frozen split only"
    assert {"time", "metrics", "n", "adapter", "judge", "dataset_fingerprint", "git_commit", "isolation"} <= set(
        records[-1]
    )


def test_notify_hook_that_raises_is_noted_not_fatal(golden_run, tmp_path):
    def broken(alarms):
        raise RuntimeError("pager down")

    series = tmp_path / "s.jsonl"
    for _ in range(3):
        append_record(series, record(answer_correctness=0.9))  # the hub scores 0.0 now: an alarm
    result = drift(golden_run, series, notify=broken)
    assert not result.ok and "answer_correctness" in {a["metric"] for a in result.alarms}
    assert any("notify hook raised RuntimeError: pager down" in n for n in result.notes)


def test_notify_hook_that_exits_cannot_hide_the_alarm(tmp_path, capsys):
    series = tmp_path / "s.jsonl"
    for _ in range(3):
        append_record(series, record(answer_correctness=0.9))
    code = main(
        ["drift", "--data", str(GOLDEN), "--timeseries", str(series), "--quiet", "--notify", "plugins:notify_exits"]
    )
    captured = capsys.readouterr()
    assert code == 3, "a hook's sys.exit(0) must not turn an alarm into a pass"
    assert "notify hook called sys.exit(0)" in captured.out and "DRIFT: ALARM" in captured.out


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"metrics": {"faithfulness_rate": "high"}}', "metric 'faithfulness_rate' is 'high'"),
        ('{"metrics": {}, "alarms": 5}', "'alarms' is 5"),
        ('{"metrics": 3}', "'metrics' missing or not an object"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_a_malformed_history_line_exits_65_and_appends_nothing(tmp_path, capsys, line, message):
    series = tmp_path / "s.jsonl"
    series.write_text(json.dumps(record()) + "\n" + line + "\n" + json.dumps(record()) + "\n")
    before = series.read_bytes()
    for _ in range(2):  # a retry does not add a line either
        assert main(["drift", "--data", str(GOLDEN), "--timeseries", str(series), "--quiet"]) == 65
        err = capsys.readouterr().err
        assert message in err and f"{series}:2" in err and "Traceback" not in err
    assert series.read_bytes() == before


def test_a_short_write_is_undone_and_exits_74(tmp_path, monkeypatch, capsys):
    series = tmp_path / "s.jsonl"
    append_record(series, record())
    before = series.read_bytes()
    real_write = os.write

    def full_disk(fd, data):
        return real_write(fd, data[: len(data) // 2])  # the disk took half and then filled up

    monkeypatch.setattr(os, "write", full_disk)
    code = main(["drift", "--data", str(GOLDEN), "--timeseries", str(series), "--quiet"])
    monkeypatch.undo()
    captured = capsys.readouterr()
    assert code == 74 and "DRIFT: OK" not in captured.out
    assert "the file is as it was" in captured.err
    assert series.read_bytes() == before, "the torn half line was truncated away"


def test_append_line_reports_failure_as_file_access_error(tmp_path, monkeypatch):
    def no_space(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", no_space)
    with pytest.raises(FileAccessError, match="No space left on device"):
        append_line(tmp_path / "x.jsonl", "{}")


def test_a_line_separator_inside_a_history_line_does_not_tear_it(tmp_path):
    """Issue 40: history lines are written with U+2028 and its kin unescaped, and read back with
    str.splitlines(), which split every such line into two torn halves: the history emptied, and a
    drift that should alarm did not. Lines end at a newline alone."""
    from qaeval import api

    series = tmp_path / "series.jsonl"
    for _ in range(2):
        api.drift(str(GOLDEN), timeseries=str(series), isolation="none")
    lines = series.read_text(encoding="utf-8").splitlines(keepends=True)
    record = json.loads(lines[0])
    record["adapter"] = "my\u2028adapter\u2029with\x85separators"
    lines[0] = json.dumps(record, ensure_ascii=False) + "\n"
    series.write_text("".join(lines), encoding="utf-8")
    result = api.drift(str(GOLDEN), timeseries=str(series), isolation="none")
    assert result.history["run"].nunique() == 3 and not any("torn" in n for n in result.notes), result.notes
    assert any("2 earlier runs" in n for n in result.notes), result.notes
