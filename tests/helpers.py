"""Hand-built outputs for layer tests: one case, one output, no adapter."""

from __future__ import annotations

import re
from typing import Any

from conftest import make_case, write_cases

from qaeval import load_suite
from qaeval.core.frames import frame
from qaeval.reports.explorer import SCRIPT
from qaeval.system.contract import OUTPUT_SCHEMA, output_fingerprint

S1 = "The Eastside Branch opened in 1964 on Dunmore Street."
S2 = "The Northgate Branch opened in 1978 and is the smallest location."


def output(case_id: str = "case-0001", **fields: Any) -> dict[str, Any]:
    row = dict(
        case_id=case_id,
        answer=S1,
        citations=[{"source_id": "s1", "claim": S1}],
        retrieved_ids=["s1", "s2"],
        passages=[],
        abstained=False,
        model_was_called=True,
        prompt_to_model=f"When did the Eastside Branch open?\n{S1}\n{S2}",
        computed_aggregate=None,
        error=None,
        latency_s=0.0,
        logs="",
    )
    row.update(fields)
    row["output_fingerprint"] = output_fingerprint(row["answer"], row["citations"], row["abstained"], row["error"])
    return row


def outputs_frame(rows: list[dict[str, Any]]):
    return frame(rows, OUTPUT_SCHEMA)


def frames(tmp_path, cases: list[dict[str, Any]] | None = None, outputs: list[dict[str, Any]] | None = None):
    suite = load_suite(write_cases(tmp_path / "d", cases or [make_case()]))
    return suite, suite.to_frame(), outputs_frame(outputs or [output()]), suite.sources_frame()


def without_explorer(page: str) -> str:
    """The page less the case explorer's two scripts: its JSON data and its own script, which must be
    exactly qaeval's (the page's Content-Security-Policy allows that text by its hash, and no other)."""
    page, data = re.subn(
        r'<script (?=[^>]*class="qx-data")(?=[^>]*type="application/json")[^>]*>[^<]*</script>', "", page
    )
    assert data >= 1, "the page carries the explorer's data"
    return page.replace(f"<script>{SCRIPT}</script>", "")
