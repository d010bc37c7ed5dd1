#!/usr/bin/env python3
"""qaeval on real public data: the reference system's profile on imported QA sets, and the offline judge's
agreement with real human labels.

    python benchmarks/real_data.py [--data ../shared/data]

Needs the public files described in ../shared/data/README.md (the project ships none of them; a missing
file is skipped and says so). For SQuAD 2.0, HotpotQA and MuSiQue it imports every record, runs the
reference system and prints the headline metrics; for WiCE, ExpertQA and ARES it builds a labelled set and
calibrates the offline judge against the human labels: exact and within-one agreement with 95% Wilson
intervals, kappa and n, per axis. These are the honest figures of how far a token-overlap judge is from
people on real text.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data"
QA = (
    ("squad2", "squad2-small.json"),
    ("hotpotqa", "hotpotqa-distractor-100.json"),
    ("musique", "musique-sample-20.json"),
)
LABELLED = (
    ("wice", "wice-claim-dev.jsonl"),
    ("expertqa", "expertqa-rand-val.jsonl"),
    ("ares", "ares-human-examples.tsv"),
    ("ares", "ares-nq-few-shot.tsv"),
)
SHOWN = (
    "deterministic_pass_rate",
    "abstention_recall",
    "over_refusal_rate",
    "retrieval_recall_at_k",
    "rerank_mrr",
    "multi_step_task_success",
    "answer_correctness",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DEFAULT), help=f"folder holding the public files (default: {DEFAULT})")
    args = parser.parse_args()
    data = Path(args.data)
    if not data.is_dir():
        sys.exit(
            f"real_data.py: {data} is not a folder; pass --data DIR, the folder that holds the files listed in "
            "../shared/data/README.md"
        )
    print(f"data: {data}")

    from qaeval import api

    def present(name: str) -> Path | None:
        path = data / name
        if not path.is_file():
            print(f"  {name}: absent ({path}); skipped (pass --data DIR to read it elsewhere)")
            return None
        return path

    print("QA sets, the reference system, offline judge")
    for fmt, name in QA:
        if (path := present(name)) is None:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            report = api.import_cases(fmt, path, tmp)
            start = time.perf_counter()
            run = api.run(tmp)
            elapsed = time.perf_counter() - start
        board = run.scoreboard.set_index("metric")
        figures = ", ".join(f"{m} {board.at[m, 'value']:.3f} (n={board.at[m, 'n']})" for m in SHOWN)
        print(f"  {name}: {report.imported} of {report.read} imported; {elapsed:.1f} s; {figures}")

    print("\nthe offline judge against human labels (faithfulness)")
    for fmt, name in LABELLED:
        if (path := present(name)) is None:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            report = api.import_cases(fmt, path, tmp, labelled=True, prefix=path.stem)
            result = api.calibrate(labelled=str(next(Path(tmp).glob("*-labelled.jsonl"))), min_labels=5)
        r = result.agreement.set_index("axis").loc["faithfulness"]
        refused = sum(report.refused.values())
        print(
            f"  {name}: {report.imported} labelled claims ({refused} refused); exact {r['exact']:.2f} "
            f"[{r['exact_low']:.2f}, {r['exact_high']:.2f}], within one {r['within_one']:.2f} "
            f"[{r['within_one_low']:.2f}, {r['within_one_high']:.2f}], kappa {r['kappa']:.2f}, n={r['n']}"
        )
        print(
            f"    confusion (rows human 0/1/2, columns judge 0/1/2): {result.confusion['faithfulness'].values.tolist()}"
        )


if __name__ == "__main__":
    main()
