#!/usr/bin/env python3
"""Compare `qaeval run` at two commits on the same synthetic suite, runs alternated.

    python benchmarks/bench_ab.py 599dc59 HEAD                       # 10,000 cases of 4 KB, process
    python benchmarks/bench_ab.py 599dc59 HEAD --isolation none --pairs 7
    python benchmarks/bench_ab.py HEAD~1 HEAD --cases 2000 --case-kb 0
    python benchmarks/bench_ab.py 8015992 HEAD --pairs 6             # against the code issue 19 was filed on
    python benchmarks/bench_ab.py 4d6ad6f HEAD --case-kb 0 --trials 5 --pairs 3   # issue 48: 10,000 x 5 trials

Issue 19 asked for 10,000 cases of 4 KB under 8 s on 2 cores when they took 20-22 s there: as a ratio to
the code it was filed on (8015992), about 0.38. A slow or fast minute moves that ratio by a few per cent,
where it moves the seconds by a third.

On a shared machine the same code's wall time drifts by a third from one minute to the next, so a
figure from one session says little against one from another. This script checks each commit out into
a temporary worktree (compiled, as a wheel install is), writes one suite (bench_run.py's cases), then
runs `qaeval run --quiet` at each commit in turn, ``--pairs`` times, from a folder outside the
repository. It prints every run's wall time and CPU time (user + system of the run and every process
it started: its workers), then the median of each and the ratio of the second commit's
to the first's. Read the ratio; the seconds are this machine's, now.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_run import write_suite  # noqa: E402  (importable once HERE is on the path)


def worktree(repo: Path, rev: str, into: Path) -> Path:
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "--quiet", str(into), rev], check=True)
    compileall.compile_dir(str(into / "qaeval"), quiet=1)
    return into


def one_run(tree: Path, data: Path, isolation: str, cwd: Path, trials: int = 1) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the run and every process it started)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "qaeval", "run", "--data", str(data), "--quiet"),
            *("--isolation", isolation, "--trials", str(trials)),
        ],
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"qaeval run at {tree} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="the first commit (any git revision)")
    parser.add_argument("after", help="the second commit")
    parser.add_argument("--cases", type=int, default=10_000, help="cases in the synthetic suite")
    parser.add_argument("--case-kb", type=float, default=4, help="about how many KB each case line is")
    parser.add_argument("--isolation", default="process", choices=["process", "none"], help="qaeval run's --isolation")
    parser.add_argument("--pairs", type=int, default=5, help="runs of each commit, alternated")
    parser.add_argument("--trials", type=int, default=1, help="qaeval run's --trials")
    args = parser.parse_args()
    repo = HERE.parent
    with tempfile.TemporaryDirectory(prefix="qaeval-ab-") as tmp:
        base = Path(tmp)
        trees = {}
        try:
            for label, rev in (("before", args.before), ("after", args.after)):
                trees[label] = worktree(repo, rev, base / label)
            data = base / "data"
            data.mkdir()
            write_suite(data, args.cases, args.case_kb)
            runs: dict[str, list[tuple[float, float]]] = {label: [] for label in trees}
            print(
                f"{args.cases} cases of about {args.case_kb:g} KB x {args.trials} trial(s), --isolation {args.isolation}, "
                f"{args.pairs} alternated pair(s)"
            )
            for _ in range(args.pairs):
                for label, tree in trees.items():
                    wall, cpu = one_run(tree, data, args.isolation, base, args.trials)
                    runs[label].append((wall, cpu))
                    print(f"  {label:<6} wall {wall:6.2f} s   cpu {cpu:6.2f} s", flush=True)
            medians = {
                label: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r))
                for label, r in runs.items()
            }
            for label, rev in (("before", args.before), ("after", args.after)):
                wall, cpu = medians[label]
                print(f"median {label:<6} ({rev}): wall {wall:.2f} s, cpu {cpu:.2f} s")
            (bw, bc), (aw, ac) = medians["before"], medians["after"]
            print(f"after / before: wall {aw / bw:.3f}, cpu {ac / bc:.3f}")
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], check=False)


if __name__ == "__main__":
    main()
