"""The boundary's promises under attack from inside a worker (issue 17): every read has a deadline,
every reply names its case and is held to the harness's limits, the harness cannot be read through
/proc, escaped processes do not outlive the run, and honest environments are left alone."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import GOLDEN, ROOT

from qaeval import api, load_suite
from qaeval.core.settings import RunSettings
from qaeval.core.text import USER_TEXT_LIMIT as LOG_LIMIT
from qaeval.data.cases import Suite
from qaeval.lowlevel import run_suite
from qaeval.worker.messages import MAX_CONTAINERS, encode, encode_case, read_message
from qaeval.worker.process import confined_env, hidden_folders

TESTS = str(ROOT / "tests")
QAEVAL = [sys.executable, "-m", "qaeval.cli"]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")


@pytest.fixture(scope="module")
def living():
    return load_suite(GOLDEN).select(split="living")


def first(suite):
    return Suite(suite.cases[:1], suite.root)


def cli(*args: str, cwd: str = TESTS) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "QAEVAL_PROGRESS": "0", "PYTHONPATH": os.pathsep.join([str(ROOT), TESTS])}
    start = time.monotonic()
    done = subprocess.run([*QAEVAL, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    return done, time.monotonic() - start


# --------------------------------------------------------------------------- hangs are bounded


def test_an_adapter_factory_that_never_returns_is_a_usage_error_within_the_startup_timeout():
    done, elapsed = cli(
        "gate",
        "--data",
        str(GOLDEN),
        "--baseline",
        str(GOLDEN / "ci-baseline.json"),
        "--adapter",
        "hostile_adapters:make_never_starts",
        "--startup-timeout",
        "2",
    )
    assert done.returncode == 64, done.stderr
    assert "did not start" in done.stderr and "--startup-timeout" in done.stderr
    assert elapsed < 30, f"took {elapsed:.1f} s with a 2 s start-up deadline"


@pytest.mark.parametrize("adapter", ["make_half_header", "make_half_body"])
def test_a_half_sent_frame_times_out_its_case(living, adapter):
    start = time.monotonic()
    frame = run_suite(living, f"hostile_adapters:{adapter}", RunSettings(timeout=1.0, concurrency=2))
    elapsed = time.monotonic() - start
    assert frame["error"].str.startswith("timed out after 1 s").all(), frame["error"].tolist()
    assert elapsed < 30, f"{len(living)} cases with a 1 s deadline took {elapsed:.1f} s"


# --------------------------------------------------------------------------- the protocol


def test_logs_past_the_limit_are_cut_by_the_harness(living):
    frame = run_suite(first(living), "hostile_adapters:make_huge_logs", RunSettings(timeout=5))
    logs = frame["logs"][0]
    assert frame["error"].isna().all(), frame["error"].tolist()
    assert len(logs) <= LOG_LIMIT + 80 and "dropped by the harness" in logs


def test_a_frame_over_the_limit_stops_its_worker(living):
    frame = run_suite(first(living), "hostile_adapters:make_huge_frame", RunSettings(timeout=30))
    assert frame["error"][0] == (
        "the adapter's worker announced a message of 16777216 bytes; the limit is 8388608 (it was stopped)"
    ), frame["error"][0]


def test_a_frame_over_the_limit_is_named_even_when_the_worker_exits_at_once(living, monkeypatch):
    """What broke the protocol is the case's reason, not the exit that followed it: when the harness saw the
    exit before it read the frame, the case said only "adapter process exited with code 0". The harness
    is made to read the frame only once the worker has exited."""
    from qaeval.system import pool

    real = pool._PoolRun.readable

    def after_the_exit(self, timeout):
        ready = real(self, timeout)
        for w in ready:
            if w.state == "busy":
                w.proc.popen.wait(30)
        return ready

    monkeypatch.setattr(pool._PoolRun, "readable", after_the_exit)
    frame = run_suite(first(living), "hostile_adapters:make_huge_frame_then_exit", RunSettings(timeout=30))
    assert frame["error"][0] == (
        "the adapter's worker announced a message of 16777216 bytes; the limit is 8388608 (it was stopped)"
    ), frame["error"][0]


def test_a_worker_that_hangs_up_and_keeps_running_is_said_to_have_hung_up(living):
    """Its connection closed while its process lived on: qaeval stopped it, so "killed by SIGKILL" (what the
    case said) blamed a signal nobody but qaeval sent."""
    start = time.monotonic()
    frame = run_suite(first(living), "hostile_adapters:make_hangs_up", RunSettings(timeout=60))
    assert frame["error"][0] == ("adapter process closed its connection and kept running (it was stopped)"), frame[
        "error"
    ][0]
    assert time.monotonic() - start < 30


def test_a_frame_of_too_many_containers_is_not_parsed(living):
    frame = run_suite(first(living), "hostile_adapters:make_many_dicts", RunSettings(timeout=30))
    assert f"the limit is {MAX_CONTAINERS}" in frame["error"][0], frame["error"][0]


def test_a_case_crosses_in_marshal_form_and_arrives_whole():
    """The harness hands a worker its case in marshal's format (one frame per case, written ten times
    faster than JSON); the worker reads it back exactly, and still reads the JSON frames (setup, stop)."""
    import socket

    payload = (
        "0123456789abcdef",
        "Qu'est-ce qu'un \u00e9t\u00e9 ? \U0001f600",
        (("s1", 'Text\nwith "quotes" and \u2028', None), ("s2", "x" * 70_000, "Title")),
    )
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.sendall(encode_case(payload) + encode({"stop": True}))
        assert read_message(theirs) == {"case": payload}
        assert read_message(theirs) == {"stop": True}


def test_a_default_socket_timeout_in_the_harness_leaves_the_workers_socket_blocking(living):
    """``socket.setdefaulttimeout`` (a notebook's) makes ``socketpair`` non-blocking, and the worker inherited
    that: a read with nothing there raised, its loop ended, and cases failed with "exited with code 0"
    (0 to 7 of 15, by timing). Its socket is blocking whatever the harness's default."""
    import socket

    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(10)
    try:
        frame = run_suite(living, "plugins:make_socket_reporter", RunSettings(timeout=30))
    finally:
        socket.setdefaulttimeout(previous)
    assert frame["error"].isna().all(), frame["error"].tolist()
    assert {a for a in frame["answer"]} == {"[true]"}, frame["answer"].tolist()


@linux_only  # the frames below fit in the socket's buffer, unread, on Linux (212,992 bytes by default)
def test_a_worker_reads_frames_whole_however_they_arrive():
    """The worker's reader (``MessageReader``): a frame split across sends, several in one send, and one
    larger than a read all come out whole and in order; the harness gone (even in the middle of a frame)
    is EOFError."""
    import socket

    from qaeval.worker.messages import MessageReader

    big = ("0123456789abcdef", "Why?", (("s1", "y" * 100_000, None),))
    first = encode_case(("0123456789abcdef", "Why?", (("s1", "Because.", None),)))
    ours, theirs = socket.socketpair()
    with ours, theirs:
        reader = MessageReader(theirs)
        ours.sendall(first + encode_case(big) + first[:3])  # two whole frames and the start of a third
        assert reader.receive() == {"case": ("0123456789abcdef", "Why?", (("s1", "Because.", None),))}
        assert reader.receive() == {"case": big}  # larger than one read: taken in several
        ours.sendall(first[3:] + encode({"stop": True}))
        assert reader.receive()["case"][0] == "0123456789abcdef"
        assert reader.receive() == {"stop": True}
        ours.sendall(first[:10])
        ours.shutdown(socket.SHUT_WR)
        with pytest.raises(EOFError):
            reader.receive()


@pytest.mark.parametrize("isolation", ["process", "none"])
def test_a_case_built_from_str_subclasses_reaches_the_system_as_plain_text(living, isolation):
    """marshal refuses a str subclass and writes numpy.str_ as its raw bytes: such a case (built in Python,
    from pandas or numpy values) goes to a worker as JSON instead, and the system sees the same text with
    either isolation."""
    import dataclasses

    import numpy as np

    from qaeval import Source

    class Label(str):
        pass

    case = living.cases[0]
    odd = dataclasses.replace(
        case,
        question=np.str_(case.question),
        sources=(Source(Label("s-odd"), np.str_("Numpy text."), Label("A title")), *case.sources[1:]),
    )
    frame = run_suite(
        Suite([odd], living.root), "plugins:make_type_reporter", RunSettings(isolation=isolation, timeout=30)
    )
    assert frame["error"].isna().all(), frame["error"][0]
    seen = json.loads(frame["answer"][0])
    assert [value for value, _ in seen[:4]] == [case.question, "s-odd", "Numpy text.", "A title"]
    if isolation == "process":  # across the boundary, plain data (isolation none hands over the objects)
        assert all(kind in ("str", "NoneType") for _, kind in seen), seen


def test_a_reply_in_marshal_form_is_refused_not_unmarshalled(living):
    """Only the harness writes marshal: a worker's reply is strict JSON, and one in marshal's format fails
    its case as not JSON (the harness never unmarshals what user code wrote)."""
    frame = run_suite(first(living), "hostile_adapters:make_marshal_reply", RunSettings(timeout=30))
    error = frame["error"][0]
    assert error and "JSON" in error and frame["answer"][0] == "", error


def test_a_reply_for_another_case_fails_the_case(living):
    frame = run_suite(living, "hostile_adapters:make_other_id", RunSettings(timeout=30, concurrency=2))
    assert frame["error"].str.contains("a reply for a case it was not asked").all(), frame["error"].tolist()


def test_a_second_reply_fails_the_case_it_answered(living):
    frame = run_suite(living, "hostile_adapters:make_twice", RunSettings(timeout=30, concurrency=1))
    errors = frame["error"].tolist()
    # every case but the last is followed by another, so its extra frame is always seen
    assert all(e and ("second reply" in e or "not asked" in e) for e in errors[:-1]), errors


def test_a_reply_over_the_configured_limit_fails_on_the_worker_side(living):
    frame = run_suite(first(living), "qaeval.system.reference:make_adapter", RunSettings(max_reply_mb=200 / 2**20))
    assert "the limit is 200" in frame["error"][0]


# --------------------------------------------------------------------------- the operating system


@linux_only
def test_the_harness_cannot_be_read_through_proc(living):
    frame = run_suite(first(living), "hostile_adapters:make_proc_reader")
    found = json.loads(frame["answer"][0])
    # memory (where the labels live) and the harness's open files (CI's stdout) are closed to a worker;
    # /proc/<pid>/environ is the harness's starting environment, which the worker got anyway, less the
    # variables naming the data folder (docs/guides/boundary.md says so)
    assert (found["mem"], found["fd/1"]) == ("PermissionError", "PermissionError"), found
    libc = ctypes.CDLL(None)
    assert libc.prctl(3, 0, 0, 0, 0) == 1, "the harness is dumpable again after the run"


@linux_only
def test_a_judge_runs_non_dumpable_so_no_worker_can_read_the_gold_answers_it_is_sent():
    """A judge's host holds every request, gold answers included; dumpable, its /proc/<pid>/mem was open to
    any process of the same user without CAP_SYS_PTRACE: a descendant an adapter left behind read
    '44 years' and '860,000' from it while a slow judge ran (a reviewer's attack)."""
    run = api.run(str(GOLDEN), judge="hostile_plugins:make_dumpable_reporter")
    assert set(run.verdicts["rationale"]) == {"dumpable=0"}, set(run.verdicts["rationale"])


@linux_only
def test_a_worker_that_exits_while_a_descendant_holds_its_socket_fails_its_case_at_once(living):
    """No end-of-file ever comes (an escaped descendant keeps the socket open), so the pool notices the
    exit itself (EXIT_CHECK), well before the case's 60 s deadline."""
    start = time.monotonic()
    frame = run_suite(first(living), "hostile_adapters:make_exits_leaving_socket_open", RunSettings(timeout=60))
    assert frame["error"][0] == "adapter process exited with code 5", frame["error"][0]
    assert time.monotonic() - start < 30


@linux_only
def test_a_process_that_escapes_the_group_does_not_outlive_the_run(living):
    frame = run_suite(first(living), "hostile_adapters:make_escaper")
    pid = int(frame["answer"][0])
    assert not os.path.exists(f"/proc/{pid}"), f"escaped process {pid} is still alive"


def test_the_worker_works_in_a_scratch_folder_that_is_gone_afterwards(living, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    frame = run_suite(first(living), "plugins:make_reporter")
    seen = json.loads(frame["answer"][0])
    assert seen["cwd"] != str(tmp_path) and "qaeval-scratch-" in seen["cwd"]
    assert not os.path.exists(seen["cwd"])


# --------------------------------------------------------------------------- honest users


def test_the_environment_is_copied_whole_while_another_thread_changes_it(tmp_path):
    """MLflow 3's telemetry thread sets and removes a variable of its own at any moment; the copy a run
    gives its workers (and judges, hooks) must not fail on meeting that midway (it raised KeyError)."""
    import threading

    from qaeval.system.calls import worker_env

    stop = threading.Event()

    def flip():
        while not stop.is_set():
            os.environ["QAEVAL_TEST_FLIPPING"] = "1"
            os.environ.pop("QAEVAL_TEST_FLIPPING", None)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the two threads take turns every few bytecodes, not every 5 ms
    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    try:
        envs = [worker_env(str(tmp_path))[0] for _ in range(500)]
    finally:
        stop.set()
        flipper.join()
        sys.setswitchinterval(interval)
    assert all(env["PATH"] == os.environ["PATH"] and "PYTHONPATH" in env for env in envs)


# The ``qaeval`` command's path starts with its script's folder, not the working directory (``python -m``
# puts the working directory first instead): a run started as the command, from ``cwd``.
AS_THE_COMMAND = [sys.executable, "-c", "import sys; del sys.path[0]; from qaeval.cli import entry; sys.exit(entry())"]


def test_the_command_finds_an_adapter_in_the_working_folder_beside_a_custom_judge(tmp_path):
    """A custom judge runs in a host process of its own, so this process never imports a name from the
    working folder; the workers still must (they got it only when this process had imported one: with
    the default judge the adapter imported, with any other it was 'No module named myrag')."""
    (tmp_path / "myrag.py").write_text("from qaeval.system.reference import make_adapter as make\n")
    env = {**os.environ, "QAEVAL_PROGRESS": "0", "PYTHONPATH": str(ROOT)}
    for judge in ([], ["--judge", "examples.custom_judge:make_judge"]):
        done = subprocess.run(
            [*AS_THE_COMMAND, "run", "--data", str(GOLDEN), "--adapter", "myrag:make", *judge],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=300,
        )
        assert done.returncode in (0, 1), done.stderr
        assert "deterministic checks green, no adapter error" in done.stdout and "No module named" not in done.stderr, (
            judge,
            done.stdout,
        )


def test_the_environment_filter_matches_whole_paths(tmp_path, monkeypatch):
    data = tmp_path / "data"
    shutil.copytree(GOLDEN, data, ignore=shutil.ignore_patterns("buggy", "calibration", "*.json"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", "/mnt/data/hf")
    monkeypatch.setenv("SERVICE_URL", "http://models.internal/data/v1")
    monkeypatch.setenv("ABS_DATA", str(data / "living.jsonl"))
    monkeypatch.setenv("REL_DATA", "./data")
    monkeypatch.setenv("SEARCH", f"/opt/x{os.pathsep}{data}")
    suite = load_suite("data").select(split="living")
    frame = run_suite(first(suite), "plugins:make_reporter", data_dir="data")
    env = json.loads(frame["answer"][0])["env"]
    assert env["HF_HOME"] == "/mnt/data/hf" and env["SERVICE_URL"] == "http://models.internal/data/v1"
    assert "ABS_DATA" not in env and "REL_DATA" not in env and "SEARCH" not in env


def test_a_data_folder_named_bin_keeps_path():
    folders = hidden_folders("bin")
    env = confined_env({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root"}, folders)
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"


def test_error_text_is_cut_by_the_harness_and_a_huge_answer_is_malformed(living):
    error = run_suite(first(living), "hostile_adapters:make_huge_error", RunSettings(timeout=30))["error"][0]
    assert error.startswith("eeee") and error.endswith("[... 98000 more characters]")
    answer = run_suite(first(living), "hostile_adapters:make_long")["error"][0]
    assert answer == "malformed output: answer is 1250000 characters long (limit 1000000)"


def test_a_long_ranking_is_refused_at_once_not_checked_for_duplicates_pair_by_pair():
    """200,000 ids with one repeat used to be checked with list.count per id (quadratic: hours)."""
    from qaeval.system.validate import validate_plain

    ids = [f"d{i}" for i in range(200_000)] + ["d0"]
    plain = {
        "answer": "",
        "citations": {"__type__": "list", "items": []},
        "abstained": True,
        "retrieved_ids": {"__type__": "list", "items": ids},
        "model_was_called": False,
        "prompt_to_model": None,
        "computed_aggregate": None,
    }
    start = time.monotonic()
    fields, problems = validate_plain(plain)
    assert fields is None and problems == ["retrieved_ids holds 200001 ids (limit 1000)"]
    assert time.monotonic() - start < 5


def test_ctrl_c_ends_a_run_with_exit_130_its_workers_stopped_and_no_record_saved(tmp_path):
    """The exit-code table's 130: Ctrl-C while workers are inside the adapter."""
    import select
    import signal

    fifo, record = tmp_path / "announce", tmp_path / "r.json"
    os.mkfifo(fifo)
    env = dict(
        os.environ,
        QAEVAL_TEST_FIFO=str(fifo),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")])),
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "qaeval",
            "run",
            "--data",
            str(GOLDEN),
            "--adapter",
            "plugins:make_announcer",
            "--concurrency",
            "1",
            "--save",
            str(record),
            "--quiet",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    announced = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:  # readable once a worker is inside answer() and has written its pid
        assert select.select([announced], [], [], 120)[0], "no worker reached the adapter"
        worker = int(os.read(announced, 64).decode().split()[0])
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        os.close(announced)
        if proc.poll() is None:  # the test failed: leave no run behind
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130 and "qaeval: interrupted" in err and "Traceback" not in err, err
    assert not record.exists()
    with pytest.raises(ProcessLookupError):  # the worker was stopped (and reaped) with the run
        os.kill(worker, 0)


def test_a_reply_that_arrives_as_its_process_ends_is_not_dropped():
    """``Channel.receive`` with ``ended``: a frame that arrives between its read and the exit check is the
    reply, not lost (it was read and dropped, and the case failed as "exited")."""
    import socket

    from qaeval.worker.messages import Channel, encode

    ours, theirs = socket.socketpair()
    sent = []

    def ended():  # the reply lands just as the process is found gone
        if not sent:
            theirs.sendall(encode({"id": "x", "output": None}))
            sent.append(True)
        return True

    channel = Channel(ours)
    try:
        assert channel.receive(time.monotonic() + 5, ended=ended) == b'{"id":"x","output":null}'
    finally:
        channel.close()
        theirs.close()
