#!/usr/bin/env python3
"""A slow system and a slow judge: how much of their time a run overlaps, what a run costs at no latency,
and what resuming an interrupted run asks for again.

    python benchmarks/bench_overlap.py                   # 200 cases, system 200 ms, judge 200 ms, 8 + 8; 3 runs
    python benchmarks/bench_overlap.py --large           # also 1,000 cases, system 1 s, judge 2 s, 16 + 32 (minutes)
    python benchmarks/bench_overlap.py --resume-only     # 1,000 cases interrupted at about half, then resumed
    python benchmarks/bench_overlap.py --custom-only     # a custom judge in its own process and a slow check

Each run is a fresh ``qaeval run`` process: the system is benchmarks/bench_boundary.py's sleepy adapter in
worker processes, the judge is ``qaeval.judges.openai`` against the package's fake server
(``qaeval.judges.fake_server``) on 127.0.0.1 with the given latency, its cache off. The fixed cost is the
same command at 0 ms on both sides. Prints the median wall time, the fixed cost, and (wall - fixed) as a
multiple of max(system-bound, judge-bound): cases x system latency / concurrency against judged cases x
judge latency / judge concurrency (phases one after the other would give their sum).

Resume: a 1,000-case run (system 20 ms, judge 20 ms) with ``--save``, sent SIGINT once its journal holds
about half the outputs, then run again with ``--resume``; the system's calls are counted by the adapter
(one line each in a file), and the resumed scoreboard is compared with an uninterrupted run's.

Custom (``--custom-only``, also run by default): the same 200 cases and system, with a custom judge in its
own process (``make_custom_judge`` below: 200 ms a request, 8 at once within each call, as a team's own
model wrapper would) and a registered check that takes 20 ms a case (``slow_check``). The bound is then
the largest of the system's, the judge's (judged x 200 ms / 8) and the checks' (cases x 20 ms); one
after the other they would add up.

Targets (issue 38): (wall - fixed) within 1.10x of the bound; fixed cost under 2 s for 200 cases.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def write_cases(folder: Path, n: int) -> None:
    from bench_run import write_suite

    folder.mkdir(parents=True, exist_ok=True)
    write_suite(folder, n, 0)


def judged(folder: Path) -> int:
    """How many cases the judge grades: the answerable ones (the sleepy adapter answers every case)."""
    return sum(1 for line in (folder / "cases.jsonl").read_text().splitlines() if line.strip())


def run(
    folder: Path,
    url: str,
    system: float,
    concurrency: int,
    judge_concurrency: int,
    extra: list[str] | None = None,
    env: dict[str, str] | None = None,
    judge: list[str] | None = None,
) -> float:
    env = {
        **os.environ,
        "QAEVAL_PROGRESS": "0",
        "BENCH_LATENCY": str(system),
        "OPENAI_BASE_URL": url,
        "QAEVAL_JUDGE_CACHE": "off",
        "PYTHONPATH": str(HERE),
        **(env or {}),
    }
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "qaeval",
            "run",
            "--data",
            str(folder),
            "--adapter",
            "bench_boundary:make_sleepy",
            *(judge or ["--judge", "qaeval.judges.openai:make_judge", "--judge-model", "fake"]),
            "--concurrency",
            str(concurrency),
            "--judge-concurrency",
            str(judge_concurrency),
            "--quiet",
            *(extra or []),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder.parent,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"qaeval run exited {done.returncode}: {done.stderr[-2000:]}")
    return wall


def overlap(cases: int, system: float, judge: float, concurrency: int, judge_concurrency: int, repeat: int) -> None:
    from qaeval.judges.fake_server import FakeJudgeServer

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "cases"
        write_cases(folder, cases)
        with FakeJudgeServer(latency=0.0) as fast:
            fixed = statistics.median(run(folder, fast.url, 0.0, concurrency, judge_concurrency) for _ in range(repeat))
        with FakeJudgeServer(latency=judge) as slow:
            walls = [run(folder, slow.url, system, concurrency, judge_concurrency) for _ in range(repeat)]
        wall = statistics.median(walls)
        system_bound = cases * system / concurrency
        judge_bound = judged(folder) * judge / judge_concurrency
        bound = max(system_bound, judge_bound)
        print(
            f"{cases} cases, system {system * 1000:.0f} ms x {concurrency}, judge {judge * 1000:.0f} ms x "
            f"{judge_concurrency}: wall {wall:.2f} s (runs {', '.join(f'{w:.2f}' for w in walls)}), fixed {fixed:.2f} s, "
            f"bound {bound:.2f} s (system {system_bound:.2f}, judge {judge_bound:.2f}; phased {system_bound + judge_bound:.2f})"
            f" -> (wall - fixed) / bound = {(wall - fixed) / bound:.3f}",
            flush=True,
        )


CUSTOM_JUDGE_S = 0.2  # a custom judge's time per request
CUSTOM_CHECK_S = 0.02  # a registered check's time per case
CUSTOM_IN_CALL = 8  # requests the custom judge works on at once within one call


class SlowCustomJudge:
    """The offline judge's verdicts, each taking BENCH_JUDGE_LATENCY seconds, CUSTOM_IN_CALL at a time."""

    def __init__(self) -> None:
        from qaeval.judges.offline import OfflineJudge

        self.inner = OfflineJudge()
        self.config = self.inner.config
        self.latency = float(os.environ.get("BENCH_JUDGE_LATENCY", "0"))

    def judge(self, requests):
        from concurrent.futures import ThreadPoolExecutor

        def one(req):
            time.sleep(self.latency)  # a model call
            return self.inner.judge([req])[0]

        with ThreadPoolExecutor(CUSTOM_IN_CALL) as pool:
            return list(pool.map(one, requests))


