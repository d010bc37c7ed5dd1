"""Per-hop facts of rows read from traces: for each retrieval hop (its number in the trace and its kind),
how many rows had it, the documents it returned, how many of them the answers cited, and how many reached
the prompt (over the rows whose prompt and passages were not hidden), over every row, per slice group
and per time window. Read from the row frame's ``hop_counts`` (``qaeval.scoring.monitor.hop_facts``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from qaeval.core.frames import frame
from qaeval.scoring.monitor_metrics import ALL, window_keys

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
    parts["prompted"] = np.where(shown, parts["prompted"].where(shown, "0"), "0").astype(int)
    groups: list[tuple[str, str, np.ndarray]] = [(ALL, ALL, np.ones(len(rows), dtype=bool))]
    for column in by:
        values = rows[column].astype(str).to_numpy(object)
        groups += [(column, g, values == g) for g in sorted(set(values.tolist()))]
    windows: list[tuple[str | None, np.ndarray]] = [(None, np.ones(len(rows), dtype=bool))]
    if every is not None:
        keys = window_keys(rows["timestamp"], every).to_numpy(object)
        windows += [(w, keys == w) for w in sorted({k for k in keys.tolist() if isinstance(k, str)})]
    out = []
    for window, in_window in windows:
        for column, group, mask in groups:
            here = parts[(in_window & mask)[parts["position"].to_numpy()]]
            for (hop, kind), part in here.groupby(["hop", "kind"], sort=True):
                out.append(
                    dict(
                        window=window,
                        slice=column,
                        group=group,
                        hop=hop,
                        kind=kind,
                        rows=len(part),
                        documents=int(part["documents"].sum()),
                        cited=int(part["cited"].sum()),
                        prompted=int(part["prompted"].sum()),
                        prompt_rows=int(part["prompt_rows"].sum()),
                    )
                )
    return frame(out, HOP_SCHEMA)
