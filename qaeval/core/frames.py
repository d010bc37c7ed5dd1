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

import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

DTYPES = {
    "text": object,
    "object": object,
    "bool": "bool",
    "boolean": "boolean",
    "int": "int64",
    "Int64": "Int64",
    "float": "float64",
}


def is_missing(value: Any) -> bool:
    """True for None, NaN and pd.NA: the one test for a missing cell."""
    if value is None:
        return True
    kind = type(value)
    if kind is str or kind is bool or kind is int:  # the common cells, answered without a lookup
        return False
    return (isinstance(value, float) and value != value) or kind.__name__ == "NAType"


_PLAIN_TEXT = frozenset({str, type(None)})
_PLAIN_NUMBERS = frozenset({float, int, bool, type(None)})


def column(values: Sequence[Any], kind: str, index: pd.Index | None = None) -> pd.Series:
    """``values`` as a Series of column kind ``kind`` (``index``: the frame's, shared by its columns)."""
    import pandas as pd

    if kind == "text":
        if set(map(type, values)) <= _PLAIN_TEXT:  # nothing to replace: skip the per-cell test (a column of
            return pd.Series(list(values), dtype=object, index=index)  # 10,000 is a tenth of a millisecond, not one)
        return pd.Series([None if is_missing(v) else v for v in values], dtype=object, index=index)
    if kind in ("Int64", "boolean"):
        return pd.Series([pd.NA if is_missing(v) else v for v in values], dtype=DTYPES[kind], index=index)
    if kind == "float":
        if set(map(type, values)) <= _PLAIN_NUMBERS:  # NumPy reads None as NaN and converts in C
            import numpy as np

            return pd.Series(np.array(values, dtype=np.float64), dtype="float64", index=index)
        return pd.Series([float("nan") if is_missing(v) else float(v) for v in values], dtype="float64", index=index)
    return pd.Series(list(values), dtype=DTYPES[kind], index=index)


def frame(rows: Iterable[Mapping[str, Any]], schema: Mapping[str, str]) -> pd.DataFrame:
    """A DataFrame with exactly the columns of ``schema`` ({column: kind}), in that order."""
    rows = list(rows)
    return columns_frame({name: [r[name] for r in rows] for name in schema}, schema)


def columns_frame(columns: Mapping[str, Sequence[Any]], schema: Mapping[str, str]) -> pd.DataFrame:
    """Like ``frame`` but from column lists (all of one length)."""
    import pandas as pd

    length = len(next(iter(columns.values()), ())) if schema else 0
    index = pd.RangeIndex(length)  # one object for every column and the frame: pandas neither unions nor reindexes
    return pd.DataFrame(
        {name: column(columns[name], kind, index) for name, kind in schema.items()}, index=index, columns=list(schema)
    )


_KIND_TYPES: dict[str, tuple[tuple[type, ...], bool]] = {  # kind: (the JSON types it takes, whether None is one)
    "str": ((str,), False),
    "list": ((list,), False),
    "dict": ((dict,), False),
    "Dict": ((dict,), True),
    "text": ((str,), True),
    "bool": ((bool,), False),
    "boolean": ((bool,), True),
    "int": ((int,), False),
    "Int64": ((int,), True),
    "float": ((int, float), True),
    "number": ((int, float), False),
}


def row_problems(rows: Any, schema: Mapping[str, str], where: str) -> list[str]:
    """Why ``rows`` (read from a file) cannot be a frame of ``schema``: not a list of objects, or a field
    missing or of the wrong JSON type (``true`` is not an int). Each problem names its place, e.g.
    ``cases[3].verdicts[0].score is str, not int or null``. Columns of kind ``object`` take anything."""
    if not isinstance(rows, list):
        return [f"{where} is {type(rows).__name__}, not a list"]
    return [p for i, row in enumerate(rows) for p in object_problems(row, schema, f"{where}[{i}]")]


def object_problems(row: Any, schema: Mapping[str, str], where: str) -> list[str]:
    """Why one JSON object cannot be a row of ``schema`` (see ``row_problems``)."""
    if not isinstance(row, dict):
        return [f"{where} is {type(row).__name__}, not an object"]
    return [f"{where}.{name} {problem}" for name, kind in schema.items() if (problem := value_problem(row, name, kind))]


