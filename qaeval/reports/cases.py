"""The per-case drill-down: a plain ``<details>`` per case (no script), built from named sections.

Each case opens with its question, gold answer and why it fails, then its answer (beside the baseline's
for a regressed case), then ``SECTIONS``: the passages in ranked order with the judge's quote marked,
the citations, the judge's axes, the checks, the trajectory, the prompt and what the adapter printed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from qaeval.core.frames import is_missing
from qaeval.data.schema import CITATION_CORRECTNESS, GoldenCase
from qaeval.reports.html import Col, esc, first_reason, html_table, mark, score, trial_marks
from qaeval.scoring.checks import fidelity_text
from qaeval.scoring.index import CaseRows
from qaeval.scoring.outcomes import citation_change, cited_beside_gold, cited_ids
from qaeval.verdicts.baseline import by_trial

Row = Mapping[str, Any]
Tags = Sequence[tuple[str, str]]  # (text, css class) shown beside a case's id


@dataclass(frozen=True)
class CaseDetail:
    """What one drill-down draws from: the case, its scored rows, and how much to show."""

    case: GoldenCase
    rows: CaseRows
    full: bool
    baseline: Any = None  # the case in the baseline (qaeval.record.write.BaselineCase), when compared
    corpus: Any = None  # the run's corpus, or the passages its record kept: anything with get(id)
    trials: tuple[CaseRows, ...] = ()  # every trial's rows, with several trials (the first is ``rows``)
    gold: bool = True  # False for a logged row (monitor): it has no gold answer, gold sources or answer correctness

    @property
    def passed(self) -> bool:
        return bool(self.rows.outcome["case_passed"])

    @cached_property
    def by_axis(self) -> dict[str, Row]:
        return {v["axis"]: v for v in self.rows.verdicts if v["axis"] != CITATION_CORRECTNESS}

    @cached_property
    def by_citation(self) -> dict[str, Row]:
        return {v["target"]: v for v in self.rows.verdicts if v["axis"] == CITATION_CORRECTNESS}

    @cached_property
    def cited(self) -> set[str]:
        return {c["source_id"] for c in self.rows.output["citations"]}

    def quote(self, axis: str) -> str:
        return self.by_axis.get(axis, {}).get("quote", "") or ""


def highlight(text: str, quotes: Iterable[str]) -> str:
    """``text`` escaped, with every quote found in it (case and runs of whitespace ignored) marked."""
    spans: list[tuple[int, int]] = []
    for quote in quotes:
        words = (quote or "").split()
        if not words:
            continue
        found = re.search(r"\s+".join(re.escape(w) for w in words), text, flags=re.IGNORECASE)
        if found:
            spans.append(found.span())
    out, at = [], 0
    for start, end in sorted(spans):
        if start < at:
            continue
        out += [esc(text[at:start]), "<mark>", esc(text[start:end]), "</mark>"]
        at = end
    out.append(esc(text[at:]))
    return "".join(out)


def verdict_line(v: Row) -> str:
    """One judge verdict: the score, whether it was valid, the quote and the rationale."""
    if not is_missing(v.get("error")):
        return f'<span class="bad">judge error</span>: {esc(v["error"])}'
    valid = "" if v["valid"] else f' <span class="bad">invalid: {esc(v["invalid_reason"])}</span>'
    quote = f" · quote: “{esc(v['quote'])}”" if v["quote"] else ""
    why = f" · {esc(v['rationale'])}" if v["rationale"] else ""
    return f"<b>{score(v['score'])}</b>{valid}{quote}{why}"


def _summary(view: CaseDetail, tags: Tags) -> str:
    case, reasons = view.case, view.rows.outcome["fail_reasons"]
    tag_html = "".join(f'<span class="tag {c}">{esc(t)}</span>' for t, c in tags)
    kind = esc(case.difficulty) + (" · " + esc(case.adversarial) if case.adversarial else "")
    why = " — " + esc(first_reason(reasons, 140)) if reasons else ""
    marks = trial_marks(t.outcome["case_passed"] for t in view.trials)
    return (
        f'<summary>{mark(view.passed)} {marks} <code>{esc(case.id)}</code> {tag_html}<span class="na">{kind}</span>'
        f"{why}</summary>"
    )


def _about(view: CaseDetail) -> str:
    """The question, the gold answer and why the case fails."""
    case, reasons = view.case, view.rows.outcome["fail_reasons"]
    gold = esc(case.gold_answer) if case.gold_answer is not None else "<span class=na>(must abstain)</span>"
    parts = [f"<dl><dt>Question</dt><dd>{esc(case.question) or '<span class=na>(none)</span>'}</dd>"]
    if view.gold:
        parts.append(f"<dt>Gold answer</dt><dd>{gold}</dd>")
    out = view.rows.output
    if is_missing(out["error"]) and not out["abstained"]:
        sources = (
            cited_beside_gold(out["citations"], case.gold_source_ids)
            if view.gold
            else f"cited {', '.join(cited_ids(out['citations'])) or 'nothing'}"
        )
        parts.append(f"<dt>Sources</dt><dd>{esc(sources)}</dd>")
    if reasons:
        parts.append(
            '<dt>Why it fails</dt><dd><ul class="reasons">'
            + "".join(f"<li>{esc(r)}</li>" for r in reasons)
            + "</ul></dd>"
        )
    return "".join(parts) + "</dl>"


def _answer_block(title: str, answer: Any, abstained: Any, quote: str = "", state: str = "") -> str:
    if abstained:
        body = '<span class="na">(abstained)</span>'
    elif answer is None:
        body = '<span class="na">(not recorded)</span>'
    else:
        body = highlight(str(answer), [quote]) if quote else esc(answer)
    note = f' <span class="na">({esc(state)})</span>' if state else ""
    return f"<div><b>{esc(title)}</b>{note}<br>{body}</div>"


def baseline_state(b: Any) -> str:
    """A baseline case's outcome in a reviewer's words: what its pass checked, and the judge's answer
    correctness, which a pass does not read (``units``: (right, out of) per metric)."""
    state = "passed in the baseline (checks, faithfulness, trajectory)" if b.passed else "failed in the baseline"
    right, out_of = b.units.get("answer_correctness", (0.0, 0.0))
    if out_of:
        state += "; answer judged " + ("correct" if right else "not correct") + " (answer correctness is not gated)"
    return state


def _answers(view: CaseDetail) -> str:
    """The answer with the judge's answer-correctness quote marked, beside the baseline's when compared."""
    out = view.rows.output
    if not is_missing(out["error"]):
        now = f'<div><b>Answer</b><br><span class="bad">adapter error</span>: {esc(out["error"])}</div>'
    else:
        now = _answer_block("Answer", out["answer"], out["abstained"], view.quote("answer_correctness"))
    b = view.baseline
    if b is not None:
        cited = b.trial_cited or ()
        state = baseline_state(b) + (f"; trial 1 of {len(cited)} shown" if len(cited) > 1 else "")
        before = _answer_block("Baseline answer", b.answer, b.abstained, state=state)
        if len(set(cited)) > 1:  # its trials cited differently: trial 1's citation against ours would mislead
            note = f'<p class="bad">Baseline citations by trial: {esc(by_trial(cited))}</p>'
        else:
            moved = (
                citation_change(b.citations, out["citations"])
                if b.citations is not None and not b.abstained and is_missing(out["error"]) and not out["abstained"]
                else ""
            )
            note = f'<p class="bad">{esc(moved)}</p>' if moved else ""
        return f'<div class="side">{before}{now}</div>{note}'
    return now if view.full else f'<div class="side">{now}</div>'


# --------------------------------------------------------------------------- the named sections


@dataclass(frozen=True)
class Shown:
    """One passage as the drill-down draws it: the text the system used and where that text came from."""

    text: str | None
    title: str | None
    origin: str  # "case" (its frozen sources), "corpus" (the frozen corpus) or "system only"
    frozen: str | None = None  # the frozen text, when the system returned a different one


def shown_passage(view: CaseDetail, sid: str) -> Shown:
    """Where passage ``sid`` came from: the case's sources, the corpus (the record keeps the passages its
    run touched), or only the system's output; and the frozen text when the system's differs from it."""
    source = next((s for s in view.case.sources if s.id == sid), None)
    held = source if source is not None else (view.corpus.get(sid) if view.corpus is not None else None)
    origin = "case" if source is not None else ("corpus" if held is not None else "system only")
    given = next((p for p in view.rows.output.get("passages") or () if p["id"] == sid), None)
    if given is None:
        return Shown(held.text if held is not None else None, held.title if held is not None else None, origin)
    title = given.get("title") or (held.title if held is not None else None)
    differs = held is not None and fidelity_text(given["text"]) != fidelity_text(held.text)
    return Shown(given["text"], title, origin, held.text if differs and held is not None else None)


def word_diff(frozen: str, given: str) -> str:
    """``given`` against ``frozen`` word by word, escaped: removed words in ``<del>``, added in ``<ins>``."""
    a, b = fidelity_text(frozen).split(), fidelity_text(given).split()
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(esc(" ".join(a[i1:i2])))
            continue
        if i2 > i1:
            out.append(f"<del>{esc(' '.join(a[i1:i2]))}</del>")
        if j2 > j1:
            out.append(f"<ins>{esc(' '.join(b[j1:j2]))}</ins>")
    return " ".join(out)


def _passage(view: CaseDetail, sid: str, rank: int, retrieved: bool) -> str:
    shown = shown_passage(view, sid)
    cited = sid in view.cited
    labels = [
        f"#{rank}" if retrieved else "not retrieved",
        f"[{sid}]",
        f"from the {shown.origin}" if shown.origin != "system only" else "the system's own",
    ]
    if cited:
        labels.append("cited")
    if sid in view.case.gold_source_ids:
        labels.append("gold")
    quotes = [view.by_citation[sid]["quote"]] if sid in view.by_citation else []
    if cited and view.quote("faithfulness"):
        quotes.append(view.quote("faithfulness"))
    text = highlight(shown.text, quotes) if shown.text is not None else '<span class="bad">(not in the fixture)</span>'
    if shown.frozen is not None:
        text += (
            f'<div class="fidelity"><span class="bad">differs from the frozen {esc(shown.origin)}</span> '
            f"(frozen → the system's, words removed struck, added underlined): "
            f"{word_diff(shown.frozen, shown.text or '')}</div>"
        )
    title = f" — {esc(shown.title)}" if shown.title else ""
    css = "cited" if cited else ("" if retrieved else "unretrieved")
    return f'<div class="passage {css}"><span class="pid">{esc(" · ".join(labels))}{title}</span>{text}</div>'


def passages_section(view: CaseDetail) -> str:
    """The passages the system retrieved, best first, each saying where its text came from (the case,
    the corpus, or only the system) with a word diff where the system's text differs from the frozen
    one; then the case's other passages and any cited passage it did not retrieve (in short form: only
    retrieved or cited ones). A case may have no passages of its own."""
    retrieved = list(view.rows.output["retrieved_ids"])
    order = list(dict.fromkeys([*retrieved, *(s.id for s in view.case.sources), *sorted(view.cited)]))
    items = [
        _passage(view, sid, rank, sid in retrieved)
        for rank, sid in enumerate(order, start=1)
        if view.full or sid in retrieved or sid in view.cited
    ]
    return "<h3>Passages, in the order the system ranked them</h3>" + (
        "".join(items) or '<p class="qaeval-empty">none</p>'
    )


def citations_section(view: CaseDetail) -> str:
    citations = view.rows.output["citations"]
    if not citations:
        return ""

    def verdict(c: Row) -> str:
        v = view.by_citation.get(c["source_id"], {})
        return verdict_line(v) if v else '<span class="na">not judged</span>'

    cols = [
        Col("source_id", "source", "id"),
        Col("claim", "claim"),
        Col("verdict", "judge (score · quote · rationale)", "html", get=verdict),
        Col(
            "decoy",
            "hardest decoy",
            "id",
            get=lambda c: view.by_citation.get(c["source_id"], {}).get("decoy_id") or "—",
        ),
    ]
    return "<h3>Citations</h3>" + html_table(citations, cols)


def _terms(title: str, items: Iterable[tuple[str, str]]) -> str:
    """A titled ``<dl>`` of (term, description) pairs, both already markup."""
    return f"<h3>{title}</h3><dl>" + "".join(f"<dt>{dt}</dt><dd>{dd}</dd>" for dt, dd in items) + "</dl>"


def judge_section(view: CaseDetail) -> str:
    by_axis = view.by_axis
    if not by_axis:
        return ""
    axes = [
        a for a in ("faithfulness", "answer_correctness") if a in by_axis and (view.gold or a != "answer_correctness")
    ]
    return _terms("Judge", [(esc(a.replace("_", " ")), verdict_line(by_axis[a])) for a in axes])


def checks_section(view: CaseDetail) -> str:
    """The deterministic checks, then the registered checks (tier 1 or informational) and metrics."""

    def custom(c: Row) -> tuple[str, str]:
        kind = (
            ("tier 1" if c["blocks"] else "informational")
            if c["kind"] == "check"
            else f"metric, {c['num']:g} of {c['den']:g}"
        )
        return (
            f"{esc(c['name'].replace('_', ' '))} <span class=na>({esc(kind)})</span>",
            f"{mark(c['passed'])} {esc(c['reason'])}",
        )

    checks = [(esc(c["check"].replace("_", " ")), f"{mark(c['passed'])} {esc(c['reason'])}") for c in view.rows.checks]
    return _terms("Checks", checks + [custom(c) for c in view.rows.custom])


def trajectory_section(view: CaseDetail) -> str:
    steps = [
        (esc(s["step"]), f"{mark(s['passed'], 'held', 'failed')} {esc(s['description'])}: {esc(s['detail'])}")
        for s in view.rows.trajectory
    ]
    return _terms("Trajectory", steps) if steps else ""


def prompt_section(view: CaseDetail) -> str:
    out = view.rows.output
    prompt = out["prompt_to_model"]
    if not out["model_was_called"] and is_missing(prompt):
        return ""
    body = esc(prompt) if not is_missing(prompt) else "(no prompt recorded)"
    return f'<details class="more"><summary>Prompt sent to the model</summary><pre>{body}</pre></details>'


def logs_section(view: CaseDetail) -> str:
    logs = view.rows.output.get("logs")
    if not logs:
        return ""
    if is_missing(view.rows.output["error"]):
        return f'<details class="more"><summary>What the adapter printed</summary><pre>{esc(logs)}</pre></details>'
    # an adapter error: its traceback is at the end of the logs (qaeval.worker.serve.with_traceback)
    return (
        f'<details class="more" open><summary>What the adapter printed, and the traceback of what it raised'
        f"</summary><pre>{esc(logs)}</pre></details>"
    )


def _output_key(out: Row) -> tuple[Any, ...]:
    return (
        out["answer"],
        bool(out["abstained"]),
        out["error"] if not is_missing(out["error"]) else None,
        tuple(c["source_id"] for c in out["citations"]),
    )


def trials_section(view: CaseDetail) -> str:
    """With several trials: each distinct output once, with the trials that gave it, whether each passed
    and why not, side by side (nothing when every trial gave the same output)."""
    if len(view.trials) < 2:
        return ""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for n, t in enumerate(view.trials):
        groups.setdefault(_output_key(t.output), []).append(n)
    passes = sum(bool(t.outcome["case_passed"]) for t in view.trials)
    head = f"<h3>Trials: {passes} of {len(view.trials)} passed</h3>"
    if len(groups) == 1:
        return head + '<p class="na">Every trial gave the same output.</p>'
    blocks = []
    for (answer, abstained, error, cited), at in groups.items():
        first = view.trials[at[0]]
        label = f"trial{'s' if len(at) > 1 else ''} {', '.join(str(n + 1) for n in at)}"
        verdicts = ", ".join("passed" if view.trials[n].outcome["case_passed"] else "failed" for n in at)
        body = (
            f'<span class="bad">adapter error</span>: {esc(error)}'
            if error is not None
            else '<span class="na">(abstained)</span>'
            if abstained
            else esc(answer)
        )
        cites = f'<br><span class="na">cites: {esc(", ".join(cited))}</span>' if cited else ""
        why = first.outcome["fail_reasons"]
        reason = f'<br><span class="bad">{esc(first_reason(why, 160))}</span>' if why else ""
        blocks.append(
            f"<div><b>{esc(label)}</b> <span class=na>({esc(verdicts)})</span><br>{body}{cites}{reason}</div>"
        )
    return head + f'<div class="side">{"".join(blocks)}</div>'


SECTIONS: tuple[Callable[[CaseDetail], str], ...] = (
    trials_section,
    passages_section,
    citations_section,
    judge_section,
    checks_section,
    trajectory_section,
    prompt_section,
    logs_section,
)


def case_html(view: CaseDetail, tags: Tags = (), open_: bool = False) -> str:
    """One case's ``<details>``: the summary line, what the case asks and why it fails, the answers,
    then every section (a passing case in short form shows no sections)."""
    parts = [_about(view), _answers(view)]
    if view.full or not view.passed:
        parts += [section(view) for section in SECTIONS]
    css = "pass" if view.passed else "fail"
    return (
        f'<details class="case {css}" id="case-{esc(view.case.id)}"{" open" if open_ else ""}>{_summary(view, tags)}'
        f'<div class="case-body">{"".join(parts)}</div></details>'
    )
