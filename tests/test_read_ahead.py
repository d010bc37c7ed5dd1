"""Loading on two cores (qaeval.data.ahead, qaeval.forked.Ahead): a forked copy reads the case files ahead
of the loader and sends fingerprints and term sets; the loader takes only what describes the line it has
just read, computes the rest itself, never waits, and loads exactly what it would have alone."""

from __future__ import annotations

import json
import mmap
import os
import select
import sys

import pytest
from conftest import make_case, write_cases

from qaeval import forked, text
from qaeval.data import ahead, cases
from qaeval.data.cases import case_fingerprint, load_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2,
                                reason="reading ahead in a forked copy is for Linux with two or more cores")

PASSAGE = " ".join(["The branch library lends laptops and museum passes to card holders for a week."] * 6)


@pytest.fixture
def may_fork(monkeypatch):
    # A thread an earlier test abandoned would turn forking off for the rest of this worker.
    monkeypatch.setattr(forked.threading, "active_count", lambda: 1)


def big_suite(folder, n=700):
    """About 4 KB a case: ``n`` of them pass ``ahead.MIN_BYTES``."""
    rows = [make_case(id=f"c{i:05d}", question=f"Which branch lends laptops, case {i}?",
                      sources=[{"id": f"s{k}", "text": f"{PASSAGE} Passage {k} of case {i}."} for k in range(8)],
                      gold_source_ids=["s0"]) for i in range(n)]
    return write_cases(folder, rows)


def forget_text():
    for memo in (text._NORMAL, text._TERM_SETS):
        memo.clear()
        memo.chars = 0


def everything(fd_owner, take):
    """What a child sends until it ends, waiting on its pipe (never a sleep)."""
    got = []
    while fd_owner.fd is not None:
        select.select([fd_owner.fd], [], [], 30)
        got += take()
    return got


def numbers(n):
    yield from ([os.getpid(), i] for i in range(n))


def fails_after_two():
    yield "one"
    yield "two"
    raise RuntimeError("the producer broke")


def forever():
    while True:
        yield "x" * 1000


def priority():
    yield os.getpriority(os.PRIO_PROCESS, 0)


def test_items_come_from_a_child_in_order_and_the_child_is_reaped(may_fork):
    with forked.Ahead(numbers, 500, rows=forked.MIN_ROWS) as sent:
        child = sent.pid
        got = everything(sent, sent.arrived)
    assert child not in (None, os.getpid())
    assert got == [[child, i] for i in range(500)]
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)


def test_a_producer_that_raises_delivers_what_it_sent_then_nothing(may_fork):
    with forked.Ahead(fails_after_two, rows=forked.MIN_ROWS) as sent:
        got = everything(sent, sent.arrived)
        assert sent.arrived() == []
    assert got == ["one", "two"]


def test_nothing_arrives_without_a_fork(monkeypatch):
    with forked.Ahead(numbers, 5, rows=forked.MIN_ROWS - 1) as small:  # too small to be worth it
        assert small.pid is None and small.arrived() == []
    monkeypatch.setattr(forked.threading, "active_count", lambda: 2)  # another thread runs
    with forked.Ahead(numbers, 5, rows=forked.MIN_ROWS) as threaded:
        assert threaded.pid is None and threaded.arrived() == []


def test_leaving_early_kills_and_reaps_a_child_still_producing(may_fork):
    with forked.Ahead(forever, rows=forked.MIN_ROWS) as sent:
        child = sent.pid
        select.select([sent.fd], [], [], 30)
        assert sent.arrived()
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)


def test_the_child_yields_the_cores_to_the_loader(may_fork):
    with forked.Ahead(priority, rows=forked.MIN_ROWS) as sent:
        (nice,) = everything(sent, sent.arrived)
    assert nice >= os.getpriority(os.PRIO_PROCESS, 0) + 10


def place(index, offset):
    shared = mmap.mmap(-1, ahead._AT.size)
    ahead._AT.pack_into(shared, 0, index, offset)
    return shared


def test_the_copy_computes_what_the_loader_would_from_the_same_bytes(tmp_path):
    path = big_suite(tmp_path / "data", n=400) / "cases.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    starts = [sum(len(x) for x in lines[:i]) for i in range(len(lines))]
    forget_text()
    items = [item for batch in ahead._computed([str(path)], place(-1, 0), case_fingerprint) for item in batch]
    assert [item[1] for item in items] == starts  # every line, from the first: the loader is in no file yet
    for item, line, start in zip(items, lines, starts):
        raw = json.loads(line)
        assert item[:4] == (0, start, len(line), ahead._digest(line))
        assert item[4] == case_fingerprint(raw)
        assert [frozenset(t) for t in item[5]] == [frozenset(text._distinct_terms(s["text"])) for s in raw["sources"]]


