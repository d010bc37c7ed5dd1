#!/usr/bin/env python3
"""The monitor at scale: rows per second of the mechanical layer, and peak memory of a 1,000,000-row run.

    python benchmarks/bench_monitor.py                       # 1,000,000 rows, judge on 2,000; 3 timings of 100,000
    python benchmarks/bench_monitor.py --rows 200000 --repeat 5

1. The mechanical layer alone (``qaeval.commands.monitoring.check_log``: strict loading and the four gold-free
   checks on every row), in this process, on ``--layer-rows`` rows, ``--repeat`` times: the median rows
   per second.
2. A whole ``qaeval monitor --logs FILE --by system --window 1D --sample 2000`` on ``--rows`` rows, in a
   fresh process with the offline judge: its wall time and peak resident memory (the target: under
   1.5 GB at 1,000,000 rows).

Each row has 4 passages, a two-sentence answer with two citations (a tenth cite a passage the row does
not hold), a prompt, a timestamp over 14 days and a system out of 3.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PASSAGE = "The {w} branch lends {n} items per card and renews them twice unless another patron holds them."


def row(i: int) -> dict:
    words = ("north", "south", "east", "west", "river", "hill", "harbour")
    passages = [{"id": f"p{j}", "text": PASSAGE.format(w=words[(i + j) % 7], n=(i + j) % 13 + 2)} for j in range(4)]
    first = f"The {words[i % 7]} branch lends {i % 13 + 2} items per card."
    second = "It renews them twice unless another patron holds them."
    cited = "p9" if i % 10 == 0 else "p0"
    question = f"How many items does the {words[i % 7]} branch lend?"
    return {
        "id": f"req-{i:07d}",
        "question": question,
        "passages": passages,
        "answer": f"{first} {second}",
        "citations": [{"source_id": cited, "claim": first}, {"source_id": "p0", "claim": second}],
        "model_was_called": True,
        "prompt": "Passages:\n" + "\n".join(p["text"] for p in passages) + f"\nQuestion: {question}",
        "timestamp": f"2026-03-{1 + i % 14:02d}T{i % 24:02d}:00:00Z",
        "system": f"sys-{i % 3}",
    }


def write_log(path: Path, n: int) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, n, 10_000):
            f.write("".join(json.dumps(row(i)) + "\n" for i in range(start, min(n, start + 10_000))))
    return path


def mechanical(path: Path, repeat: int) -> tuple[list[float], list[float]]:
    """(rows per wall second, rows per CPU second) of each run: on a shared machine the second is the
    figure that does not depend on what else is running."""
    from qaeval.commands.monitoring import check_log

    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        rows, _ = check_log(path)
        wall.append(len(rows) / (time.perf_counter() - start))
        cpu.append(len(rows) / (time.process_time() - start_cpu))
    return wall, cpu


def whole_run(path: Path, sample: int) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak RSS in MiB, the command's first line) of one `qaeval monitor` process."""
    command = [
        sys.executable,
        "-m",
        "qaeval",
        "monitor",
        "--logs",
        str(path),
        "--by",
        "system",
        "--window",
        "1D",
        "--sample",
        str(sample),
        "--seed",
        "1",
        "--quiet",
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 3):
        sys.exit(f"qaeval monitor failed ({done.returncode}): {done.stderr[-2000:]}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, done.stdout.splitlines()[0]  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--layer-rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sample", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qaeval-bench-monitor-") as tmp:
        small = write_log(Path(tmp) / "small.jsonl", args.layer_rows)
        wall, cpu = mechanical(small, args.repeat)
        print(
            f"mechanical layer (load + 4 checks), {args.layer_rows:,} rows, {len(wall)} runs: median "
            f"{statistics.median(wall):,.0f} rows/s of wall time ({', '.join(f'{r:,.0f}' for r in wall)}), "
            f"{statistics.median(cpu):,.0f} rows per CPU second; load average {os.getloadavg()[0]:.1f} "
            f"on {os.cpu_count()} cores"
        )
        big = write_log(Path(tmp) / "big.jsonl", args.rows)
        size = big.stat().st_size / 2**20
        wall, cpu, peak, first = whole_run(big, args.sample)
        print(
            f"qaeval monitor, {args.rows:,} rows ({size:,.0f} MiB of JSONL), judge on {args.sample:,}: "
            f"{wall:,.1f} s wall ({args.rows / wall:,.0f} rows/s), {cpu:,.1f} CPU s ({args.rows / cpu:,.0f} rows per "
            f"CPU second), peak RSS {peak:,.0f} MiB (target: under 1,536 MiB)"
        )
        print(f"  {first}")


if __name__ == "__main__":
    main()
