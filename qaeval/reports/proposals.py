"""The propose notebook's views: what the candidates were chosen from, what was dropped, the candidates."""

from __future__ import annotations

from typing import Any

from qaeval.reports.html import Col, Html, empty_note, esc, notes_html, table


def proposal_pool(proposal: Any) -> Html:
    """For traffic: per kind and stratum, the rows there were and how many were chosen."""
    if proposal.origin != "traffic":
        return empty_note("Generated from a corpus: see the drops below.")
    if proposal.pool.empty:
        return empty_note("No row failed a check, was judged unfaithful or abstained.")
    cols = [
        Col("kind", "kind"),
        Col("stratum", "stratum (slices, window)"),
        Col("rows", "rows", "int"),
        Col("chosen", "chosen", "int"),
    ]
    caption = "What the candidates were chosen from"
    return Html(notes_html(proposal.notes)) + table(proposal.pool.to_dict("records"), cols, caption=caption)


def proposal_drops(proposal: Any) -> Html:
    """What was dropped before anyone saw it, by reason."""
    drops = proposal.dropped_frame()
    if drops.empty:
        return empty_note("Nothing was dropped.")
    return table(
        drops.to_dict("records"),
        [Col("reason", "reason"), Col("dropped", "dropped", "int")],
        caption="Dropped before the sheet, by reason",
    )


def _passages(candidate: Any) -> str:
    gold = set(candidate["gold_source_ids"])
    return "".join(
        f'<div class="{"gold" if p.id in gold else ""}"><code>{esc(p.id)}</code> '
        f"{('<b>' + esc(p.title) + '</b> ') if p.title else ''}{esc(p.text)}</div>"
        for p in candidate["passages"]
    )


def candidates_table(proposal: Any) -> Html:
    """Every candidate with why it was proposed, its checks, its passages (gold ones marked) and the
    pre-filled proposal."""
    if not proposal.candidates:
        return empty_note("No candidate: " + ("; ".join(proposal.notes) or "nothing was proposed"))
    cols = [
        Col("id", "candidate", "id"),
        Col("kind", "kind"),
        Col("question", "question"),
        Col("answer", "answer"),
        Col("expected_behavior", "proposed behaviour"),
        Col("gold_answer", "proposed gold answer"),
        Col("why", "why"),
        Col("checks", "checks", get=lambda c: "; ".join(c["checks"])),
        Col("passages", "passages", "html", get=_passages),
    ]
    rows = [vars(c) for c in proposal.candidates]  # a candidate's fields, by name
    return table(rows, cols, caption=f"{len(rows)} candidate(s), written to {proposal.sheet}")