def make_custom_judge():
    return SlowCustomJudge()


def slow_check(case, output, passages):
    """A registered check that takes BENCH_CHECK_LATENCY seconds (an entailment model, say)."""
    time.sleep(float(os.environ.get("BENCH_CHECK_LATENCY", "0")))
    return True, "checked"


def custom(cases: int, system: float, repeat: int) -> None:
    from qaeval.judges.fake_server import FakeJudgeServer

    args = ["--judge", "bench_overlap:make_custom_judge", "--check", "bench_overlap:slow_check"]
    slow = {"BENCH_JUDGE_LATENCY": str(CUSTOM_JUDGE_S), "BENCH_CHECK_LATENCY": str(CUSTOM_CHECK_S)}
    with tempfile.TemporaryDirectory() as tmp, FakeJudgeServer(latency=0.0) as unused:
        folder = Path(tmp) / "cases"
        write_cases(folder, cases)
        fixed = statistics.median(run(folder, unused.url, 0.0, 8, 8, judge=args) for _ in range(repeat))
        walls = [run(folder, unused.url, system, 8, 8, judge=args, env=slow) for _ in range(repeat)]
        judge_bound = judged(folder) * CUSTOM_JUDGE_S / CUSTOM_IN_CALL
    wall = statistics.median(walls)
    system_bound = cases * system / 8
    checks_bound = cases * CUSTOM_CHECK_S
    bound = max(system_bound, judge_bound, checks_bound)
    print(
        f"{cases} cases, system {system * 1000:.0f} ms x 8, custom judge {CUSTOM_JUDGE_S * 1000:.0f} ms x "
        f"{CUSTOM_IN_CALL} in its process, a check of {CUSTOM_CHECK_S * 1000:.0f} ms: wall {wall:.2f} s (runs "
        f"{', '.join(f'{w:.2f}' for w in walls)}), fixed {fixed:.2f} s, bound {bound:.2f} s (system "
        f"{system_bound:.2f}, judge {judge_bound:.2f}, checks {checks_bound:.2f}; phased "
        f"{system_bound + judge_bound + checks_bound:.2f}) -> (wall - fixed) / bound = {(wall - fixed) / bound:.3f}",
        flush=True,
    )


