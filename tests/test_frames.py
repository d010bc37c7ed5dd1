"""qaeval.core.frames: columns built the quick way hold exactly what the cell-by-cell way builds."""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest

from qaeval.core.frames import column, is_missing


def by_cell(values, kind):
    """The cell-by-cell construction ``column`` uses whenever a value is not a plain one."""
    if kind == "text":
        return pd.Series([None if is_missing(v) else v for v in values], dtype=object)
    return pd.Series([float("nan") if is_missing(v) else float(v) for v in values], dtype="float64")


PLAIN = {
    "float": [0, 1, -3, 2.5, -0.0, 1e308, True, False, None, math.nan, math.inf, 2**53 + 1],
    "text": ["", "a", "é", "\x00", "a" * 1000, None],
}


@pytest.mark.parametrize("kind", ["float", "text"])
def test_plain_columns_match_the_cell_by_cell_construction(kind):
    rng = random.Random(7)
    for n in (0, 1, 5, 200):
        values = [rng.choice(PLAIN[kind]) for _ in range(n)]
        fast, slow = column(values, kind), by_cell(values, kind)
        assert fast.dtype == slow.dtype
        assert fast.tolist() == slow.tolist() or fast.equals(slow)
        assert [type(v) for v in fast.tolist()] == [type(v) for v in slow.tolist()]


def test_a_column_with_other_missing_values_still_reads_them_as_missing():
    nan_text = column(["a", math.nan, pd.NA, None], "text")
    assert nan_text.tolist() == ["a", None, None, None]
    floats = column([1, pd.NA, None, math.nan], "float")
    assert floats.iloc[0] == 1.0 and floats.iloc[1:].isna().all() and floats.dtype == "float64"


def test_a_float_column_refuses_what_float_refuses():
    for bad, error in (("x", ValueError), (10**400, OverflowError), ([1], TypeError)):
        with pytest.raises(error):
            column([1.0, bad], "float")
