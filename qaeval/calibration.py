"""Calibration: does the judge agree with people before its numbers count?

Hand labels are JSONL, one object per line: ``case_id``, ``axis`` (faithfulness, answer_correctness or
citation_correctness), ``score`` (0, 1 or 2), ``reason`` (a short why), and optionally
``output_fingerprint``: the fingerprint of the system output the person judged (``per_case`` column of
the same name). A label whose output has since changed is *stale*: it is reported and left out of the
agreement, never silently compared with a verdict on different text.

Per axis and overall: exact agreement, within-one agreement, mean absolute error, quadratic-weighted
Cohen's kappa and n, plus a 3x3 confusion matrix per axis (rows: human, columns: judge). The judge is
trusted only when *every* axis reaches the bar on exact agreement; a good overall average does not save
a weak axis, and an axis with no usable label cannot be trusted.
"""

from __future__ import annotations

import math
from functools import partial
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from qaeval.cases import iter_jsonl
from qaeval.errors import DatasetError, JudgeNotTrusted, Problem
from qaeval.judging import AXES

LABEL_FIELDS = {"case_id", "axis", "score", "reason", "output_fingerprint"}
DEFAULT_MIN_AGREEMENT = 0.7


def load_labels(path: str | Path, known_cases: set[str] | None = None) -> pd.DataFrame:
    """Load hand labels strictly (every problem reported with file and line).

    Returns columns: case_id, axis, human, reason, output_fingerprint (None when absent), line.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"labels file not found: {path}", file=str(path))
    problems: list[Problem] = []
    rows = []
    seen: dict[tuple[str, str], int] = {}
    for number, raw in iter_jsonl(path, problems):
        where = partial(Problem, str(path), number)
        if not isinstance(raw, dict):
            problems.append(where("each line must be one JSON object"))
            continue
        found = [f"unknown field {k!r}" for k in raw if k not in LABEL_FIELDS]
        for key in ("case_id", "axis", "score"):
            if key not in raw:
                found.append(f"missing required field {key!r}")
        cid, axis, score = raw.get("case_id"), raw.get("axis"), raw.get("score")
        if "case_id" in raw and not (isinstance(cid, str) and cid):
            found.append("'case_id' must be a non-empty string")
        elif isinstance(cid, str) and known_cases is not None and cid not in known_cases:
            found.append(f"case {cid!r} is not in the data")
        if "axis" in raw and axis not in AXES:
            found.append(f"'axis' is {axis!r}; expected one of {', '.join(AXES)}")
        if "score" in raw and (isinstance(score, bool) or score not in (0, 1, 2)):
            found.append(f"'score' is {score!r}; expected 0, 1 or 2")
        for key in ("reason", "output_fingerprint"):
            if key in raw and not isinstance(raw[key], str):
                found.append(f"{key!r} must be a string")
        if not found:
            key = (cid, axis)
            if key in seen:
                found.append(f"a second label for {cid} / {axis} (first on line {seen[key]})")
            seen[key] = number
        if found:
            problems.extend(where(p) for p in found)
            continue
        rows.append(dict(case_id=cid, axis=axis, human=int(score), reason=raw.get("reason", ""),
                         output_fingerprint=raw.get("output_fingerprint"), line=number))
    if not rows and not problems:
        problems.append(Problem(str(path), None, "no labels in the file"))
    if problems:
        raise DatasetError(problems)
    return pd.DataFrame(rows, columns=["case_id", "axis", "human", "reason", "output_fingerprint", "line"])


def quadratic_kappa(human: np.ndarray, judge: np.ndarray, categories: int = 3) -> float:
    """Quadratic-weighted Cohen's kappa; NaN when it is undefined (no variation to agree on)."""
    if human.size == 0:
        return math.nan
    observed = np.zeros((categories, categories))
    for h, j in zip(human, judge):
        observed[h, j] += 1
    expected = np.outer(observed.sum(1), observed.sum(0)) / human.size
    i, j = np.indices((categories, categories))
    weights = (i - j) ** 2 / (categories - 1) ** 2
    denominator = (weights * expected).sum()
    return math.nan if denominator == 0 else float(1 - (weights * observed).sum() / denominator)


def agreement_row(name: str, pairs: pd.DataFrame, bar: float) -> dict[str, Any]:
    h = pairs["human"].to_numpy(int)
    j = pairs["judge"].to_numpy(int)
    n = int(h.size)
    if n == 0:
        return dict(axis=name, n=0, exact=math.nan, within_one=math.nan, mae=math.nan, kappa=math.nan,
                    passed=False)
    exact = float((h == j).mean())
    return dict(axis=name, n=n, exact=exact, within_one=float((abs(h - j) <= 1).mean()),
                mae=float(abs(h - j).mean()), kappa=quadratic_kappa(h, j), passed=exact >= bar - 1e-12)


