"""A saved record is checked against itself before anything is drawn or decided from it.

A record carries its per-case layers (the case, the output, the checks, retrieval, the judge's verdicts,
the trajectory) and everything they add up to (per-case pass/fail and units, the scoreboard, slices,
and the gate, calibration or drift verdict). When a record is loaded, what can be derived from the
layers is derived again and compared with what the record says; a record that disagrees with its own
data is a ``RecordError`` (exit 65) naming the field, e.g.
``record gate.tiers[2].passed says true but its cases give false``.

``Audit`` collects the disagreements of one load and raises them together. Values are compared as
JSON would hold them: a boolean must be a boolean, a number a number (within ``REL_TOL``: floats pass
through text), a missing number is null. Explanatory text (reasons, details, notes) is not compared
word for word: it may be worded differently by another qaeval version, and no verdict reads it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from qaeval.core.errors import Problem, RecordError

REL_TOL = 1e-9
ABS_TOL = 1e-12
SHOWN = 20  # disagreements listed before "... and N more"


def plain(value: Any) -> Any:
    """A value as JSON holds it: numpy scalars as Python numbers, NaN and pd.NA as None, tuples as lists."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or type(value).__name__ == "NAType":
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def same(stored: Any, computed: Any) -> bool:
    """Whether a stored JSON value says what the recomputed one says (floats within a tight tolerance)."""
    if type(stored) is type(computed) and stored == computed:  # the common case, cheaply
        return True
    stored, computed = plain(stored), plain(computed)
    if isinstance(computed, bool) or isinstance(stored, bool):
        return type(stored) is type(computed) and stored == computed
    if _number(computed):
        return _number(stored) and math.isclose(stored, computed, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    if isinstance(computed, list):
        return isinstance(stored, list) and len(stored) == len(computed) and all(map(same, stored, computed))
    return type(stored) is type(computed) and stored == computed


def show(value: Any, limit: int = 80) -> str:
    text = json.dumps(plain(value), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Audit:
    """The disagreements found in one record."""

    def __init__(self, where: str, written_by: str | None = None) -> None:
        self.where = where
        self.written_by = written_by  # the qaeval version that wrote the record
        self.problems: list[str] = []

    def same(self, field: str, stored: Any, computed: Any, basis: str = "its cases") -> bool:
        """Note a disagreement between ``stored`` (what the record says at ``field``) and ``computed``
        (what ``basis`` gives); True when they agree."""
        if same(stored, computed):
            return True
        self.disagree(field, stored, computed, basis)
        return False

    def disagree(self, field: str, stored: Any, computed: Any, basis: str = "its cases") -> None:
        self.problems.append(f"record {field} says {show(stored)} but {basis} give {show(computed)}")

    def problem(self, message: str) -> None:
        self.problems.append(f"record {message}")

    def done(self) -> None:
        """Raise every disagreement found (a RecordError, exit 65)."""
        if not self.problems:
            return
        listed = self.problems[:SHOWN]
        if len(self.problems) > SHOWN:
            listed.append(f"... and {len(self.problems) - SHOWN} more disagreement(s)")
        from qaeval import __version__

        if self.written_by != __version__:
            listed.append(
                f"the record was written by qaeval {self.written_by or '(unknown version)'} and this is "
                f"{__version__}: if a definition changed in between, write the record again"
            )
        raise RecordError([Problem(self.where, None, p) for p in listed])