def test_the_copy_jumps_ahead_of_the_loader_and_spends_term_sets_only_far_ahead(tmp_path):
    path = big_suite(tmp_path / "data", n=600) / "cases.jsonl"
    size = path.stat().st_size
    assert size > ahead.LEAD + ahead.SLACK
    items = [item for batch in ahead._computed([str(path)], place(0, 0), case_fingerprint) for item in batch]
    assert min(item[1] for item in items) >= ahead.LEAD  # the loader is at the start: the copy leaves it that far
    near = [item for item in items if item[1] <= ahead.SLACK]
    far = [item for item in items if item[1] > ahead.SLACK]
    assert near and far
    assert all(item[5] is None for item in near) and all(item[5] is not None for item in far)
    assert list(ahead._computed([str(path)], place(1, 0), case_fingerprint)) == []  # the loader is past the file


def test_lines_the_loader_refuses_are_never_taken_from_the_copy(tmp_path, monkeypatch):
    folder = tmp_path / "data"
    folder.mkdir()
    good = json.dumps(make_case())
    twice = good[:-1] + ', "id": "forged"}'  # a key twice: JSON to the copy's lenient parse, refused by the loader
    path = folder / "cases.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + good.encode() + b"\n\n[1, 2]\n" + twice.encode() + b"\nnot json\n\xff\xfe\n"
                     + good.encode() + b"\n")
    items = [item for batch in ahead._computed([str(path)], place(-1, 0), case_fingerprint) for item in batch]
    data = path.read_bytes()
    at_twice = data.index(twice.encode())
    # Objects only (a BOM is fine on line 1); the line with a key twice gets an item, for its lenient value
    assert [item[1] for item in items] == [0, at_twice, data.rindex(good.encode())]
    assert items[1][4] == case_fingerprint(json.loads(twice)) != case_fingerprint(json.loads(good))

    monkeypatch.setattr(ahead, "Ahead", lambda *a, **k: Stub([items]))
    reader = ahead.ReadAhead([path], case_fingerprint)
    problems = []
    read = [number for number, _ in reader.lines(0, path, problems)]
    assert 4 not in read and any("appears twice" in p.message for p in problems)  # the loader refused line 4
    assert set(reader.taken) == {(str(path), 1), (str(path), read[-1])}  # and took nothing for it
    assert list(reader.got) == [(0, at_twice)]  # sent, and left unused


def test_a_line_no_file_can_hold_stops_nothing_but_itself(tmp_path):
    """The copy's lenient parse takes "\\ud800" (the loader refuses it): it skips that line and goes on, the
    lines before and after it still get their items."""
    path = tmp_path / "cases.jsonl"
    good = json.dumps(make_case())
    bad = good[:-1] + ', "note": "\\ud800"}'
    path.write_text(f"{good}\n{bad}\n{good}\n", encoding="utf-8")
    items = [item for batch in ahead._computed([str(path)], place(-1, 0), case_fingerprint) for item in batch]
    assert [item[1] for item in items] == [0, len(good) + 1 + len(bad) + 1]  # the first and the third line


class Stub:
    """Stands in for the forked copy: delivers the given batches at the first ask."""

    fd = 0

    def __init__(self, batches):
        self.batches = batches

    def arrived(self):
        batches, self.batches = self.batches, []
        return batches

    def close(self):
        self.fd = None


def test_the_loader_takes_an_item_only_for_the_bytes_it_read(tmp_path, monkeypatch):
    folder = big_suite(tmp_path / "data", n=3)
    lines = (folder / "cases.jsonl").read_bytes().splitlines(keepends=True)
    second = len(lines[0])
    items = [(0, 0, len(lines[0]), ahead._digest(lines[0]), "from-the-copy", None),  # taken
             (0, second, len(lines[1]), bytes(16), "rewritten-since", None),  # other bytes: refused
             (0, second + len(lines[1]), len(lines[2]) + 1, ahead._digest(lines[2]), "wrong-length", None)]
    monkeypatch.setattr(ahead, "Ahead", lambda *a, **k: Stub([items]))
    suite = load_suite(folder)
    truth = [case_fingerprint(json.loads(line)) for line in lines]
    assert [c.fingerprint for c in suite] == ["from-the-copy", truth[1], truth[2]]


def test_an_item_come_too_late_for_its_line_is_dropped(tmp_path, monkeypatch):
    folder = big_suite(tmp_path / "data", n=2)
    lines = (folder / "cases.jsonl").read_bytes().splitlines(keepends=True)
    stub = Stub([])
    monkeypatch.setattr(ahead, "Ahead", lambda *a, **k: stub)
    reader = ahead.ReadAhead([folder / "cases.jsonl"], case_fingerprint)
    read = reader.lines(0, folder / "cases.jsonl", [])
    next(read)
    stub.batches = [[(0, 0, len(lines[0]), ahead._digest(lines[0]), "late", None)]]
    next(read)
    assert reader.got == {} and reader.fingerprint(str(folder / "cases.jsonl"), 1) is None