def value_problem(row: Mapping[str, Any], name: str, kind: str) -> str:
    """Why ``row[name]`` is not a value of column kind ``kind`` ("" when it is)."""
    return "is missing" if name not in row else kind_problem(row[name], kind)


def kind_problem(value: Any, kind: str) -> str:
    """Why ``value`` is not a value of column kind ``kind`` ("" when it is)."""
    types, nullable = _KIND_TYPES.get(kind, ((object,), True))
    if value is None and nullable:
        return ""
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        return (
            f"is {type(value).__name__}, not {' or '.join(t.__name__ for t in types)}{' or null' if nullable else ''}"
        )
    return ""


# --------------------------------------------------------------------------- shapes of JSON values
#
# A shape says what a JSON value read from a file must be, so that what is built from it afterwards can
# trust its types: a column kind above ("str", "int", "float", "number" (a float that may not be null),
# ...), or one of the classes below, nested as the value nests. ``shape_problems`` names every place that
# is not what its shape says.


@dataclass(frozen=True)
class Fields:
    """A JSON object with these fields, each of its own shape; those in ``optional`` may be absent."""

    fields: Mapping[str, Any]
    optional: tuple[str, ...] = ()


@dataclass(frozen=True)
class Each:
    """A JSON array whose items are each of ``item``'s shape."""

    item: Any


@dataclass(frozen=True)
class Fixed:
    """A JSON array of exactly these items, each of its own shape (``[numerator, denominator]``)."""

    items: tuple[Any, ...]


@dataclass(frozen=True)
class Keyed:
    """A JSON object keyed by names of the data's own (case ids, metrics, axes), each value of one shape."""

    value: Any


@dataclass(frozen=True)
class Maybe:
    """null, or a value of ``shape``."""

    shape: Any


@dataclass(frozen=True)
class Valid:
    """A value of ``shape`` that also passes ``test`` (what a type cannot say); ``what`` names what it must be."""

    shape: Any
    test: Callable[[Any], bool]
    what: str


def rows_of(schema: Mapping[str, str], optional: tuple[str, ...] = (), **narrowed: Any) -> Each:
    """A list of rows of a frame ``schema``, with the shapes of some columns ``narrowed`` (a column of kind
    ``object`` takes anything, but what reads it may need a list of strings)."""
    return Each(Fields({**schema, **narrowed}, optional))


_LIMITS = {"int": 2**63, "Int64": 2**63, "float": sys.float_info.max, "number": sys.float_info.max}
_EXACT = {
    kind: frozenset(types) | ({type(None)} if nullable else set()) for kind, (types, nullable) in _KIND_TYPES.items()
}


def _fits(value: Any, kind: str) -> bool:
    """The quick yes for the common value (a type the kind takes, a number in range); False: look closer."""
    exact = _EXACT.get(kind)
    if exact is None:
        return True  # "object": anything
    limit = _LIMITS.get(kind)
    return type(value) in exact and (limit is None or value is None or -limit <= value <= limit)


def _kind_problems(value: Any, kind: str, where: str) -> list[str]:
    if _fits(value, kind):
        return []
    problem = kind_problem(value, kind)
    if not problem and kind in _LIMITS and value is not None and not -_LIMITS[kind] <= value <= _LIMITS[kind]:
        text = str(value)  # inf (from 1e999), or an int no int64 (or float) holds
        problem = f"is {text if len(text) <= 20 else text[:17] + '...'}, out of range"
    return [f"{where} {problem}"] if problem else []


def shape_problems(value: Any, shape: Any, where: str) -> list[str]:
    """Every place in ``value`` (read from a file) that is missing or not of ``shape``, named from ``where``:
    ``gate.tiers[1].passed is str, not bool``, ``drift.bands[0].metric is missing``."""
    if isinstance(shape, str):
        return _kind_problems(value, shape, where)
    if isinstance(shape, Maybe):
        return [] if value is None else shape_problems(value, shape.shape, where)
    if isinstance(shape, Valid):
        problems = shape_problems(value, shape.shape, where)
        if problems or shape.test(value):
            return problems
        return [
            f"{where} is not {shape.what}"
            if isinstance(value, (list, dict))
            else f"{where} is {str(value)[:40]!r}, not {shape.what}"
        ]
    if isinstance(shape, (Each, Fixed)):
        if not isinstance(value, list):
            return [f"{where} is {type(value).__name__}, not a list"]
        if isinstance(shape, Fixed) and len(value) != len(shape.items):
            return [f"{where} has {len(value)} item(s), not {len(shape.items)}"]
        items = shape.items if isinstance(shape, Fixed) else [shape.item] * len(value)
        return [p for i, (v, s) in enumerate(zip(value, items)) for p in shape_problems(v, s, f"{where}[{i}]")]
    if not isinstance(value, dict):
        return [f"{where} is {type(value).__name__}, not an object"]
    if isinstance(shape, Keyed):
        return [p for key, v in value.items() for p in shape_problems(v, shape.value, f"{where}.{key}")]
    problems = []
    for name, field in shape.fields.items():  # a loop, not a comprehension: a record may hold 100,000 rows
        if name not in value:
            problems += [] if name in shape.optional else [f"{where}.{name} is missing"]
        elif not (isinstance(field, str) and _fits(value[name], field)):
            problems += shape_problems(value[name], field, f"{where}.{name}")
    return problems


