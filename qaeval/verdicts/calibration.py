"""Calibration: does the judge agree with people before its numbers count?

Human labels (``qaeval.data.labels``) are compared with the judge's effective score on the same
case and axis. A label whose output has changed since it was given is *stale*: reported and left out,
never compared with a verdict on different text.

Per axis and overall: n, exact agreement and within-one agreement each with a 95% Wilson interval,
mean absolute error, quadratic-weighted Cohen's kappa, and a 3x3 confusion matrix per axis (rows:
human, columns: judge). The judge is TRUSTED only when *every* axis has at least ``min_labels`` usable
labels and reaches ``min_agreement`` exact agreement; a good overall average does not save a weak
axis, and an axis with too few labels cannot certify anything ("too few labels to certify").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from qaeval.audit import Audit
from qaeval.errors import JudgeNotTrusted
from qaeval.frames import frame, is_missing, text_frame
from qaeval.record import frame_rows
from qaeval.results import Result
from qaeval.scoring.evaluate import RunResult
from qaeval.scoring.judge import AXES
from qaeval.scoring.metrics import format_interval, format_number

DEFAULT_MIN_AGREEMENT = 0.7
DEFAULT_MIN_LABELS = 10

PAIR_SCHEMA = {
    "case_id": "text", "axis": "text", "human": "int", "judge": "Int64", "status": "text", "agree": "boolean",
    "reason": "text", "judge_quote": "text", "judge_rationale": "text", "judge_valid": "boolean",
    "output_fingerprint": "text", "label_fingerprint": "text",
}
AGREEMENT_VALUES = ("n", "exact", "exact_low", "exact_high", "within_one", "within_one_low", "within_one_high", "mae",
                    "kappa", "passed")
AGREEMENT_SCHEMA = {
    "axis": "text", "n": "int", "exact": "float", "exact_low": "float", "exact_high": "float", "within_one": "float",
    "within_one_low": "float", "within_one_high": "float", "mae": "float", "kappa": "float", "passed": "bool",
    "status": "text",
}


def wilson(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval for a proportion (NaN with n = 0)."""
    if n == 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def quadratic_kappa(human: np.ndarray, judge: np.ndarray, categories: int = 3) -> float:
    """Cohen's kappa with quadratic weights; NaN when there is no spread to agree on."""
    if human.size == 0:
        return math.nan
    observed = np.zeros((categories, categories))
    for h, j in zip(human, judge):
        observed[h, j] += 1
    weights = np.array([[(i - j) ** 2 for j in range(categories)] for i in range(categories)], dtype=float)
    expected = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    denominator = (weights * expected).sum()
    if denominator == 0:
        return math.nan
    return float(1 - (weights * observed).sum() / denominator)


def agreement_row(name: str, pairs: pd.DataFrame, bar: float, min_labels: int, *, gated: bool = True) -> dict[str, Any]:
    h = pairs["human"].to_numpy(int)
    j = pairs["judge"].astype("int64").to_numpy() if len(pairs) else np.zeros(0, dtype=int)
    n = int(h.size)
    if n == 0:
        return dict(axis=name, n=0, exact=math.nan, exact_low=math.nan, exact_high=math.nan, within_one=math.nan,
                    within_one_low=math.nan, within_one_high=math.nan, mae=math.nan, kappa=math.nan, passed=False,
                    status="no usable label" if gated else "not gated")
    exact_hits = int((h == j).sum())
    within_hits = int((abs(h - j) <= 1).sum())
    exact = exact_hits / n
    if not gated:
        status, passed = "not gated: every axis must pass on its own", True
    elif n < min_labels:
        status, passed = f"too few labels to certify ({n} < {min_labels})", False
    elif exact < bar - 1e-12:
        status, passed = f"weak: exact agreement {exact:.2f} < {bar:.2f}", False
    else:
        status, passed = "ok", True
    return dict(axis=name, n=n, exact=exact, **dict(zip(("exact_low", "exact_high"), wilson(exact_hits, n))),
                within_one=within_hits / n, **dict(zip(("within_one_low", "within_one_high"), wilson(within_hits, n))),
                mae=float(abs(h - j).mean()), kappa=quadratic_kappa(h, j), passed=passed, status=status)


