"""Scoring beside the judge in a forked copy of the process (qaeval.forked): the same values as
computing here, and every way the child can fail ends in computing here, never in a wrong value, a
hang or a process left behind."""

from __future__ import annotations

import os
import select
import sys
import threading

import pandas as pd
import pytest
from conftest import GOLDEN

from qaeval import api
from qaeval.data.cases import load_suite
from qaeval.judges.offline import OfflineJudge
from qaeval import forked

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2,
                                reason="forking to score is for Linux with two or more cores")

PARENT = os.getpid()
GOLDEN_IDS = [case.id for case in load_suite(GOLDEN)]


@pytest.fixture
def small_suites_fork(monkeypatch):
    monkeypatch.setattr(forked, "MIN_ROWS", 0)
    # A thread an earlier test abandoned (an adapter hung under isolation none) would turn the fork off
    # for the rest of this worker; the thread rule has its own test below.
    monkeypatch.setattr(forked.threading, "active_count", lambda: 1)


def in_child() -> bool:
    return os.getpid() != PARENT


def pid_and_square(x: int) -> tuple[int, int]:
    return os.getpid(), x * x


def test_the_value_comes_from_a_forked_child(small_suites_fork):
    with forked.Beside(pid_and_square, 7, rows=1) as later:
        child = later.pid
        pid, value = later.result()
    assert later.forked and pid == child != os.getpid() and value == 49
    with pytest.raises(ChildProcessError):  # reaped
        os.waitpid(child, os.WNOHANG)


def test_a_run_scores_the_same_with_and_without_the_fork(small_suites_fork, monkeypatch):
    seen = []
    real = forked.Beside.result

    def result(self):
        value = real(self)
        seen.append(self.forked)
        return value

    monkeypatch.setattr(forked.Beside, "result", result)
    split = api.run(str(GOLDEN), isolation="none")
    monkeypatch.setattr(forked, "ENABLED", False)
    here = api.run(str(GOLDEN), isolation="none")
    assert seen == [True, False]
    for name in ("checks", "verdicts", "per_case", "scoreboard"):
        a, b = (getattr(r, name).drop(columns=["latency_s"], errors="ignore") for r in (split, here))
        assert a.astype(str).equals(b.astype(str)), name


def dies_in_the_child(x: int) -> int:
    if in_child():
        os._exit(3)
    return x + 1


def raises_in_the_child(x: int) -> int:
    if in_child():
        raise MemoryError("child only")
    return x + 1


def test_a_child_that_exits_or_raises_is_replaced_by_computing_here(small_suites_fork):
    for fn in (dies_in_the_child, raises_in_the_child):
        with forked.Beside(fn, 1, rows=1) as later:
            assert later.pid is not None
            assert later.result() == 2 and not later.forked


def raises_everywhere(x: int) -> int:
    raise ValueError(f"bad {x}")


def test_an_error_of_the_step_itself_is_raised_here(small_suites_fork):
    with forked.Beside(raises_everywhere, 5, rows=1) as later, pytest.raises(ValueError, match="bad 5"):
        later.result()


def hangs_in_the_child(x: int) -> int:
    if in_child():
        read, _ = os.pipe()
        select.select([read], [], [])  # nothing will ever arrive
    return x * 10


def test_a_child_past_its_deadline_is_killed_and_the_value_computed_here(small_suites_fork, monkeypatch):
    monkeypatch.setattr(forked, "DEADLINE", 0.3)
    with forked.Beside(hangs_in_the_child, 4, rows=1) as later:
        child = later.pid
        assert later.result() == 40 and not later.forked
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)


def test_leaving_early_kills_and_reaps_the_child(small_suites_fork):
    with pytest.raises(KeyError):
        with forked.Beside(hangs_in_the_child, 1, rows=1) as later:
            child = later.pid
            raise KeyError("the judge failed")
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)


def test_no_fork_while_another_thread_runs_or_for_a_small_suite(monkeypatch):
    with forked.Beside(pid_and_square, 3, rows=forked.MIN_ROWS - 1) as later:
        assert later.pid is None and later.result() == (os.getpid(), 9)
    monkeypatch.setattr(forked, "MIN_ROWS", 0)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        with forked.Beside(pid_and_square, 3, rows=1) as later:
            assert later.pid is None and later.result() == (os.getpid(), 9) and not later.forked
    finally:
        stop.set()
        other.join()


