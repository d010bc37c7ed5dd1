"""The command line fails closed: no input a user can give ends in a traceback, no plugin chooses the exit
code, nothing written is half written, and nothing printed is obeyed by the terminal."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import GOLDEN, make_case, write_cases

from qaeval.cli import main

BUGGY = "qaeval.system.saboteur:make_adapter"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "b.json"
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(path)]) == 0
    return str(path)


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--timeout", "inf", "timeout must be a finite number"),
        ("--timeout", "1e300", "timeout must be at most 604800"),
        ("--timeout", "0", "timeout must be at least 0.001"),
        ("--concurrency", "0", "concurrency must be at least 1"),
        ("--k", "many", "invalid int value"),
        ("--isolation", "thread", "invalid choice"),
        ("--executor", "tcp://1.2.3.4:1", "executor must be dask://HOST:PORT"),
    ],
)
def test_bad_values_are_usage_errors(capsys, flag, value, message):
    assert main(["run", "--data", str(GOLDEN), flag, value]) == 64
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_required_flag_and_unknown_command_exit_64(capsys):
    assert main(["gate", "--data", str(GOLDEN)]) == 64
    assert main(["launch"]) == 64
    assert "Traceback" not in capsys.readouterr().err


def test_a_factory_that_exits_cannot_choose_the_exit_code(capsys):
    assert main(["run", "--data", str(GOLDEN), "--adapter", "plugins:make_exiting_factory"]) == 64
    assert "called sys.exit(0)" in capsys.readouterr().err
    assert main(["run", "--data", str(GOLDEN), "--judge", "plugins:make_exiting_factory"]) == 64


def test_a_model_call_without_a_prompt_fails_grounding_not_the_harness(capsys):
    assert main(["run", "--data", str(GOLDEN), "--adapter", "plugins:make_no_prompt"]) == 0
    out = capsys.readouterr().out
    assert "TIER 1: RED" in out and "deterministic_pass_rate         0.200" in out


def test_saving_to_a_device_writes_to_it_and_never_replaces_it(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    import threading

    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    assert main(["run", "--data", str(GOLDEN), "--save", str(fifo), "--quiet"]) == 0
    reader.join(30)
    assert json.loads(got[0])["format"] == "qaeval-record"
    assert os.path.exists(fifo) and not os.path.isfile(fifo), "the FIFO is still a FIFO"


def test_repeated_retrieved_ids_are_malformed_and_no_metric_leaves_zero_one(baseline, capsys):
    assert main(["gate", "--data", str(GOLDEN), "--adapter", "plugins:make_repeats", "--baseline", baseline]) == 1
    out = capsys.readouterr().out
    assert "adapter error on 12" in out
    from qaeval import api

    run = api.run(str(GOLDEN), adapter="plugins:make_repeats")
    assert run.outputs["error"].dropna().str.contains("retrieved_ids lists").all()
    board = run.scoreboard
    assert ((board["value"].fillna(0) >= 0) & (board["value"].fillna(0) <= 1)).all()


def test_an_abstention_that_still_answers_is_malformed(baseline, capsys):
    assert (
        main(["gate", "--data", str(GOLDEN), "--adapter", "plugins:make_abstains_but_answers", "--baseline", baseline])
        == 1
    )
    out = capsys.readouterr().out
    assert "adapter error on 3" in out and "abstention_recall" in out


def test_a_huge_aggregate_is_malformed_output_not_a_crash(capsys):
    assert main(["run", "--data", str(GOLDEN), "--adapter", "plugins:make_huge_aggregate"]) == 0
    assert "adapter errors: 15" in capsys.readouterr().out


def test_a_failed_report_write_leaves_the_old_report_and_no_temporary(tmp_path, monkeypatch, capsys):
    report = tmp_path / "run.html"
    previous = '<!DOCTYPE html>\n<html lang="en"><head></head><body><main class="qaeval-report">the previous report'
    report.write_text(previous)  # one qaeval wrote

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    code = main(["run", "--data", str(GOLDEN), "--html", str(report), "--quiet"])
    monkeypatch.undo()
    assert code == 74 and "No space left on device" in capsys.readouterr().err
    assert report.read_text() == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.html"], "no temporary left behind"


def test_a_failed_baseline_write_leaves_no_partial_record_and_keeps_the_journal(tmp_path, monkeypatch, capsys):
    """A full disk when the record is written: no partial file, and the run's journal stays, so --resume
    writes the baseline without asking the system again."""

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(tmp_path / "b.json")]) == 74
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["b.json.journal"]
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(tmp_path / "b.json"), "--resume"]) == 0
    assert "15 of 15 (case, trial) output(s) reused" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]


def test_gate_output_escapes_control_characters(tmp_path, capsys):
    data = write_cases(tmp_path / "d", [make_case(id="x\x1b[2J\x1b]0;pwned\x07", adversarial="t\x1b[31m")])
    base = tmp_path / "b.json"
    assert main(["baseline", "--data", str(data), "--out", str(base)]) == 0
    capsys.readouterr()
    assert main(["gate", "--data", str(data), "--adapter", BUGGY, "--baseline", str(base)]) == 1
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out + captured.err and "\x07" not in captured.out
    assert "x\\x1b[2J\\x1b]0;pwned\\x07" in captured.out


def test_the_exit_code_table_holds(baseline, tmp_path, capsys, strict_labels):
    labels = strict_labels  # labels the offline judge does not agree with
    assert main(["run", "--data", str(GOLDEN)]) == 0
    assert main(["gate", "--data", str(GOLDEN), "--baseline", baseline]) == 0
    assert main(["gate", "--data", str(GOLDEN), "--adapter", BUGGY, "--baseline", baseline]) == 1
    assert main(["gate", "--data", str(GOLDEN / "buggy"), "--adapter", BUGGY, "--baseline", baseline]) == 65
    assert main(["calibrate", "--data", str(GOLDEN), "--labels", str(labels)]) == 2
    assert main(["validate", "--data", str(tmp_path / "none")]) == 65
    capsys.readouterr()


def test_version_and_help_exit_zero(capsys):
    assert main(["--version"]) == 0
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--concurrency" in out and "--isolation" in out and "--executor" in out and "--save" in out


def test_a_misspelt_flag_gets_a_suggestion(capsys):
    assert main(["run", "--data", str(GOLDEN), "--adpter", "x"]) == 64
    assert "did you mean --adapter?" in capsys.readouterr().err


def test_help_gives_each_default_once(capsys):
    assert main(["calibrate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    start = text.index("--judge MODULE:FACTORY the judge")
    judge = text[start : text.index(" --k K ", start)]
    assert judge.count("default") == 1, judge


def test_an_adapter_that_cannot_be_imported_is_named_once(capsys):
    assert main(["run", "--data", str(GOLDEN), "--adapter", "nope.mod:make"]) == 64
    err = capsys.readouterr().err.strip()
    assert err.startswith("qaeval: adapter 'nope.mod:make': cannot import module 'nope.mod' (No module named 'nope');")
    assert err.count("nope.mod:make") == 1 and "\n" not in err, err


def test_an_adapter_run_from_the_wrong_folder_is_told_where_modules_are_looked_for(tmp_path):
    """The adapter sits in a project folder; the command runs from another one, without PYTHONPATH."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir(), elsewhere.mkdir()
    (project / "greenline.py").write_text("def make_adapter():\n    return None\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [sys.executable, "-m", "qaeval.cli", "run", "--data", str(GOLDEN), "--adapter", "greenline:make_adapter"]
    done = subprocess.run(command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 64, done.stderr
    err = done.stderr.strip()
    assert "cannot import module 'greenline' (No module named 'greenline')" in err and "Traceback" not in err
    assert f"the folder qaeval was run from ({elsewhere}), on PYTHONPATH" in err, err
    assert "run from the folder that holds greenline.py" in err, err


def test_an_adapter_whose_own_import_is_missing_names_that_import_not_the_search_path(tmp_path, monkeypatch, capsys):
    (tmp_path / "needs_dep.py").write_text("import not_installed_dependency_xyz\n\ndef make():\n    return None\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["run", "--data", str(GOLDEN), "--adapter", "needs_dep:make"]) == 64
    err = capsys.readouterr().err
    assert "No module named 'not_installed_dependency_xyz'" in err and "was run from" not in err, err


def test_a_reader_that_leaves_early_gets_no_complaint_and_the_verdict_stands():
    import subprocess
    import sys

    done = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "qaeval.cli",
            "gate",
            "--data",
            str(GOLDEN),
            "--adapter",
            "qaeval.system.saboteur:make_adapter",
            "--baseline",
            str(GOLDEN / "ci-baseline.json"),
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    done.stdout.close()  # as `| head -0` would
    err = done.stderr.read().decode()
    assert done.wait(timeout=300) == 1, err
    assert "Broken pipe" not in err and "Traceback" not in err, err


def test_a_flag_of_another_command_is_named_as_such_not_suggested_back(capsys):
    """`baseline --mlflow URI` used to answer "did you mean --mlflow?" (a new user's report)."""
    assert main(["baseline", "--data", "golden", "--out", "x.json", "--mlflow", "http://127.0.0.1:1"]) == 64
    err = capsys.readouterr().err
    assert "--mlflow is not an option of `qaeval baseline`" in err and "did you mean" not in err
    assert "(see `qaeval baseline --help`)" in err


@pytest.mark.parametrize(
    "flag, said", [("--bogus", None), ("--foo", None), ("--log", None), ("--concurency", "did you mean --concurrency?")]
)
def test_a_suggestion_is_a_flag_of_the_command_itself(flag, said, capsys):
    """A new user's report: `run --bogus` suggested monitor's --logs, `run --foo` add-case's --from."""
    assert main(["run", "--data", str(GOLDEN), flag, "2"]) == 64
    err = capsys.readouterr().err
    assert (said in err) if said else ("did you mean" not in err)
    assert "(see `qaeval run --help`)" in err


def test_an_adapter_named_by_its_file_says_how_to_name_it(capsys, tmp_path):
    """A new user's pass: --adapter /path/my_rag.py:make_adapter said only that it could not import it."""
    script = tmp_path / "my_rag.py"
    script.write_text("def make_adapter():\n    return None\n")
    assert main(["run", "--data", str(GOLDEN), "--adapter", f"{script}:make_adapter"]) == 64
    err = capsys.readouterr().err
    assert "name it by its module (my_rag:make_adapter)" in err and f"PYTHONPATH={tmp_path}" in err, err


def test_a_file_inside_a_package_is_named_from_the_top_of_its_package(capsys, tmp_path):
    """The hint named the file alone (engine:make_adapter, PYTHONPATH=.../rag/systems), which cannot import a
    module whose code imports from its own package."""
    package = tmp_path / "rag" / "systems"
    package.mkdir(parents=True)
    for folder in (tmp_path / "rag", package):
        (folder / "__init__.py").write_text("")
    (package / "engine.py").write_text("from rag.systems import helpers\n")
    assert main(["run", "--data", str(GOLDEN), "--adapter", f"{package / 'engine.py'}:make_adapter"]) == 64
    err = capsys.readouterr().err
    assert "name it by its module (rag.systems.engine:make_adapter)" in err, err
    assert err.rstrip().endswith(f"PYTHONPATH={tmp_path}"), err


def test_report_of_a_run_made_with_isolation_none_says_the_boundary_was_not_enforced(capsys, tmp_path):
    """A new user's pass: `run` and its HTML say so, `report` said nothing."""
    for isolation, said in (("none", True), ("process", False)):
        record = tmp_path / f"{isolation}.json"
        assert main(["run", "--data", str(GOLDEN), "--isolation", isolation, "--save", str(record), "--quiet"]) == 0
        capsys.readouterr()
        assert main(["report", str(record), "--html", str(tmp_path / f"{isolation}.html")]) == 0
        out = "".join(capsys.readouterr())
        assert ("the boundary was NOT enforced" in out) is said, out


def test_every_argument_of_every_command_says_what_it_is():
    """A new user's pass: `qaeval import --help` gave no help for IN, --out, --limit, --split or --prefix."""
    import argparse

    from qaeval.commands.parser import build_parser

    def bare(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from bare(sub, f"{path} {name}")
            elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)) and not action.help:
                yield f"{path} {'/'.join(action.option_strings) or action.dest}"

    assert list(bare(build_parser(), "qaeval")) == []


def test_run_names_its_first_failing_cases_and_why(capsys):
    """A new user's pass: `run` printed only counts ("adapter errors: 4"); the reasons were in the record."""
    assert main(["run", "--data", str(GOLDEN), "--adapter", "plugins:make_raises_on_one", "--quiet"]) == 0
    out = capsys.readouterr().out
    failing = [line for line in out.splitlines() if line.startswith("  ") and ": " in line]
    assert failing[0].startswith(
        "  single-0002: adapter error: adapter raised RuntimeError: backend down for this one (at plugins.py:"
    )
    assert main(["run", "--data", str(GOLDEN), "--adapter", "qaeval.system.saboteur:make_adapter", "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown = [line for line in lines if line.startswith("  ") and ": " in line]
    assert len(shown) == 5 and all(len(line) <= 2 + 60 + 162 for line in shown)
    assert (
        "  ... and 10 more, every one in the HTML report (--html PATH, or qaeval report RECORD --html PATH) "
        "and in .failing_cases()"
    ) in lines


def test_a_failing_case_id_or_reason_with_a_line_break_cannot_print_a_line_of_its_own(capsys, tmp_path):
    """A review: a case id (or a judge's error) holding "\\nTIER 1: GREEN ..." printed a forged TIER line."""
    from conftest import make_case, write_cases

    forged = "TIER 1: GREEN   cases passing: 20/20   adapter errors: 0"
    data = write_cases(
        tmp_path / "data",
        [
            make_case(
                id=f"evil\n{forged}",
                expected_behavior="unanswerable_must_abstain",
                gold_answer=None,
                gold_source_ids=[],
            )
        ],
    )
    assert main(["run", "--data", str(data), "--adapter", "plugins:make_raising", "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not any(line.startswith("TIER 1: GREEN") for line in lines), lines
    assert any(line.startswith("  evil\\nTIER 1: GREEN") for line in lines), lines


def test_report_warns_of_isolation_none_for_every_record_that_holds_a_run(capsys, tmp_path):
    """A review: the warning came for a run's record only, not a gate's (its run is inside it)."""
    record = tmp_path / "gate.json"
    assert (
        main(
            [
                "gate",
                "--data",
                str(GOLDEN),
                "--isolation",
                "none",
                "--baseline",
                str(GOLDEN / "ci-baseline.json"),
                "--save",
                str(record),
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["report", str(record), "--html", str(tmp_path / "gate.html")]) == 0
    assert "the boundary was NOT enforced" in "".join(capsys.readouterr())


def test_report_and_runs_refuse_a_folder_in_the_way_before_any_notebook_runs(tmp_path, capsys, monkeypatch):
    """The report was rendered (papermill, seconds) and only then found it could not be written."""
    record = tmp_path / "runs" / "run.json"
    assert main(["run", "--data", str(GOLDEN), "--save", str(record), "--quiet"]) == 0
    in_the_way = tmp_path / "page.html"
    in_the_way.mkdir()
    from qaeval.reports import render, runs

    def never(*args, **kwargs):
        raise AssertionError("rendered before the output was checked")

    monkeypatch.setattr(render, "render_record", never)
    monkeypatch.setattr(runs, "render_runs", never)
    capsys.readouterr()
    assert main(["report", str(record), "--html", str(in_the_way)]) == 74
    assert "a folder is in the way" in capsys.readouterr().err
    assert main(["runs", str(tmp_path / "runs"), "--html", str(in_the_way)]) == 74
    assert "a folder is in the way" in capsys.readouterr().err


def test_saving_to_dev_stdout_redirected_to_a_file_writes_the_file_and_leaves_dev_stdout_alone(tmp_path):
    """/dev/stdout is a link to /proc/self/fd/1; with stdout redirected to a regular file it looked like a
    file to replace, and a root run renamed its temporary record over the system's /dev/stdout."""
    out = tmp_path / "out.json"
    probe = "import sys; from qaeval.core.files import _written_in_place; sys.stderr.write(str(_written_in_place('/dev/stdout')))"
    with open(out, "wb") as f:
        done = subprocess.run([sys.executable, "-c", probe], stdout=f, stderr=subprocess.PIPE, text=True, check=True)
    assert done.stderr == "True"  # checked first: the run below would replace /dev/stdout if this were False
    link = os.readlink("/dev/stdout")
    with open(out, "wb") as f:
        done = subprocess.run(
            [sys.executable, "-m", "qaeval", "run", "--data", str(GOLDEN), "--save", "/dev/stdout", "--quiet"],
            stdout=f,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert done.returncode == 0, done.stderr
    assert os.readlink("/dev/stdout") == link and not list(Path("/dev").glob(".stdout*"))
    record, end = json.JSONDecoder().raw_decode(out.read_text())  # the record, then what the run printed
    assert record["format"] == "qaeval-record" and "deterministic_pass_rate" in out.read_text()[end:]


@pytest.mark.parametrize(
    "flags", [["--max-reply-mb", "inf"], ["--max-reply-mb", "nan"], ["--concurrency", "0"], ["--max-reply-mb", "1e309"]]
)
def test_a_bad_run_setting_is_a_usage_error_before_any_worker_starts(flags, capsys, monkeypatch):
    """A review: the frame limit was computed from --max-reply-mb before it was checked, so inf and nan
    were internal errors (exit 70)."""
    from qaeval.system import calls

    started = []
    monkeypatch.setattr(calls, "spawn_worker", lambda env, limit: started.append(limit))
    assert main(["run", "--data", str(GOLDEN), *flags]) == 64
    assert "must be" in capsys.readouterr().err and started == []


def test_a_misspelt_command_or_choice_gets_a_suggestion(capsys):
    assert main(["gat", "--data", str(GOLDEN)]) == 64
    assert "invalid choice: 'gat'" in (err := capsys.readouterr().err) and "did you mean 'gate'?" in err
    assert main(["run", "--data", str(GOLDEN), "--isolation", "nne"]) == 64
    assert "did you mean 'none'?" in capsys.readouterr().err


def test_a_misspelt_factory_name_gets_a_suggestion(capsys):
    assert main(["run", "--data", str(GOLDEN), "--adapter", "qaeval.system.reference:make_adaptr"]) == 64
    err = capsys.readouterr().err
    assert "has no attribute 'make_adaptr'; did you mean 'make_adapter'?" in err


def test_a_misspelt_baseline_path_suggests_the_file_beside_it(capsys):
    assert main(["gate", "--data", str(GOLDEN), "--baseline", str(GOLDEN / "ci-baselin.json")]) == 65
    err = capsys.readouterr().err
    assert f"baseline not found; did you mean {GOLDEN / 'ci-baseline.json'}?" in err


def test_the_run_verdict_says_what_was_checked_and_that_answer_correctness_is_not(capsys):
    assert main(["run", "--data", str(GOLDEN), "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    verdict = next(i for i, line in enumerate(lines) if line.startswith("TIER 1:"))
    assert lines[verdict] == (
        "TIER 1: GREEN   deterministic checks green, no adapter error; 10 of 15 cases pass; "
        "answer correctness is not gated"
    )
    assert lines[verdict + 1] == (
        "  (a case passes on its deterministic checks, the judge's full faithfulness score "
        "and, when multi-step, its trajectory)"
    )


def test_baseline_names_the_system_it_recorded_and_that_it_was_the_default(tmp_path, capsys):
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(tmp_path / "b.json"), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert (
        "baseline of qaeval.system.reference:make_adapter (no --adapter given: the bundled reference system) "
        f"written to {tmp_path / 'b.json'}"
    ) in err


def test_an_output_never_replaces_a_file_qaeval_did_not_write(tmp_path, capsys):
    """--save and --html replaced any file, the adapter's own source too (a new user's --save mysys2.py)."""
    source = tmp_path / "my_adapter.py"
    source.write_text("def make_adapter():\n    ...\n")
    readme = tmp_path / "README.md"
    readme.write_text("# my project\n")
    assert main(["run", "--data", str(GOLDEN), "--save", str(source), "--quiet"]) == 64
    assert "a file that is not a run record qaeval wrote is there" in capsys.readouterr().err
    assert main(["run", "--data", str(GOLDEN), "--html", str(readme), "--quiet"]) == 64
    assert source.read_text().startswith("def make_adapter") and readme.read_text() == "# my project\n"
    record = tmp_path / "r.json"
    assert main(["run", "--data", str(GOLDEN), "--save", str(record), "--quiet"]) == 0
    assert main(["run", "--data", str(GOLDEN), "--save", str(record), "--quiet"]) == 0, "its own record: replaced"


def test_an_adapter_kept_in_the_data_folder_is_told_that_folder_is_not_searched(tmp_path):
    """Run from inside the data folder: user code never sees that folder, so it is not searched either."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(GOLDEN, data, ignore=shutil.ignore_patterns("buggy", "*.json"))
    (data / "greenline.py").write_text("def make_adapter():\n    return None\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [sys.executable, "-m", "qaeval.cli", "run", "--data", ".", "--adapter", "greenline:make_adapter"]
    done = subprocess.run(command, cwd=data, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 64, done.stderr
    assert "(not in the folder qaeval was run from: the data folder)" in done.stderr, done.stderr
    assert str(data) not in done.stderr.split("cannot import module")[1], "the message does not name it as searched"
