#!/usr/bin/env python3
"""Where `qaeval run` spends its CPU, phase by phase, on a synthetic suite (bench_run.py's cases).

    python benchmarks/bench_phases.py                                 # 10,000 cases of 4 KB, isolation none
    python benchmarks/bench_phases.py --cases 2000 --case-kb 0 --isolation process --repeat 5

Runs `qaeval run` inside this process (after the imports, which are timed apart) with each phase's
function wrapped, and prints the median CPU seconds of each phase over the runs (process time: every
thread of this process, not the workers of --isolation process) beside the whole run's. CPU time
rather than wall time, because a shared machine stretches wall time; a phase's share is what to read.
The text memos are emptied between runs, so each run pays for its text once, as a fresh process does.

Phases: loading the cases; the system (the adapter's answers, checked at the boundary); the five
deterministic checks; retrieval metrics; the judge (the hardest decoys it weighs citations against,
requests, the calls, checking each verdict); trajectories; per-case outcomes; the scoreboard and slices
with their bootstrap intervals. The garbage collector's time is printed apart as well (it is also inside
the phases it interrupted).

Target (issue 36): 10,000 cases of 4 KB under 15 s of wall time on 2 cores (bench_run.py times real runs).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PHASES = (  # (label, module the caller looks the name up in, name)
    ("load the cases", "qaeval.api", "load_suite"),
    ("the system", "qaeval.commands.pipeline", "run_suite"),
    ("checks", "qaeval.scoring.checks", "check_outputs"),
    ("retrieval", "qaeval.scoring.evaluate", "score_retrieval"),
    ("judge", "qaeval.scoring.evaluate", "score_with_judge"),
    ("trajectories", "qaeval.scoring.evaluate", "score_trajectories"),
    ("per-case outcomes", "qaeval.scoring.evaluate", "case_outcomes"),
    ("scoreboard", "qaeval.scoring.evaluate", "scoreboard_and_slices"),
)


def instrument(spent: dict[str, float]) -> None:
    for label, path, name in PHASES:
        owner = importlib.import_module(path)
        original: Callable[..., Any] = getattr(owner, name)

        @functools.wraps(original)
        def timed(*args: Any, _f: Callable[..., Any] = original, _label: str = label, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return _f(*args, **kwargs)
            finally:
                spent[_label] = spent.get(_label, 0.0) + time.process_time() - start

        setattr(owner, name, timed)


def time_collections(spent: dict[str, float]) -> None:
    """Add the garbage collector's own time (every generation) to ``spent["garbage collector"]``."""
    import gc

    started: list[float] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.process_time()]
        elif started:
            spent["garbage collector"] = spent.get("garbage collector", 0.0) + time.process_time() - started[0]

    gc.callbacks.append(callback)


def forget_text() -> None:
    from qaeval.core import text

    for memo in (text._NORMAL, text._TERM_SETS):
        memo.clear()
        memo.chars = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--case-kb", type=float, default=4)
    parser.add_argument("--isolation", default="none", choices=["process", "none"])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    start = time.process_time()
    from qaeval.cli import main as qaeval_main

    imports = time.process_time() - start
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        from bench_run import write_suite

        write_suite(Path(tmp), args.cases, args.case_kb)
        spent: dict[str, float] = {}
        instrument(spent)
        time_collections(spent)
        for _ in range(args.repeat):
            forget_text()
            spent.clear()
            start = time.process_time()
            with contextlib.redirect_stdout(io.StringIO()):  # the scoreboard it prints
                code = qaeval_main(["run", "--data", tmp, "--quiet", "--isolation", args.isolation])
            spent["whole run"] = time.process_time() - start
            if code != 0:
                sys.exit(f"qaeval run exited {code}")
            runs.append(dict(spent))
    print(
        f"\n{args.cases} cases of about {args.case_kb:g} KB, isolation {args.isolation}, median of {args.repeat} "
        f"run(s), CPU seconds of this process"
    )
    print(f"{'imports (once)':<22} {imports:>7.2f}")
    whole = statistics.median(r["whole run"] for r in runs)
    for label in [label for label, _, _ in PHASES] + ["garbage collector"]:
        value = statistics.median(r.get(label, 0.0) for r in runs)
        print(f"{label:<22} {value:>7.2f}  {value / whole:>5.0%}")
    print(f"{'whole run':<22} {whole:>7.2f}  (the rest is the record, the notes and printing)")
    if (args.cases, args.case_kb) == (10_000, 4):
        print(
            f"target: under 15 s of wall time end to end (imports included): "
            f"{'met' if imports + whole < 8 else 'not met'} in CPU time here ({imports + whole:.1f} s)"
        )
    else:
        print("(the target, under 15 s end to end, is for 10,000 cases of 4 KB: the defaults)")


if __name__ == "__main__":
    main()
