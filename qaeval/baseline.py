"""Baselines: the last green run, written as JSON meant to be reviewed as a diff.

The file holds the metrics (value, interval, n), every case's pass or fail with its reasons and its
share of each metric (what the gate's paired test needs), the judge config, the adapter, k, and the
dataset and case fingerprints. Keys are sorted and nothing time-dependent is written, so re-baselining
an unchanged system produces an empty diff.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from qaeval.errors import BaselineError
from qaeval.metrics import METRIC_NAMES

FORMAT = "qaeval-baseline/1"


def _num(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 6)


def baseline_dict(result: Any) -> dict[str, Any]:
    """The JSON-ready baseline of a RunResult."""
    from qaeval import __version__

    fingerprints = {c.id: c.fingerprint for c in result.suite}
    metrics = {
        row.metric: dict(value=_num(row.value), ci_low=_num(row.ci_low), ci_high=_num(row.ci_high),
                         n=int(row.n), direction=row.direction)
        for row in result.scoreboard.itertuples(index=False)
    }
    cases = {}
    for row in result.per_case.to_dict("records"):
        cases[row["case_id"]] = dict(
            fingerprint=fingerprints[row["case_id"]],
            passed=bool(row["case_passed"]),
            reasons=[r for r in row["fail_reasons"].split("; ") if r],
            outcomes={m: [_num(row[f"{m}__num"]), _num(row[f"{m}__den"])] for m in METRIC_NAMES},
        )
    return dict(
        format=FORMAT, qaeval_version=__version__, adapter=result.adapter,
        judge=result.judge_config.to_dict(), k=result.k, data=str(result.suite.root),
        dataset_fingerprint=result.dataset_fingerprint, metrics=metrics, cases=cases,
    )


def write_baseline(result: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(baseline_dict(result), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


@dataclass(frozen=True)
class Baseline:
    path: str
    data: dict[str, Any]

    @property
    def dataset_fingerprint(self) -> str:
        return self.data["dataset_fingerprint"]

    @property
    def cases(self) -> dict[str, dict[str, Any]]:
        return self.data["cases"]

    def metrics_frame(self) -> pd.DataFrame:
        rows = [dict(metric=m, **{k: v for k, v in d.items()}) for m, d in self.data["metrics"].items()]
        frame = pd.DataFrame(rows)
        frame["value"] = pd.to_numeric(frame["value"]).astype(float)
        return frame

    def outcomes(self, metric: str) -> dict[str, tuple[float, float]]:
        out = {}
        for cid, case in self.cases.items():
            num, den = case["outcomes"].get(metric, [None, None])
            if num is not None and den:
                out[cid] = (float(num), float(den))
        return out


def read_baseline(path: str | Path | None) -> Baseline:
    """Read and check a baseline file. Missing or corrupt is a BaselineError (exit 65), never a pass."""
    if path is None:
        raise BaselineError("no baseline given: write one with `qaeval baseline --data DIR --out FILE`")
    path = Path(path)
    where = str(path)
    if not path.is_file():
        raise BaselineError(f"baseline not found: {path} (write one with `qaeval baseline`)", file=where)
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError:
        raise BaselineError("baseline is not UTF-8 text", file=where) from None
    except json.JSONDecodeError as exc:
        raise BaselineError(f"baseline is not valid JSON (line {exc.lineno}: {exc.msg})", file=where) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BaselineError(f"not a qaeval baseline (expected format {FORMAT!r})", file=where)
    problems = []
    for key, kind in (("dataset_fingerprint", str), ("metrics", dict), ("cases", dict), ("judge", dict)):
        if not isinstance(data.get(key), kind):
            problems.append(f"field {key!r} missing or not a {kind.__name__}")
    if not problems:
        for m in METRIC_NAMES:
            if not isinstance(data["metrics"].get(m), dict) or "value" not in data["metrics"][m]:
                problems.append(f"metric {m!r} missing")
        for cid, case in data["cases"].items():
            if not isinstance(case, dict) or not isinstance(case.get("passed"), bool) \
                    or not isinstance(case.get("outcomes"), dict) or not isinstance(case.get("fingerprint"), str):
                problems.append(f"case {cid!r} is malformed")
                break
    if problems:
        raise BaselineError("baseline is corrupt: " + "; ".join(problems), file=where)
    return Baseline(where, data)
