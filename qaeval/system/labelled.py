"""The outputs a labelled set carries (``qaeval.data.labels``): ``load_labelled_set`` checks each answer
against the output contract, as if a worker had sent it, and gives the suite, outputs and labels."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from qaeval.core.errors import DatasetError, Problem
from qaeval.core.frames import frame
from qaeval.data.cases import Suite
from qaeval.data.labels import read_labelled_set
from qaeval.data.schema import LABEL_SCHEMA
from qaeval.system.contract import OUTPUT_SCHEMA, output_row
from qaeval.system.validate import validate_plain

if TYPE_CHECKING:
    import pandas as pd


def load_labelled_set(path: str | Path) -> tuple[Suite, pd.DataFrame, pd.DataFrame]:
    """(suite, outputs, labels) from a labelled set, strictly: every problem with its file and line."""
    lines = read_labelled_set(path)
    problems: list[Problem] = []
    outputs, labels = [], []
    for line in lines:
        case = line.case
        fields, found = validate_plain(line.output)
        if found:
            problems += [Problem(case.file, case.line, f"case {case.id!r}: output: {p}") for p in found]
            continue
        row = output_row(case.id, fields, None, 0.0)
        outputs.append(row)
        labels += [
            dict(
                case_id=case.id,
                axis=axis,
                human=int(item["score"]),
                reason=item.get("reason") or "",
                output_fingerprint=row["output_fingerprint"],
                line=case.line,
            )
            for axis, item in line.labels.items()
        ]
    if problems:
        raise DatasetError(problems)
    return (
        Suite(tuple(line.case for line in lines), str(path)),
        frame(outputs, OUTPUT_SCHEMA),
        frame(labels, LABEL_SCHEMA),
    )
