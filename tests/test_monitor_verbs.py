"""``qaeval monitor`` end to end: exit codes, the time series and its alarms, the record and its check, label
sheets of the judged sample, PPI per slice against ppi-python, and the notebook under papermill."""

from __future__ import annotations

import json
import os

import nbformat
import numpy as np
import pandas as pd
import pytest
from conftest import ROOT
from helpers import without_explorer
from monitor_logs import log_row, traffic, write_jsonl
from papermill.exceptions import PapermillExecutionError

from qaeval import api
from qaeval.cli import main
from qaeval.core.errors import RecordError
from qaeval.reports.render import notebook_path, run_papermill
from qaeval.scoring.ppi import ppi_mean

TESTS = str(ROOT / "tests")
PARITY = "monitor_logs:make_parity_judge"


@pytest.fixture(autouse=True)
def judge_importable(monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("QAEVAL_PROGRESS", "0")


def test_a_log_where_every_row_abstained_is_scored_with_no_judged_row(tmp_path, capsys):
    """No answered row: the judge's sample is empty, and scoring an empty suite gives an empty run (it
    raised IndexError once shares of cases were scored: exit 70)."""
    rows = [
        log_row(i, passages=[], answer=None, citations=[], model_was_called=False, prompt=None, abstained=True)
        for i in range(3)
    ]
    logs = write_jsonl(tmp_path / "abstained.jsonl", rows)
    assert main(["monitor", "--logs", str(logs)]) == 0
    assert "the judge graded every answered row (0)" in capsys.readouterr().out


def test_exit_codes(tmp_path, capsys):
    good = write_jsonl(tmp_path / "logs.jsonl", traffic(days=1, per_day=6))
    bad = write_jsonl(tmp_path / "bad.jsonl", [log_row(0, timestamp="soon")])
    assert main(["monitor", "--logs", str(good), "--quiet"]) == 0
    assert main(["monitor", "--logs", str(bad)]) == 65
    assert "bad.jsonl:1: timestamp 'soon' is not an ISO 8601 date and time" in capsys.readouterr().err
    assert main(["monitor", "--logs", str(good), "--by", "tenant"]) == 64
    assert main(["monitor", "--logs", str(good), "--window", "fortnightly"]) == 64
    assert "cannot cut the log into windows" in capsys.readouterr().err
    assert main(["monitor", "--logs", str(good), "--timeseries", str(tmp_path / "h.jsonl")]) == 64
    assert "timeseries needs window" in capsys.readouterr().err
    assert main(["monitor", "--logs", str(tmp_path / "absent.jsonl")]) == 65
    assert main(["monitor", "--logs", str(good), "--save", str(good)]) == 64, "an output may not overwrite the log"


def test_a_window_out_of_its_band_alarms_with_exit_3_and_is_not_appended_twice(tmp_path, capsys):
    logs = write_jsonl(tmp_path / "logs.jsonl", traffic(days=4, per_day=40, bad_day=4))
    history = tmp_path / "history.jsonl"
    args = ["monitor", "--logs", str(logs), "--window", "1D", "--timeseries", str(history), "--quiet"]
    assert main(args) == 3
    out = capsys.readouterr().out
    assert "MONITOR: ALARM" in out and "citation_resolvability dropped below its band" in out
    assert "(mean of 3 windows" in out and "runs" not in out, "a monitor's history is of windows"
    lines = [json.loads(line) for line in history.read_text().splitlines()]
    assert [line["window"][:10] for line in lines] == ["2026-02-01", "2026-02-02", "2026-02-03", "2026-02-04"]
    assert lines[-1]["alarms"] and not any(line["alarms"] for line in lines[:3]), "three earlier windows before a band"
    assert main(args) == 0 and len(history.read_text().splitlines()) == 4
    assert "is in the history already: not appended again" in capsys.readouterr().out


def test_a_future_dated_window_does_not_silence_the_next_days_alarm(tmp_path, capsys):
    """Issue 40: one row stamped 2099 went into the history, and every later window was 'not after the
    history's last' and skipped: a day on which every citation failed exited 0."""
    history = tmp_path / "history.jsonl"
    good = traffic(days=3, per_day=40) + [log_row(900 + k, timestamp="2099-01-01T00:00:00+00:00") for k in range(40)]
    assert (
        main(
            [
                "monitor",
                "--logs",
                str(write_jsonl(tmp_path / "a.jsonl", good)),
                "--window",
                "1D",
                "--timeseries",
                str(history),
                "--quiet",
            ]
        )
        == 0
    )
    bad = [log_row(1000 + k, day=4, bad_citation=True) for k in range(40)]
    code = main(
        [
            "monitor",
            "--logs",
            str(write_jsonl(tmp_path / "b.jsonl", bad)),
            "--window",
            "1D",
            "--timeseries",
            str(history),
            "--quiet",
        ]
    )
    out = capsys.readouterr().out
    assert code == 3 and "citation_resolvability dropped below its band" in out, out[-2000:]


def test_a_window_appended_with_too_few_rows_is_completed_later_and_alarms(tmp_path, capsys):
    """Issue 40: a scheduled run early in the day appended today's window with too few rows; the full
    day, whose rows fail, was then never compared."""
    history = tmp_path / "history.jsonl"
    early = traffic(days=3, per_day=40) + [log_row(500 + k, day=4, bad_citation=True) for k in range(5)]
    args = ["--window", "1D", "--timeseries", str(history), "--quiet"]
    assert main(["monitor", "--logs", str(write_jsonl(tmp_path / "early.jsonl", early)), *args]) == 0
    full = [log_row(500 + k, day=4, bad_citation=True) for k in range(40)]
    assert main(["monitor", "--logs", str(write_jsonl(tmp_path / "full.jsonl", full)), *args]) == 3
    assert "citation_resolvability dropped below its band" in capsys.readouterr().out
    days = [json.loads(line)["window"][:10] for line in history.read_text().splitlines()]
    assert days == ["2026-02-01", "2026-02-02", "2026-02-03", "2026-02-04", "2026-02-04"]


def test_a_window_with_too_few_rows_says_so_instead_of_alarming(tmp_path, capsys):
    rows = traffic(days=3, per_day=40) + [log_row(500 + k, day=4, bad_citation=True) for k in range(5)]
    logs = write_jsonl(tmp_path / "logs.jsonl", rows)
    code = main(
        ["monitor", "--logs", str(logs), "--window", "1D", "--timeseries", str(tmp_path / "h.jsonl"), "--quiet"]
    )
    assert code == 0
    assert "window 2026-02-04T00:00:00+00:00: 5 row(s), too few rows to compare: no alarm" in capsys.readouterr().out


def test_notify_is_called_with_the_alarms(tmp_path):
    logs = write_jsonl(tmp_path / "logs.jsonl", traffic(days=4, per_day=40, bad_day=4))
    seen = []
    result = api.monitor(
        str(logs), time_window="1D", timeseries=str(tmp_path / "h.jsonl"), notify=seen.extend, isolation="none"
    )
    assert result.exit_code == 3 and {a["metric"] for a in seen} >= {
        "citation_resolvability",
        "deterministic_pass_rate",
    }
    assert all(a["window"].startswith("2026-02-04") for a in seen)


def test_the_record_round_trips_is_checked_and_its_sheet_lists_the_judged_rows(tmp_path):
    logs = write_jsonl(tmp_path / "logs.jsonl", traffic(days=2, per_day=30))
    record = tmp_path / "monitor.json"
    result = api.monitor(str(logs), judge=PARITY, by=["system"], time_window="1D", sample=10, seed=3, save=str(record))
    again = api.load_run(record)
    assert (
        again.kind == "monitor"
        and again.scoreboard.equals(result.scoreboard)
        and again.rows["row_id"].equals(result.rows["row_id"])
    )
    path, n = api.label_export(str(record), tmp_path / "sheet.csv")
    sheet = path.read_text()
    judged = set(result.rows.loc[result.rows["sampled"], "row_id"])
    assert n == 10 and all(rid in sheet for rid in judged) and "answer_correctness" not in sheet
    data = json.loads(record.read_text())
    data["monitor"]["scoreboard"][0]["value"] = 0.0
    record.write_text(json.dumps(data))
    with pytest.raises(RecordError, match=r"monitor.scoreboard\[0\].value"):
        api.load_run(record)


def test_the_report_is_drawn_from_the_record_and_escapes_what_the_log_brought(tmp_path):
    hostile = log_row(900, system="<script>alert(1)</script>", question="<b>When</b> does the library open?")
    logs = write_jsonl(tmp_path / "logs.jsonl", traffic(days=2, per_day=30) + [hostile])
    record = tmp_path / "monitor.json"
    assert (
        main(["monitor", "--logs", str(logs), "--by", "system", "--window", "1D", "--save", str(record), "--quiet"])
        == 0
    )
    assert main(["report", str(record), "--html", str(tmp_path / "m.html")]) == 0
    page = (tmp_path / "m.html").read_text()
    assert "qaeval monitor report" in page and "<mark>" in page and "unresolvable citation: missing" in page
    assert "<script>alert" not in page and "<b>When</b>" not in page and "&lt;script&gt;alert(1)" in page


def test_the_readme_command_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    args = [
        "monitor",
        "--logs",
        "examples/traffic.jsonl",
        "--by",
        "model_version",
        "--window",
        "1D",
        "--sample",
        "40",
        "--seed",
        "1",
        "--save",
        str(tmp_path / "monitor.json"),
        "--quiet",
    ]
    assert main(args) == 0
    result = api.load_run(tmp_path / "monitor.json")
    assert int(result.rows["sampled"].sum()) == 40 and set(result.rows["model_version"]) == {"v1", "v2"}


def _labels(tmp_path, result, every=2):
    judged = result.rows[result.rows["sampled"]]
    lines = [
        {"case_id": rid, "axis": "faithfulness", "score": 2 if int(rid[1:]) % 3 else 0}
        for rid in judged["row_id"].tolist()[::every]
    ]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_ppi_per_slice_matches_ppi_python(tmp_path):
    ppi_py = pytest.importorskip("ppi_py", reason="ppi-python (the reference implementation) is not installed")
    logs = write_jsonl(tmp_path / "logs.jsonl", traffic(days=3, per_day=60))
    first = api.monitor(str(logs), judge=PARITY, by=["system"], sample=80, seed=2)
    labels = _labels(tmp_path, first)
    result = api.monitor(str(logs), judge=PARITY, by=["system"], sample=80, seed=2, labels=str(labels))
    human = {json.loads(line)["case_id"]: json.loads(line)["score"] for line in labels.read_text().splitlines()}
    for system in ("a", "b"):
        judged = result.rows[result.rows["sampled"] & (result.rows["system"] == system)]
        g = (judged["faithfulness"] == 2).to_numpy(float)
        labelled = judged[judged["row_id"].isin(human)]
        y = np.array([1.0 if human[r] == 2 else 0.0 for r in labelled["row_id"]])
        f = (labelled["faithfulness"] == 2).to_numpy(float)
        _, _, _, lam = ppi_mean(y, f, g)
        low, high = ppi_py.ppi_mean_ci(y, f, g, alpha=0.05, lam=lam)
        if lam == 0:  # the labels alone: their Wilson interval (statsmodels computes it too)
            from statsmodels.stats.proportion import proportion_confint

            low, high = ([v] for v in proportion_confint(int(y.sum()), len(y), alpha=0.05, method="wilson"))
        value = float(ppi_py.ppi_mean_pointestimate(y, f, g, lam=lam)[0])
        row = result.slices[(result.slices["group"] == system) & (result.slices["metric"] == "faithfulness_rate")].iloc[
            0
        ]
        assert row["n_labelled"] == len(y) > 2
        assert row["ppi_value"] == pytest.approx(min(1, max(0, value)), abs=1e-9)
        assert (row["ppi_ci_low"], row["ppi_ci_high"]) == (
            pytest.approx(max(0, float(low[0])), abs=1e-9),
            pytest.approx(min(1, float(high[0])), abs=1e-9),
        )
    assert f"{len(human)} of {len(human)} label(s) are on judged rows" in " ".join(result.notes)
    board = result.scoreboard.set_index("metric")
    assert board.loc["faithfulness_rate", "n_labelled"] == len(human) and not np.isnan(
        board.loc["faithfulness_rate", "ppi_value"]
    )
    assert np.isnan(board.loc["citation_correctness_rate", "ppi_value"]), "no label on that axis: no estimate"


def test_labels_on_rows_that_were_not_judged_are_left_out_and_counted(tmp_path):
    logs = write_jsonl(tmp_path / "logs.jsonl", traffic(days=1, per_day=20))
    first = api.monitor(str(logs), sample=5, seed=1)
    unjudged = first.rows.loc[~first.rows["sampled"], "row_id"].tolist()[:3]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"case_id": r, "axis": "faithfulness", "score": 2}) + "\n" for r in unjudged))
    result = api.monitor(str(logs), sample=5, seed=1, labels=str(labels))
    assert "0 of 3 label(s) are on judged rows" in " ".join(result.notes)
    assert result.scoreboard.set_index("metric").loc["faithfulness_rate", "n_labelled"] == 0


