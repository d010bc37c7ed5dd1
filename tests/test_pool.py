"""The process boundary: adapters run in worker processes that hold no label, and whatever they do (snoop,
tamper, exit, hang, spam, leave threads behind) costs only their own cases and never decides a verdict."""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import os
import subprocess
import sys
import threading

import pandas as pd
import pytest
from conftest import GOLDEN, ROOT, make_case, write_cases

from qaeval import UsageError, api, load_suite
from qaeval.core.settings import RunSettings
from qaeval.core.text import USER_TEXT_LIMIT as LOG_LIMIT
from qaeval.lowlevel import run_suite
from qaeval.record.write import write_record

TESTS = str(ROOT / "tests")


@pytest.fixture(scope="module")
def golden():
    return load_suite(GOLDEN)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, golden_run):
    return str(write_record(golden_run, tmp_path_factory.mktemp("b") / "baseline.json", baseline=True))


def secrets_of(suite) -> list[str]:
    """Label strings a system must never be able to find: readable case ids, and gold answers that
    appear verbatim in no source and no question. (Not the schema's vocabulary, such as the string
    "unanswerable_must_abstain": it is a constant of any program that imports qaeval, and says nothing
    about any case.)"""
    out = set()
    for case in suite:
        out.add(case.id)
        if (
            case.gold_answer
            and not any(case.gold_answer in s.text for s in case.sources)
            and case.gold_answer not in case.question
        ):
            out.add(case.gold_answer)
    return sorted(out)


def snoop(monkeypatch, suite, **options):
    hashes = [hashlib.sha256(s.encode()).hexdigest() for s in secrets_of(suite)]
    monkeypatch.setenv("QAEVAL_TEST_SECRETS", ",".join(hashes))
    frame = run_suite(suite, "plugins:make_snooper", RunSettings(**options))
    found = [
        int(line.split()[1]) for logs in frame["logs"] for line in logs.splitlines() if line.startswith("snooper:")
    ]
    scanned = [
        int(line.split()[4]) for logs in frame["logs"] for line in logs.splitlines() if line.startswith("snooper:")
    ]
    return found, scanned


