"""Every saved run as a table (issue 21, item 2): ``qa.runs(DIR)`` has one row per record under DIR, from
records the demo's commands save; a record that does not load is a row with its reason, never skipped;
``qaeval runs DIR --html`` prints the table and writes an index page that links each run's report, plots
each metric over time, and shows markup from records as text."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import GOLDEN, ROOT
from test_report_browser import CHROMIUM, dump_dom

import qaeval.api as qa
from qaeval.cli import main
from qaeval.scoring.metrics import METRIC_NAMES

SABOTEUR = "qaeval.system.saboteur:make_adapter"
MARKUP = "<script>document.body.setAttribute('data-pwned','runs')</script>"
NAME = "<img src=x onerror=\"document.body.setAttribute('data-pwned','name')\">"  # a file name cannot hold a /


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """What the demo saves (a run with its report beside it, the saboteur's gate, a calibration, a drift
    run, the committed baseline in a subfolder), plus three records that cannot be trusted or read."""
    tmp = tmp_path_factory.mktemp("runs")
    folder = tmp / "reports"
    (folder / "baselines").mkdir(parents=True)
    assert (
        main(
            [
                "run",
                "--data",
                str(GOLDEN),
                "--save",
                str(folder / "run.json"),
                "--html",
                str(folder / "run.html"),
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
                str(GOLDEN),
                "--adapter",
                SABOTEUR,
                "--baseline",
                str(GOLDEN / "ci-baseline.json"),
                "--save",
                str(folder / "gate-saboteur.json"),
                "--quiet",
            ]
        )
        == 1
    )
    assert (
        main(
            [
                "calibrate",
                "--labelled",
                str(ROOT / "examples" / "labelled-set.jsonl"),
                "--min-labels",
                "5",
                "--save",
                str(folder / "calibrate.json"),
                "--quiet",
            ]
        )
        == 2
    )
    assert (
        main(
            [
                "drift",
                "--data",
                str(GOLDEN),
                "--timeseries",
                str(tmp / "history.jsonl"),
                "--save",
                str(folder / "drift.json"),
                "--quiet",
            ]
        )
        == 0
    )
    shutil.copy(GOLDEN / "ci-baseline.json", folder / "baselines" / "ci-baseline.json")
    data = json.loads((folder / "run.json").read_text())
    data["meta"]["adapter"] = f"evil {MARKUP}"  # loads: how a run was made is not derived from its cases
    (folder / "hostile.json").write_text(json.dumps(data))
    data["scoreboard"][METRIC_NAMES.index("faithfulness_rate")]["value"] = 0.0
    (folder / "edited.json").write_text(json.dumps(data))
    (folder / f"broken {NAME}.json").write_text("{not json")
    return folder


def test_one_row_per_record_with_its_metrics_and_the_unreadable_with_their_reason(saved):
    table = qa.runs(saved)
    assert len(table) == len(list(saved.rglob("*.json"))) == 8, "one row per record under the folder, subfolders too"
    rows = table.set_index(table["path"].map(lambda p: Path(p).name))
    read = rows[rows["reason"].isna()]
    assert sorted(read["kind"]) == ["calibrate", "drift", "gate", "run", "run", "run"]
    assert (
        rows.at["gate-saboteur.json", "verdict"] == "BLOCK" and rows.at["calibrate.json", "verdict"] == "RETUNE JUDGE"
    )
    assert "saboteur" in rows.at["gate-saboteur.json", "adapter"]
    assert (
        rows.at["edited.json", "reason"].startswith("RecordError")
        and "faithfulness_rate" in rows.at["edited.json", "reason"]
    )
    assert "not valid JSON" in rows.at[f"broken {NAME}.json", "reason"]
    assert rows.loc[["edited.json", f"broken {NAME}.json"], "kind"].isna().all(), "nothing else is claimed for them"
    run = qa.load_run(saved / "run.json")
    board = run.scoreboard.set_index("metric")
    for m in METRIC_NAMES:
        for suffix, column in (("", "value"), ("_ci_low", "ci_low"), ("_ci_high", "ci_high"), ("_n", "n")):
            assert rows.at["run.json", m + suffix] == pytest.approx(board.at[m, column], nan_ok=True), m + suffix
    assert rows.at["run.json", "data_fingerprint"] == run.suite.fingerprint
    assert (
        rows.at["run.json", "commit"] == run.meta.git_commit and rows.at["run.json", "judge"] == run.meta.judge.label()
    )
    assert rows.at["run.json", "report"] == str(saved / "run.html") and rows.at["drift.json", "report"] is None
    assert table["time"].dropna().is_monotonic_increasing, "in time order"
    assert table["time"].isna().iloc[-3:].all(), "records without a time (the baseline, the unreadable) come last"


def test_runs_prints_the_table_and_writes_the_index(saved, tmp_path, capsys):
    index = tmp_path / "index.html"
    assert main(["runs", str(saved), "--html", str(index)]) == 0
    out, err = capsys.readouterr()
    assert f"8 record(s) under {saved}, 2 could not be read" in out
    assert "gate-saboteur.json" in out and "BLOCK" in out and "RETUNE JUDGE" in out
    assert f"could not read {saved / 'edited.json'}: RecordError" in out
    assert f"index: {index}" in err
    page = index.read_text()
    assert MARKUP not in page and "&lt;script&gt;" in page, "markup from records is escaped"
    assert NAME not in page and "&lt;img src=x" in page, "and from file names"
    assert page.count("data:image/png;base64,") == 1


def test_the_index_page_may_not_overwrite_a_record(saved, capsys):
    before = (saved / "drift.json").read_bytes()
    assert main(["runs", str(saved), "--html", str(saved / "drift.json")]) == 64
    assert "drift.json" in capsys.readouterr().err
    assert (saved / "drift.json").read_bytes() == before


def test_a_folder_that_is_not_there_is_exit_65_as_a_missing_data_folder_is(tmp_path, capsys):
    assert main(["runs", str(tmp_path / "missing")]) == 65
    err = capsys.readouterr().err
    assert f"{tmp_path / 'missing'}: no such folder of run records" in err and err.count(str(tmp_path)) == 1


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_the_index_opens_in_chromium_with_its_chart_and_links(saved, tmp_path):
    index = saved / "index.html"
    main(["runs", str(saved), "--html", str(index)])
    dom = dump_dom(index, tmp_path)
    assert 'data-pwned="' not in dom, "markup from a record ran"
    assert '<a href="run.html">report</a>' in dom, "the run links the report beside it, relative to the page"
    assert dom.count('<span class="na">none</span>') >= 4, "runs without a report say so"
    assert "why it could not be read" in dom and "edited.json" in dom
    images = re.findall(r'<img alt="([^"]*)" src="data:image/png;base64,([^"]+)"', dom)
    assert len(images) == 1 and "over the saved runs" in images[0][0]
    from matplotlib.image import imread

    pixels = imread(io.BytesIO(base64.b64decode(images[0][1])), format="png")
    assert pixels.shape[0] > 200 and pixels.shape[1] > 600, "the chart is a real picture, a panel per metric"


def test_entries_that_are_not_record_files_are_rows_with_their_reason_not_skipped(tmp_path, capsys):
    """Issue 40: a dangling symlink, a FIFO and a folder named x.json were left out, and the output said
    "0 could not be read"."""
    import os

    from qaeval.cli import main

    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "gone.json").symlink_to(tmp_path / "nowhere.json")
    os.mkfifo(folder / "pipe.json")
    (folder / "x.json").mkdir()
    assert main(["runs", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "3 record(s) under" in out and "3 could not be read" in out, out
    for why in ("a symbolic link to nothing", "a FIFO", "a folder"):
        assert f"not a record file: {why}" in out, out