class Rows:
    """Collects a frame row by row into column lists (no dict per row is kept), then builds it."""

    def __init__(self, schema: Mapping[str, str]) -> None:
        self.schema = schema
        self.columns: dict[str, list[Any]] = {name: [] for name in schema}
        self._appends = [(name, column.append) for name, column in self.columns.items()]

    def add(self, **values: Any) -> None:
        for name, append in self._appends:
            append(values[name])

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()), []))

    def frame(self) -> pd.DataFrame:
        return columns_frame(self.columns, self.schema)


class RowsByKey:
    """A frame's rows looked up by a key column (``case_id``), each built as a dict only when asked for, so
    a hundred thousand rows are not a hundred thousand dicts at once."""

    def __init__(self, df: pd.DataFrame, key: str = "case_id") -> None:
        self.columns = {c: df[c].tolist() for c in df.columns}
        self.index = {k: i for i, k in enumerate(self.columns[key])}

    def row(self, i: int) -> dict[str, Any]:
        return {c: v[i] for c, v in self.columns.items()}

    def __getitem__(self, key: Any) -> dict[str, Any]:
        return self.row(self.index[key])

    def __contains__(self, key: object) -> bool:
        return key in self.index

    def __len__(self) -> int:
        return len(self.index)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self.row(i) for i in range(len(self.index)))


def text_frame(df: pd.DataFrame, empty: str = "No rows.") -> pd.DataFrame:
    """``df`` as a frame that shows its text in full in a notebook (wrapped, escaped, never cut at
    pandas' column width), and ``empty`` when it has no rows (not pandas' "Empty TextFrame");
    otherwise an ordinary DataFrame."""
    shown = __getattr__("TextFrame")(df)
    shown.empty_text = empty
    return shown


def _text_frame_class() -> type:
    import pandas as pd

    class TextFrame(pd.DataFrame):
        _metadata = ["empty_text"]
        empty_text = "No rows."

        @property
        def _constructor(self) -> type:
            return TextFrame

        def _repr_html_(self) -> str:  # type: ignore[override]  # pandas declares it on DataFrame only for some versions
            if self.empty:
                import html

                return f'<p class="qaeval-empty">{html.escape(self.empty_text)}</p>'
            styler = pd.DataFrame(self).style.format(escape="html", na_rep="").hide(axis="index")
            return styler.set_properties(
                **{"white-space": "pre-wrap", "text-align": "left", "vertical-align": "top"}
            ).to_html()

        def __repr__(self) -> str:
            if self.empty:
                return self.empty_text
            with pd.option_context("display.max_colwidth", None, "display.width", 200):
                return pd.DataFrame.__repr__(self)

    return TextFrame


def __getattr__(name: str) -> Any:  # TextFrame is built on first use, so importing this module needs no pandas
    if name == "TextFrame":
        cls = _text_frame_class()
        globals()["TextFrame"] = cls
        return cls
    raise AttributeError(name)


# --------------------------------------------------------------------------- plain values


def clean(value: Any) -> Any:
    """JSON-ready: NaN and pd.NA become null, numpy scalars become Python numbers, tuples lists, and the
    keys of every object sorted (so a record diffs cleanly)."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    import pandas as pd

    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def frame_rows(df: pd.DataFrame, columns: list[str] | None = None) -> list[dict[str, Any]]:
    cols = columns or list(df.columns)
    return [clean(dict(zip(cols, values))) for values in zip(*(df[c].tolist() for c in cols))] if len(df) else []
