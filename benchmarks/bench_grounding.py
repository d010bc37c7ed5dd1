#!/usr/bin/env python3
"""The grounding check on one huge prompt: a row with many passages, all of them in its prompt.

    python benchmarks/bench_grounding.py                  # 1,000 passages (an output's limit) and 12,000
    python benchmarks/bench_grounding.py --passages 5000 --repeat 5

For each size: the median time of ``check_grounding_isolation`` on a case with a gold answer (so the leak
detector cuts every passage out of the prompt too), over ``--repeat`` runs; and, for comparison, the time
of cutting the passages out the way it was done before (one scan of the prompt per piece, reproduced
here), which grows with passages x prompt.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

from qaeval.scoring.checks import check_grounding_isolation
from qaeval.text import normalize


def one_scan_per_piece(text: str, pieces: list[str]) -> str:
    out = f" {text} "
    for piece in sorted({p for p in pieces if p}, key=len, reverse=True):
        needle = f" {piece} "
        while needle in out:
            out = out.replace(needle, " | ")
    return out


def row(n: int) -> tuple[SimpleNamespace, dict, dict]:
    bodies = {f"p{i}": f"Passage {i} says the branch number {i} lends {i % 13 + 2} items and renews them "
                       f"twice, unless patron {i * 7} holds them for the {i % 5}th time." for i in range(n)}
    prompt = "Answer from these passages only.\n" + "\n".join(f"[{k}] {v}" for k, v in bodies.items()) + \
        "\nQuestion: How many items does branch 3 lend?"
    out = dict(model_was_called=True, prompt_to_model=prompt, retrieved_ids=list(bodies),
               citations=[{"source_id": k, "claim": "x"} for k in bodies])
    case = SimpleNamespace(question="How many items does branch 3 lend?", gold_answer="five items", must_abstain=False)
    return case, out, bodies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, nargs="*", default=[1000, 12000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for n in args.passages:
        case, out, bodies = row(n)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            ok, why = check_grounding_isolation(case, out, bodies)
            times.append(time.perf_counter() - start)
        pieces = [normalize(case.question)] + [p for k, v in bodies.items() for p in (normalize(v), normalize(k),
                                                                                     f"{normalize(k)} {normalize(v)}")]
        start = time.perf_counter()
        one_scan_per_piece(normalize(out["prompt_to_model"]), pieces)
        before = time.perf_counter() - start
        print(f"{n:,} passages, prompt {len(out['prompt_to_model']) / 2**20:.1f} MiB: grounding check median "
              f"{statistics.median(times):.3f} s ({', '.join(f'{t:.3f}' for t in times)}; {ok}); cutting the "
              f"passages out one scan per piece, as before: {before:.2f} s")


if __name__ == "__main__":
    main()