def resume(cases: int = 1000) -> None:
    from qaeval.judges.fake_server import FakeJudgeServer

    with tempfile.TemporaryDirectory() as tmp, FakeJudgeServer(latency=0.02) as server:
        folder = Path(tmp) / "cases"
        write_cases(folder, cases)
        counted = Path(tmp) / "calls"
        env = {
            **os.environ,
            "QAEVAL_PROGRESS": "0",
            "BENCH_LATENCY": "0.02",
            "OPENAI_BASE_URL": server.url,
            "QAEVAL_JUDGE_CACHE": "off",
            "PYTHONPATH": str(HERE),
            "BENCH_CALLS": str(counted),
        }
        args = [
            sys.executable,
            "-m",
            "qaeval",
            "run",
            "--data",
            str(folder),
            "--adapter",
            "bench_overlap:make_counted",
            "--judge",
            "qaeval.judges.openai:make_judge",
            "--judge-model",
            "fake",
            "--concurrency",
            "8",
            "--save",
            str(Path(tmp) / "r.json"),
            "--quiet",
        ]
        journal = Path(tmp) / "r.json.journal"
        proc = subprocess.Popen(args, env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while proc.poll() is None:  # a benchmark, not a test: it watches the journal grow
            outputs = journal.read_text().count('"kind": "output"') if journal.exists() else 0
            if outputs >= cases // 2:
                proc.send_signal(signal.SIGINT)
                break
            time.sleep(0.05)
        proc.wait(timeout=120)
        if not journal.exists():
            sys.exit(f"the interrupted run (exit {proc.returncode}) left no journal: {proc.stderr.read()[-2000:]}")
        first = len(counted.read_text().splitlines())
        kept = journal.read_text().count('"kind": "output"')
        done = subprocess.run(args + ["--resume"], env=env, cwd=tmp, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"resume exited {done.returncode}: {done.stderr[-2000:]}")
        second = len(counted.read_text().splitlines()) - first
        resumed = json.loads((Path(tmp) / "r.json").read_text())["scoreboard"]
        subprocess.run(args[:-3] + ["--save", str(Path(tmp) / "whole.json"), "--quiet"], env=env, cwd=tmp, check=True)
        whole = json.loads((Path(tmp) / "whole.json").read_text())["scoreboard"]
        same = [(r["metric"], r["value"], r["n"]) for r in resumed] == [
            (r["metric"], r["value"], r["n"]) for r in whole
        ]
        print(
            f"resume: interrupted with exit {proc.returncode} after {first} system calls, {kept} outputs journaled; "
            f"the resumed run asked for {second} ({cases} - {kept} = {cases - kept}); scoreboard equal to an "
            f"uninterrupted run's: {same}",
            flush=True,
        )


class Counted:
    """bench_boundary's sleepy adapter, writing one line per call to BENCH_CALLS."""

    def __init__(self) -> None:
        from bench_boundary import make_sleepy

        self.inner = make_sleepy()

    def answer(self, case):
        with open(os.environ["BENCH_CALLS"], "a") as f:
            f.write("x\n")
        return self.inner.answer(case)


def make_counted():
    return Counted()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--large", action="store_true")
    parser.add_argument("--resume-only", action="store_true")
    parser.add_argument("--custom-only", action="store_true")
    args = parser.parse_args()
    if args.custom_only:
        custom(200, 0.2, args.repeat)
        return
    if not args.resume_only:
        overlap(200, 0.2, 0.2, 8, 8, args.repeat)
        custom(200, 0.2, args.repeat)
        if args.large:
            overlap(1000, 1.0, 2.0, 16, 32, 1)
    resume()
    print("targets: (wall - fixed) / bound <= 1.10; fixed cost under 2 s for 200 cases")


if __name__ == "__main__":
    main()
