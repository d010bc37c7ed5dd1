"""Layer 4: trajectory scoring for multi-hop and aggregation cases.

A lucky answer reached through the wrong evidence is a failure: a multi-step case succeeds only when its
end state is right (answered, and the normalised gold answer in the normalised answer, or a numeric gold
answer equal to ``computed_aggregate``) *and* every checkpoint of its ``checkpoints`` holds: ``retrieved``,
``cited`` (and retrieved), ``aggregate_equals`` (within ``tolerance``, default 0) or ``answer_mentions``
(see the cases guide).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from qaeval.core.frames import is_missing
from qaeval.core.text import normalize
from qaeval.data.schema import MULTI_STEP, as_number

if TYPE_CHECKING:
    import pandas as pd


def describe_checkpoint(checkpoint: Mapping[str, Any]) -> str:
    kind = checkpoint["kind"]
    if kind in ("retrieved", "cited"):
        return f"{kind} {checkpoint['source_id']}"
    if kind == "aggregate_equals":
        return f"aggregate = {checkpoint['value']}"
    return f"answer mentions {checkpoint['text']!r}"


def _checkpoint_holds(cp: Mapping[str, Any], out: Mapping[str, Any]) -> tuple[bool, str]:
    kind = cp["kind"]
    retrieved = list(out.get("retrieved_ids") or [])
    if kind == "retrieved":
        ok = cp["source_id"] in retrieved
        return ok, "retrieved" if ok else "not retrieved"
    if kind == "cited":
        cited = {c["source_id"] for c in out.get("citations") or []}
        if cp["source_id"] not in cited:
            return False, "not cited"
        if cp["source_id"] not in retrieved:
            return False, "cited but never retrieved"
        return True, "cited and retrieved"
    if kind == "aggregate_equals":
        got = as_number(out.get("computed_aggregate"))
        if got is None:
            return False, "no numeric aggregate reported"
        ok = abs(got - float(cp["value"])) <= float(cp.get("tolerance", 0))
        return ok, f"aggregate {got:g}"
    text = normalize(cp["text"])
    ok = bool(text) and text in normalize(out.get("answer") or "")
    return ok, "mentioned" if ok else "not mentioned"


def end_state_reached(gold_answer: str | None, out: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether an output reached the gold end state, with the reason."""
    if not is_missing(out.get("error")):
        return False, "adapter error"
    if out.get("abstained"):
        return False, "abstained"
    if gold_answer is None:
        return False, "no gold answer"
    gold_number = as_number(gold_answer)
    got = as_number(out.get("computed_aggregate"))
    if gold_number is not None and got is not None:
        ok = math.isclose(gold_number, got, rel_tol=1e-9, abs_tol=1e-9)
        return ok, f"aggregate {got:g} vs gold {gold_number:g}"
    gold = normalize(gold_answer)
    ok = bool(gold) and gold in normalize(out.get("answer") or "")
    return ok, "gold answer in the answer" if ok else "gold answer not in the answer"


TRAJECTORY_SCHEMA = {
    "case_id": "text",
    "step": "text",
    "kind": "text",
    "description": "text",
    "passed": "bool",
    "detail": "text",
    "success": "bool",
}


def score_trajectories(cases: pd.DataFrame, outputs: pd.DataFrame) -> pd.DataFrame:
    """Score every multi-hop and aggregation case.

    ``cases`` is ``Suite.to_frame()``; ``outputs`` is the runner's frame. Returns one row per
    (case, step), where step ``end_state`` comes first and then each checkpoint in order:

    ============  ===========================================================
    case_id       the readable case id
    step          ``end_state`` or ``checkpoint 1``, ``checkpoint 2``, ...
    kind          ``end_state`` or the checkpoint kind
    description   what the step asks for
    passed        bool
    detail        what was observed
    success       bool, the same on every row of a case: every step passed
    ============  ===========================================================
    """
    from qaeval.core.frames import Rows, RowsByKey

    outs = RowsByKey(outputs)
    rows = Rows(TRAJECTORY_SCHEMA)
    for case in cases.itertuples(index=False):
        if case.difficulty not in MULTI_STEP:
            continue
        out = outs[case.case_id]
        ok, detail = end_state_reached(case.gold_answer, out)
        steps = [("end_state", "end_state", f"reach the gold answer {case.gold_answer!r}", bool(ok), detail)]
        failed = not is_missing(out.get("error"))
        for i, cp in enumerate(case.checkpoints or [], start=1):
            held, why = (False, "adapter error") if failed else _checkpoint_holds(cp, out)
            steps.append((f"checkpoint {i}", cp["kind"], describe_checkpoint(cp), bool(held), why))
        success = all(s[3] for s in steps)
        for step in steps:
            rows.add(**dict(zip(TRAJECTORY_SCHEMA, (case.case_id, *step, success))))
    return rows.frame()
