#!/usr/bin/env python3
"""`qaeval run` end to end over a frozen corpus: the reference system retrieving with BM25 (FTS5).

    python benchmarks/bench_corpus_run.py                          # 100,000 passages, 1,000 cases, concurrency 4, 3 runs
    python benchmarks/bench_corpus_run.py --passages 20000 --cases 200 --repeat 1

The corpus is ``bench_corpus.py``'s synthetic one (~80 words a passage); each case asks for the four
rarest words of a random passage (its gold passage); one in ten asks about words no passage has and
must be abstained on. Each run is a fresh ``qaeval run`` process with its own empty index cache, so the
time includes building the FTS5 index once per worker (printed separately: the workers start together
and share the cache, so it is built once). Peak memory is summed over the harness and every process it
started, sampled every 50 ms from /proc (Linux).

Targets (issue 19): under 45 s and under 2 GB across all processes on 2 cores.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
TARGET_S, TARGET_MIB = 45.0, 2048.0


def write_data(folder: Path, passages: int, cases: int) -> None:
    from bench_corpus import questions, write_corpus

    from qaeval.data.corpus import Corpus

    folder.mkdir(parents=True, exist_ok=True)
    write_corpus(folder / "corpus.jsonl", passages)
    with Corpus.open(folder / "corpus.jsonl") as corpus:
        asked = questions(corpus, passages)[:cases]
    with open(folder / "cases.jsonl", "w", encoding="utf-8") as out:
        for i, (question, gold) in enumerate(asked):
            case = {
                "id": f"q-{i:05d}",
                "question": question,
                "gold_source_ids": [gold] if gold else [],
                "gold_answer": None,
                "expected_behavior": "unanswerable_must_abstain" if gold is None else "answer",
                "difficulty": "single-hop",
                "split": "frozen",
            }
            if gold:  # the answer is the gold passage's last sentence, which the reference system quotes
                case["gold_answer"] = "Ref"
            out.write(json.dumps(case) + "\n")


def tree_rss_mib(root: int) -> float:
    """Resident memory of ``root`` and every descendant, in MiB."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            rss[int(entry)] = int(Path(f"/proc/{entry}/statm").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack += children.get(pid, [])
    return total * os.sysconf("SC_PAGE_SIZE") / 2**20


def one_run(data: Path, concurrency: int) -> tuple[float, float, str]:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "QAEVAL_PROGRESS": "0", "QAEVAL_INDEX_CACHE": cache, "XDG_CACHE_HOME": cache}
        start = time.perf_counter()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "qaeval.cli",
                "run",
                "--data",
                str(data),
                "--concurrency",
                str(concurrency),
                "--quiet",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        peak = 0.0
        while proc.poll() is None:
            peak = max(peak, tree_rss_mib(proc.pid))
            time.sleep(0.05)
        out, err = proc.communicate()
        elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"qaeval run failed ({proc.returncode}):\n{err[-2000:]}")
    board = [line for line in out.splitlines() if line.startswith(("retrieval_recall_at_k", "abstention_recall"))]
    return elapsed, peak, "; ".join(" ".join(line.split()[:2]) for line in board)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        start = time.perf_counter()
        write_data(data, args.passages, args.cases)
        print(
            f"{args.passages} passages, {args.cases} cases written in {time.perf_counter() - start:.1f} s; "
            f"concurrency {args.concurrency}"
        )
        times, peaks = [], []
        for _ in range(args.repeat):
            elapsed, peak, figures = one_run(data, args.concurrency)
            times.append(elapsed)
            peaks.append(peak)
            print(f"  run: {elapsed:.1f} s, peak {peak:.0f} MiB across all processes; {figures}", flush=True)
        t, m = statistics.median(times), statistics.median(peaks)
        print(
            f"median {t:.1f} s (target {TARGET_S:g} s: {'met' if t <= TARGET_S else 'MISSED'}), "
            f"peak {m:.0f} MiB (target {TARGET_MIB:g} MiB: {'met' if m <= TARGET_MIB else 'MISSED'})"
        )


if __name__ == "__main__":
    main()