def test_labels_for_rows_the_log_lacks_are_refused_before_any_judge_call(tmp_path):
    logs = write_jsonl(tmp_path / "logs.jsonl", traffic(days=1, per_day=4))
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"case_id": "nope", "axis": "faithfulness", "score": 2}) + "\n")
    assert main(["monitor", "--logs", str(logs), "--labels", str(labels)]) == 65


def test_the_notebook_executes_under_papermill_and_fails_on_an_alarm(tmp_path):
    logs = write_jsonl(tmp_path / "logs.jsonl", traffic(days=4, per_day=40, bad_day=4))
    out = tmp_path / "monitor-out.ipynb"
    with pytest.raises(PapermillExecutionError) as info:
        run_papermill(
            notebook_path("monitor"),
            out,
            kernel_name="python3",
            progress_bar=False,
            cwd=str(ROOT),
            parameters=dict(
                logs=str(logs), by=["system"], time_window="1D", timeseries=str(tmp_path / "h.jsonl"), sample=30
            ),
        )
    assert info.value.ename == "DriftAlarm" and "citation_resolvability" in info.value.evalue
    text = json.dumps([c.get("outputs", []) for c in nbformat.read(out, as_version=4).cells])
    assert "ALARM" in text and "image/png" in text and 'details class=\\"case' in text


