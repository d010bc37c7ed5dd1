"""Hostile files at the edge: bad Unicode, bad numbers, bad nesting, formulas, and outputs aimed at inputs.

Each is a load error (65) or a usage error (64) with the file and line or both paths named, before
anything runs or is written; none is an internal error (70)."""

from __future__ import annotations

import json
import os

import pytest
from conftest import GOLDEN, make_case, write_cases

from qaeval.cli import main
from qaeval.core.jsonfile import loads_strict
from qaeval.scoring.metrics import METRIC_NAMES

LONE = "\\ud800"  # as written in a JSON file: an escape for half of a surrogate pair


def history_line(**changes) -> str:
    line = {
        "metrics": {m: 0.9 for m in METRIC_NAMES},
        "n": {m: 10 for m in METRIC_NAMES},
        "cases": 10,
        "time": "2024-05-01T12:00:00.000+00:00",
        "alarms": [],
    }
    line["metrics"]["over_refusal_rate"] = 0.1
    line.update(changes)
    return json.dumps(line)


# --------------------------------------------------------------------------- unpaired surrogates (item 15)


@pytest.mark.parametrize(
    "text, where",
    [
        ('"a\\ud800b"', "\\ud800 at column 3"),
        ('{"x":\n "\\udc00"}', "\\udc00 at line 2 column 3"),
        ('["\\ud83d\\ud83d\\ude00"]', "\\ud83d at column 3"),  # a high half followed by a whole pair
        ('"\\ud83d\\\\ude00"', "\\ud83d at column 2"),  # the low half's backslash is escaped: not a pair
    ],
)
def test_the_strict_loader_refuses_unpaired_surrogates_and_says_where(text, where):
    with pytest.raises(ValueError, match="unpaired surrogate") as info:
        loads_strict(text)
    assert where in str(info.value)


@pytest.mark.parametrize(
    "text, value",
    [
        ('"\\ud83d\\ude00"', "\U0001f600"),  # an escaped pair is one character
        ('"\\\\ud800"', "\\ud800"),  # an escaped backslash, then letters
        ('"\\\\\\\\ud800"', "\\\\ud800"),
    ],
)
def test_the_strict_loader_accepts_pairs_and_escaped_backslashes(text, value):
    assert loads_strict(text) == value


@pytest.fixture
def spy(tmp_path, monkeypatch):
    """The file plugins:make_counting appends one line to per call of the system."""
    path = tmp_path / "calls.txt"
    monkeypatch.setenv("QAEVAL_TEST_CALLS", str(path))
    return path


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_case_with_an_unpaired_surrogate_is_a_load_error_with_file_and_line(tmp_path, capsys, spy, command):
    data = tmp_path / "d"
    data.mkdir()
    cases = data / "cases.jsonl"
    second = json.dumps(make_case(id="bad-0002")).replace("When did", f"When{LONE} did")
    cases.write_text(json.dumps(make_case(id="ok-0001")) + "\n" + second + "\n")
    extra = ["--adapter", "plugins:make_counting", "--quiet"] if command == "run" else []
    assert main([command, "--data", str(data), *extra]) == 65
    err = capsys.readouterr().err
    assert f"{cases}:2: an unpaired surrogate (\\ud800 at column" in err and "Traceback" not in err
    assert not spy.exists(), "the system was called"


def test_a_labels_reason_with_an_unpaired_surrogate_stops_calibrate_before_the_run(tmp_path, capsys, spy):
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        '{"case_id": "single-0001", "axis": "faithfulness", "score": 2, "reason": "ok"}\n'
        f'{{"case_id": "single-0002", "axis": "faithfulness", "score": 2, "reason": "x{LONE}"}}\n'
    )
    record = tmp_path / "cal.json"
    code = main(
        [
            "calibrate",
            "--data",
            str(GOLDEN),
            "--labels",
            str(labels),
            "--save",
            str(record),
            "--adapter",
            "plugins:make_counting",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 65 and f"{labels}:2: an unpaired surrogate" in err and "Traceback" not in err
    assert not record.exists() and not spy.exists(), "the system was called although the labels cannot be read"


# --------------------------------------------------------------------------- hand-edited history (item 17)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(metrics={m: 5.0 for m in METRIC_NAMES}), "metric 'faithfulness_rate' is 5.0, outside [0, 1]"),
        (
            dict(metrics={**{m: 0.9 for m in METRIC_NAMES}, "rerank_mrr": 1e200}),
            "metric 'rerank_mrr' is 1e+200, outside [0, 1]",
        ),
        (
            dict(metrics={**{m: 0.9 for m in METRIC_NAMES}, "abstention_recall": -0.5}),
            "metric 'abstention_recall' is -0.5",
        ),
        (dict(n={"faithfulness_rate": -3}), "'n' of 'faithfulness_rate' is -3, not a whole number"),
        (dict(n={"faithfulness_rate": 2.5}), "'n' of 'faithfulness_rate' is 2.5"),
        (dict(cases=True), "'cases' is True"),
        (
            dict(time="0001-01-01T00:00:00+00:00"),
            "'time' is '0001-01-01T00:00:00+00:00', outside the years 1970 to 2999",
        ),
        (dict(time="9999-12-31T23:59:59+00:00"), "'time' is '9999-12-31T23:59:59+00:00', outside the years"),
        (dict(time="last tuesday"), "'time' is 'last tuesday', not an ISO 8601 date and time"),
        (dict(time=20240501), "'time' must be a string"),
    ],
)
def test_a_history_line_with_impossible_numbers_or_times_is_refused_before_the_append(
    tmp_path, capsys, changes, message
):
    series = tmp_path / "s.jsonl"
    series.write_text("".join(history_line() + "\n" for _ in range(3)) + history_line(**changes) + "\n")
    before = series.read_bytes()
    assert main(["drift", "--data", str(GOLDEN), "--timeseries", str(series), "--quiet"]) == 65
    err = capsys.readouterr().err
    assert f"{series}:4: {message}" in err and "Traceback" not in err
    assert series.read_bytes() == before


