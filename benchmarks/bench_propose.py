#!/usr/bin/env python3
"""Proposed cases at scale: from a large monitor record, and from a large corpus with a slow generator.

    python benchmarks/bench_propose.py                 # both: 1,000,000 log rows; 100,000 passages
    python benchmarks/bench_propose.py --rows 100000 --passages 20000 --repeat 3
    python benchmarks/bench_propose.py --only traffic   # or corpus

1. **Traffic.** A log of ``--rows`` rows (2% cite a passage they do not hold, 1% abstain, 1.4% make a
   claim their passage does not; 3 systems over 14 days) is scored once by ``qaeval monitor --by system --window 1D --sample
   2000 --save`` (not timed: it is the input). Then ``qaeval propose --from-monitor RECORD --n 50`` runs
   ``--repeat`` times, each in a fresh process: its wall time and peak resident memory. The same is done
   on a record a tenth the size, so the two peaks show whether memory follows the log or the sample.
   (Target: 50 candidates in under 10 s on 2 cores, memory bounded by the sample.)
2. **Corpus.** A corpus of ``--passages`` passages; the fake server generates at ``--latency`` seconds a
   call with ``--concurrency`` in flight, and every 10th reply is malformed (so some calls are
   dropped and the run must make them up). ``qa.propose(from_corpus=..., n=--n)`` runs ``--repeat``
   times with the reply cache off; the first run also builds the corpus's retrieval index, which later
   runs find in the cache folder, so it is reported apart. The figure: wall time over the ideal,
   calls x latency / concurrency (target: within 1.2x), with the drop counts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ("north", "south", "east", "west", "river", "hill", "harbour")


def log_row(i: int) -> dict:
    w, n = WORDS[i % 7], i % 13 + 2
    passages = [
        {
            "id": f"p{j}",
            "text": f"The {WORDS[(i + j) % 7]} branch lends {(i + j) % 13 + 2} items per card "
            "and renews them twice unless another patron holds them.",
        }
        for j in range(4)
    ]
    question = f"How many items does the {w} branch lend?"
    answer = f"The {w} branch lends {n} items per card."
    row = {
        "id": f"req-{i:07d}",
        "question": question,
        "passages": passages,
        "answer": answer,
        "citations": [{"source_id": "p9" if i % 50 == 0 else "p0", "claim": answer}],
        "model_was_called": True,
        "prompt": f"Question: {question}\nPassages:\n" + "\n".join(p["text"] for p in passages),
        "timestamp": f"2026-03-{1 + i % 14:02d}T{i % 24:02d}:00:00Z",
        "system": f"sys-{i % 3}",
    }
    if i % 100 == 1:
        row.update(answer=None, citations=[], abstained=True)
    elif i % 70 == 3:  # a claim its passage does not make: the judge, where it reads it, scores it unfaithful
        claim = "Members may borrow unlimited e-books on weekends."
        row.update(answer=claim, citations=[{"source_id": "p0", "claim": claim}])
    return row


def write_log(path: Path, n: int) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, n, 10_000):
            f.write("".join(json.dumps(log_row(i)) + "\n" for i in range(start, min(n, start + 10_000))))
    return path


def run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode not in (0, 3):
        sys.exit(f"{' '.join(command[:4])} failed ({done.returncode}): {done.stderr[-2000:]}")


def peak_of(command: list[str]) -> tuple[float, float, str]:
    """(wall seconds, the process's own peak RSS in MiB, stdout) of ``qaeval COMMAND`` in a fresh process."""
    wrapper = [
        sys.executable,
        "-c",
        "import resource, runpy, sys; sys.argv = sys.argv[1:]; "
        "import atexit; atexit.register(lambda: print('PEAK', resource.getrusage(resource.RUSAGE_SELF)"
        ".ru_maxrss, file=sys.stderr)); runpy.run_module('qaeval', run_name='__main__')",
        "qaeval",
        *command,
    ]
    start = time.perf_counter()
    done = subprocess.run(wrapper, capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak = next(
        (int(line.split()[1]) / 1024 for line in done.stderr.splitlines() if line.startswith("PEAK")), float("nan")
    )
    if done.returncode != 0:
        sys.exit(f"qaeval {' '.join(command[:2])} failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall, peak, done.stdout


def traffic(tmp: Path, rows: int, repeat: int) -> None:
    for size in (rows // 10, rows):
        log = write_log(tmp / f"log-{size}.jsonl", size)
        record = tmp / f"mon-{size}.json"
        start = time.perf_counter()
        run(
            [
                sys.executable,
                "-m",
                "qaeval",
                "monitor",
                "--logs",
                str(log),
                "--by",
                "system",
                "--window",
                "1D",
                "--sample",
                "2000",
                "--save",
                str(record),
                "--quiet",
            ]
        )
        made = time.perf_counter() - start
        walls, peaks = [], []
        for k in range(repeat):
            wall, peak, out = peak_of(
                ["propose", "--from-monitor", str(record), "--out", str(tmp / f"s{k}.csv"), "--n", "50"]
            )
            walls.append(wall)
            peaks.append(peak)
        print(
            f"traffic, {size:,} log rows (record {record.stat().st_size / 2**20:,.0f} MiB, made in {made:,.0f} s): "
            f"propose --n 50 median {statistics.median(walls):.2f} s wall ({', '.join(f'{w:.2f}' for w in walls)}), "
            f"peak RSS median {statistics.median(peaks):,.0f} MiB"
        )
        print("  " + out.splitlines()[1].strip())


def corpus(tmp: Path, passages: int, n: int, latency: float, concurrency: int, repeat: int) -> None:
    from qaeval import api
    from qaeval.judges.fake_server import FakeJudgeServer

    folder = tmp / "corpus"
    folder.mkdir()
    topics = ("harbour", "library", "museum", "railway", "garden", "bridge", "market", "theatre", "school", "stadium")
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for i in range(passages):
            t = topics[i % 10]
            f.write(
                json.dumps(
                    {
                        "id": f"p{i:06d}",
                        "title": f"{t} {i // 10}",
                        "text": f"The {t} of district {i // 10} opened in {1800 + i % 220} after a subscription raised "
                        f"{1000 + i % 9973} pounds. Its first keeper served {3 + i % 30} years and wrote a history of the "
                        f"{t} numbered {i}.",
                    }
                )
                + "\n"
            )
    os.environ.update(
        QAEVAL_JUDGE_MODEL="fake",
        QAEVAL_CACHE_DIR=str(tmp / "cache"),
        QAEVAL_PROGRESS="0",
        QAEVAL_JUDGE_CONCURRENCY=str(concurrency),
    )
    rows = []
    with FakeJudgeServer(latency=latency, generation_faults={"malformed": 10}) as server:
        os.environ["OPENAI_BASE_URL"] = server.url
        for k in range(repeat + 1):
            start = time.perf_counter()
            p = api.propose(from_corpus=str(folder), sheet=str(tmp / f"c{k}.csv"), n=n, generator_cache=False, seed=k)
            wall = time.perf_counter() - start
            ideal = p.calls * latency / concurrency
            rows.append((wall, ideal, p))
            label = "first (builds the index)" if k == 0 else f"run {k}"
            print(
                f"corpus, {passages:,} passages, {label}: {len(p.candidates)} verified from {p.calls} calls in "
                f"{wall:.2f} s ({p.generation_seconds:.2f} s from the first request to the last reply); ideal "
                f"{ideal:.2f} s; ratio {wall / ideal:.2f} whole, {p.generation_seconds / ideal:.2f} generating; "
                f"dropped {p.dropped}"
            )
    ratios = [w / i for w, i, _ in rows[1:]]
    phase = [p.generation_seconds / i for _, i, p in rows[1:]]
    print(
        f"corpus: median wall/ideal over {repeat} runs with the index built: {statistics.median(ratios):.2f} for the "
        f"whole call, {statistics.median(phase):.2f} while generating (target 1.2); the first run, building the "
        f"index: {rows[0][0] / rows[0][1]:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=("traffic", "corpus"))
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="qaeval-bench-propose-") as tmp:
        if args.only in (None, "traffic"):
            traffic(Path(tmp), args.rows, args.repeat)
        if args.only in (None, "corpus"):
            corpus(Path(tmp), args.passages, args.n, args.latency, args.concurrency, args.repeat)


if __name__ == "__main__":
    main()