def test_a_monitor_record_speaks_through_its_own_scoreboard_in_the_runs_table_and_is_not_compared(tmp_path, capsys):
    """Found by a new user: `qaeval runs` showed a monitor's judged-sample board (n = the sample, an answer
    correctness the monitor says is absent), and `compare` diffed a monitor record against a golden run."""
    logs = write_jsonl(tmp_path / "logs.jsonl", traffic(days=2, per_day=30))
    folder = tmp_path / "records"
    folder.mkdir()
    result = api.monitor(str(logs), time_window="1D", sample=10, seed=3, save=str(folder / "monitor.json"))
    assert main(["run", "--data", str(ROOT / "golden"), "--save", str(folder / "run.json"), "--quiet"]) == 0
    table = api.runs(folder).set_index("kind")
    board = result.scoreboard.set_index("metric")
    assert table.at["monitor", "deterministic_pass_rate"] == pytest.approx(board.at["deterministic_pass_rate", "value"])
    assert table.at["monitor", "deterministic_pass_rate_n"] == len(result.rows) == 60
    assert table.at["monitor", "citation_resolvability_n"] == board.at["citation_resolvability", "n"]
    assert np.isnan(table.at["monitor", "answer_correctness"]) and np.isnan(table.at["run", "citation_resolvability"])
    capsys.readouterr()
    assert main(["compare", str(ROOT / "golden" / "ci-baseline.json"), str(folder / "monitor.json")]) == 65
    assert "a monitor record, not a run's: compare takes the records of two runs" in capsys.readouterr().err
    capsys.readouterr()
    assert main(["export", "trec", str(folder / "monitor.json"), "--out", str(tmp_path / "trec")]) == 64
    assert "no gold passages to write qrels from" in capsys.readouterr().err
    assert not (tmp_path / "trec").exists()


