"""Calibration: does the judge agree with people before its numbers count?

Human labels (``qaeval.data.labels``) are compared with the judge's effective score on the same case and
axis; a label whose output changed since it was given is *stale*: reported, never compared. The judge is
TRUSTED when every assessed axis (``axes``) clears three bars: ``labels`` (at least ``min_labels``),
``exact`` (agreement of at least ``min_agreement``; a good overall average does not save a weak axis)
and ``kappa`` (quadratic-weighted, at least ``min_kappa``, where the people's scores have ``spread``:
exact agreement alone rewards a judge that always gives the dominant score). docs/guides/judge.md says why.

The agreement frame's ``failed`` names the bars an assessed axis missed (comma-separated, empty when it
passed), ``assessed`` whether the axis decides, ``spread`` whether kappa could measure it, ``status`` says
it in words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from qaeval.core.audit import Audit
from qaeval.core.errors import JudgeNotTrusted, UsageError
from qaeval.core.frames import (
    Each,
    Fields,
    Fixed,
    Keyed,
    Maybe,
    frame,
    frame_rows,
    is_missing,
    rows_of,
    shape_problems,
    text_frame,
)
from qaeval.core.results import Result
from qaeval.data.schema import AXES
from qaeval.scoring.metrics import format_interval, format_number
from qaeval.scoring.result import RunResult
from qaeval.verdicts.agreement import (
    AGREEMENT_SCHEMA,
    AGREEMENT_VALUES,
    DEFAULT_MIN_AGREEMENT,
    DEFAULT_MIN_KAPPA,
    DEFAULT_MIN_LABELS,
    ONE_SCORE,
    agreement_row,
)

PAIR_SCHEMA = {
    "case_id": "text",
    "axis": "text",
    "human": "int",
    "judge": "Int64",
    "status": "text",
    "agree": "boolean",
    "reason": "text",
    "judge_quote": "text",
    "judge_rationale": "text",
    "judge_valid": "boolean",
    "output_fingerprint": "text",
    "label_fingerprint": "text",
}
SECTION = Fields(
    dict(  # the calibration section of a record ("confusion": {axis: 3x3 counts, human by judge})
        pairs=rows_of(PAIR_SCHEMA, optional=("label_fingerprint",)),
        agreement=rows_of(AGREEMENT_SCHEMA),
        confusion=Keyed(Fixed((Fixed(("int",) * 3),) * 3)),
        min_agreement="number",
        min_labels="int",
        min_kappa="number",
        axes=Each("str"),
        judge_label="str",
        source="text",
        labelled="bool",
        notes=Maybe(Each("str")),
    ),
    optional=("source", "notes"),
)


def axes_to_assess(asked: list[str] | tuple[str, ...], labelled: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The axes a calibration is decided on, in axis order: those ``asked`` for (each item may list
    several, comma-separated), else those ``labelled``. An unknown name is a usage error."""
    names = [a.strip() for item in asked for a in item.split(",") if a.strip()] or list(labelled)
    unknown = [a for a in names if a not in AXES]
    if unknown:
        raise UsageError(f"axes: {', '.join(repr(a) for a in unknown)} is not an axis; the axes are {', '.join(AXES)}")
    return tuple(a for a in AXES if a in names)