def test_a_history_line_of_rates_at_5_cannot_widen_the_band_for_the_saboteur(tmp_path, capsys):
    series = tmp_path / "s.jsonl"
    series.write_text(
        "".join(history_line() + "\n" for _ in range(4)) + history_line(metrics={m: 5.0 for m in METRIC_NAMES}) + "\n"
    )
    before = series.read_bytes()
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
        ]
    )
    captured = capsys.readouterr()
    assert code == 65 and "DRIFT: OK" not in captured.out
    assert f"{series}:5: metric" in captured.err and "outside [0, 1]" in captured.err
    assert series.read_bytes() == before


def test_an_honest_history_still_drifts(tmp_path, capsys):
    series = tmp_path / "s.jsonl"
    series.write_text("".join(history_line(time=f"20{y}-01-01T00:00:00+00:00") + "\n" for y in (23, 24)))
    assert main(["drift", "--data", str(GOLDEN), "--timeseries", str(series), "--quiet"]) == 0
    assert len(series.read_text().splitlines()) == 3


# --------------------------------------------------------------------------- spreadsheet formulas (item 14)


FORMULAS = [
    '=HYPERLINK("http://127.0.0.1/x?"&A1,"click")',
    "-5 degrees",
    "+1",
    "@SUM(A1:A2)",
    "\tx",
    "\rx",
    "'=already quoted",
    "''+two quotes",
    "'plain quote",
    "plain",
]


def hostile_run(tmp_path):
    """A run whose case ids, questions and answers would each start a formula in a spreadsheet."""
    from helpers import output, outputs_frame

    from qaeval import load_suite
    from qaeval.judges.offline import OfflineJudge
    from qaeval.scoring.evaluate import score_outputs

    ids = [f"{text}-{n}" for n, text in enumerate(FORMULAS)]
    data = write_cases(
        tmp_path / "d",
        [make_case(id=i, question=f"{text} When did the Eastside Branch open?") for i, text in zip(ids, FORMULAS)],
    )
    rows = [output(i, answer=text, citations=[{"source_id": "s1", "claim": text}]) for i, text in zip(ids, FORMULAS)]
    return score_outputs(load_suite(data), outputs_frame(rows), OfflineJudge())


def test_a_label_sheet_starts_no_cell_with_a_formula_and_imports_back_unchanged(tmp_path):
    import csv

    from qaeval import api

    run = hostile_run(tmp_path)
    sheet = tmp_path / "sheet.csv"
    api.label_export(run, sheet)
    rows = list(csv.DictReader(sheet.open(newline="")))
    assert rows, "the sheet has rows"
    for row in rows:
        for column, cell in row.items():
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), f"{column} starts a formula: {cell!r}"
    from qaeval.verdicts.sheets import sheet_value

    answers = {r["case_id"]: r["answer"] for r in run.per_case.to_dict("records")}
    for row in rows:
        case_id = sheet_value(row["case_id"])
        assert sheet_value(row["answer"]) == answers[case_id], "the quote comes off exactly"
        assert sheet_value(row["question"]) == run.suite[case_id].question
    for row in rows:
        row["score"], row["reason"] = "2", "-5 is right"
    with sheet.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    path, n, blank = api.label_import(sheet, run, tmp_path / "labels.jsonl")
    header, *labels = [json.loads(line) for line in path.read_text().splitlines()]
    assert header == {"format": "qaeval-labels", "version": 1}
    assert n == len(rows) and blank == 0
    assert {label["case_id"] for label in labels} == set(answers), "every hostile case id came back as it was"
    assert {label["reason"] for label in labels} == {"-5 is right"}


