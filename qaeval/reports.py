"""Rendering for people: escaped HTML tables for notebooks and reports."""

from __future__ import annotations

import pandas as pd


def scoreboard_html(board: pd.DataFrame) -> str:
    frame = board.copy()
    return frame.to_html(index=False, escape=True, na_rep="NaN", float_format=lambda v: f"{v:.3f}")