@dataclass(repr=False)
class CalibrationResult(Result):
    """How far the judge agrees with human labels, per axis; its verdict says whether to trust it.

    ``ok`` (TRUSTED) when every assessed axis clears the bars; ``raise_for_status()`` raises
    ``JudgeNotTrusted``.

    Attributes:
        run: The run whose outputs were labelled and judged.
        pairs: One row per label: case, axis, the human's and the judge's score, whether they agree.
        agreement: One row per axis: agreement, Cohen's kappa, n, and whether it passed the bars.
        confusion: Per axis, the human-by-judge table of scores.
        min_agreement: The least agreement an axis needs.
        min_labels: The fewest labels an axis needs.
        min_kappa: The least kappa an axis needs.
        axes: The assessed axes, in axis order.
        judge_label: The judge that was calibrated (``JudgeConfig.label()``).
        source: Where the labels came from.
        labelled: True when the run's cases and outputs came from a labelled set.
        notes: What the result says about itself.
    """

    run: RunResult
    pairs: pd.DataFrame
    agreement: pd.DataFrame
    confusion: dict[str, pd.DataFrame]
    min_agreement: float
    min_labels: int
    min_kappa: float
    axes: tuple[str, ...]
    judge_label: str
    source: str = ""
    labelled: bool = False
    notes: list[str] = field(default_factory=list)

    kind = "calibrate"
    error_type = JudgeNotTrusted
    words = ("TRUSTED", "RETUNE JUDGE")

    def _axes_where(self, mask: pd.Series) -> list[str]:
        return self.agreement.loc[self.agreement["axis"].isin(AXES) & mask, "axis"].tolist()

    @property
    def weak_axes(self) -> list[str]:
        """Assessed axes that missed a bar."""
        return self._axes_where(self.agreement["assessed"] & ~self.agreement["passed"])

    @property
    def not_assessed(self) -> list[str]:
        return self._axes_where(~self.agreement["assessed"])

    @property
    def unmeasured_axes(self) -> list[str]:
        """Assessed axes with labels on which the people gave one score only (judged on exact agreement alone)."""
        a = self.agreement
        return self._axes_where(a["assessed"] & (a["n"] > 0) & ~a["spread"])

    @property
    def ok(self) -> bool:
        return not self.weak_axes

    @property
    def bars_text(self) -> str:
        return (
            f"{self.min_agreement:.2f} exact agreement and {self.min_kappa:.2f} quadratic kappa (where people's "
            f"scores vary) on at least {self.min_labels} labels"
        )

    @property
    def reason(self) -> str:
        rows = self.agreement.set_index("axis")
        if self.ok:
            which = "every axis" if not self.not_assessed else f"every assessed axis ({', '.join(self.axes)})"
            parts = [f"{which} reaches {self.bars_text}"]
            if self.unmeasured_axes:
                parts.append(f"on {', '.join(self.unmeasured_axes)} {ONE_SCORE}")
        else:
            parts = [f"{axis}: {rows.at[axis, 'status']}" for axis in self.weak_axes]
        if self.not_assessed:
            parts.append(f"not assessed: {', '.join(self.not_assessed)}")
        return "; ".join(parts)

    @property
    def overall_clears_bar(self) -> bool:
        """Whether the assessed axes pooled (when there are several) would clear the exact and kappa bars."""
        o = self.agreement.set_index("axis").loc["overall"]
        kappa_ok = not o["spread"] or o["kappa"] >= self.min_kappa - 1e-12
        return bool(len(self.axes) > 1 and o["n"] and o["exact"] >= self.min_agreement - 1e-12 and kappa_ok)

    def disagreements(self) -> pd.DataFrame:
        """Compared labels where the judge and the person differ, largest gap first.

        Returns:
            Those rows of ``pairs``.
        """
        compared = self.pairs[self.pairs["status"] == "compared"]
        gap = (compared["human"] - compared["judge"].astype("int64")).abs()
        ordered = (
            compared[gap > 0]
            .assign(_gap=gap[gap > 0])
            .sort_values(["_gap", "axis", "case_id"], ascending=[False, True, True])
        )
        return text_frame(ordered.drop(columns="_gap"))

    def summary_text(self) -> str:
        lines = [
            f"CALIBRATION: {self.verdict}   judge {self.judge_label}, bars per axis: {self.bars_text}"
            + (f"   labels: {self.source}" if self.source else "")
        ]
        lines.append(f"  {'axis':<22} {'n':>4} {'exact':>6} {'95% CI':<13} {'within1':>8} {'MAE':>6} {'kappa':>6}")
        f = partial(format_number, digits=2)
        for r in self.agreement.itertuples(index=False):
            ci = format_interval(r.exact_low, r.exact_high, r.n, digits=2)
            lines.append(
                f"  {r.axis:<22} {r.n:>4} {f(r.exact):>6} {ci:<13} {f(r.within_one):>8} {f(r.mae):>6} "
                f"{f(r.kappa):>6}{_mark(r)}"
            )
        if not self.ok and self.overall_clears_bar:
            lines.append("  the overall figure clears the bar, but the judge is only as good as its weakest axis")
        passed_alone = [a for a in self.unmeasured_axes if a not in self.weak_axes]
        if passed_alone:
            lines.append(f"  exact alone: on {', '.join(passed_alone)} {ONE_SCORE} (kappa needs more than one score)")
        if self.not_assessed:
            lines.append(
                f"  not assessed: {', '.join(self.not_assessed)} (calibrated on {', '.join(self.axes)}; "
                "--axes chooses); the judge's numbers on them are not certified"
            )
        excluded = self.pairs[self.pairs["status"] != "compared"]
        if len(excluded):
            lines.append(
                f"  {len(excluded)} label(s) left out: "
                + "; ".join(f"{r.case_id}/{r.axis} ({r.status})" for r in excluded.itertuples(index=False))
            )
        lines += [f"  note: {n}" for n in self.notes]
        if not self.ok:
            lines.append(f"  weak axes: {', '.join(self.weak_axes)}; the judge's numbers on them do not count")
        return "\n".join(lines)

    def to_frame(self) -> pd.DataFrame:
        return self.agreement

    def record_section(self) -> dict[str, Any]:
        return dict(
            pairs=frame_rows(self.pairs),
            agreement=frame_rows(self.agreement),
            confusion={axis: m.to_numpy().tolist() for axis, m in self.confusion.items()},
            min_agreement=self.min_agreement,
            min_labels=self.min_labels,
            min_kappa=self.min_kappa,
            axes=list(self.axes),
            judge_label=self.judge_label,
            source=self.source,
            labelled=self.labelled,
            notes=self.notes,
        )

    @classmethod
    def section_problems(cls, s: Mapping[str, Any], prefix: str = "calibration") -> list[str]:
        return shape_problems(s, SECTION, prefix)  # see GateResult.section_problems

    @classmethod
    def from_section(cls, run: RunResult, s: Mapping[str, Any]) -> CalibrationResult:
        pairs = [{"label_fingerprint": None, **p} for p in s["pairs"]]  # older records did not keep it
        return cls(
            run=run,
            pairs=frame(pairs, PAIR_SCHEMA),
            agreement=frame(s["agreement"], AGREEMENT_SCHEMA),
            confusion={
                axis: _matrix(np.array(s["confusion"][axis], dtype=int)) for axis in AXES if axis in s["confusion"]
            },
            min_agreement=float(s["min_agreement"]),
            min_labels=int(s["min_labels"]),
            min_kappa=float(s["min_kappa"]),
            axes=tuple(s["axes"]),
            judge_label=str(s["judge_label"]),
            source=str(s.get("source") or ""),
            labelled=s["labelled"],
            notes=list(s.get("notes") or []),
        )

    def audit_section(self, audit: Audit, s: Mapping[str, Any], prefix: str = "calibration") -> None:
        """Calibrate again from the run's cases and the labels the pairs carry, with the record's bars and
        axes, and note where the section disagrees: each pair, every axis's figures, the confusion matrices."""
        if not (0 <= self.min_agreement <= 1 and 0 <= self.min_kappa <= 1 and self.min_labels >= 1):
            audit.problem(
                f"{prefix} bars {self.min_agreement!r} (exact), {self.min_kappa!r} (kappa) / minimum "
                f"{self.min_labels!r} are out of range"
            )
            return
        if not self.axes or list(self.axes) != [a for a in AXES if a in self.axes]:
            audit.problem(f"{prefix}.axes {list(self.axes)!r} are not axes of {', '.join(AXES)} in that order")
            return
        bad = [
            j
            for j, p in enumerate(s["pairs"])
            if p.get("axis") not in AXES or p.get("human") not in (0, 1, 2) or isinstance(p.get("human"), bool)
        ]
        if bad:
            audit.problem(
                f"{prefix}.pairs[{bad[0]}] is not a label: an axis of {', '.join(AXES)} and a score 0, 1 or 2"
            )
            return
        labels = frame(
            [
                dict(
                    case_id=p.get("case_id"),
                    axis=p["axis"],
                    human=p["human"],
                    reason=p.get("reason"),
                    output_fingerprint=p.get("label_fingerprint"),
                )
                for p in s["pairs"]
            ],
            {"case_id": "text", "axis": "text", "human": "int", "reason": "text", "output_fingerprint": "text"},
        )
        again = calibrate(
            self.run,
            labels,
            min_agreement=self.min_agreement,
            min_labels=self.min_labels,
            min_kappa=self.min_kappa,
            axes=self.axes,
        )
        for j, (stored, row) in enumerate(zip(s["pairs"], again.pairs.to_dict("records"))):
            for column in ("status", "judge", "agree", "judge_valid", "output_fingerprint"):
                audit.same(
                    f"{prefix}.pairs[{j}].{column} ({row['case_id']}, {row['axis']})", stored.get(column), row[column]
                )
        if not audit.same(
            f"{prefix}.agreement axes", [r.get("axis") for r in s["agreement"]], again.agreement["axis"].tolist()
        ):
            return
        for j, (stored, row) in enumerate(zip(s["agreement"], again.agreement.to_dict("records"))):
            for column in AGREEMENT_VALUES:
                audit.same(f"{prefix}.agreement[{j}].{column} ({row['axis']})", stored.get(column), row[column])
        for axis, matrix in again.confusion.items():
            audit.same(f"{prefix}.confusion.{axis}", s["confusion"].get(axis), matrix.to_numpy().tolist())