def test_the_summary_prints_every_metric_per_window(tmp_path):
    logs = write_jsonl(tmp_path / "logs.jsonl", traffic(days=3, per_day=30))
    text = api.monitor(str(logs), time_window="1D").summary_text()
    head = "per 1D window (all rows; a judge metric is NaN where no row was judged):"
    assert head in text
    block = text.split(head, 1)[1]
    assert block.count("T00:00:00") == 3 and "faithfulness_rate" in block and " judged " in block


def test_strata_of_one_judged_row_are_resampled_together_and_a_window_without_judged_rows_says_so(capsys):
    """A new user's report: two judged rows that disagreed (one per tenant) gave 0.444 [0.444, 0.444], and
    windows with no judged row showed NaN with no count beside it. Resampled together, the two rows give
    the interval two disagreeing rows can give."""
    assert (
        main(
            [
                "monitor",
                "--logs",
                str(ROOT / "examples" / "traffic.jsonl"),
                "--by",
                "tenant",
                "--window",
                "1D",
                "--sample",
                "2",
                "--seed",
                "1",
                "--quiet",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("faithfulness_rate"))
    assert line.split()[1:5] == ["0.444", "[0.000,", "1.000]", "2"], line
    rows = [x.split() for x in out.split("judge metric is NaN where no row was judged):", 1)[1].splitlines()[3:6]]
    assert all((r[2] == "0") == (r[-1] == "NaN") for r in rows), rows


def test_one_rare_slice_value_does_not_take_the_interval_of_the_whole_metric(tmp_path, capsys):
    """An adversarial review: a tenant with one answered row made faithfulness_rate's interval blank; its
    stratum is resampled with the largest other, and the interval is what it was without the rare value."""
    rows = [json.loads(line) for line in (ROOT / "examples" / "traffic.jsonl").read_text().splitlines()]
    next(r for r in rows if r.get("answer"))["tenant"] = "solo"
    logs = write_jsonl(tmp_path / "solo.jsonl", rows)
    assert main(["monitor", "--logs", str(logs), "--by", "tenant", "--quiet"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("faithfulness_rate"))
    assert "[0.324, 0.509]" in line, line


def test_a_row_without_a_time_is_in_no_window_and_the_run_goes_on(tmp_path, capsys):
    """An adversarial review: one row without a timestamp, with --window, was an internal error (exit 70)."""
    rows = [json.loads(line) for line in (ROOT / "examples" / "traffic.jsonl").read_text().splitlines()]
    del rows[5]["timestamp"]
    logs = write_jsonl(tmp_path / "untimed.jsonl", rows)
    assert main(["monitor", "--logs", str(logs), "--window", "1D", "--quiet"]) == 0
    assert "1 row(s) have no timestamp: they are in no window" in capsys.readouterr().out
    frame = pd.read_json(ROOT / "examples" / "traffic.jsonl", lines=True)
    frame.loc[5, "timestamp"] = pd.NaT
    result = api.monitor(frame, time_window="1D", isolation="none")
    assert result.exit_code == 0 and "1 row(s) have no timestamp: they are in no window" in result.notes


def test_a_monitor_record_whose_alarms_were_added_or_removed_is_refused(tmp_path, capsys):
    """An adversarial review: a monitor record's alarms were taken as written, so a forged record loaded
    as ALARM, and a real alarm deleted from one loaded as OK."""
    logs = write_jsonl(tmp_path / "logs.jsonl", traffic(days=4, per_day=40, bad_day=4))
    record = tmp_path / "alarm.json"
    assert (
        main(
            [
                "monitor",
                "--logs",
                str(logs),
                "--window",
                "1D",
                "--timeseries",
                str(tmp_path / "h.jsonl"),
                "--save",
                str(record),
                "--quiet",
            ]
        )
        == 3
    )
    assert api.load_run(record).verdict == "ALARM"
    data = json.loads(record.read_text())

    quiet = json.loads(json.dumps(data))
    quiet["monitor"]["alarms"] = []
    (tmp_path / "quiet.json").write_text(json.dumps(quiet))
    with pytest.raises(RecordError, match="monitor.alarms says"):
        api.load_run(tmp_path / "quiet.json")

    hidden = json.loads(json.dumps(quiet))
    for entry in hidden["monitor"]["timeline"]:
        entry["alarms"] = []
        for band in entry["bands"]:
            band["alarm"] = False
    (tmp_path / "hidden.json").write_text(json.dumps(hidden))
    with pytest.raises(RecordError, match=r"monitor.timeline\[3\].bands\[\d+\].alarm says false but its band"):
        api.load_run(tmp_path / "hidden.json")


@pytest.mark.parametrize("span", ["1ME", "1YE", "1QS", "1SME", "1C", "1bh", "1M", "0D", "-1D"])
def test_a_window_either_cuts_the_log_or_is_a_usage_error_naming_what_works(span, tmp_path, capsys):
    """Issue 40: calendar spans crashed (exit 70 in to_period) and 0D made one window per row. A span is
    tried on two timestamps before anything is read: what this pandas can cut by works (1M is a month in
    pandas 2.0), anything else is a usage error; an empty or negative one is always refused."""
    logs = write_jsonl(tmp_path / "logs.jsonl", traffic(days=1, per_day=5))
    code = main(["monitor", "--logs", str(logs), f"--window={span}"])
    err = capsys.readouterr().err
    if span in ("0D", "-1D"):
        assert code == 64 and "is empty or negative" in err
    else:
        assert (code == 64 and "give a time span such as 1D, 1W, 6h or 30min" in err) or (code == 0 and not err), err


def test_a_negative_monitor_seed_is_a_usage_error(tmp_path, capsys):
    """Issue 40: --seed -1 exited 70 (the sampler's ValueError)."""
    logs = write_jsonl(tmp_path / "logs.jsonl", traffic(days=1, per_day=5))
    assert main(["monitor", "--logs", str(logs), "--seed", "-1"]) == 64
    assert "seed" in capsys.readouterr().err


def test_a_slice_column_named_like_the_all_rows_group_is_bad_data_and_nothing_is_appended(tmp_path, capsys):
    """Issue 40: a column named "(all)" gave a traceback (exit 70), after appending a history line whose
    overall figures were one group's."""
    rows = [dict(r, **{"(all)": "x" if i % 2 else "y"}) for i, r in enumerate(traffic(days=1, per_day=10))]
    history = tmp_path / "h.jsonl"
    code = main(
        [
            "monitor",
            "--logs",
            str(write_jsonl(tmp_path / "l.jsonl", rows)),
            "--window",
            "1D",
            "--timeseries",
            str(history),
        ]
    )
    assert code == 65 and "(all)" in capsys.readouterr().err and not history.exists()


@pytest.mark.parametrize("stamp, span", [("1970-01-01T00:00:00Z", "1W"), ("1970-01-01T00:30:00+01:00", "1D")])
def test_epoch_timestamps_never_put_a_window_before_1970_into_the_history(stamp, span, tmp_path, capsys):
    """Issue 40: a window of 1969-12-29 (1W) or a time of 1969 in UTC (checked before conversion) was
    appended, and every later run exited 65 on the history qaeval wrote itself."""
    rows = [log_row(i, timestamp=stamp) for i in range(5)]
    history = tmp_path / "h.jsonl"
    code = main(
        [
            "monitor",
            "--logs",
            str(write_jsonl(tmp_path / "l.jsonl", rows)),
            f"--window={span}",
            "--timeseries",
            str(history),
        ]
    )
    assert code == 65 and "1970" in capsys.readouterr().err and not history.exists()


def test_the_labels_note_counts_only_the_labels_a_monitor_metric_uses(tmp_path):
    """Issue 40: "2 of 2 label(s) ... the PPI columns use those", where one was on answer correctness,
    which no monitor metric uses."""
    logs = write_jsonl(tmp_path / "logs.jsonl", traffic(days=1, per_day=10))
    first = api.monitor(str(logs))
    row = first.rows["row_id"].tolist()[0]
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(
            json.dumps({"case_id": row, "axis": axis, "score": 2}) + "\n"
            for axis in ("faithfulness", "answer_correctness")
        )
    )
    note = " ".join(api.monitor(str(logs), labels=str(labels)).notes)
    assert "2 of 2 label(s) are on judged rows" in note and "the PPI columns use the 1 on" in note
    assert "no monitor metric uses answer_correctness" in note, note


def test_the_monitor_report_draws_no_gold_says_what_no_alarm_means_and_keeps_its_dates_apart(tmp_path):
    """Logged rows were drawn with "Gold answer (must abstain)" and "answer correctness 0"; the banner was a
    green OK while a fifth of the rows failed a check; the per-window charts' dates overlapped."""
    from qaeval.reports.monitor import metrics_over_time

    log = write_jsonl(tmp_path / "log.jsonl", traffic(days=28, per_day=5))  # the first row of each day miscites
    page = tmp_path / "monitor.html"
    assert main(["monitor", "--logs", str(log), "--window", "1D", "--html", str(page), "--quiet"]) == 0
    text = page.read_text()
    banner = text[text.index("qaeval-banner") :]
    banner = banner[: banner.index("</div></div>")]
    assert "NO ALARM" in banner and "28 of 140 row(s) (20.0%) fail a check" in banner
    assert '"gold":false' in text, "the case explorer draws no gold either"
    static = without_explorer(text)  # its script holds the words it would draw a golden case with
    rows = static[static.index('id="case-r') :]
    assert "Gold answer" not in rows and "must abstain" not in rows and "answer correctness" not in rows
    assert "cited hours" in rows

    figure = metrics_over_time(api.monitor(str(log), time_window="1D")).figure
    figure.canvas.draw()
    for ax in figure.axes:
        boxes = [t.get_window_extent() for t in ax.get_xticklabels() if t.get_text()]
        assert len(boxes) >= 2, ax.get_title()
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:])), f"{ax.get_title()}: tick labels overlap"


