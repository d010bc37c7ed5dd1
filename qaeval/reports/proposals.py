"""The propose notebook's views: what the candidates were chosen from, what was dropped, the candidates."""

from __future__ import annotations

from typing import Any

from qaeval.reports.html import Col, Html, empty_note, esc, html_table, notes_html


def proposal_pool(proposal: Any) -> Html:
    """For traffic: per kind and stratum, the rows there were and how many were chosen."""
    if proposal.origin != "traffic":
        return empty_note("Generated from a corpus: see the drops below.")
    if proposal.pool.empty:
        return empty_note("No row failed a check, was judged unfaithful or abstained.")
    return Html(
        notes_html(proposal.notes)
        + html_table(
            proposal.pool.to_dict("records"),
            [
                Col("kind", "kind"),
                Col("stratum", "stratum (slices, window)"),
                Col("rows", "rows", "int"),
                Col("chosen", "chosen", "int"),
            ],
            caption="What the candidates were chosen from",
        )
    )


def proposal_drops(proposal: Any) -> Html:
    """What was dropped before anyone saw it, by reason."""
    drops = proposal.dropped_frame()
    if drops.empty:
        return empty_note("Nothing was dropped.")
    return Html(
        html_table(
            drops.to_dict("records"),
            [Col("reason", "reason"), Col("dropped", "dropped", "int")],
            caption="Dropped before the sheet, by reason",
        )
    )


def _passages(candidate: Any) -> str:
    gold = set(candidate.gold_source_ids)
    return "".join(
        f'<div class="{"gold" if p.id in gold else ""}"><code>{esc(p.id)}</code> '
        f"{('<b>' + esc(p.title) + '</b> ') if p.title else ''}{esc(p.text)}</div>"
        for p in candidate.passages
    )


def candidates_table(proposal: Any) -> Html:
    """Every candidate with why it was proposed, its checks, its passages (gold ones marked) and the
    pre-filled proposal."""
    if not proposal.candidates:
        return empty_note("No candidate: " + ("; ".join(proposal.notes) or "nothing was proposed"))
    rows = [
        dict(
            id=c.id,
            kind=c.kind,
            question=c.question,
            answer=c.answer,
            expected=c.expected_behavior,
            gold=c.gold_answer,
            why=c.why,
            checks="; ".join(c.checks),
            passages=_passages(c),
        )
        for c in proposal.candidates
    ]
    return Html(
        html_table(
            rows,
            [
                Col("id", "candidate", "id"),
                Col("kind", "kind"),
                Col("question", "question"),
                Col("answer", "answer"),
                Col("expected", "proposed behaviour"),
                Col("gold", "proposed gold answer"),
                Col("why", "why"),
                Col("checks", "checks"),
                Col("passages", "passages", "html"),
            ],
            caption=f"{len(rows)} candidate(s), written to {proposal.sheet}",
        )
    )
