#!/usr/bin/env python3
"""The reference hub's profile on real text: SQuAD 2.0 questions as golden cases.

    python benchmarks/real_data_squad2.py [--path ../shared/data/squad2-small.json] [--limit 626]

Needs a SQuAD 2.0 file in the official format (the project does not ship one). Each question's own
paragraph is its gold source and five neighbouring paragraphs of the same article are distractors;
unanswerable questions must be abstained on. Prints the scoreboard and the time it took.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "squad2-small.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default=str(DEFAULT))
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    if not Path(args.path).is_file():
        sys.exit(f"SQuAD 2.0 file not found at {args.path}; pass --path to one (it is not shipped with qaeval)")

    from qaeval import api
    from qaeval.datasets import squad2_cases, write_jsonl

    with tempfile.TemporaryDirectory() as tmp:
        write_jsonl(squad2_cases(args.path, limit=args.limit), tmp)
        start = time.perf_counter()
        result = api.run(tmp)
        elapsed = time.perf_counter() - start
    print(result.summary_text())
    print(f"\n{len(result.suite)} cases scored in {elapsed:.2f} s")


if __name__ == "__main__":
    main()
