#!/usr/bin/env python3
"""The process boundary: wall time against a slow system at several concurrencies, and the harness's own
cost per case.

    python benchmarks/bench_boundary.py                    # 200 cases x 200 ms at concurrency 1, 4, 8, 16; 3 runs each
    python benchmarks/bench_boundary.py --concurrency 8 --repeat 5
    python benchmarks/bench_boundary.py --overhead-only
    python benchmarks/bench_boundary.py --wire-only        # one case frame: marshal against JSON

The slow adapter sleeps ``--latency`` seconds per case and answers like a careful system; the ideal wall
time is cases x latency / concurrency. Only the adapter phase is timed (``run_suite``: starting the
workers, every call, collecting the results), not loading or scoring. The overhead figure times 2,000
cases against an adapter that answers at once, in worker processes and in-process (``isolation="none"``),
and divides by the number of cases.

The wire figure times the frame that hands a worker one case of about 4 KB (bench_run.py's ``--case-kb 4``, 8 passages),
written and read back as the harness and the worker do (``process.encode_case``, ``process.read_message``'s
decoding) against the JSON frame it replaced, in microseconds per case (median of 7 rounds).

Target: the median within 1.3x of the ideal at every concurrency (the same bar as the judge's).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = 1.3  # median wall time within 1.3x of cases x latency / concurrency
sys.path.insert(0, str(HERE))


class Sleepy:
    def __init__(self, latency: float) -> None:
        self.latency = latency

    def answer(self, case):
        from qaeval import Citation, SUTOutput

        time.sleep(self.latency)
        best = case.sources[0]
        return SUTOutput(
            answer=best.text,
            citations=[Citation(best.id, best.text)],
            retrieved_ids=[best.id],
            model_was_called=True,
            prompt_to_model=f"{case.question}\n{best.text}",
        )


def make_sleepy():
    import os

    return Sleepy(float(os.environ.get("BENCH_LATENCY", "0.2")))


def make_instant():
    return Sleepy(0.0)


def suite_of(n: int, folder: Path):
    from bench_run import write_suite

    from qaeval import load_suite

    folder.mkdir(parents=True, exist_ok=True)
    write_suite(folder, n)
    return load_suite(folder)


def timed(suite, adapter: str, **options) -> float:
    from qaeval.core.settings import RunSettings
    from qaeval.system.pool import run_suite

    start = time.perf_counter()
    frame = run_suite(suite, adapter, RunSettings(show_progress=False, **options))
    elapsed = time.perf_counter() - start
    assert frame["error"].isna().all(), frame["error"].dropna().head()
    return elapsed


def wire(rounds: int = 7, cases: int = 2000) -> None:
    import json
    import marshal
    import random

    from bench_run import make_case

    from qaeval.data.cases import build_suite
    from qaeval.system.contract import make_payload
    from qaeval.worker.messages import HEADER, encode, encode_case

    rng = random.Random(1)
    suite = build_suite(((f"bench:{i}", i, make_case(i, rng, pad=4 * 1024 // 8 - 230)) for i in range(cases)), "bench")
    payloads = [make_payload(case) for case in suite.cases]
    ways = {
        "json": (lambda p: encode({"case": p}), lambda b: json.loads(b[HEADER.size :])),
        "marshal": (encode_case, lambda b: marshal.loads(b[HEADER.size + 1 :])),
    }
    spent: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for name, (write, read) in ways.items():
            start = time.process_time()
            frames = [write(p) for p in payloads]
            middle = time.process_time()
            for frame in frames:
                read(frame)
            spent.setdefault((name, "write"), []).append(middle - start)
            spent.setdefault((name, "read"), []).append(time.process_time() - middle)
    size = statistics.mean(len(encode({"case": p})) for p in payloads)
    print(
        f"one case's frame ({size / 1024:.1f} KB as JSON), microseconds per case, median of {rounds} rounds of {cases}:"
    )
    for name in ways:
        write, read = (statistics.median(spent[(name, part)]) / cases * 1e6 for part in ("write", "read"))
        print(f"  {name:<8} written {write:6.1f}  read {read:6.1f}")


def main() -> None:
    import os

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--overhead-only", action="store_true")
    parser.add_argument("--wire-only", action="store_true")
    args = parser.parse_args()
    wire()
    if args.wire_only:
        return
    os.environ["BENCH_LATENCY"] = str(args.latency)
    with tempfile.TemporaryDirectory() as tmp:
        if not args.overhead_only:
            suite = suite_of(args.cases, Path(tmp) / "slow")
            print(f"{args.cases} cases, {args.latency * 1000:.0f} ms each")
            print(f"{'concurrency':>11} {'ideal s':>8} {'median s':>9} {'min s':>7} {'x ideal':>8}")
            for c in args.concurrency:
                times = [
                    timed(suite, "bench_boundary:make_sleepy", concurrency=c, timeout=60) for _ in range(args.repeat)
                ]
                ideal = args.cases * args.latency / c
                med = statistics.median(times)
                print(
                    f"{c:>11} {ideal:>8.2f} {med:>9.2f} {min(times):>7.2f} {med / ideal:>8.2f}"
                    f"  {'met' if med <= TARGET * ideal else 'MISSED'}",
                    flush=True,
                )
            print(f"target: within {TARGET}x of ideal at every concurrency (the judge's bar, bench_judge.py)")
        suite = suite_of(2000, Path(tmp) / "fast")
        print("\nharness overhead per case at 0 ms latency (2,000 cases)")
        for isolation, concurrency in (("process", 1), ("process", 4), ("none", 1)):
            times = [
                timed(suite, "bench_boundary:make_instant", isolation=isolation, concurrency=concurrency)
                for _ in range(args.repeat)
            ]
            med = statistics.median(times)
            print(
                f"  isolation {isolation:<8} concurrency {concurrency:>2}: {med:6.2f} s, "
                f"{med / 2000 * 1000:.3f} ms per case (median of {args.repeat})",
                flush=True,
            )


if __name__ == "__main__":
    main()
