"""Per-hop facts of rows read from traces (the row frame's ``hop_counts``): for each retrieval hop, the
rows that had it, its documents, how many the answers cited and how many reached the prompt, over every
row, per slice group and per time window. For the ``--timeseries`` history each hop of a window also
gives the rates ``HOP_RATES``, named ``hop{n}_{kind}_{rate}``, banded as the metrics are; a hop no row
of a window had has a ``row_share`` of 0 there (its other rates are null).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from qaeval.core.frames import frame
from qaeval.scoring.monitor_metrics import ALL, _groups, window_keys

HOP_SCHEMA = {
    "window": "text",
    "slice": "text",
    "group": "text",
    "hop": "int",
    "kind": "text",
    "rows": "int",
    "documents": "int",
    "cited": "int",
    "prompted": "int",
    "prompt_rows": "int",  # rows whose prompt and passages were shown: ``prompted`` is over these
    "prompt_documents": "int",  # the documents of those rows: ``prompted`` is out of these
}


def _parts(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (log row, hop)."""
    out = []
    for position, text in enumerate(rows["hop_counts"].tolist() if "hop_counts" in rows else []):
        if not isinstance(text, str) or not text:
            continue
        for item in text.split(";"):
            hop, kind, documents, cited, prompted = item.split(":")
            out.append((position, int(hop), kind, int(documents), int(cited), prompted))
    return pd.DataFrame(out, columns=["position", "hop", "kind", "documents", "cited", "prompted"])


def hop_frame(rows: pd.DataFrame, by: Sequence[str] = (), every: str | None = None) -> pd.DataFrame:
    """``HOP_SCHEMA``: every hop over all rows (window None), per slice group, and per window."""
    parts = _parts(rows)
    if parts.empty:
        return frame([], HOP_SCHEMA)
    shown = parts["prompted"] != ""
    parts["prompt_rows"] = shown.astype(int)
    parts["prompt_documents"] = parts["documents"].where(shown, 0)
    parts["prompted"] = np.where(shown, parts["prompted"].where(shown, "0"), "0").astype(int)
    groups = _groups(rows, by)
    windows: list[tuple[str | None, np.ndarray]] = [(None, np.ones(len(rows), dtype=bool))]
    if every is not None:
        keys = window_keys(rows["timestamp"], every).to_numpy(object)
        windows += [(w, keys == w) for w in sorted({k for k in keys.tolist() if isinstance(k, str)})]
    out = []
    for window, in_window in windows:
        for column, group, mask in groups:
            here = parts[(in_window & mask)[parts["position"].to_numpy()]]
            for (hop, kind), part in here.groupby(["hop", "kind"], sort=True):
                sums = {
                    c: int(part[c].sum()) for c in ("documents", "cited", "prompted", "prompt_rows", "prompt_documents")
                }
                out.append(dict(window=window, slice=column, group=group, hop=hop, kind=kind, rows=len(part), **sums))
    return frame(out, HOP_SCHEMA)


@dataclass(frozen=True)
class HopRate:
    """One hop's rate, as ``qaeval.verdicts.drift.compare`` bands a metric (a ``name`` and a ``drift`` rule)."""

    name: str
    drift: str


HOP_RATES = {  # rate: (which way its band alarms, what it is a share of)
    "row_share": ("both", "the window's rows that had the hop"),
    "cited_share": ("both", "the hop's documents the answers cited"),
    "prompted_share": ("drop", "the hop's documents that reached the prompt (rows showing it)"),
}
RATE_NAME = re.compile(r"hop(\d+)_(\w+)_(" + "|".join(HOP_RATES) + ")")


def rate_names(hop: int, kind: str) -> list[str]:
    return [f"hop{hop}_{kind}_{rate}" for rate in HOP_RATES]


def hop_rates(
    hops: pd.DataFrame, window: str, rows: int, names: Iterable[str] = ()
) -> tuple[dict[str, float | None], dict[str, int]]:
    """({name: rate or None}, {name: its denominator}) of each hop of ``window`` over all rows (a
    ``hop_frame``), and of every hop ``names`` name that the window lacks (``row_share`` 0)."""
    here = hops[(hops["window"] == window) & (hops["slice"] == ALL)] if not hops.empty else hops
    found = {(int(r["hop"]), str(r["kind"])): r for r in here.to_dict("records")}
    wanted = {(int(m.group(1)), m.group(2)) for m in map(RATE_NAME.fullmatch, names) if m}
    values: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    for hop, kind in sorted(wanted | set(found)):
        r = found.get((hop, kind), {})
        over = {"row_share": rows, "cited_share": r.get("documents", 0), "prompted_share": r.get("prompt_documents", 0)}
        had = {"row_share": r.get("rows", 0), "cited_share": r.get("cited", 0), "prompted_share": r.get("prompted", 0)}
        for rate, name in zip(HOP_RATES, rate_names(hop, kind)):
            values[name] = had[rate] / over[rate] if over[rate] else None
            counts[name] = int(over[rate])
    return values, counts


def rate_metrics(names: Iterable[str]) -> list[HopRate]:
    """The hop rates among ``names``, as metrics ``compare`` bands, in name order."""
    return [HopRate(n, HOP_RATES[m.group(3)][0]) for n in sorted(set(names)) for m in [RATE_NAME.fullmatch(n)] if m]
