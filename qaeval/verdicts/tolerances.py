"""The gate's tolerances: how far each gated metric may move the wrong way, from the defaults
(``Metric.tolerance``), a JSON file and ``metric=value`` overrides. Answer correctness is gated only when
asked for: by a tolerance of its own, or by a calibration in the same gate that trusts the judge on its
axis (``trusted_axes``); the bundled offline judge is weak there."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from qaeval.core.errors import DatasetError, Problem, UsageError
from qaeval.core.files import read_text
from qaeval.core.jsonfile import loads_strict
from qaeval.scoring.metrics import GATED, OPT_IN, Metric

DEFAULT_TOLERANCES: dict[str, float] = dict(GATED)


def gated(metrics: Sequence[Metric]) -> dict[str, float]:
    """The default tolerance of every gated metric among ``metrics`` (a run's, registered ones included)."""
    return {m.name: m.tolerance for m in metrics if m.tolerance is not None}


def opt_in(metrics: Sequence[Metric]) -> dict[str, float]:
    """The metrics among ``metrics`` that are gated only when asked for, with the tolerance they then get."""
    return {m.name: m.opt_in_tolerance for m in metrics if m.tolerance is None and m.opt_in_tolerance is not None}


def trusted_axes(
    tolerances: Mapping[str, float], metrics: Sequence[Metric], calibration: Any, *, adaptive: bool = False
) -> dict[str, float]:
    """``tolerances`` with every opt-in metric whose label axis the calibration trusts added at its
    opt-in tolerance (a tolerance the user gave is kept). A calibration that refused the judge adds none:
    that gate blocks on the refusal; nor does an ``adaptive`` run (``refuse_adaptive``)."""
    if calibration is None or not calibration.ok or adaptive:
        return dict(tolerances)
    trusted = set(calibration.axes)
    added = {
        m.name: float(m.opt_in_tolerance)
        for m in metrics
        if m.tolerance is None and m.opt_in_tolerance is not None and m.label_axis in trusted
    }
    return {**tolerances, **{k: v for k, v in added.items() if k not in tolerances}}


ADAPTIVE_WHY = (
    "adaptive trials chose which cases to ask again by each case's pass, which does not count a right "
    "answer: a case answered wrongly in its first trial got no more"
)


def refuse_adaptive(tolerances: Mapping[str, float], metrics: Sequence[Metric], adaptive: bool) -> None:
    """An opt-in metric (answer correctness) asked for in a gate of adaptive trials is a UsageError: its
    per-case rule would judge a case on the one trial the adaptive rule gave it (``ADAPTIVE_WHY``)."""
    asked = [name for name in opt_in(metrics) if name in tolerances]
    if adaptive and asked:
        raise UsageError(f"{', '.join(asked)} cannot be gated with --adaptive: {ADAPTIVE_WHY}; use fixed --trials")


def load_tolerances(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    defaults: Mapping[str, float] = DEFAULT_TOLERANCES,
    optional: Mapping[str, float] = OPT_IN,
) -> dict[str, float]:
    """Defaults (the built-in gated metrics', or ``gated(run.metrics)``), then a JSON file
    ``{"metric": tolerance}``, then ``metric=value`` overrides. A metric of ``optional`` (gated only when
    asked for: answer correctness) is gated when the file or an override gives it a tolerance.

    The file is input data: whatever is wrong with its content (not JSON, not an object, a metric that is
    not gated, a tolerance that is not a finite number >= 0) is a DatasetError (exit 65) naming the file
    and the metric, every problem at once. The same mistakes in an override are a UsageError (exit 64)
    naming the ``--tolerance`` flag."""
    tolerances = dict(defaults)
    if path is not None:
        tolerances.update(_from_file(path, defaults, optional))
    for item in overrides or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--tolerance expects metric=value, got {item!r}")
        try:
            number = float(value)
        except ValueError:
            raise UsageError(f"--tolerance {item!r}: {value!r} is not a number") from None
        problem = _problem(name.strip(), number, defaults, optional)
        if problem:
            raise UsageError(f"--tolerance {item}: {problem}")
        tolerances[name.strip()] = number
    return tolerances


def _from_file(path: str | Path, defaults: Mapping[str, float], optional: Mapping[str, float]) -> dict[str, float]:
    """The tolerances a JSON file gives, or a DatasetError listing every problem in it, each with the
    file and the metric it is about."""
    where = str(path)
    try:
        data = loads_strict(read_text(path, "tolerances file"))
    except ValueError as exc:
        raise DatasetError(f"tolerances file is not valid JSON ({exc})", file=where) from None
    if not isinstance(data, dict):
        raise DatasetError(
            f'a tolerances file holds one JSON object, {{"metric": tolerance}}, not {type(data).__name__}', file=where
        )
    problems = [
        Problem(where, None, f"tolerances file: {problem}")
        for name, value in data.items()
        if (problem := _problem(name, value, defaults, optional))
    ]
    if problems:
        raise DatasetError(problems, file=where)
    return {name: float(value) for name, value in data.items()}


def _problem(name: str, value: Any, defaults: Mapping[str, float], optional: Mapping[str, float]) -> str:
    """What is wrong with a tolerance ``value`` for metric ``name``, naming the metric ("" when nothing is)."""
    if name not in defaults and name not in optional:
        also = f"; gated when given a tolerance: {', '.join(optional)}" if optional else ""
        return f"no gated metric named {name!r}; gated: {', '.join(defaults)}{also}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return f"tolerance for {name} must be a finite number >= 0, got {value!r}"
    return ""