def cli(*args, timeout=180, env=None):
    """The real command line in a fresh process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "qaeval", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": TESTS, "QAEVAL_PROGRESS": "0", **(env or {})},
    )


# --------------------------------------------------------------------------- no label reaches the adapter


def test_frame_walk_and_gc_scan_find_no_label_in_a_worker(monkeypatch, golden):
    found, scanned = snoop(monkeypatch, golden)
    assert len(found) == len(golden) and min(scanned) > 5000, "the snooper really searched its process"
    assert sum(found) == 0, "no readable id or hidden gold answer is in a worker"


def test_the_same_snoop_in_the_harness_process_finds_the_labels(monkeypatch, golden):
    """The check above can fail: inside the harness the very same adapter finds every secret. (Three
    cases, because each one scans the test process's whole heap.)"""
    from qaeval.data.cases import Suite

    few = Suite(golden.cases[:3], golden.root, golden.corpus)
    found, _ = snoop(monkeypatch, few, isolation="none", concurrency=1)  # in-process prints are caught per thread
    assert found and min(found) == len(secrets_of(few)) >= 3, (
        "every readable id and hidden gold answer is within reach in-process"
    )


def test_an_adapter_cannot_tamper_with_the_harness(baseline):
    result = api.gate(str(GOLDEN), baseline=baseline, adapter="plugins:make_tamperer")
    assert not result.ok, "an always-abstaining system must not pass by rewriting the cases"
    assert result.run.metric("over_refusal_rate") == 1.0
    assert len(result.regressed) == 7, "every answerable case that passed before regresses"
    assert result.run.suite["single-0001"].expected_behavior == "answer"


def test_workers_argv_environment_and_directory_name_no_data(tmp_path, monkeypatch):
    data = write_cases(tmp_path / "secret-golden", [make_case(id="a")])
    monkeypatch.setenv("MY_DATA_DIR", str(data))
    monkeypatch.chdir(data)
    frame = run_suite(load_suite(data), "plugins:make_reporter", data_dir=str(data))
    seen = json.loads(frame["answer"][0])
    assert "secret-golden" not in " ".join(seen["argv"])
    assert "MY_DATA_DIR" not in seen["env"] and not any("secret-golden" in v for v in seen["env"].values())
    assert "secret-golden" not in seen["cwd"]
    assert seen["pid"] != os.getpid()


def test_a_worker_sees_opaque_ids_only(golden):
    frame = run_suite(golden, "plugins:make_reporter")
    questions = [json.loads(a)["question"] for a in frame["answer"]]
    assert questions == [c.question for c in golden], "results come back in suite order"


# --------------------------------------------------------------------------- faults cost one case each


@pytest.mark.parametrize(
    "factory, reason",
    [
        ("plugins:make_raising", "adapter raised RuntimeError: backend down"),
        ("plugins:make_sys_exit", "adapter called sys.exit(0)"),
        ("plugins:make_os_exit", "adapter process exited with code 0"),
    ],
)
def test_raising_and_exiting_adapters_fail_their_cases_with_the_reason(golden, factory, reason):
    frame = run_suite(golden.select(split="living"), factory, RunSettings(concurrency=2))
    where = " (at plugins.py:" if "raised" in reason else ""  # an exception names where it was raised
    assert [e.split(where)[0] if where else e for e in frame["error"]] == [reason] * 5
    assert all(where in e for e in frame["error"])


def test_the_worker_that_replaces_one_that_exited_is_heard(golden):
    """One worker: the one started in place of the worker that exited takes its socket's number, and the
    pool waits on the new socket, so every other case is answered (none waits for a timeout)."""
    frame = run_suite(golden, "plugins:make_exits_on_one", RunSettings(concurrency=1, timeout=20))
    errors = frame.set_index("case_id")["error"]
    assert errors.notna().sum() == 1 and errors.dropna().iloc[0] == "adapter process exited with code 3"
    assert frame["abstained"].sum() + (frame["answer"] != "").sum() == len(golden) - 1


def test_a_hang_that_swallows_every_exception_is_stopped_from_outside(golden):
    living = golden.select(split="living")
    frame = run_suite(living, "plugins:make_hanging", RunSettings(timeout=0.5, concurrency=5))
    assert list(frame["error"]) == ["timed out after 0.5 s (its worker was stopped and replaced)"] * 5


def test_one_failing_case_fails_exactly_one_case(baseline):
    """With pandas 3, None in the error column once became a truthy NaN and failed every case."""
    result = api.gate(str(GOLDEN), baseline=baseline, adapter="plugins:make_raises_on_one")
    pc = result.run.per_case.set_index("case_id")
    assert pc["error"].notna().sum() == 1 and pc.at["single-0002", "error"].startswith("adapter raised RuntimeError")
    assert (~pc["case_passed"]).sum() == 6, "the known five multi-step failures and the one that raised"
    assert result.run.judge_usage["calls"] == 11
    assert list(result.regressed["case_id"]) == ["single-0002"]


def test_printed_output_is_captured_per_case_and_bounded(golden):
    frame = run_suite(golden.select(split="living"), "plugins:make_spammer")
    logs = frame["logs"][0]
    assert "fd1: faithfulness_rate 1.000 FAKE" in logs or "earlier bytes dropped" in logs
    assert "noise line 1999" in logs and len(logs) <= LOG_LIMIT + 60
    assert frame["error"].isna().all()


def test_an_unshippable_adapter_object_suggests_isolation_none(golden):
    class HoldsALock:
        lock = threading.Lock()

        def __init__(self):
            self.held = threading.Lock()

        def answer(self, case):
            return None

    with pytest.raises(UsageError, match="isolation='none'"):
        run_suite(golden, HoldsALock())


def test_adapter_objects_and_factories_are_shipped_to_the_workers(golden):
    from qaeval.system.reference import ReferenceHub, make_adapter

    by_name = run_suite(golden, "qaeval.system.reference:make_adapter")
    for adapter in (ReferenceHub(), make_adapter):
        frame = run_suite(golden, adapter)
        assert list(frame["answer"]) == list(by_name["answer"])


def test_a_class_is_a_factory_in_every_isolation_and_is_recorded_by_its_name():
    """docs/guides/adapters.md: adapter= takes "a factory or an adapter object, even a class defined in a notebook cell".
    A class has an answer attribute (a function), so it was taken for an adapter object: every case
    failed with "answer() missing 1 required positional argument: 'case'", recorded as builtins.type."""
    from qaeval.system.reference import ReferenceHub, make_adapter

    class NotebookHub(ReferenceHub):  # defined here, as in a notebook cell: shipped by value
        pass

    for isolation in ("process", "none"):
        result = api.run(str(GOLDEN), adapter=NotebookHub, isolation=isolation)
        assert result.adapter_errors == 0, result.outputs["error"].dropna().unique()
        assert result.meta.adapter.endswith("NotebookHub"), result.meta.adapter
    assert api.run(str(GOLDEN), adapter=make_adapter).meta.adapter == "qaeval.system.reference.make_adapter"


def test_async_adapters_are_awaited(golden):
    for isolation in ("process", "none"):
        frame = run_suite(golden, "plugins:make_async_hub", RunSettings(isolation=isolation))
        assert frame["error"].isna().all() and frame["answer"].str.len().gt(0).sum() == 12


def test_concurrency_keeps_suite_order_and_uses_several_workers(golden):
    frame = run_suite(golden, "plugins:make_slow", RunSettings(concurrency=4))
    assert list(frame["case_id"]) == [c.id for c in golden]
    assert all(a == c.sources[0].text for a, c in zip(frame["answer"], golden))
    pids = {line for logs in frame["logs"] for line in logs.splitlines() if line.startswith("pid ")}
    assert len(pids) > 1


def test_isolation_none_runs_in_this_process_and_says_so(golden):
    result = api.run(str(GOLDEN), isolation="none", adapter="plugins:make_reporter")
    assert {json.loads(a)["pid"] for a in result.outputs["answer"]} == {os.getpid()}
    assert "boundary was NOT enforced" in result.summary_text()
    assert not result.meta.boundary_enforced


def test_a_factory_that_fails_is_a_usage_error_naming_it(golden):
    with pytest.raises(UsageError, match="no credentials"):
        run_suite(golden, "plugins:make_crashing_factory")
    with pytest.raises(UsageError, match="cannot import module"):
        run_suite(golden, "qaeval.nope:make")


def test_a_factory_that_ends_its_process_is_a_usage_error_as_one_that_raises(golden):
    """No worker ever built the adapter, because its factory ends the process (os._exit, a crash): exit 64
    naming the adapter and how its workers ended, as for a factory that raises and as on an executor
    (it was every case failed with that reason, and exit 0)."""
    with pytest.raises(
        UsageError,
        match="adapter plugins:make_process_ending_factory did not start: worker exited "
        "with code 3 before the adapter was built",
    ):
        run_suite(golden, "plugins:make_process_ending_factory")
    done = cli("run", "--data", str(GOLDEN), "--adapter", "plugins:make_process_ending_factory")
    assert done.returncode == 64 and "exited with code 3 before the adapter was built" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    with pytest.raises(UsageError, match="exited with code 3 before the adapter was built"):  # no end-of-file comes
        run_suite(golden, "plugins:make_factory_ending_behind_a_descendant")


# --------------------------------------------------------------------------- the command line stays clean


def test_cli_output_is_clean_of_everything_an_adapter_prints(baseline):
    done = cli("run", "--data", str(GOLDEN), "--adapter", "plugins:make_spammer")
    assert done.returncode == 0, done.stderr
    assert "FAKE" not in done.stdout + done.stderr and "noise line" not in done.stdout + done.stderr
    assert done.stdout.count("deterministic_pass_rate") == 1


@pytest.mark.parametrize(
    "factory, reason",
    [
        ("plugins:make_sys_exit", "adapter called sys.exit(0)"),
        ("plugins:make_os_exit", "adapter process exited with code 0"),
        ("plugins:make_hanging", "timed out after 1 s"),
    ],
)
def test_exits_and_hangs_block_the_gate_from_the_cli(baseline, factory, reason):
    done = cli(
        "gate",
        "--data",
        str(GOLDEN),
        "--adapter",
        factory,
        "--baseline",
        baseline,
        "--timeout",
        "1",
        "--concurrency",
        "8",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "GATE: BLOCK" in done.stdout and "adapter error on 15" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_lingering_thread_does_not_keep_the_cli_alive(baseline):
    done = cli("run", "--data", str(GOLDEN), "--adapter", "plugins:make_lingerer", timeout=120)
    assert done.returncode == 0 and "TIER 1" in done.stdout


def test_a_lingering_thread_under_isolation_none_does_not_either():
    done = cli("run", "--data", str(GOLDEN), "--adapter", "plugins:make_lingerer", "--isolation", "none", timeout=120)
    assert done.returncode == 0 and "NOT enforced" in done.stdout


def test_the_saboteur_reads_what_an_adapter_printed_in_the_record(tmp_path):
    record = tmp_path / "r.json"
    assert (
        cli(
            "run", "--data", str(GOLDEN / "buggy"), "--adapter", "plugins:make_spammer", "--save", str(record)
        ).returncode
        == 0
    )
    data = json.loads(record.read_text())
    assert all("noise line 1999" in line["output"]["logs"] for line in data["cases"])


class _Text(str):
    """A str subclass whose methods lie: comparing, hashing or encoding it would raise."""

    def __eq__(self, other):
        raise AssertionError("the harness compared a str subclass")

    __hash__ = str.__hash__

    def encode(self, *args, **kwargs):
        raise AssertionError("the harness called a str subclass's encode")


class _Number(float):
    def __repr__(self):
        raise AssertionError("the harness called a float subclass's __repr__")


class SubclassingAdapter:
    """Answers with the reference system's output, every string and number a lying subclass."""

    def __init__(self):
        from qaeval.system.reference import make_adapter

        self.inner = make_adapter()

    def answer(self, case):
        from qaeval.system.contract import Citation, SUTOutput

        out = self.inner.answer(case)
        return SUTOutput(
            answer=_Text(out.answer),
            abstained=out.abstained,
            model_was_called=out.model_was_called,
            citations=[Citation(_Text(c.source_id), _Text(c.claim)) for c in out.citations],
            retrieved_ids=[_Text(r) for r in out.retrieved_ids],
            prompt_to_model=None if out.prompt_to_model is None else _Text(out.prompt_to_model),
            computed_aggregate=_Number(1.5),
        )


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_str_and_float_subclasses_come_back_as_plain_values(golden, isolation):
    """In process or not, the outputs hold exact str and float values with the same text, so nothing an
    adapter's subclass overrides runs in scoring; and the cases score as the plain output would."""
    outputs = run_suite(golden, SubclassingAdapter(), RunSettings(isolation=isolation, concurrency=2))
    plain = run_suite(golden, "qaeval.system.reference:make_adapter", RunSettings(isolation="none", concurrency=2))
    assert outputs["error"].isna().all(), outputs["error"].dropna().tolist()
    for column in ("answer", "prompt_to_model"):
        assert {type(v) for v in outputs[column] if v is not None} == {str}
        assert outputs[column].tolist() == plain[column].tolist()
    assert {type(r) for ids in outputs["retrieved_ids"] for r in ids} == {str}
    assert {type(v) for cited in outputs["citations"] for c in cited for v in c.values()} == {str}
    assert {type(v) for v in outputs["computed_aggregate"]} == {float}
    assert outputs["output_fingerprint"].tolist() == plain["output_fingerprint"].tolist()


def test_a_run_collects_garbage_less_often_and_gives_the_thresholds_back():
    """A run raises the collector's thresholds (1,400 collections took 1.5 s of a 9 s run) and restores
    the caller's own afterwards, also when the run fails: a notebook keeps its settings."""
    import gc

    from qaeval.commands.pipeline import RUN_THRESHOLDS

    seen = []

    class Watcher:
        def answer(self, case):
            seen.append(gc.get_threshold())
            from qaeval import SUTOutput

            return SUTOutput(abstained=True, model_was_called=False)

    before = gc.get_threshold()
    gc.set_threshold(1234, 5, 6)
    try:
        api.run(str(GOLDEN), isolation="none", adapter=Watcher())
        assert gc.get_threshold() == (1234, 5, 6)
        assert seen and set(seen) == {(RUN_THRESHOLDS[0], RUN_THRESHOLDS[1], RUN_THRESHOLDS[2])}
        with pytest.raises(UsageError):
            api.run(str(GOLDEN), isolation="none", adapter="no_such_module:make")
        assert gc.get_threshold() == (1234, 5, 6)
    finally:
        gc.set_threshold(*before)


@pytest.mark.parametrize(
    "factory, reason",
    [
        ("plugins:make_hangs_on_one", "timed out after 1 s (its worker was stopped and replaced)"),
        ("plugins:make_exits_on_digital_loans", "adapter process exited with code 3"),
    ],
)
def test_the_case_queued_behind_a_stopped_worker_is_answered_by_its_replacement(golden, monkeypatch, factory, reason):
    """A busy worker is sent its next case before it answers. When it is stopped (a hang, an exit), that
    queued case never ran: it is handed out again, not failed with the other case's reason."""
    from qaeval.system import pool

    sent: list[str] = []
    real = pool.make_payload
    monkeypatch.setattr(pool, "make_payload", lambda case: sent.append(case.id) or real(case))
    living = golden.select(split="living")
    frame = run_suite(living, factory, RunSettings(timeout=1, concurrency=1)).set_index("case_id")
    stopped, behind = "single-0006", "single-0007"
    assert frame.at[stopped, "error"] == reason
    assert frame.drop(index=stopped)["error"].isna().all(), frame["error"].tolist()
    assert sent.count(behind) == 2, sent  # queued behind the stopped case, then sent again
    pids = {cid: frame.at[cid, "answer"] for cid in ("single-0005", behind)}
    assert pids["single-0005"] != pids[behind], "the case behind was answered by the replacement"


def test_the_cli_runs_exit_hooks_although_it_skips_tearing_the_interpreter_down(tmp_path):
    """`qaeval` leaves with os._exit (freeing every object of a large run one by one took 0.45 s) after
    running what an exit runs: a library's exit hook still fires, and every line of output arrives."""
    marker = tmp_path / "hook"
    done = cli(
        "run",
        "--data",
        str(GOLDEN),
        "--adapter",
        "plugins:make_exit_hook_adapter",
        "--isolation",
        "none",
        env={"QAEVAL_TEST_EXIT_HOOK": str(marker)},
    )
    assert done.returncode == 0 and done.stdout.rstrip().endswith("tokens spent: 0 prompt + 0 completion")
    assert marker.read_text() == "exit hooks ran"


def test_a_queued_case_is_timed_from_when_its_worker_turns_to_it(golden):
    """The case queued behind a 1.5 s case takes 1.2 s itself: timed from when it was sent (2.7 s) it
    would pass the 2 s timeout; timed from when its worker turned to it, it does not."""
    living = golden.select(split="living")
    frame = run_suite(living, "plugins:make_takes_its_time", RunSettings(timeout=2, concurrency=1)).set_index("case_id")
    assert frame["error"].isna().all(), frame["error"].tolist()  # timed from when it was sent, it would time out
    # Its clock starts when the harness reads the reply before it, a little after the worker turned to it,
    # so under load its latency can read a few milliseconds short of the 1.2 s it took (CI saw 1.1985).
    assert 1.5 <= frame.at["single-0006", "latency_s"] < 2 and 0.9 <= frame.at["single-0007", "latency_s"] < 2


def test_a_second_reply_fails_the_case_it_repeats_and_hands_back_the_case_behind(golden, monkeypatch):
    """An adversarial review: the worker's second reply for a case, arriving once the case queued behind
    it had begun, failed that innocent case too ("a reply for a case it was not asked")."""
    from qaeval.system import pool

    sent: list[str] = []
    real = pool.make_payload
    monkeypatch.setattr(pool, "make_payload", lambda case: sent.append(case.id) or real(case))
    frame = run_suite(
        golden.select(split="living"), "plugins:make_answers_twice", RunSettings(timeout=30, concurrency=1)
    ).set_index("case_id")
    assert frame.at["single-0006", "error"] == "its worker sent a second reply for it (it was stopped)"
    assert frame.drop(index="single-0006")["error"].isna().all(), frame["error"].tolist()
    assert sent.count("single-0007") == 2, sent  # queued behind it, then handed to the replacement
    assert frame.at["single-0005", "answer"] != frame.at["single-0007", "answer"]


def test_a_frame_too_big_to_wait_in_the_socket_is_not_queued_so_deadlines_hold(tmp_path, monkeypatch):
    """An adversarial review: a queued case of 12,000 sources (a frame of about 280 KB, more than the
    socket holds) blocked the harness's send while the worker was busy, so the case before it was read
    late and accepted past its timeout. Such a case now waits for an idle worker."""
    from qaeval import load_suite
    from qaeval.system import pool

    big = [{"id": f"s{i}", "text": "é"} for i in range(12_000)]
    folder = write_cases(
        tmp_path / "data",
        [
            make_case(id="c1", question="first"),
            make_case(id="c2", question="second", sources=big, gold_source_ids=["s1"]),
        ],
    )
    sent: list[str] = []
    real = pool.make_payload
    monkeypatch.setattr(pool, "make_payload", lambda case: sent.append(case.id) or real(case))
    frame = run_suite(
        load_suite(str(folder)), "plugins:make_slow_on_the_first", RunSettings(timeout=1.5, concurrency=1)
    ).set_index("case_id")
    assert frame.at["c1", "error"] == "timed out after 1.5 s (its worker was stopped and replaced)"
    assert frame.at["c2", "error"] is None or pd.isna(frame.at["c2", "error"])
    assert sent == ["c1", "c2"]  # c2 was made ready once and sent once, to the replacement


def test_overlapping_runs_and_a_collector_turned_off_keep_the_callers_settings():
    """An adversarial review: two runs overlapping in threads that ended out of order left the raised
    thresholds set for good, and a collector turned off with set_threshold(0) was turned back on."""
    import gc

    from qaeval.commands.pipeline import RUN_THRESHOLDS, fewer_collections

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        first, second = fewer_collections(), fewer_collections()
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)  # the first to begin ends first
        assert gc.get_threshold() == RUN_THRESHOLDS, "a run still going keeps its thresholds"
        second.__exit__(None, None, None)
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(0)
        with fewer_collections():
            assert gc.get_threshold()[0] == 0
        assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)


