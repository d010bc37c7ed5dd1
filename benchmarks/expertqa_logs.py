#!/usr/bin/env python3
"""ExpertQA's validation file as production traffic: convert it to the monitor's log format, then check the
offline judge's figures, corrected by 20% of the expert labels (PPI), against all of the expert labels.

    python benchmarks/expertqa_logs.py                      # convert and run (reads ../shared/data/expertqa-rand-val.jsonl)
    python benchmarks/expertqa_logs.py --out DIR --convert-only
    qaeval monitor --logs DIR/logs.jsonl --by system --labels DIR/labels-20.jsonl     # the same run from the shell

The conversion: one row per (question, system answer), the ``system`` column the slice. The answer's
``[n]`` evidence strings become passages (id ``n``, the text after the URL line, in the order of n); each
claim that carries ``[n]`` markers cites those passages with the claim (markers removed) as its claim.
A claim naming a number the annotators gave no evidence for cites a passage the row does not hold, and
so fails resolvability, as it should. No timestamp: ExpertQA has none.

The labels: an answer's faithfulness is what the monitor's judge grades (every claim entailed by its
cited passages). From the experts' per-claim support: 2 when every judged claim is Complete, 0 when any
is Missing or Incomplete, else 1 (some Partial); an answer with no judged claim (support N/A or none)
gets no label. ``labels-all.jsonl`` holds every such label, ``labels-20.jsonl`` a random 20% (seed 0).
The truth per system is the share of its labelled answers with label 2 (all labels); the PPI estimate
uses the offline judge on every answer and the 20%.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "expertqa-rand-val.jsonl"
MARK = re.compile(r"\[(\d+)\]")
GOOD, BAD = {"Complete"}, {"Missing", "Incomplete"}


def _evidence(claims: list[dict]) -> dict[str, str]:
    passages: dict[str, str] = {}
    for claim in claims:
        for item in claim.get("evidence") or []:
            found = MARK.match(item.strip()) if isinstance(item, str) else None
            if found:
                text = item.strip().split("\n\n", 1)[-1].strip()
                if text and not text.startswith("http"):
                    passages.setdefault(found.group(1), text)
    return passages


def _label(claims: list[dict]) -> int | None:
    support = [c.get("support") for c in claims if c.get("support") in GOOD | BAD | {"Partial"}]
    if not support:
        return None
    return 0 if any(s in BAD for s in support) else 2 if all(s in GOOD for s in support) else 1


def convert(path: Path) -> tuple[list[dict], list[dict]]:
    """(log rows, faithfulness labels keyed by row id)."""
    rows, labels = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        record = json.loads(line)
        for system, answer in record["answers"].items():
            claims = [c for c in answer.get("claims") or [] if isinstance(c, dict)]
            passages = _evidence(claims)
            citations = [
                {"source_id": n, "claim": MARK.sub("", c["claim_string"]).strip()}
                for c in claims
                if isinstance(c.get("claim_string"), str)
                for n in dict.fromkeys(MARK.findall(c["claim_string"]))
            ]
            rid = f"eqa-{number:03d}-{system}"
            rows.append(
                {
                    "id": rid,
                    "question": record["question"],
                    "answer": answer["answer_string"],
                    "passages": [{"id": n, "text": passages[n]} for n in sorted(passages, key=int)],
                    "citations": citations,
                    "system": system,
                }
            )
            score = _label(claims)
            if score is not None:
                labels.append(
                    {
                        "case_id": rid,
                        "axis": "faithfulness",
                        "score": score,
                        "reason": "ExpertQA experts' claim support",
                    }
                )
    return rows, labels


def write(out: Path, rows: list[dict], labels: list[dict], share: float, seed: int) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    some = random.Random(seed).sample(labels, round(share * len(labels)))
    paths = {"logs": out / "logs.jsonl", "all": out / "labels-all.jsonl", "some": out / "labels-20.jsonl"}
    for key, items in (("logs", rows), ("all", labels), ("some", some)):
        paths[key].write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8")
    return paths


def compare(paths: dict[str, Path]) -> None:
    import qaeval.api as qa
    from qaeval.scoring.metrics import format_interval, format_number

    result = qa.monitor(str(paths["logs"]), by=["system"], labels=str(paths["some"]), judge_cache=False)
    truth: dict[str, list[int]] = {}
    systems = dict(zip(result.rows["row_id"], result.rows["system"].astype(str)))
    for line in paths["all"].read_text().splitlines():
        label = json.loads(line)
        truth.setdefault(systems[label["case_id"]], []).append(label["score"] == 2)
    part = result.slices[result.slices["metric"] == "faithfulness_rate"]
    print(
        f"{'system':<22} {'answers':>7}  {'offline judge':>13} {'95% CI':<15} {'PPI (20%)':>9} {'PPI 95% CI':<15} "
        f"{'labels':>6}  {'truth (all)':>11} {'labels':>6}"
    )
    for r in part.itertuples(index=False):
        t = truth.get(r.group, [])
        print(
            f"{r.group:<22} {r.n:>7}  {format_number(r.value):>13} {format_interval(r.ci_low, r.ci_high, r.n):<15} "
            f"{format_number(r.ppi_value, missing='-'):>9} {format_interval(r.ppi_ci_low, r.ppi_ci_high, r.n_labelled):<15} "
            f"{r.n_labelled:>6}  {format_number(sum(t) / len(t) if t else None):>11} {len(t):>6}"
        )
    board = result.scoreboard.set_index("metric")
    print(
        f"citation_resolvability over all answers: {format_number(board.loc['citation_resolvability', 'value'])} "
        f"(n={board.loc['citation_resolvability', 'n']})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", type=Path, default=DEFAULT)
    parser.add_argument(
        "--out", type=Path, help="where to write logs.jsonl and the labels (default: a temporary folder)"
    )
    parser.add_argument("--share", type=float, default=0.2, help="share of the expert labels PPI uses")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--convert-only", action="store_true")
    args = parser.parse_args()
    if not args.input.is_file():
        sys.exit(
            f"ExpertQA's validation file is absent: {args.input} (see ../shared/data/README.md; this clone does "
            "not ship it). Pass --input PATH to a copy of data/lfqa/rand_val.jsonl."
        )
    rows, labels = convert(args.input)
    with tempfile.TemporaryDirectory(prefix="qaeval-expertqa-") as tmp:
        paths = write(args.out or Path(tmp), rows, labels, args.share, args.seed)
        print(
            f"{len(rows)} answers as log rows, {len(labels)} expert labels ({len(paths['some'].read_text().splitlines())} "
            f"used for PPI) in {paths['logs'].parent}"
        )
        if not args.convert_only:
            compare(paths)


if __name__ == "__main__":
    main()