def test_a_load_with_the_copy_is_the_load_without_it_and_the_copy_did_the_work(tmp_path, monkeypatch, may_fork):
    folder = big_suite(tmp_path / "data")
    assert (folder / "cases.jsonl").stat().st_size >= ahead.MIN_BYTES
    monkeypatch.setattr(forked, "ENABLED", False)
    forget_text()
    alone = load_suite(folder)
    monkeypatch.setattr(forked, "ENABLED", True)

    # The loader lets the copy finish before it reads a line, so what the copy does is certain: every
    # line past LEAD has its fingerprint, and its term sets past SLACK.
    real_init = ahead.ReadAhead.__init__

    def init_and_wait(self, *args):
        real_init(self, *args)
        assert self.ahead.pid is not None
        everything(self.ahead, lambda: [self._item(0, -1)])

    monkeypatch.setattr(ahead.ReadAhead, "__init__", init_and_wait)
    computed_here = []
    real_fingerprint = cases.case_fingerprint
    monkeypatch.setattr(cases, "case_fingerprint", lambda raw: computed_here.append(raw["id"]) or real_fingerprint(raw))
    forget_text()
    together = load_suite(folder)
    assert together.cases == alone.cases
    assert [c.fingerprint for c in together] == [c.fingerprint for c in alone]
    case_bytes = (folder / "cases.jsonl").stat().st_size / len(alone)
    assert 0 < len(computed_here) <= ahead.LEAD / case_bytes + 1  # the copy's were taken for the rest
    primed = {t: frozenset(v) for t, v in text._TERM_SETS.items()}
    far = [s.text for c in alone.cases[int(ahead.SLACK / case_bytes) + 1:] for s in c.sources]
    assert far and all(set(primed[t]) == set(text._distinct_terms(t)) for t in far)


def test_a_ctrl_c_while_the_copy_is_forked_or_reaped_leaves_no_child(may_fork, monkeypatch):
    """A KeyboardInterrupt that landed between the fork and recording the child, or inside the wait that
    reaps it, left a live copy blocked on its pipe or a zombie (an adversarial review's finding). Another
    thread is running, as pytest-xdist's is (and a C library's may be): a signal the main thread had
    blocked went to it, and Python raised KeyboardInterrupt in the main thread all the same."""
    import signal
    import threading

    done = threading.Event()
    other = threading.Thread(target=done.wait, daemon=True)
    other.start()
    forks = []
    real_fork, real_waitpid = os.fork, os.waitpid

    def ctrl_c():
        """SIGINT to this process, returning once it has been taken, in whichever thread the kernel chose."""
        taken, told = os.pipe()
        os.set_blocking(told, False)
        before = signal.set_wakeup_fd(told)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            os.read(taken, 1)
        finally:
            signal.set_wakeup_fd(before)
            os.close(taken)
            os.close(told)

    def fork_then_ctrl_c():
        pid = real_fork()
        if pid:
            forks.append(pid)
            ctrl_c()  # the moment the child exists
        return pid

    monkeypatch.setattr(forked.os, "fork", fork_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        forked.Ahead(forever, rows=forked.MIN_ROWS)
    with pytest.raises(ChildProcessError):
        os.waitpid(forks[0], os.WNOHANG)  # killed and reaped
    monkeypatch.setattr(forked.os, "fork", real_fork)

    def ctrl_c_then_wait(pid, options):
        ctrl_c()  # while the child is being reaped
        return real_waitpid(pid, options)

    sent = forked.Ahead(forever, rows=forked.MIN_ROWS)
    child = sent.pid
    monkeypatch.setattr(forked.os, "waitpid", ctrl_c_then_wait)
    with pytest.raises(KeyboardInterrupt):
        sent.close()
    monkeypatch.setattr(forked.os, "waitpid", real_waitpid)
    done.set()
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)


def test_the_copy_never_opens_what_is_not_a_regular_file(tmp_path, monkeypatch):
    """Opening a FIFO blocked the copy until a writer came, or let a waiting writer go on (its data
    swallowed); /dev/zero linked as a case file is one endless line; opening a device can have effects.
    The loader refuses them all; the copy skips them and reads the file after them."""
    folder = big_suite(tmp_path / "data", n=3)
    os.mkfifo(folder / "a-pipe.jsonl")
    (folder / "b-null.jsonl").symlink_to("/dev/null")
    (folder / "c-zero.jsonl").symlink_to("/dev/zero")
    opened = []
    real_open = ahead.os.open
    monkeypatch.setattr(ahead.os, "open", lambda path, *a: opened.append(path) or real_open(path, *a))
    paths = [str(folder / name) for name in ("a-pipe.jsonl", "b-null.jsonl", "c-zero.jsonl", "cases.jsonl")]
    items = [item for batch in ahead._computed(paths, place(-1, 0), case_fingerprint) for item in batch]
    assert opened == [str(folder / "cases.jsonl")]
    assert [item[0] for item in items] == [3, 3, 3]


def test_no_fork_takes_the_last_file_descriptors(tmp_path):
    """With two descriptors left, the copy's pipe and pidfd took them and the loader could not open the
    case file; with one, os.pipe raised out of load_suite."""
    folder = big_suite(tmp_path / "data", n=600)
    script = f"""
import os, resource
from qaeval import forked
from qaeval.data.cases import load_suite
forked.threading.active_count = lambda: 1
alone = load_suite({str(folder)!r})
for spare in range(0, 4):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + spare, hard))
    assert load_suite({str(folder)!r}).cases == alone.cases
print("ok")
"""
    import subprocess

    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