@dataclass(repr=False)
class CalibrationResult(Result):
    run: RunResult
    pairs: pd.DataFrame
    agreement: pd.DataFrame
    confusion: dict[str, pd.DataFrame]
    min_agreement: float
    min_labels: int
    judge_label: str
    source: str = ""
    notes: list[str] = field(default_factory=list)

    kind = "calibrate"
    error_type = JudgeNotTrusted
    words = ("TRUSTED", "RETUNE JUDGE")

    @property
    def weak_axes(self) -> list[str]:
        rows = self.agreement[self.agreement["axis"].isin(AXES)]
        return rows.loc[~rows["passed"], "axis"].tolist()

    @property
    def ok(self) -> bool:
        return not self.weak_axes

    @property
    def trusted(self) -> bool:
        return self.ok

    @property
    def reason(self) -> str:
        rows = self.agreement.set_index("axis")
        if self.ok:
            return (f"every axis reaches {self.min_agreement:.2f} exact agreement on at least "
                    f"{self.min_labels} labels")
        return "; ".join(f"{axis}: {rows.at[axis, 'status']}" for axis in self.weak_axes)

    @property
    def overall_clears_bar(self) -> bool:
        overall = self.agreement.set_index("axis").loc["overall"]
        return bool(overall["n"] and overall["exact"] >= self.min_agreement - 1e-12)

    def disagreements(self) -> pd.DataFrame:
        """Compared labels where the judge and the person differ, largest gap first."""
        compared = self.pairs[self.pairs["status"] == "compared"]
        gap = (compared["human"] - compared["judge"].astype("int64")).abs()
        ordered = compared[gap > 0].assign(_gap=gap[gap > 0]).sort_values(["_gap", "axis", "case_id"],
                                                                             ascending=[False, True, True])
        return text_frame(ordered.drop(columns="_gap"))

    def summary_text(self) -> str:
        lines = [f"CALIBRATION: {self.verdict}   judge {self.judge_label}, bar {self.min_agreement:.2f} exact "
                 f"agreement on at least {self.min_labels} labels per axis" + (f"   labels: {self.source}" if self.source else "")]
        lines.append(f"  {'axis':<22} {'n':>4} {'exact':>6} {'95% CI':<13} {'within1':>8} {'MAE':>6} {'kappa':>6}")
        f = partial(format_number, digits=2)
        for r in self.agreement.itertuples(index=False):
            ci = format_interval(r.exact_low, r.exact_high, r.n, digits=2)
            mark = "" if r.axis == "overall" else ("  ok" if r.passed else f"  <- {r.status}")
            lines.append(f"  {r.axis:<22} {r.n:>4} {f(r.exact):>6} {ci:<13} {f(r.within_one):>8} {f(r.mae):>6} "
                         f"{f(r.kappa):>6}{mark}")
        if not self.ok and self.overall_clears_bar:
            lines.append("  the overall figure clears the bar, but the judge is only as good as its weakest axis")
        excluded = self.pairs[self.pairs["status"] != "compared"]
        if len(excluded):
            lines.append(f"  {len(excluded)} label(s) left out: " + "; ".join(
                f"{r.case_id}/{r.axis} ({r.status})" for r in excluded.itertuples(index=False)))
        lines += [f"  note: {n}" for n in self.notes]
        if not self.ok:
            lines.append(f"  weak axes: {', '.join(self.weak_axes)}; the judge's numbers on them do not count")
        return "\n".join(lines)

    def to_frame(self) -> pd.DataFrame:
        return self.agreement

    def record_section(self) -> dict[str, Any]:
        return dict(pairs=frame_rows(self.pairs), agreement=frame_rows(self.agreement),
                    confusion={axis: m.to_numpy().tolist() for axis, m in self.confusion.items()},
                    min_agreement=self.min_agreement, min_labels=self.min_labels, judge_label=self.judge_label,
                    source=self.source, notes=self.notes)

    @classmethod
    def from_section(cls, run: RunResult, s: Mapping[str, Any]) -> CalibrationResult:
        pairs = [{"label_fingerprint": None, **p} for p in s["pairs"]]  # older records did not keep it
        return cls(run=run, pairs=frame(pairs, PAIR_SCHEMA), agreement=frame(s["agreement"], AGREEMENT_SCHEMA),
                   confusion={axis: _matrix(np.array(s["confusion"][axis], dtype=int)) for axis in AXES
                              if axis in s["confusion"]},
                   min_agreement=float(s["min_agreement"]), min_labels=int(s["min_labels"]),
                   judge_label=str(s["judge_label"]), source=str(s.get("source") or ""), notes=list(s.get("notes") or []))

    def audit_section(self, audit: Audit, s: Mapping[str, Any], prefix: str = "calibration") -> None:
        """Calibrate again from the run's cases and the labels the pairs carry (case, axis, the person's
        score and the output fingerprint the label was given on), with the record's bar and minimum, and
        note where the section disagrees: each pair's status, judge score and agreement, every axis's
        figures and pass, the confusion matrices. The labels themselves are what people said."""
        if isinstance(self.min_agreement, bool) or not 0 <= self.min_agreement <= 1 or self.min_labels < 1:
            audit.problem(f"{prefix} bar {self.min_agreement!r} / minimum {self.min_labels!r} is out of range")
            return
        bad = [j for j, p in enumerate(s["pairs"]) if p.get("axis") not in AXES or p.get("human") not in (0, 1, 2)
               or isinstance(p.get("human"), bool)]
        if bad:
            audit.problem(f"{prefix}.pairs[{bad[0]}] is not a label: an axis of {', '.join(AXES)} and a score 0, 1 or 2")
            return
        labels = frame([dict(case_id=p.get("case_id"), axis=p["axis"], human=p["human"], reason=p.get("reason"),
                             output_fingerprint=p.get("label_fingerprint")) for p in s["pairs"]],
                       {"case_id": "text", "axis": "text", "human": "int", "reason": "text", "output_fingerprint": "text"})
        again = calibrate(self.run, labels, min_agreement=self.min_agreement, min_labels=self.min_labels)
        for j, (stored, row) in enumerate(zip(s["pairs"], again.pairs.to_dict("records"))):
            for column in ("status", "judge", "agree", "judge_valid", "output_fingerprint"):
                audit.same(f"{prefix}.pairs[{j}].{column} ({row['case_id']}, {row['axis']})", stored.get(column),
                           row[column])
        if not audit.same(f"{prefix}.agreement axes", [r.get("axis") for r in s["agreement"]],
                          again.agreement["axis"].tolist()):
            return
        for j, (stored, row) in enumerate(zip(s["agreement"], again.agreement.to_dict("records"))):
            for column in AGREEMENT_VALUES:
                audit.same(f"{prefix}.agreement[{j}].{column} ({row['axis']})", stored.get(column), row[column])
        for axis, matrix in again.confusion.items():
            audit.same(f"{prefix}.confusion.{axis}", s["confusion"].get(axis), matrix.to_numpy().tolist())