def _mark(r: Any) -> str:
    """What the summary's table says after an axis's figures."""
    if r.axis == "overall":
        return ""
    if not r.assessed:
        return "  not assessed"
    if not r.passed:
        return f"  <- {r.status}"
    return "  ok" if r.spread else "  ok (exact alone)"


def _matrix(values: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(values, index=pd.Index([0, 1, 2], name="human"), columns=pd.Index([0, 1, 2], name="judge"))


def _pair_rows(run: RunResult, labels: pd.DataFrame) -> list[dict[str, Any]]:
    """Each label beside the judge's effective score on the same case and axis (a case's weakest
    citation for citation correctness), with whether they could be compared."""
    pc = run.per_case.set_index("case_id")
    verdicts = {
        (r["case_id"], r["axis"]): r for r in run.verdicts.to_dict("records") if r["axis"] != "citation_correctness"
    }
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
        rows.append(
            dict(
                case_id=cid,
                axis=axis,
                human=int(lab["human"]),
                judge=int(judge_score) if compared else None,
                status=status,
                agree=(int(judge_score) == int(lab["human"])) if compared else None,
                reason=lab.get("reason") or "",
                judge_quote=verdict.get("quote") or "",
                judge_rationale=verdict.get("rationale") or "",
                judge_valid=verdict.get("valid") if verdict else None,
                output_fingerprint=current_fp,
                label_fingerprint=None if is_missing(fp) else fp,
            )
        )
    return rows


def calibrate(
    run: RunResult,
    labels: pd.DataFrame,
    *,
    min_agreement: float = DEFAULT_MIN_AGREEMENT,
    min_labels: int = DEFAULT_MIN_LABELS,
    min_kappa: float = DEFAULT_MIN_KAPPA,
    axes: tuple[str, ...] = AXES,
    source: str = "",
    labelled: bool = False,
) -> CalibrationResult:
    """Compare the judge's effective scores in ``run`` with human ``labels``, deciding on ``axes``
    (a non-empty selection of ``AXES``; see ``axes_to_assess``). Pure."""
    if not axes or set(axes) - set(AXES):
        raise ValueError(f"axes must be a non-empty selection of {', '.join(AXES)}, got {axes!r}")
    axes = tuple(a for a in AXES if a in axes)
    pairs = frame(_pair_rows(run, labels), PAIR_SCHEMA)
    compared = pairs[pairs["status"] == "compared"]
    bars: dict[str, Any] = dict(bar=min_agreement, min_labels=min_labels, min_kappa=min_kappa)
    stale = pairs[pairs["status"] == "stale"]["axis"].value_counts()
    agreement = [
        agreement_row(
            axis, compared[compared["axis"] == axis], assessed=axis in axes, stale=int(stale.get(axis, 0)), **bars
        )
        for axis in AXES
    ]
    agreement.append(agreement_row("overall", compared[compared["axis"].isin(axes)], assessed=False, **bars))
    confusion: dict[str, pd.DataFrame] = {}
    for axis in AXES:
        sub = compared[compared["axis"] == axis]
        matrix = np.zeros((3, 3), dtype=int)
        np.add.at(matrix, (sub["human"].to_numpy(int), sub["judge"].to_numpy(int)), 1)
        confusion[axis] = _matrix(matrix)
    notes = [
        f"no usable label on {axis}: it cannot be trusted"
        for axis in axes
        if not len(compared[compared["axis"] == axis])
    ]
    return CalibrationResult(
        run=run,
        pairs=pairs,
        agreement=frame(agreement, AGREEMENT_SCHEMA),
        confusion=confusion,
        min_agreement=min_agreement,
        min_labels=min_labels,
        min_kappa=min_kappa,
        axes=axes,
        judge_label=run.judge_config.label(),
        source=source,
        labelled=labelled,
        notes=notes,
    )
