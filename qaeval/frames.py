"""Building DataFrames with the dtypes we mean, not the ones pandas infers.

pandas 3 turns ``None`` in a column of strings into NaN (which is truthy) and infers its own string
dtype; pandas 2 keeps ``None``. Every frame qaeval returns is built column by column through ``frame``
with an explicit kind per column, so a missing value is the same thing on both:

==========  =====================================================================================
text        object dtype holding ``str`` or ``None`` (test with ``pd.isna`` / ``isna()``)
object      object dtype holding lists, dicts or mixed values as given
bool        numpy bool (no missing values)
boolean     pandas nullable boolean (``<NA>`` when missing)
int         int64 (no missing values)
Int64       pandas nullable integer (``<NA>`` when missing)
float       float64 (NaN when missing)
==========  =====================================================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

DTYPES = {"text": object, "object": object, "bool": "bool", "boolean": "boolean", "int": "int64",
          "Int64": "Int64", "float": "float64"}


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


def column(values: Sequence[Any], kind: str) -> pd.Series:
    if kind == "text":
        return pd.Series([None if _missing(v) else v for v in values], dtype=object)
    if kind in ("Int64", "boolean"):
        return pd.Series([pd.NA if _missing(v) else v for v in values], dtype=DTYPES[kind])
    if kind == "float":
        return pd.Series([float("nan") if _missing(v) else float(v) for v in values], dtype="float64")
    return pd.Series(list(values), dtype=DTYPES[kind])


def frame(rows: Iterable[Mapping[str, Any]], schema: Mapping[str, str]) -> pd.DataFrame:
    """A DataFrame with exactly the columns of ``schema`` ({column: kind}), in that order."""
    rows = list(rows)
    return pd.DataFrame({name: column([r[name] for r in rows], kind) for name, kind in schema.items()},
                        columns=list(schema))


def columns_frame(columns: Mapping[str, Sequence[Any]], schema: Mapping[str, str]) -> pd.DataFrame:
    """Like ``frame`` but from column lists."""
    return pd.DataFrame({name: column(columns[name], kind) for name, kind in schema.items()}, columns=list(schema))


def is_missing(value: Any) -> bool:
    """True for None, NaN and pd.NA: the one test for a missing cell."""
    return _missing(value)