class _ScriptedExecutor(cf.Executor):
    """An executor whose first call comes back first, saying the adapter could not start there; the second
    comes back answered once the first has been read, and any later one answered at once: an adapter that
    failed to start on one of the executor's workers while it started on another. Nothing runs; the order
    is fixed."""

    def __init__(self) -> None:
        self.calls = 0
        self.second: tuple[cf.Future, list] | None = None

    @staticmethod
    def reply(payload, *, started: bool) -> str:
        from qaeval.system.contract import SUTOutput, output_to_plain

        if not started:
            return json.dumps(
                {
                    "id": payload[0],
                    "error": "adapter could not start: RuntimeError: no GPU here",
                    "not_started": {"why": "RuntimeError: no GPU here", "usage": False},
                }
            )
        output = output_to_plain(SUTOutput(abstained=True, model_was_called=False))
        return json.dumps({"id": payload[0], "output": output, "logs": ""})

    def submit(self, fn, spec_json, payload, *args):
        self.calls += 1
        if self.calls == 1:
            executor = self

            class First(cf.Future):
                def result(self, timeout=None):  # read: the second comes back now
                    waiting, theirs = executor.second
                    if not waiting.done():
                        waiting.set_result(executor.reply(theirs, started=True))
                    return super().result(timeout)

            future: cf.Future = First()
            future.set_result(self.reply(payload, started=False))
        else:
            future = cf.Future()
            if self.calls == 2:
                self.second = (future, payload)
            else:
                future.set_result(self.reply(payload, started=True))
        return future


def test_an_adapter_that_fails_to_start_on_one_executor_worker_but_starts_on_another_is_not_refused():
    """A review: the first reply said "could not start" and the run was refused, while another worker had
    started it. The calls in flight are waited for first; only when none of them started is it refused."""
    suite = load_suite(GOLDEN)
    frame = run_suite(
        suite, "qaeval.system.reference:make_adapter", RunSettings(executor=_ScriptedExecutor(), concurrency=2)
    )
    errors = frame["error"].tolist()
    assert errors[0] == "adapter could not start: RuntimeError: no GPU here"
    assert all(e is None for e in errors[1:]) and frame["abstained"].tolist()[1:] == [True] * (len(suite) - 1)