def test_a_fork_that_fails_is_replaced_by_computing_here_and_leaks_nothing(small_suites_fork, monkeypatch):
    """An adversarial review: a fork refused by a process limit (EAGAIN) ended the run (exit 74)."""
    import errno

    def refused():
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    fds = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(forked.os, "fork", refused)
    with forked.Beside(pid_and_square, 6, rows=1) as later:
        assert later.pid is None and later.result() == (os.getpid(), 36) and not later.forked
    assert len(os.listdir("/proc/self/fd")) == fds


def test_with_sigchld_ignored_the_childs_value_is_still_taken(small_suites_fork):
    """An adversarial review: with SIGCHLD ignored (inherited, or set by user code) the system reaps
    the child, waitpid raised ECHILD, and the run ended with exit 74, "No child processes"."""
    import signal

    before = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        with forked.Beside(pid_and_square, 8, rows=1) as later:
            child = later.pid
            pid, value = later.result()
        assert later.forked and pid == child and value == 64
    finally:
        signal.signal(signal.SIGCHLD, before)


def test_without_a_fork_the_step_runs_at_once(monkeypatch):
    """An adversarial review: computed lazily, an error in the checks (a corpus file changed on disk)
    came only after every judge call had been made and paid for; it comes first, as it used to."""
    calls = []
    with forked.Beside(calls.append, "ran", rows=0) as later:
        assert calls == ["ran"]
        later.result()
    assert calls == ["ran"]


# --------------------------------------------------------------------------- a share of the next step first


def own_pid() -> int:
    return os.getpid()


def test_the_child_sends_its_share_of_the_next_step_before_its_value(small_suites_fork):
    with forked.Beside(pid_and_square, 7, rows=1, first=own_pid) as later:
        child = later.pid
        assert later.first_value() == child != os.getpid(), "the share was computed in the child"
        assert later.result() == (child, 49) and later.forked


def test_a_share_never_asked_for_is_read_past(small_suites_fork):
    with forked.Beside(pid_and_square, 3, rows=1, first=own_pid) as later:
        child = later.pid
        assert later.result() == (child, 9) and later.forked


def big_share() -> bytes:
    return bytes(3 << 20)  # far more than a pipe holds: the child blocks until it is read


def test_a_share_larger_than_the_pipe_arrives_whole(small_suites_fork):
    with forked.Beside(pid_and_square, 2, rows=1, first=big_share) as later:
        assert later.first_value() == bytes(3 << 20)
        assert later.result()[1] == 4 and later.forked


def share_dies_in_the_child() -> int:
    if in_child():
        os._exit(3)
    return os.getpid()


def test_a_child_that_dies_before_its_share_has_both_computed_here(small_suites_fork):
    with forked.Beside(pid_and_square, 5, rows=1, first=share_dies_in_the_child) as later:
        assert later.first_value() == os.getpid()
        assert later.result() == (os.getpid(), 25) and not later.forked


def share_raises() -> int:
    raise LookupError("the share itself is wrong")


def test_an_error_of_the_share_itself_is_raised_here(small_suites_fork):
    with forked.Beside(pid_and_square, 5, rows=1, first=share_raises) as later, pytest.raises(LookupError):
        later.first_value()


def test_a_share_past_the_deadline_is_computed_here(small_suites_fork, monkeypatch):
    monkeypatch.setattr(forked, "DEADLINE", 0.3)

    def share_hangs_in_the_child() -> int:
        if in_child():
            read, _ = os.pipe()
            select.select([read], [], [])
        return os.getpid()

    with forked.Beside(pid_and_square, 6, rows=1, first=share_hangs_in_the_child) as later:
        child = later.pid
        assert later.first_value() == os.getpid()
        assert later.result() == (os.getpid(), 36) and not later.forked
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)


def test_without_a_fork_the_share_is_computed_here():
    with forked.Beside(pid_and_square, 4, rows=0, first=own_pid) as later:
        assert later.pid is None and later.first_value() == os.getpid()


