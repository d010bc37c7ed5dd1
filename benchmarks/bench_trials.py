#!/usr/bin/env python3
"""How often the gate blocks a nondeterministic system that did not change, and how often it catches one that
did, at K = 1, 3, 5 and 10 trials per case.

    python benchmarks/bench_trials.py                      # 100 cases, 40 gate runs per K and system
    python benchmarks/bench_trials.py --trials 5 --runs 60
    python benchmarks/bench_trials.py --table              # the README's table: computed, nothing is run
    python benchmarks/bench_trials.py --trials 5 --runs 48 --adaptive-baseline   # fixed-K gates, adaptive baseline

The system is ``qaeval.system.flaky``: the reference system with 3% wrongful refusals and 10% of answers
quoting the second-ranked passage, varying per call (``make_adapter``), and the same with 15% wrongful
refusals (``make_regressed``). The cases are bench_run.py's synthetic suite (every one answerable or
abstainable by the reference system). For each K: one baseline of ``make_adapter`` with K trials, then
``--runs`` gates of each system with K trials against it (in-process, the offline judge). Prints the share
blocked for each, and the system and judge calls of one gate run.

``--table`` prints, for N cases and a per-case pass probability p, the chance that an unchanged system
trips the broken-case rule (every baseline trial passes, every current trial fails: sum over cases of
p^K (1 - p)^K), and the chance that a case whose pass probability drops from p to q is flagged broken
(p^K (1 - q)^K): what K buys without running anything.

Targets (issue 37): unchanged at K=5 blocked in at most 5% of at least 40 runs; regressed blocked in at
least 95%.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def table() -> None:
    print("chance that an unchanged system of N cases, each passing with probability p, trips the broken-case rule")
    print(f"{'N':>5} {'p':>5} " + " ".join(f"{'K=' + str(k):>9}" for k in (1, 3, 5, 10)))
    for n in (50, 100, 500):
        for p in (0.5, 0.9, 0.97):
            cells = [1 - (1 - p**k * (1 - p) ** k) ** n for k in (1, 3, 5, 10)]
            print(f"{n:>5} {p:>5} " + " ".join(f"{c:>9.4f}" for c in cells))
    print()
    print("chance that one case whose pass probability drops from p to q is caught as broken")
    print(f"{'p':>5} {'q':>5} " + " ".join(f"{'K=' + str(k):>9}" for k in (1, 3, 5, 10)))
    for p, q in ((1.0, 0.0), (0.97, 0.1), (0.97, 0.5), (0.9, 0.3)):
        print(f"{p:>5} {q:>5} " + " ".join(f"{p**k * (1 - q) ** k:>9.4f}" for k in (1, 3, 5, 10)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--runs", type=int, default=40, help="gate runs per K and system")
    parser.add_argument("--trials", type=int, nargs="*", default=[1, 3, 5, 10])
    parser.add_argument("--table", action="store_true")
    parser.add_argument("--adaptive", action="store_true", help="also gate with --adaptive against the same baseline")
    parser.add_argument(
        "--adaptive-baseline", action="store_true", help="write each baseline with --adaptive (the gates: fixed K)"
    )
    args = parser.parse_args()
    if args.table:
        table()
        return
    import os

    os.environ["QAEVAL_PROGRESS"] = "0"
    from bench_run import write_suite

    from qaeval import api

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "cases"
        data.mkdir()
        write_suite(data, args.cases, 0)
        common = dict(isolation="none", concurrency=4)
        for k in args.trials:
            base = str(Path(tmp) / f"baseline-{k}.json")
            api.baseline(
                str(data),
                out=base,
                adapter="qaeval.system.flaky:make_adapter",
                trials=k,
                allow_failing=True,
                adaptive=args.adaptive_baseline and k > 1,
                **common,
            )
            for adaptive in [False, True] if args.adaptive and k > 1 else [False]:
                blocked, calls = {}, {}
                start = time.perf_counter()
                for name in ("make_adapter", "make_regressed"):
                    count = 0
                    for _ in range(args.runs):
                        result = api.gate(
                            str(data),
                            baseline=base,
                            adapter=f"qaeval.system.flaky:{name}",
                            trials=k,
                            adaptive=adaptive,
                            **common,
                        )
                        count += not result.ok
                        calls.setdefault(name, []).append(int(result.run.per_case["trials"].sum()))
                    blocked[name] = count
                spent = (time.perf_counter() - start) / (2 * args.runs)
                usage = result.run.judge_usage
                label = (
                    f"K={k}{' adaptive' if adaptive else ''}{' (adaptive baseline)' if args.adaptive_baseline else ''}"
                )
                print(
                    f"{label:<13} unchanged blocked {blocked['make_adapter']:>3}/{args.runs} "
                    f"({blocked['make_adapter'] / args.runs:6.1%})   regressed blocked {blocked['make_regressed']:>3}/"
                    f"{args.runs} ({blocked['make_regressed'] / args.runs:6.1%})   one gate: median "
                    f"{statistics.median(calls['make_adapter']):.0f} (unchanged) and "
                    f"{statistics.median(calls['make_regressed']):.0f} (regressed) system calls of {args.cases * k}, "
                    f"{usage['calls'] - usage['cached']} judge calls, {spent:.2f} s",
                    flush=True,
                )
    print("targets: at K=5 unchanged blocked <= 5%, regressed blocked >= 95%")


if __name__ == "__main__":
    main()
