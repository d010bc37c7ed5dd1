"""The gate's tolerances: how far each gated metric may move the wrong way, from the defaults, a JSON file
and ``metric=value`` overrides."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from qaeval.core.errors import DatasetError, UsageError
from qaeval.core.files import read_text
from qaeval.core.jsonfile import loads_strict
from qaeval.scoring.metrics import GATED, Metric

DEFAULT_TOLERANCES: dict[str, float] = dict(GATED)


def gated(metrics: Sequence[Metric]) -> dict[str, float]:
    """The default tolerance of every gated metric among ``metrics`` (a run's, registered ones included)."""
    return {m.name: m.tolerance for m in metrics if m.tolerance is not None}


def load_tolerances(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    defaults: Mapping[str, float] = DEFAULT_TOLERANCES,
) -> dict[str, float]:
    """Defaults (the built-in gated metrics', or ``gated(run.metrics)``), then a JSON file
    ``{"metric": tolerance}``, then ``metric=value`` overrides."""
    tolerances = dict(defaults)
    updates: dict[str, Any] = {}
    if path is not None:
        try:
            data = loads_strict(read_text(path, "tolerances file"))
        except ValueError as exc:
            raise DatasetError(f"tolerances file is not valid JSON ({exc})", file=str(path)) from None
        if not isinstance(data, dict):
            raise DatasetError("tolerances file must hold a JSON object", file=str(path))
        updates.update(data)
    for item in overrides or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--tolerance expects metric=value, got {item!r}")
        try:
            updates[name.strip()] = float(value)
        except ValueError:
            raise UsageError(f"--tolerance {item!r}: {value!r} is not a number") from None
    for name, value in updates.items():
        if name not in defaults:
            raise UsageError(f"no gated metric named {name!r}; gated: {', '.join(defaults)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise UsageError(f"tolerance for {name} must be a finite number >= 0, got {value!r}")
        tolerances[name] = float(value)
    return tolerances