@dataclass
class CalibrationResult:
    pairs: pd.DataFrame
    agreement: pd.DataFrame
    confusion: dict[str, pd.DataFrame]
    min_agreement: float
    judge_label: str
    notes: list[str] = field(default_factory=list)

    @property
    def weak_axes(self) -> list[str]:
        rows = self.agreement[self.agreement["axis"].isin(AXES)]
        return rows[~rows["passed"]]["axis"].tolist()

    @property
    def trusted(self) -> bool:
        return not self.weak_axes

    @property
    def verdict(self) -> str:
        return "TRUST" if self.trusted else "RETUNE JUDGE"

    def raise_for_status(self) -> None:
        if not self.trusted:
            raise JudgeNotTrusted(f"RETUNE JUDGE: weak on {', '.join(self.weak_axes)}", self)

    def to_frame(self) -> pd.DataFrame:
        return self.agreement

    def summary_text(self) -> str:
        lines = [f"CALIBRATION: {self.verdict}   judge {self.judge_label}, bar {self.min_agreement:.2f} exact agreement"]
        lines.append(f"  {'axis':<22} {'n':>4} {'exact':>6} {'within1':>8} {'MAE':>6} {'kappa':>6}")
        f = lambda v: "NaN" if v != v else f"{v:.2f}"  # noqa: E731
        for r in self.agreement.itertuples(index=False):
            mark = "" if r.axis == "overall" else ("  ok" if r.passed else "  <- WEAK")
            lines.append(f"  {r.axis:<22} {r.n:>4} {f(r.exact):>6} {f(r.within_one):>8} {f(r.mae):>6} {f(r.kappa):>6}{mark}")
        excluded = self.pairs[self.pairs["status"] != "compared"]
        if len(excluded):
            lines.append(f"  {len(excluded)} label(s) left out: " + "; ".join(
                f"{r.case_id}/{r.axis} ({r.status})" for r in excluded.itertuples(index=False)))
        lines += [f"  note: {n}" for n in self.notes]
        if not self.trusted:
            lines.append(f"  weak axes: {', '.join(self.weak_axes)}; the judge's numbers on them do not count")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary_text()

    def _repr_html_(self) -> str:
        from qaeval.reports import banner_html

        return banner_html(self.verdict, ", ".join(self.weak_axes) or "every axis clears the bar") + \
            self.agreement.to_html(index=False, escape=True, na_rep="NaN", float_format=lambda v: f"{v:.2f}")


def calibrate(run: Any, labels: pd.DataFrame, *, min_agreement: float = DEFAULT_MIN_AGREEMENT) -> CalibrationResult:
    """Compare the judge's effective scores in ``run`` with hand ``labels``. Pure."""
    per_case = run.per_case.set_index("case_id")
    rows = []
    for lab in labels.itertuples(index=False):
        judge_score = per_case.at[lab.case_id, lab.axis] if lab.case_id in per_case.index else pd.NA
        current_fp = per_case.at[lab.case_id, "output_fingerprint"] if lab.case_id in per_case.index else None
        if lab.output_fingerprint and lab.output_fingerprint != current_fp:
            status = "stale"
        elif judge_score is pd.NA or pd.isna(judge_score):
            status = "not judged"
        else:
            status = "compared"
        rows.append(dict(case_id=lab.case_id, axis=lab.axis, human=lab.human,
                         judge=None if status != "compared" else int(judge_score), status=status,
                         reason=lab.reason))
    pairs = pd.DataFrame(rows, columns=["case_id", "axis", "human", "judge", "status", "reason"])
    pairs["judge"] = pairs["judge"].astype("Int64")
    compared = pairs[pairs["status"] == "compared"]
    agreement = [agreement_row(axis, compared[compared["axis"] == axis], min_agreement) for axis in AXES]
    overall = agreement_row("overall", compared, min_agreement)
    agreement.append(overall)
    confusion = {}
    for axis in AXES:
        sub = compared[compared["axis"] == axis]
        matrix = pd.crosstab(pd.Categorical(sub["human"].astype(int), categories=[0, 1, 2]),
                             pd.Categorical(sub["judge"].astype(int), categories=[0, 1, 2]),
                             rownames=["human"], colnames=["judge"], dropna=False)
        confusion[axis] = matrix
    notes = []
    for axis in AXES:
        if not len(compared[compared["axis"] == axis]):
            notes.append(f"no usable label on {axis}: it cannot be trusted")
    return CalibrationResult(pairs, pd.DataFrame(agreement), confusion, min_agreement,
                             run.judge_config.label(), notes)
