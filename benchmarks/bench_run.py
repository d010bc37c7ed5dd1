#!/usr/bin/env python3
"""Time `qaeval run` end to end on synthetic suites of growing size.

    python benchmarks/bench_run.py                  # N = 1000, 2500, 5000, 10000; 5 runs each
    python benchmarks/bench_run.py --sizes 100000 --repeat 3    # 100k cases, the memory target: under 1 GB
    python benchmarks/bench_run.py --sizes 10000 --case-kb 4 --isolation none   # long cases: under 15 s

Each case has 8 passages (one gold, near-miss distractors); a fifth of them must be abstained on and a
tenth are multi-hop. Every run is a fresh `qaeval run` process with the bundled hub and the offline
judge (adapters in worker processes, concurrency 4), so the figure includes interpreter start, imports,
loading, the workers and scoring. Prints the median wall time, the time per 1,000 cases (flat means
linear) and the peak resident memory of the qaeval process (the largest child; run one size at a time
to read it for that size).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MIB_100K = 1024.0  # peak resident memory of a 100,000-case run
TARGET_S_10K_4KB = 15.0  # wall time of 10,000 cases of 4 KB (issue 36; was 8 s with the speed machinery of issue 19)

WORDS = (
    "branch library card loan renewal fine hold printer museum pass garden tutor archive room "
    "visit budget director hours sunday ferry seed studio kit audiobook ebook laptop"
).split()


def filler(rng: random.Random, chars: int) -> str:
    """Sentences of real-sentence length (12 to 25 words) until ``chars`` characters."""
    out: list[str] = []
    while sum(len(s) + 1 for s in out) < chars:
        words = [rng.choice(WORDS) for _ in range(rng.randint(12, 25))]
        out.append(" ".join(words).capitalize() + ".")
    return " ".join(out)


def make_case(i: int, rng: random.Random, pad: int = 0) -> dict:
    topic = rng.sample(WORDS, 3)
    gold_text = f"The {topic[0]} {topic[1]} policy sets {topic[2]} limits at {i % 97} items per month for patrons."
    sources = [
        {
            "id": f"s{j}",
            "text": f"The {rng.choice(WORDS)} {rng.choice(WORDS)} note mentions "
            f"{topic[j % 3]} and {rng.choice(WORDS)} on page {j}. Staff review it every {j + 2} weeks."
            + (" " + filler(rng, pad) if pad else ""),
        }
        for j in range(7)
    ]
    if pad:
        gold_text = filler(rng, pad // 2) + " " + gold_text + " " + filler(rng, pad // 2)
    sources.insert(rng.randrange(8), {"id": "gold", "title": topic[0], "text": gold_text})
    kind = i % 10
    case = {"id": f"bench-{i:06d}", "sources": sources, "split": "frozen" if i % 3 else "living"}
    if kind < 2:
        case.update(
            question=f"What does the zoo charge for {rng.choice(['parking', 'kayaks', 'telescopes'])}?",
            gold_answer=None,
            gold_source_ids=[],
            expected_behavior="unanswerable_must_abstain",
            difficulty="single-hop",
        )
    else:
        case.update(
            question=f"How many {topic[2]} items per month does the {topic[0]} {topic[1]} policy allow?",
            gold_answer=f"{i % 97} items",
            gold_source_ids=["gold"],
            expected_behavior="answer",
            difficulty="multi-hop" if kind == 9 else "single-hop",
        )
        if kind == 9:
            case["checkpoints"] = [{"kind": "cited", "source_id": "gold"}]
    return case


def write_suite(folder: Path, n: int, case_kb: float = 0) -> None:
    """``case_kb``: pad every passage with sentences so a case line is about that many KB (0: short)."""
    rng = random.Random(n)
    pad = max(0, int(case_kb * 1024 / 8) - 230)
    with open(folder / "cases.jsonl", "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps(make_case(i, rng, pad)) + "\n")


def time_run(folder: Path, isolation: str) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "qaeval", "run", "--data", str(folder), "--quiet", "--isolation", isolation],
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"qaeval run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux, max over children so far
    return elapsed, max(peak, before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1000, 2500, 5000, 10000],
        help="suite sizes (cases) to time, one after the other",
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs per size; the median is printed")
    parser.add_argument(
        "--case-kb",
        type=float,
        default=0,
        help="pad passages with real-length sentences so each case is about this many KB",
    )
    parser.add_argument("--isolation", default="process", choices=["process", "none"])
    args = parser.parse_args()
    print(compiled_bytecode())
    print(f"{'cases':>7} {'median s':>9} {'min s':>7} {'s per 1k':>9} {'peak MiB':>9}")
    results = {}
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            write_suite(folder, n, args.case_kb)
            runs = [time_run(folder, args.isolation) for _ in range(args.repeat)]
        times = [t for t, _ in runs]
        med = statistics.median(times)
        results[n] = (med, max(m for _, m in runs))
        print(f"{n:>7} {med:>9.2f} {min(times):>7.2f} {med / n * 1000:>9.3f} {results[n][1]:>9.0f}", flush=True)
    print("(peak MiB is the largest child so far: read it on the largest size)")
    for line in targets(results, args.case_kb):
        print(line)
    print(
        f"this machine's speed now: a fixed pure-Python loop takes {machine_speed():.2f} s (median of 3; on a "
        "shared machine it drifts, so compare runs made beside each other)"
    )


def compiled_bytecode() -> str:
    """Compile qaeval's modules, as installing its wheel does, so no run pays for compiling them. (An
    editable install is not compiled, and with PYTHONDONTWRITEBYTECODE set no run writes the cache: every
    run, and every worker, then compiled qaeval anew, about half a second of each run here.)"""
    import compileall

    import qaeval

    package = Path(qaeval.__file__).resolve().parent
    ok = compileall.compile_dir(str(package), quiet=1)
    return (
        f"qaeval's bytecode is compiled ({package})"
        if ok
        else f"could not compile qaeval's bytecode in {package}: runs may include compiling it"
    )


def machine_speed() -> float:
    """Seconds a fixed pure-Python loop takes: a yardstick for figures measured on a shared machine."""

    def loop() -> float:
        start, total = time.perf_counter(), 0
        for i in range(5_000_000):
            total += i
        return time.perf_counter() - start

    return statistics.median(loop() for _ in range(3))


def targets(results: dict[int, tuple[float, float]], case_kb: float) -> list[str]:
    """Each target the sizes run can speak to, with whether it was met."""
    lines = []
    if 100_000 in results:
        peak = results[100_000][1]
        lines.append(
            f"target: 100,000 cases under {TARGET_MIB_100K:g} MiB peak: {peak:.0f} MiB, "
            f"{'met' if peak < TARGET_MIB_100K else 'MISSED'}"
        )
    if 10_000 in results and case_kb >= 4:
        med = results[10_000][0]
        lines.append(
            f"target: 10,000 cases of 4 KB under {TARGET_S_10K_4KB:g} s: {med:.1f} s, "
            f"{'met' if med < TARGET_S_10K_4KB else 'MISSED'}"
        )
    if not lines:
        lines.append(
            f"targets: under {TARGET_MIB_100K:g} MiB peak at --sizes 100000; under {TARGET_S_10K_4KB:g} s at "
            "--sizes 10000 --case-kb 4 (neither size was run)"
        )
    return lines


if __name__ == "__main__":
    main()