class OfflineLookalike(OfflineJudge):
    """Grades as the offline judge does, but is not it: a judge qaeval must call here, with every request."""


def test_with_any_other_judge_the_child_chooses_half_the_decoys_and_this_process_asks_the_judge(
        small_suites_fork, monkeypatch, tmp_path):
    """The hardest decoys of every other judged case come from the child; the judge is called here only,
    once, with every request; and the frames are those of one process doing it all."""
    from qaeval.scoring import evaluate

    real = evaluate.choose_decoys

    def choose(outputs, sources, only=None):
        chosen = real(outputs, sources, only)
        half = "first" if GOLDEN_IDS[0] in only else "second"
        (tmp_path / half).write_text(f"{os.getpid()} {len(chosen)}")
        return chosen

    calls = []
    real_judge = OfflineJudge.judge
    monkeypatch.setattr(OfflineJudge, "judge", lambda self, requests: calls.append((os.getpid(), len(requests)))
                        or real_judge(self, requests))
    monkeypatch.setattr(evaluate, "choose_decoys", choose)
    split = api.run(str(GOLDEN), isolation="none", judge=OfflineLookalike())
    child_pid, child_n = map(int, (tmp_path / "second").read_text().split())
    here_pid, here_n = map(int, (tmp_path / "first").read_text().split())
    assert here_pid == os.getpid() != child_pid
    assert child_n > 0 and here_n > 0
    assert calls == [(os.getpid(), len(split.verdicts["case_id"].unique()))]
    monkeypatch.setattr(forked, "ENABLED", False)
    assert_same_frames(split, api.run(str(GOLDEN), isolation="none", judge=OfflineLookalike()))


def test_the_offline_judge_shares_the_cases_with_the_child(small_suites_fork, monkeypatch, tmp_path):
    """qaeval's own offline judge is pure, so the child checks, grades and scores shares of the cases while
    this process does the rest: this process the first share, the child the second, then whichever is
    free the next; every case once. The frames put back together are those of one process doing it all,
    row for row and type for type, and those of a judge that is scored whole (the lookalike)."""
    from qaeval.scoring.evaluate import share_spans

    real_judge = OfflineJudge.judge

    def judge(self, requests):
        with open(tmp_path / str(os.getpid()), "a") as log:
            log.write("".join(f"{r.case_id}\n" for r in requests))
        return real_judge(self, requests)

    monkeypatch.setattr(OfflineJudge, "judge", judge)
    split = api.run(str(GOLDEN), isolation="none")
    graded = {int(p.name): p.read_text().split() for p in tmp_path.iterdir()}
    assert len(graded) == 2 and os.getpid() in graded
    judged = split.verdicts["case_id"].unique().tolist()
    here = graded.pop(os.getpid())
    (there,) = graded.values()
    assert sorted(here + there) == sorted(judged)  # each once
    (a, b), (c, d) = share_spans(len(GOLDEN_IDS))[:2]
    assert set(GOLDEN_IDS[a:b]) & set(judged) <= set(here) and set(GOLDEN_IDS[c:d]) & set(judged) <= set(there)
    assert here and there
    for p in list(tmp_path.iterdir()):
        p.unlink()
    monkeypatch.setattr(forked, "ENABLED", False)
    alone = api.run(str(GOLDEN), isolation="none")
    assert [p.name for p in tmp_path.iterdir()] == [str(os.getpid())]
    assert_same_frames(split, alone)
    assert_same_frames(split, api.run(str(GOLDEN), isolation="none", judge=OfflineLookalike()))


def assert_same_frames(a, b):
    for name in ("checks", "verdicts", "retrieval", "trajectory", "per_case", "units", "custom", "scoreboard",
                 "slices"):
        x, y = (getattr(r, name).drop(columns=["latency_s"], errors="ignore") for r in (a, b))
        assert list(x.dtypes) == list(y.dtypes), name
        assert x.index.equals(y.index), name
        assert x.astype(str).equals(y.astype(str)), name


def test_a_child_that_dies_after_its_share_gives_the_share_and_the_value_is_computed_here(small_suites_fork):
    with forked.Beside(dies_in_the_child, 1, rows=1, first=own_pid) as later:
        child = later.pid
        assert later.first_value() == child
        assert later.result() == 2 and not later.forked


