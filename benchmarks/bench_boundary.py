#!/usr/bin/env python3
"""The process boundary: wall time against a slow system at several concurrencies, and the harness's own
cost per case.

    python benchmarks/bench_boundary.py                    # 200 cases x 200 ms at concurrency 1, 4, 8, 16; 3 runs each
    python benchmarks/bench_boundary.py --concurrency 8 --repeat 5
    python benchmarks/bench_boundary.py --overhead-only

The slow adapter sleeps ``--latency`` seconds per case and answers like a careful system; the ideal wall
time is cases x latency / concurrency. Only the adapter phase is timed (``run_suite``: starting the
workers, every call, collecting the results), not loading or scoring. The overhead figure times 2,000
cases against an adapter that answers at once, in worker processes and in-process (``isolation="none"``),
and divides by the number of cases.

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

    def answer(self, case):  # noqa: ANN001
        from qaeval import Citation, SUTOutput

        time.sleep(self.latency)
        best = case.sources[0]
        return SUTOutput(answer=best.text, citations=[Citation(best.id, best.text)], retrieved_ids=[best.id],
                         model_was_called=True, prompt_to_model=f"{case.question}\n{best.text}")


def make_sleepy():  # noqa: ANN201
    import os

    return Sleepy(float(os.environ.get("BENCH_LATENCY", "0.2")))


def make_instant():  # noqa: ANN201
    return Sleepy(0.0)


def suite_of(n: int, folder: Path):  # noqa: ANN201
    from bench_run import write_suite

    from qaeval import load_suite

    folder.mkdir(parents=True, exist_ok=True)
    write_suite(folder, n)
    return load_suite(folder)


def timed(suite, adapter: str, **options) -> float:  # noqa: ANN001
    from qaeval.system.pool import run_suite

    start = time.perf_counter()
    frame = run_suite(suite, adapter, show_progress=False, **options)
    elapsed = time.perf_counter() - start
    assert frame["error"].isna().all(), frame["error"].dropna().head()
    return elapsed


def main() -> None:
    import os

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--overhead-only", action="store_true")
    args = parser.parse_args()
    os.environ["BENCH_LATENCY"] = str(args.latency)
    with tempfile.TemporaryDirectory() as tmp:
        if not args.overhead_only:
            suite = suite_of(args.cases, Path(tmp) / "slow")
            print(f"{args.cases} cases, {args.latency * 1000:.0f} ms each")
            print(f"{'concurrency':>11} {'ideal s':>8} {'median s':>9} {'min s':>7} {'x ideal':>8}")
            for c in args.concurrency:
                times = [timed(suite, "bench_boundary:make_sleepy", concurrency=c, timeout=60) for _ in range(args.repeat)]
                ideal = args.cases * args.latency / c
                med = statistics.median(times)
                print(f"{c:>11} {ideal:>8.2f} {med:>9.2f} {min(times):>7.2f} {med / ideal:>8.2f}"
                      f"  {'met' if med <= TARGET * ideal else 'MISSED'}", flush=True)
            print(f"target: within {TARGET}x of ideal at every concurrency (the judge's bar, bench_judge.py)")
        suite = suite_of(2000, Path(tmp) / "fast")
        print("\nharness overhead per case at 0 ms latency (2,000 cases)")
        for isolation, concurrency in (("process", 1), ("process", 4), ("none", 1)):
            times = [timed(suite, "bench_boundary:make_instant", isolation=isolation, concurrency=concurrency)
                     for _ in range(args.repeat)]
            med = statistics.median(times)
            print(f"  isolation {isolation:<8} concurrency {concurrency:>2}: {med:6.2f} s, "
                  f"{med / 2000 * 1000:.3f} ms per case (median of {args.repeat})", flush=True)


if __name__ == "__main__":
    main()