def test_a_history_line_qaeval_could_not_read_back_is_never_appended(tmp_path, monkeypatch):
    """Every window's line is checked as read_history reads it before the first is appended."""
    from qaeval.core.errors import DatasetError
    from qaeval.verdicts import monitor as verdicts_monitor

    logs = write_jsonl(tmp_path / "log.jsonl", traffic(days=2, per_day=40))
    history = tmp_path / "h.jsonl"
    real = verdicts_monitor.metric_values

    def out_of_range(part):
        values, counts = real(part)
        return values, {**counts, "citation_resolvability": -1}  # a count no history line may hold

    monkeypatch.setattr(verdicts_monitor, "metric_values", out_of_range)
    with pytest.raises(DatasetError, match="qaeval would append a history line it could not read back"):
        api.monitor(str(logs), time_window="1D", timeseries=str(history))
    assert not history.exists(), "nothing appended"


@pytest.mark.parametrize("name", ["log\u2028of day.jsonl", "log\u0085x.jsonl", "log\nof day.jsonl", "log\rx.jsonl"])
def test_a_log_path_with_a_line_separator_makes_a_history_that_reads_back(tmp_path, name, capsys):
    logs = write_jsonl(tmp_path / name, traffic(days=2, per_day=40))
    history = tmp_path / "h.jsonl"
    record = tmp_path / "m.json"
    assert (
        main(
            [
                "monitor",
                "--logs",
                str(logs),
                "--window",
                "1D",
                "--timeseries",
                str(history),
                "--save",
                str(record),
                "--quiet",
            ]
        )
        == 0
    )
    assert main(["monitor", "--logs", str(logs), "--window", "1D", "--timeseries", str(history), "--quiet"]) == 0
    assert "is in the history already: not appended again" in capsys.readouterr().out
    lines = history.read_text(encoding="utf-8").split("\n")
    assert len([x for x in lines if x.strip()]) == 2 and all(json.loads(x)["source"] == str(logs) for x in lines if x)
    assert api.load_run(str(record)).source == str(logs)