def test_pieces_are_each_handed_out_once_between_this_process_and_a_child(small_suites_fork):
    with forked.Pieces(40, first=2) as pieces:
        with forked.Beside(lambda: [n for n in iter(pieces.take, None)], rows=1) as later:
            mine = list(iter(pieces.take, None))
            theirs = later.result()
        assert later.forked and sorted(mine + theirs) == list(range(2, 40))
        assert pieces.take() is None
    with pytest.raises(ValueError):
        forked.Pieces(forked.Pieces.MAX + 1)


def test_shares_cover_every_case_once_largest_first():
    from qaeval.scoring.evaluate import share_spans

    for cases in (1, 2, 3, 39, 40, 41, 1000, 10_000, 1_000_000):
        spans = share_spans(cases)
        assert spans[0][0] == 0 and spans[-1][1] == cases, cases
        assert all(stop == start for (_, stop), (start, _) in zip(spans, spans[1:])), cases
        sizes = [stop - start for start, stop in spans]
        assert min(sizes) >= 1 and sizes == sorted(sizes, reverse=True), cases
        assert len(spans) <= forked.Pieces.MAX, cases
    assert [b - a for a, b in share_spans(10_000)][:3] == [2500, 1875, 1407]


def test_shares_a_child_took_and_never_sent_back_are_scored_here(small_suites_fork, monkeypatch):
    """The child takes a share from the pipe and dies with it: this process scores that share too (it
    waits here, on a pipe, until the child has taken its share, so the child surely takes one)."""
    took_r, took_w = os.pipe()
    real_take = forked.Pieces.take

    def take(self):
        if in_child():
            n = real_take(self)
            os.write(took_w, b"x" if n is not None else b"-")
            os._exit(3)
        if not seen:  # the first time: wait until the child has taken its share
            seen.append("the child took a share" if select.select([took_r], [], [], 60)[0] and os.read(took_r, 1) == b"x"
                        else "the child took nothing")
        return real_take(self)

    seen: list[str] = []
    monkeypatch.setattr(forked.Pieces, "take", take)
    split = api.run(str(GOLDEN), isolation="none")
    os.close(took_r)
    os.close(took_w)
    assert seen == ["the child took a share"]
    monkeypatch.undo()
    monkeypatch.setattr(forked, "ENABLED", False)
    assert_same_frames(split, api.run(str(GOLDEN), isolation="none"))


def test_an_empty_suite_scores_to_an_empty_run_with_either_judge():
    from qaeval import score_outputs
    from qaeval.data.cases import Suite
    from qaeval.frames import frame
    from qaeval.system.contract import OUTPUT_SCHEMA

    for judge in (OfflineJudge(), OfflineLookalike()):
        run = score_outputs(Suite((), "empty"), frame([], OUTPUT_SCHEMA), judge)
        assert run.ok and len(run.per_case) == 0 and len(run.checks) == 0 and len(run.verdicts) == 0, judge


def test_shares_are_put_back_in_case_order_whatever_share_is_empty():
    import pandas as pd

    from qaeval.scoring.evaluate import in_order

    order = {"a": 0, "b": 1, "c": 2}
    odd = pd.DataFrame({"case_id": ["b", "b"], "score": pd.array([1, 2], dtype="Int64")})
    even = pd.DataFrame({"case_id": ["a", "c", "c"], "score": pd.array([0, None, 2], dtype="Int64")})
    whole = in_order(order, even, odd)
    assert whole["case_id"].tolist() == ["a", "b", "b", "c", "c"]
    assert whole["score"].tolist() == [0, 1, 2, pd.NA, 2] and str(whole["score"].dtype) == "Int64"
    assert whole.index.tolist() == [0, 1, 2, 3, 4]
    empty = even.iloc[:0]
    assert in_order(order, empty, odd)["case_id"].tolist() == ["b", "b"]
    assert str(in_order(order, empty, empty)["score"].dtype) == "Int64" and len(in_order(order, empty, empty)) == 0