def _matrix(values: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(values, index=pd.Index([0, 1, 2], name="human"), columns=pd.Index([0, 1, 2], name="judge"))


def calibrate(run: RunResult, labels: pd.DataFrame, *, min_agreement: float = DEFAULT_MIN_AGREEMENT,
              min_labels: int = DEFAULT_MIN_LABELS, source: str = "") -> CalibrationResult:
    """Compare the judge's effective scores in ``run`` with human ``labels``. Pure."""
    pc = run.per_case.set_index("case_id")
    verdicts = {(r["case_id"], r["axis"]): r for r in run.verdicts.to_dict("records")
                if r["axis"] != "citation_correctness"}
    weakest: dict[str, dict[str, Any]] = {}
    for r in run.verdicts[run.verdicts["axis"] == "citation_correctness"].to_dict("records"):
        score = -1 if is_missing(r["score"]) or not r["valid"] else int(r["score"])
        held = weakest.get(r["case_id"])
        if held is None or score < held["_rank"]:
            weakest[r["case_id"]] = {**r, "_rank": score}
    rows = []
    for lab in labels.to_dict("records"):
        cid, axis = lab["case_id"], lab["axis"]
        present = cid in pc.index
        judge_score = pc.at[cid, axis] if present else pd.NA
        current_fp = pc.at[cid, "output_fingerprint"] if present else None
        fp = lab.get("output_fingerprint")
        if not present:
            status = "not in this run"
        elif not is_missing(fp) and fp != current_fp:
            status = "stale"
        elif is_missing(judge_score):
            status = "not judged"
        else:
            status = "compared"
        verdict = (weakest.get(cid) if axis == "citation_correctness" else verdicts.get((cid, axis))) or {}
        compared = status == "compared"
        rows.append(dict(case_id=cid, axis=axis, human=int(lab["human"]), judge=int(judge_score) if compared else None,
                         status=status, agree=(int(judge_score) == int(lab["human"])) if compared else None,
                         reason=lab.get("reason") or "", judge_quote=verdict.get("quote") or "",
                         judge_rationale=verdict.get("rationale") or "",
                         judge_valid=verdict.get("valid") if verdict else None,
                         output_fingerprint=current_fp, label_fingerprint=None if is_missing(fp) else fp))
    pairs = frame(rows, PAIR_SCHEMA)
    compared = pairs[pairs["status"] == "compared"]
    agreement = [agreement_row(axis, compared[compared["axis"] == axis], min_agreement, min_labels) for axis in AXES]
    agreement.append(agreement_row("overall", compared, min_agreement, min_labels, gated=False))
    confusion = {}
    for axis in AXES:
        sub = compared[compared["axis"] == axis]
        matrix = np.zeros((3, 3), dtype=int)
        for h, j in zip(sub["human"], sub["judge"]):
            matrix[int(h), int(j)] += 1
        confusion[axis] = _matrix(matrix)
    notes = [f"no usable label on {axis}: it cannot be trusted" for axis in AXES
             if not len(compared[compared["axis"] == axis])]
    return CalibrationResult(run=run, pairs=pairs, agreement=frame(agreement, AGREEMENT_SCHEMA), confusion=confusion,
                             min_agreement=min_agreement, min_labels=min_labels, judge_label=run.judge_config.label(),
                             source=source, notes=notes)
