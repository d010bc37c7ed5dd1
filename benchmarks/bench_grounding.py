#!/usr/bin/env python3
"""The grounding check on one huge row: a prompt of many passages, each headed by its id and title, every
one retrieved and cited.

    python benchmarks/bench_grounding.py                        # 12,000 passages (about 3 MB), 3 runs
    python benchmarks/bench_grounding.py --before HEAD~1        # the same row at another commit too
    python benchmarks/bench_grounding.py --passages 1000 --chars 1000 --shared   # an output's limits (1 MB)

Times ``qaeval.scoring.checks.check_grounding_isolation`` with a gold answer (a run's path: the prompt is
searched for the question and every passage, and cut down to where a leak would be) and without one (the
monitor's path: only searched), and prints the median of ``--repeat`` calls of each with the verdict,
which must be the same at both commits. Each passage opens with its own number ("Passage 17 says: ...")
unless ``--shared``: then no word is a passage's own (bench_run.py's 28 words), the hard case for an
index of the prompt by word. ``--before REV`` exports REV's ``qaeval/`` with ``git archive`` (the
repository is not changed) and times it in a process of its own, then this code.

Issue 40 (item 11): the row took a minute or more, one scan of the prompt per piece cut; the target is
time linear in the prompt, with no slower check on the prompts systems usually send (bench_phases.py's
"checks" line).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_run import filler  # noqa: E402  (importable once HERE is on the path)


def row(passages: int, chars: int, shared: bool) -> tuple[SimpleNamespace, dict, dict[str, str], dict[str, str]]:
    rng = random.Random(passages)
    bodies = {f"p{i}": ("" if shared else f"Passage {i} says: ") + filler(rng, chars) for i in range(passages)}
    titles = {pid: f"Note {i}" for i, pid in enumerate(bodies)}
    question = "How many items per month does the policy allow?"
    prompt = "\n\n".join(
        [
            f"Answer from the passages below.\nQuestion: {question}",
            *(f"[{pid}] {titles[pid]}\n{text}" for pid, text in bodies.items()),
        ]
    )
    case = SimpleNamespace(question=question, gold_answer="forty two items", must_abstain=False)
    out = dict(
        model_was_called=True,
        prompt_to_model=prompt,
        retrieved_ids=list(bodies),
        citations=[{"source_id": pid, "claim": text} for pid, text in bodies.items()],
    )
    return case, out, bodies, titles


def measure(passages: int, chars: int, shared: bool, repeat: int) -> dict:
    from qaeval.scoring.checks import check_grounding_isolation

    case, out, bodies, titles = row(passages, chars, shared)
    found: dict = {"prompt_chars": len(out["prompt_to_model"])}
    for label, gold in (("gold", case.gold_answer), ("no_gold", None)):
        probe = SimpleNamespace(**{**vars(case), "gold_answer": gold})
        times, verdict = [], None
        for _ in range(repeat):
            start = time.perf_counter()
            verdict = check_grounding_isolation(probe, out, bodies, titles=titles)
            times.append(time.perf_counter() - start)
        found[label] = {"median": statistics.median(times), "runs": times, "verdict": list(verdict)}
    return found


def at_commit(rev: str, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(HERE.parent), "archive", rev, "qaeval"], check=True, capture_output=True
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--json",
                "--passages",
                str(args.passages),
                "--chars",
                str(args.chars),
                "--repeat",
                str(args.repeat),
                *(["--shared"] if args.shared else []),
            ],
            env={**os.environ, "PYTHONPATH": tmp},
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(done.stdout)


def show(label: str, found: dict) -> None:
    for path, name in (("gold", "with a gold answer (a run)"), ("no_gold", "without one (the monitor)")):
        m = found[path]
        print(
            f"{label}: {name}: median {m['median']:.3f} s (runs {', '.join(f'{t:.3f}' for t in m['runs'])}); "
            f"verdict {m['verdict'][0]}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=12_000)
    parser.add_argument("--chars", type=int, default=170, help="characters of filler per passage")
    parser.add_argument("--shared", action="store_true", help="no word of a passage is its own")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", metavar="REV", help="also time the check at this commit, first")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # for --before's own process
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure(args.passages, args.chars, args.shared, args.repeat)))
        return
    before = at_commit(args.before, args) if args.before else None
    after = measure(args.passages, args.chars, args.shared, args.repeat)
    print(
        f"one row: {args.passages:,} passages{' sharing their words' if args.shared else ''}, a prompt of "
        f"{after['prompt_chars']:,} characters; median of {args.repeat}",
        flush=True,
    )
    if before is not None:
        show(f"at {args.before}", before)
    show("this code", after)
    if before is not None and any(before[p]["verdict"] != after[p]["verdict"] for p in ("gold", "no_gold")):
        sys.exit("the verdicts differ")


if __name__ == "__main__":
    main()