def test_only_the_offline_judge_as_qaeval_made_it_grades_in_the_copy():
    """A judge that runs any user code (a method set on the instance, a subclass, a config subclass or
    a config field whose formatting is user code) is never called or labelled in the forked copy."""
    import dataclasses

    from qaeval.judges.offline import grades_in_a_copy, make_judge
    from qaeval.scoring.judge import JudgeConfig

    class Label(JudgeConfig):
        def label(self) -> str:
            return "mine"

    class Model(str):
        def __format__(self, spec: str) -> str:
            return "user code"

    assert grades_in_a_copy(make_judge())
    patched = make_judge()
    patched.judge = lambda requests: []
    relabelled, odd_model, tagged = make_judge(), make_judge(), make_judge()
    relabelled.config = Label(**dataclasses.asdict(relabelled.config))
    odd_model.config = dataclasses.replace(odd_model.config, model=Model("m"))
    tagged.note = "anything"
    for judge in (patched, relabelled, odd_model, tagged, OfflineLookalike(), object()):
        assert not grades_in_a_copy(judge), judge


def test_a_judge_wrapped_by_its_user_is_called_here_once_with_every_request(small_suites_fork):
    judge = OfflineJudge()
    graded: list[tuple[int, str]] = []
    real = judge.judge
    judge.judge = lambda requests: graded.extend((os.getpid(), r.case_id) for r in requests) or real(requests)
    result = api.run(str(GOLDEN), isolation="none", judge=judge)
    assert {pid for pid, _ in graded} == {os.getpid()}
    assert [cid for _, cid in graded] == result.verdicts["case_id"].unique().tolist()


def test_outputs_given_out_of_suite_order_score_the_same_either_way(small_suites_fork):
    """``score_outputs`` takes the outputs in any order: the shares give the frames, verdicts in the
    outputs' order included, that one process gives."""
    from qaeval import score_outputs

    run = api.run(str(GOLDEN), isolation="none")
    backwards = run.outputs.iloc[::-1].reset_index(drop=True)
    shared = score_outputs(run.suite, backwards, OfflineJudge())
    whole = score_outputs(run.suite, backwards, OfflineLookalike())
    assert shared.verdicts["case_id"].tolist()[0] == backwards.loc[~backwards["abstained"] & backwards["error"].isna(),
                                                                    "case_id"].tolist()[0]
    assert_same_frames(shared, whole)


def test_outputs_that_do_not_match_the_suite_are_a_usage_error_with_either_judge():
    from qaeval import score_outputs
    from qaeval.errors import UsageError

    run = api.run(str(GOLDEN), isolation="none")
    fewer = run.suite.select(split="frozen")
    doubled = pd.concat([run.outputs, run.outputs.iloc[:1]], ignore_index=True)
    for judge in (OfflineJudge(), OfflineLookalike()):
        with pytest.raises(UsageError, match=r"output\(s\) for cases not in the suite \(first: "):
            score_outputs(fewer, run.outputs, judge)
        with pytest.raises(UsageError, match=r"case\(s\) without an output"):
            score_outputs(run.suite, run.outputs.iloc[1:], judge)
        with pytest.raises(UsageError, match=r"more than one output"):
            score_outputs(run.suite, doubled, judge)


def _items(count: int, size: int):
    for i in range(count):
        yield bytes(size)


def test_a_childs_pipe_holds_a_mebibyte_where_the_system_allows(small_suites_fork):
    """A copy reading ahead of the loader was held up after one batch (a pipe holds 64 KiB) whenever the
    harness was busy elsewhere; its pipe is enlarged so it can keep going, and what it sends arrives whole."""
    import fcntl

    read, write = os.pipe()
    try:
        fcntl.fcntl(read, fcntl.F_SETPIPE_SZ, forked.PIPE_BYTES)
    except OSError as exc:  # pipe-max-size below it, or this user's pipe pages spent
        pytest.skip(f"this system does not allow a 1 MiB pipe here ({exc})")
    finally:
        os.close(read)
        os.close(write)
    with forked.Ahead(_items, 8, 64 << 10, rows=1) as ahead:
        assert fcntl.fcntl(ahead.fd, fcntl.F_GETPIPE_SZ) == forked.PIPE_BYTES
        got = []
        while ahead.fd is not None:  # until the child has sent everything and closed its end
            select.select([ahead.fd], [], [], 5.0)
            got += ahead.arrived()
    assert got == [bytes(64 << 10)] * 8