# --------------------------------------------------------------------------- importers (item 16)


@pytest.mark.parametrize(
    "fmt, name, content, line",
    [
        ("ragas", "rows.jsonl", b'{"question": "q"}\n{"question": "caf\xe9"}\n', 2),
        ("ragas", "rows.csv", b'question,contexts,ground_truth\ncaf\xe9,"[""x""]",y\n', 2),
        ("hotpotqa", "dev.json", b'[{"question": "caf\xe9"}]', 1),
        ("ares", "ares.tsv", b"Query\tDocument\tAnswer\tAnswer_Faithfulness_Label\nq\td\xff\ta\t1\n", 2),
    ],
)
def test_an_import_that_is_not_utf8_is_a_load_error_with_line_and_offset(tmp_path, capsys, fmt, name, content, line):
    source = tmp_path / name
    source.write_bytes(content)
    offset = content.index(b"\xe9" if b"\xe9" in content else b"\xff")
    assert main(["import", fmt, str(source), "--out", str(tmp_path / "out")]) == 65
    err = capsys.readouterr().err
    assert f"{source}:{line}: not valid UTF-8 (byte 0x{content[offset]:02x} at offset {offset})" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_an_import_nested_30000_deep_is_refused_in_bounded_memory(tmp_path):
    """Before, ijson kept a prefix per level: 30,000 levels took 2.3 GB. Each import runs in a fresh
    interpreter that reports its exit code and peak memory."""
    import subprocess
    import sys

    deep = 30_000
    cases = {
        "hotpotqa": ("array.json", "[" * deep + "]" * deep),
        "squad2": ("squad.json", '{"data": [' + "[" * deep + "]" * deep + "]}"),
        "musique": ("objects.jsonl", '{"a": ' * deep + "1" + "}" * deep + "\n"),
    }
    script = (
        "import resource, sys\nfrom qaeval.cli import main\ncode = main(sys.argv[1:])\n"
        "print(code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)\n"
    )
    for fmt, (name, text) in cases.items():
        source = tmp_path / name
        source.write_text(text)
        done = subprocess.run(
            [sys.executable, "-c", script, "import", fmt, str(source), "--out", str(tmp_path / fmt)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        code, peak_mb = (int(x) for x in done.stdout.split()[-2:])
        assert code == 65, done.stderr
        assert "nested" in done.stderr and str(source) in done.stderr and "Traceback" not in done.stderr
        assert peak_mb < 400, f"{fmt}: peak {peak_mb} MB to refuse a {len(text) // 1000} kB file"


# --------------------------------------------------------------------------- outputs aimed at inputs (item 13)


@pytest.fixture
def golden_copy(tmp_path):
    """A copy of the golden folder (cases, baseline, calibration labels) and its bytes, to prove nothing changed."""
    import shutil

    folder = tmp_path / "G"
    shutil.copytree(GOLDEN, folder)
    return folder, {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def unchanged(snapshot) -> bool:
    return all(p.read_bytes() == data for p, data in snapshot.items())


@pytest.mark.parametrize(
    "argv, output, other",
    [
        (["run", "--data", "{G}", "--save", "{G}/frozen.jsonl"], "{G}/frozen.jsonl", "data folder {G}"),
        (["run", "--data", "{G}", "--save", "{G}/new.jsonl"], "{G}/new.jsonl", "data folder {G}"),
        (
            ["gate", "--data", "{G}", "--baseline", "{G}/ci-baseline.json", "--html", "{G}/ci-baseline.json"],
            "{G}/ci-baseline.json",
            "baseline {G}/ci-baseline.json",
        ),
        (
            [
                "gate",
                "--data",
                "{G}",
                "--baseline",
                "{G}/ci-baseline.json",
                "--html",
                "{G}/calibration/human_labels.jsonl",
            ],
            "{G}/calibration/human_labels.jsonl",
            "data folder {G}",
        ),
        (
            [
                "run",
                "--data",
                "{G}",
                "--labels",
                "{G}/calibration/human_labels.jsonl",
                "--save",
                "{G}/calibration/human_labels.jsonl",
            ],
            "{G}/calibration/human_labels.jsonl",
            "labels {G}/calibration/human_labels.jsonl",
        ),
        (["baseline", "--data", "{G}", "--out", "{T}/b.json", "--save", "{T}/b.json"], "{T}/b.json", "out {T}/b.json"),
        (
            ["drift", "--data", "{G}", "--timeseries", "{T}/series.jsonl", "--save", "{T}/series.jsonl"],
            "{T}/series.jsonl",
            "timeseries {T}/series.jsonl",
        ),
    ],
)
def test_an_output_that_would_overwrite_an_input_is_a_usage_error_before_anything_runs(
    golden_copy, tmp_path, capsys, spy, argv, output, other
):
    folder, snapshot = golden_copy
    fill = lambda s: s.format(G=folder, T=tmp_path)  # noqa: E731  (a one-line formatter)
    code = main([fill(a) for a in argv] + ["--adapter", "plugins:make_counting", "--quiet"])
    err = capsys.readouterr().err
    assert code == 64, err
    name, _, path = fill(other).rpartition(" ")
    assert "refusing to write the " in err and fill(output) in err and name in err and path in err
    assert unchanged(snapshot) and not spy.exists(), "the system was called or an input changed"
    assert not (folder / "new.jsonl").exists()


def test_a_hard_link_to_an_input_is_the_same_file(golden_copy, tmp_path, capsys):
    folder, snapshot = golden_copy
    link = tmp_path / "elsewhere.json"
    os.link(folder / "ci-baseline.json", link)
    code = main(["gate", "--data", str(folder), "--baseline", str(link), "--save", str(folder / "ci-baseline.json")])
    assert code == 64 and f"baseline {link}" in capsys.readouterr().err
    assert unchanged(snapshot)


def test_label_export_and_import_never_overwrite_the_data_folder_they_came_from(golden_copy, tmp_path, capsys):
    folder, snapshot = golden_copy
    record = tmp_path / "run.json"
    assert main(["run", "--data", str(folder), "--save", str(record), "--quiet"]) == 0
    labels = folder / "calibration" / "human_labels.jsonl"
    assert main(["label", "export", str(record), "--out", str(labels)]) == 64
    assert f"refusing to write the label sheet (out) to {labels}" in capsys.readouterr().err
    assert main(["label", "export", str(record), "--out", str(record)]) == 64
    sheet = tmp_path / "sheet.csv"
    assert main(["label", "export", str(record), "--out", str(sheet)]) == 0
    assert main(["label", "import", str(sheet), "--record", str(record), "--out", str(labels)]) == 64
    assert main(["label", "import", str(sheet), "--record", str(record), "--out", str(sheet)]) == 64
    assert unchanged(snapshot)


def test_honest_outputs_still_work_including_a_baseline_kept_in_the_data_folder(golden_copy, tmp_path, capsys):
    folder, _ = golden_copy
    baseline = folder / "ci-baseline.json"
    assert main(["baseline", "--data", str(folder), "--out", str(baseline), "--quiet"]) == 0, "a record over a record"
    report = folder / "gate.html"
    for _ in range(2):  # the second time replaces the report it wrote the first time
        assert (
            main(
                [
                    "gate",
                    "--data",
                    str(folder),
                    "--baseline",
                    str(baseline),
                    "--quiet",
                    "--html",
                    str(report),
                    "--save",
                    str(tmp_path / "gate.json"),
                ]
            )
            == 0
        ), capsys.readouterr().err
    assert main(["report", str(tmp_path / "gate.json"), "--html", str(tmp_path / "gate.json")]) == 64
    assert main(["compare", str(baseline), str(tmp_path / "gate.json"), "--html", str(baseline)]) == 64


@pytest.mark.parametrize(
    "content, message",
    [
        (f'[{{"id": "s1", "text": "x{LONE}"}}]', "an unpaired surrogate"),
        ('[{"id": "s1", "text": "x"', "not valid JSON"),
    ],
)
def test_add_case_interactive_reads_the_passages_file_strictly(suite_dir, tmp_path, content, message):
    from qaeval.core.errors import DatasetError
    from qaeval.data.misses import add_case

    sources = tmp_path / "sources.json"
    sources.write_text(content)
    answers = iter(["When did Northgate open?", str(sources), "1978", "s1", ""])
    with pytest.raises(DatasetError) as info:
        add_case(suite_dir, {}, ask=lambda prompt: next(answers))
    assert str(sources) in str(info.value) and message in str(info.value)
    assert not (suite_dir / "living.jsonl").exists()


@pytest.mark.parametrize("where", ["a folder", "under a file"])
def test_an_output_that_cannot_be_written_is_exit_74_before_the_system_is_called(
    golden_copy, tmp_path, capsys, spy, where
):
    """A new user's pass: `run --save DIR` with a folder in the way failed with 74 after the whole run."""
    folder, _ = golden_copy
    (tmp_path / "blocker").mkdir()
    (tmp_path / "afile").write_text("x")
    target = tmp_path / "blocker" if where == "a folder" else tmp_path / "afile" / "r.json"
    for flag in ("--save", "--html"):
        code = main(["run", "--data", str(folder), flag, str(target), "--adapter", "plugins:make_counting", "--quiet"])
        err = capsys.readouterr().err
        assert code == 74 and str(target) in err, err
        assert not spy.exists(), "the system was called"
