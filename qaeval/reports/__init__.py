"""What the notebooks and HTML reports draw: banners, tables, per-case drill-downs and charts.

Every function takes a result object (``qaeval.results``) and returns something a notebook displays:
``Html`` (markup that is already escaped) or ``Chart`` (a PNG). Everything that came from a case or a
system's answer is escaped with ``html.escape`` before it reaches markup, and has its ``$`` escaped
before it reaches a matplotlib label (so mathtext never interprets it). The page around them is the
``qaeval`` nbconvert template (``qaeval.reports.render``), which carries its own small stylesheet and
runs no script.

The per-case drill-down is a plain ``<details>`` per case (no script): the question, why it fails,
the answer (beside the baseline's for a regressed case), the passages in the order the system ranked
them with the judge's quote marked (``<mark>``) inside the passage it must come from, each citation
with its hardest decoy, the judge's axes with quote and rationale, the checks, the trajectory, the
prompt and what the adapter printed. Failing cases come first.
"""

from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pandas as pd

from qaeval.frames import is_missing
from qaeval.record import Baseline
from qaeval.results import HTML_VIEWS, Result
from qaeval.scoring.checks import CHECKS
from qaeval.scoring.evaluate import RunResult
from qaeval.scoring.judge import AXES
from qaeval.scoring.metrics import BY_NAME, format_interval, format_number, format_value
from qaeval.verdicts.calibration import CalibrationResult
from qaeval.verdicts.compare import Comparison
from qaeval.verdicts.drift import DriftResult
from qaeval.verdicts.gate import GateResult

PASS_COLOR, FAIL_COLOR, NEUTRAL, LOWER_COLOR = "#1b7f3b", "#b3261e", "#4a6fa5", "#8a5a9e"
FULL_DRILLDOWN = 200  # failing cases drawn in full; the rest get the short form
ALL_FULL_UP_TO = 60  # suites this small get every case in full
NOTEBOOKS = ("run", "gate", "calibrate", "drift")


# --------------------------------------------------------------------------- building blocks


def esc(value: Any) -> str:
    """HTML-escape anything for inclusion in report markup."""
    return html.escape("" if value is None else str(value), quote=True)


def plain(value: Any, limit: int = 60) -> str:
    """Text safe for a matplotlib label: ``$`` escaped (no mathtext), long text shortened."""
    text = "" if value is None else str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("\\", "\\\\").replace("$", r"\$")


class Html:
    """A fragment of already-escaped HTML that shows itself in a notebook."""

    def __init__(self, markup: str) -> None:
        self.markup = markup

    def _repr_html_(self) -> str:
        return self.markup

    def __str__(self) -> str:
        return self.markup

    def __add__(self, other: Html) -> Html:
        return Html(self.markup + other.markup)


class Chart:
    """A matplotlib figure that shows itself as an embedded PNG in notebooks and reports."""

    def __init__(self, figure: Any, alt: str = "chart") -> None:
        self.figure = figure
        self.alt = alt

    def png(self) -> bytes:
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=80, bbox_inches="tight")
        return buf.getvalue()

    def _repr_png_(self) -> tuple[bytes, dict[str, str]]:
        return self.png(), {"alt": self.alt}


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def mark(flag: Any, yes: str = "pass", no: str = "FAIL") -> str:
    """A boolean as a word a reviewer reads (never True/False); missing as an em dash."""
    if is_missing(flag):
        return '<span class="na">—</span>'
    if flag:
        return f'<span class="ok" style="color:{PASS_COLOR}">✓ {esc(yes)}</span>'
    return f'<span class="bad" style="color:{FAIL_COLOR};font-weight:600">✗ {esc(no)}</span>'


def _num(value: Any, n: Any = 1, digits: int = 3) -> str:
    if n == 0:
        return '<span class="na">NaN (n=0)</span>'
    return format_number(value, digits, missing='<span class="na">—</span>')


def _score(value: Any) -> str:
    return '<span class="na">—</span>' if is_missing(value) else esc(int(value))


@dataclass(frozen=True)
class Col:
    key: str
    header: str
    kind: str = "text"  # text, html (already markup), htmlnum (markup, right-aligned), nowrap, num, id, int
    digits: int = 3


def _blank(value: Any) -> Any:
    return "" if is_missing(value) else value


_CELLS: dict[str, tuple[str, Callable[[Any, Col], str]]] = {  # kind: (the cell's class, the value as markup)
    "text": ("", lambda v, c: esc(_blank(v))),
    "html": ("", lambda v, c: "" if v is None else str(v)),
    "htmlnum": ("num", lambda v, c: "" if v is None else str(v)),
    "nowrap": ("nowrap", lambda v, c: esc(_blank(v))),
    "num": ("num", lambda v, c: _num(v, None, c.digits)),
    "int": ("num", lambda v, c: "" if _blank(v) == "" else esc(int(v))),
    "id": ("id", lambda v, c: f"<code>{esc(v)}</code>"),
}


def html_table(rows: Iterable[Mapping[str, Any]], columns: Sequence[Col], *, caption: str | None = None,
               bad: Callable[[Mapping[str, Any]], bool] | None = None) -> str:
    head = "".join(f"<th>{esc(c.header)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for c in columns:
            css, markup = _CELLS[c.kind]
            attr = f' class="{css}"' if css else ""
            cells.append(f"<td{attr}>{markup(row.get(c.key), c)}</td>")
        attr = ' class="bad"' if bad is not None and bad(row) else ""
        body.append(f"<tr{attr}>{''.join(cells)}</tr>")
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f'<table class="qaeval">{cap}<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def facts_html(facts: Mapping[str, Any]) -> str:
    return '<div class="qaeval-facts">' + "".join(
        f"<span><b>{esc(k)}</b>{esc(v)}</span>" for k, v in facts.items() if v is not None) + "</div>"


def notes_html(notes: Sequence[str]) -> str:
    return '<ul class="qaeval-notes">' + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>" if notes else ""


def empty_note(text: str) -> Html:
    return Html(f'<p class="qaeval-empty">{esc(text)}</p>')


def banner_html(verdict: str, detail: str, ok: bool, kicker: str = "") -> str:
    kind = "pass" if ok else "block"
    kick = f'<div class="detail" style="opacity:.9">{esc(kicker)}</div>' if kicker else ""
    colour = PASS_COLOR if ok else FAIL_COLOR  # inline too, so the banner keeps its colour inside Jupyter
    return (f'<div class="qaeval-banner qaeval-{kind}" role="status" style="background:{colour};color:#fff;'
            f'padding:12px 20px;border-radius:8px">{kick}<div class="verdict" style="font-size:28px;font-weight:700">'
            f'{esc(verdict)}</div><div class="detail">{esc(detail)}</div></div>')


# --------------------------------------------------------------------------- banners and facts

KICKERS = {"run": "qaeval run · tier 1", "gate": "qaeval gate", "calibrate": "qaeval calibration",
           "drift": "qaeval drift", "compare": "qaeval compare"}


def banner(result: Result) -> Html:
    """The verdict at the top of every report: the word, and why in a line or two."""
    return Html(banner_html(result.verdict, result.reason, result.ok, KICKERS.get(result.kind, "")))


def _run_facts(run: RunResult) -> dict[str, Any]:
    usage = run.judge_usage
    meta = run.meta
    return {
        "cases": len(run.suite), "adapter": meta.adapter,
        "boundary": "enforced (worker processes)" if meta.boundary_enforced and not meta.executor else
        f"executor {meta.executor}" if meta.executor else "NOT enforced (isolation none)",
        "concurrency": meta.concurrency, "judge": meta.judge.label(),
        "judge calls": f"{usage['calls']} ({usage['cached']} cached, {usage['errors']} errors)",
        "tokens": f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion",
        "data": run.suite.root, "fingerprint": run.dataset_fingerprint[:12],
        "commit": (meta.git_commit or "")[:10] or None, "time": meta.created,
    }


def facts(result: Result) -> Html:
    """How the result was made, one line of facts; and its notes."""
    run = result if isinstance(result, RunResult) else getattr(result, "run", None)
    items: dict[str, Any] = {}
    notes: list[str] = []
    if isinstance(result, GateResult):
        b = result.baseline
        items["baseline"] = b.path
        items["baseline made"] = ", ".join(x for x in (b.created, (b.git_commit or "")[:10]) if x) or None
        notes = result.all_notes()
    if isinstance(run, RunResult):
        items.update(_run_facts(run))
        notes = notes or list(run.notes) + ([] if run.meta.boundary_enforced else
                                            ["isolation none: the boundary was NOT enforced in this run"])
    if isinstance(result, CalibrationResult):
        items = {"labels": result.source, "judge": result.judge_label, "bar": f"{result.min_agreement:.2f} exact agreement",
                 "labels needed per axis": result.min_labels, "cases": len(result.run.suite)}
        notes = list(result.notes)
    if isinstance(result, DriftResult):
        items = {"series": result.timeseries, "runs": result.runs, "window": result.window, **{
            k: v for k, v in _run_facts(result.run).items() if k in ("adapter", "judge", "commit", "time", "boundary")}}
        notes = list(result.notes)
    return Html(facts_html(items) + notes_html(notes))


# --------------------------------------------------------------------------- the scoreboard


def scoreboard_table(run: RunResult) -> Html:
    board = run.scoreboard
    ppi = bool((board["n_labelled"] > 0).any())
    rows = []
    for r in board.to_dict("records"):
        row = dict(metric=r["metric"], value=format_value(r["value"], r["n"]),
                   ci=format_interval(r["ci_low"], r["ci_high"], r["n"]), n=r["n"],
                   better=f"{r['direction']} ({r['over']})")
        if ppi:
            row.update(ppi="" if not r["n_labelled"] else format_number(r["ppi_value"], missing=""),
                       ppi_ci=format_interval(r["ppi_ci_low"], r["ppi_ci_high"], r["n_labelled"]),
                       labels=r["n_labelled"] or "")
        rows.append(row)
    cols = [Col("metric", "metric", "id"), Col("value", "value"), Col("ci", "95% CI"), Col("n", "n", "int")]
    if ppi:
        cols += [Col("ppi", "PPI estimate"), Col("ppi_ci", "PPI 95% CI"), Col("labels", "labelled")]
    cols.append(Col("better", "better"))
    caption = "Headline metrics with 95% bootstrap intervals over cases"
    if ppi:
        caption += "; PPI: corrected by human labels (prediction-powered inference), with its own interval"
    return Html(html_table(rows, cols, caption=caption))


def scoreboard_chart(run: RunResult) -> Chart:
    """Bars with interval whiskers, one per metric; n = 0 metrics are labelled, not drawn."""
    board = run.scoreboard.iloc[::-1]
    fig = _figure(7.0, 3.4)
    ax = fig.add_subplot()
    y = range(len(board))
    ax.barh(y, board["value"].fillna(0).to_numpy(),
            color=[NEUTRAL if d == "higher" else LOWER_COLOR for d in board["direction"]], height=0.6)
    for i, r in enumerate(board.to_dict("records")):
        if r["n"] == 0 or math.isnan(r["value"]):
            ax.text(0.01, i, "NaN (n=0)", va="center", fontsize=9, color="#555")
            continue
        if not math.isnan(r["ci_low"]):
            ax.errorbar(r["value"], i, xerr=[[r["value"] - r["ci_low"]], [r["ci_high"] - r["value"]]],
                        fmt="none", ecolor="#222", capsize=4, lw=1.2)
        right = r["ci_high"] if not math.isnan(r["ci_high"]) else r["value"]
        ax.text(min(right, 1.0) + 0.015, i, f"{r['value']:.2f}  (n={int(r['n'])})", va="center", fontsize=9)
    ax.set_yticks(list(y), [f"{m}{' (lower is better)' if d == 'lower' else ''}"
                            for m, d in zip(board["metric"], board["direction"])], fontsize=9)
    ax.set_xlim(0, 1.28)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.set_xlabel("value with 95% bootstrap interval")
    ax.spines[["top", "right"]].set_visible(False)
    return Chart(fig, "Scoreboard: each metric's value with its 95% interval")


def _heat(goodness: float) -> str:
    """A background from red (0) through yellow to green (1), light enough to read text on."""
    g = min(1.0, max(0.0, goodness))
    red, green = (255, int(180 + 75 * g * 2)) if g < 0.5 else (int(255 - 120 * (g - 0.5) * 2), 235)
    return f"rgb({red},{min(green, 235)},{150 + int(40 * g)})"


def slice_table(run: RunResult) -> Html:
    """Every metric for every group of every slice (difficulty, adversarial tag, split) as a colour-coded
    table: green is good whatever the metric's direction, grey has nothing to measure (n = 0)."""
    s = run.slices
    groups = list(dict.fromkeys(zip(s["slice"], s["group"])))
    value = {(r.slice, r.group, r.metric): (r.value, r.n) for r in s.itertuples(index=False)}
    head = "".join(f"<th>{esc(g)}<br><span class=na>{esc(sl)}</span></th>" for sl, g in groups)
    rows = []
    for m in run.scoreboard["metric"]:
        higher = BY_NAME[m].higher_is_better
        cells = []
        for sl, g in groups:
            v, n = value[(sl, g, m)]
            if n == 0 or is_missing(v):
                cells.append('<td class="num" style="background:#eceff1"><span class=na>n=0</span></td>')
            else:
                cells.append(f'<td class="num" style="background:{_heat(v if higher else 1 - v)}">{v:.2f}'
                             f'<br><span class=na>n={n}</span></td>')
        label = f"{m} (lower is better)" if not higher else m
        rows.append(f"<tr><td class=id><code>{esc(label)}</code></td>{''.join(cells)}</tr>")
    return Html(f'<table class="qaeval"><caption>Every metric by slice: green is good, grey has nothing to measure'
                f'</caption><thead><tr><th>metric</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')


# --------------------------------------------------------------------------- cases


def _first(reasons: Sequence[str], limit: int = 110) -> str:
    text = reasons[0] if reasons else ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cases_table(run: RunResult) -> Html:
    """Every case on one line (failing first), narrow enough not to scroll sideways."""
    pc = run.per_case.sort_values("case_passed", kind="stable")
    rows = []
    for r in pc.to_dict("records"):
        failed_checks = [c.replace("_", " ") for c in CHECKS if not r[c]]
        rows.append(dict(
            case_id=r["case_id"], result=mark(r["case_passed"]),
            kind=esc(f"{r['difficulty']}{' · ' + r['adversarial'] if r['adversarial'] else ''}"),
            checks=mark(not failed_checks, "4/4", ", ".join(failed_checks) or "failed"),
            retrieval="—" if is_missing(r["recall_at_k"]) else f"R@k {r['recall_at_k']:.2f} · MRR {r['mrr']:.2f}",
            judge=" · ".join(f"{a[0].upper()} {_score(r[a])}" for a in AXES),
            trajectory=mark(r["trajectory_success"], "reached", "failed"),
            why=esc(_first(r["fail_reasons"])),
        ))
    cols = [Col("case_id", "case", "id"), Col("result", "result", "html"), Col("kind", "difficulty · tag", "html"),
            Col("checks", "checks", "html"), Col("retrieval", "retrieval"), Col("judge", "judge F · A · C", "html"),
            Col("trajectory", "trajectory", "html"), Col("why", "first reason", "html")]
    return Html(html_table(rows, cols, caption="Every case (failing first); F, A, C: the judge's faithfulness, "
                                               "answer correctness and citation correctness, 0 to 2"))


def _highlight(text: str, quotes: Iterable[str]) -> str:
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


class _CaseIndex:
    """The layers of a run, indexed by case, for drawing drill-downs."""

    def __init__(self, run: RunResult) -> None:
        self.run = run
        self.outputs = {r["case_id"]: r for r in run.outputs.to_dict("records")}
        self.per_case = {r["case_id"]: r for r in run.per_case.to_dict("records")}
        self.checks: dict[str, list[dict[str, Any]]] = {}
        for r in run.checks.to_dict("records"):
            self.checks.setdefault(r["case_id"], []).append(r)
        self.verdicts: dict[str, list[dict[str, Any]]] = {}
        for r in run.verdicts.to_dict("records"):
            self.verdicts.setdefault(r["case_id"], []).append(r)
        self.trajectory: dict[str, list[dict[str, Any]]] = {}
        for r in run.trajectory.to_dict("records"):
            self.trajectory.setdefault(r["case_id"], []).append(r)


def _verdict_line(v: Mapping[str, Any]) -> str:
    if not is_missing(v.get("error")):
        return f'<span class="bad">judge error</span>: {esc(v["error"])}'
    score = _score(v["score"])
    valid = "" if v["valid"] else f' <span class="bad">invalid: {esc(v["invalid_reason"])}</span>'
    quote = f" · quote: “{esc(v['quote'])}”" if v["quote"] else ""
    why = f" · {esc(v['rationale'])}" if v["rationale"] else ""
    return f"<b>{score}</b>{valid}{quote}{why}"


def _answer_block(title: str, answer: Any, abstained: Any, quote: str = "", state: str = "") -> str:
    if abstained:
        body = '<span class="na">(abstained)</span>'
    elif answer is None:
        body = '<span class="na">(not recorded)</span>'
    else:
        body = _highlight(str(answer), [quote]) if quote else esc(answer)
    note = f' <span class="na">({esc(state)})</span>' if state else ""
    return f"<div><b>{esc(title)}</b>{note}<br>{body}</div>"


def _case_html(idx: _CaseIndex, case_id: str, *, full: bool, baseline_case: Any = None, tags: Sequence[str] = (),
               open_: bool = False) -> str:
    run = idx.run
    case = run.suite[case_id]
    out, pc = idx.outputs[case_id], idx.per_case[case_id]
    passed = pc["case_passed"]
    verdicts = idx.verdicts.get(case_id, [])
    by_axis = {v["axis"]: v for v in verdicts if v["axis"] != "citation_correctness"}
    cites = {v["target"]: v for v in verdicts if v["axis"] == "citation_correctness"}
    reasons = pc["fail_reasons"]
    tag_html = "".join(f'<span class="tag {c}">{esc(t)}</span>' for t, c in tags)
    summary = (f'<summary>{mark(passed)} <code>{esc(case_id)}</code> {tag_html}'
               f'<span class="na">{esc(case.difficulty)}{" · " + esc(case.adversarial) if case.adversarial else ""}</span>'
               f'{" — " + esc(_first(reasons, 140)) if reasons else ""}</summary>')
    parts = [f"<dl><dt>Question</dt><dd>{esc(case.question) or '<span class=na>(none)</span>'}</dd>",
             f"<dt>Gold answer</dt><dd>{esc(case.gold_answer) if case.gold_answer is not None else '<span class=na>(must abstain)</span>'}</dd>"]
    if reasons:
        parts.append("<dt>Why it fails</dt><dd><ul class=\"reasons\">" + "".join(f"<li>{esc(r)}</li>" for r in reasons)
                     + "</ul></dd>")
    parts.append("</dl>")
    answer_quote = by_axis.get("answer_correctness", {}).get("quote", "")
    now = _answer_block("Answer", out["answer"], out["abstained"] and is_missing(out["error"]), answer_quote)
    if not is_missing(out["error"]):
        now = f'<div><b>Answer</b><br><span class="bad">adapter error</span>: {esc(out["error"])}</div>'
    if baseline_case is not None:
        before = _answer_block("Baseline answer", baseline_case.answer, baseline_case.abstained,
                               state="passed in the baseline" if baseline_case.passed else "failed in the baseline")
        parts.append(f'<div class="side">{before}{now}</div>')
    else:
        parts.append(f'<div class="side">{now}</div>' if not full else now)
    if full or not passed:
        bodies = {s.id: s for s in case.sources}
        retrieved = [r for r in out["retrieved_ids"]]
        cited = {c["source_id"] for c in out["citations"]}
        faith_quote = by_axis.get("faithfulness", {}).get("quote", "")
        passages = []
        order = [*retrieved, *[s.id for s in case.sources if s.id not in retrieved]]
        for rank, sid in enumerate(order, start=1):
            src = bodies.get(sid)
            in_ranking = sid in retrieved
            labels = [f"#{rank}" if in_ranking else "not retrieved", f"[{sid}]"]
            if sid in cited:
                labels.append("cited")
            if sid in case.gold_source_ids:
                labels.append("gold")
            quotes = [cites[sid]["quote"]] if sid in cites else []
            if sid in cited and faith_quote:
                quotes.append(faith_quote)
            text = _highlight(src.text, quotes) if src is not None else '<span class="bad">(not in the fixture)</span>'
            title = f" — {esc(src.title)}" if src is not None and src.title else ""
            css = "cited" if sid in cited else ("" if in_ranking else "unretrieved")
            if not full and not in_ranking and sid not in cited:
                continue
            passages.append(f'<div class="passage {css}"><span class="pid">{esc(" · ".join(labels))}{title}</span>{text}</div>')
        parts.append("<h3>Passages, in the order the system ranked them</h3>" + ("".join(passages) or
                                                                                 '<p class="qaeval-empty">none</p>'))
        if out["citations"]:
            rows = []
            for c in out["citations"]:
                v = cites.get(c["source_id"], {})
                rows.append(dict(source=c["source_id"], claim=c["claim"],
                                 verdict=_verdict_line(v) if v else '<span class="na">not judged</span>',
                                 decoy=v.get("decoy_id") or "—"))
            parts.append("<h3>Citations</h3>" + html_table(rows, [Col("source", "source", "id"), Col("claim", "claim"),
                                                                   Col("verdict", "judge (score · quote · rationale)", "html"),
                                                                   Col("decoy", "hardest decoy", "id")]))
        if by_axis:
            parts.append("<h3>Judge</h3><dl>" + "".join(
                f"<dt>{esc(axis.replace('_', ' '))}</dt><dd>{_verdict_line(by_axis[axis])}</dd>"
                for axis in ("faithfulness", "answer_correctness") if axis in by_axis) + "</dl>")
        checks = idx.checks.get(case_id, [])
        parts.append("<h3>Checks</h3><dl>" + "".join(
            f"<dt>{esc(c['check'].replace('_', ' '))}</dt><dd>{mark(c['passed'])} {esc(c['reason'])}</dd>" for c in checks)
            + "</dl>")
        steps = idx.trajectory.get(case_id, [])
        if steps:
            parts.append("<h3>Trajectory</h3><dl>" + "".join(
                f"<dt>{esc(s['step'])}</dt><dd>{mark(s['passed'], 'held', 'failed')} {esc(s['description'])}: "
                f"{esc(s['detail'])}</dd>" for s in steps) + "</dl>")
        prompt = out["prompt_to_model"]
        if out["model_was_called"] or not is_missing(prompt):
            body = esc(prompt) if not is_missing(prompt) else "(no prompt recorded)"
            parts.append(f'<details class="more"><summary>Prompt sent to the model</summary><pre>{body}</pre></details>')
        if out.get("logs"):
            parts.append(f'<details class="more"><summary>What the adapter printed</summary><pre>{esc(out["logs"])}</pre>'
                         "</details>")
    css = "pass" if passed else "fail"
    return (f'<details class="case {css}" id="case-{esc(case_id)}"{" open" if open_ else ""}>{summary}'
            f'<div class="case-body">{"".join(parts)}</div></details>')


def drilldown(run: RunResult, case_ids: Sequence[str] | None = None, *, baseline: Baseline | None = None,
              tags: Mapping[str, Sequence[tuple[str, str]]] | None = None, open_failing: bool = False) -> Html:
    """One collapsible section per case, failing first. Suites of up to ``ALL_FULL_UP_TO`` cases get
    every case in full; larger ones get the first ``FULL_DRILLDOWN`` failing cases in full and the
    rest in short form (question, answer, cited passages), so the page stays usable at thousands."""
    idx = _CaseIndex(run)
    ids = list(case_ids) if case_ids is not None else list(run.per_case["case_id"])
    if not ids:
        return empty_note("No case to show.")
    failing = [c for c in ids if not idx.per_case[c]["case_passed"]]
    passing = [c for c in ids if idx.per_case[c]["case_passed"]]
    everything_full = len(run.suite) <= ALL_FULL_UP_TO
    parts = []
    for n, cid in enumerate([*failing, *passing]):
        full = everything_full or (cid in failing and n < FULL_DRILLDOWN)
        b = baseline.cases.get(cid) if baseline is not None else None
        parts.append(_case_html(idx, cid, full=full, baseline_case=b, tags=(tags or {}).get(cid, ()),
                                open_=open_failing and cid in failing and n < 5))
    note = ""
    if not everything_full and len(failing) > FULL_DRILLDOWN:
        note = (f'<p class="qaeval-empty">The first {FULL_DRILLDOWN} failing cases are drawn in full, the rest in '
                "short form; the run record holds everything.</p>")
    return Html(note + "".join(parts))


# --------------------------------------------------------------------------- gate


def tier_table(result: GateResult) -> Html:
    rows = [dict(tier=r["tier"], result=mark(r["passed"]), detail=r["detail"], cases=len(r["case_ids"]) or "")
            for r in result.tiers.to_dict("records")]
    return Html(html_table(rows, [Col("tier", "tier"), Col("result", "result", "html"), Col("detail", "detail"),
                                  Col("cases", "cases", "int")],
                           caption="Tiers: each blocking case is shown once below, with the tiers it trips",
                           bad=lambda r: "FAIL" in r["result"]))


def delta_table(result: GateResult) -> Html:
    rows = []
    for r in result.metric_deltas.to_dict("records"):
        rows.append(dict(metric=r["metric"], baseline=_num(r["baseline"], r["n_baseline"]),
                         current=_num(r["current"], r["n_current"]),
                         delta="—" if is_missing(r["delta"]) else f"{r['delta']:+.3f}",
                         tolerance=f"{r['tolerance']:g} ({'a drop' if r['direction'] == 'higher' else 'a rise'})",
                         result=mark(r["passed"], "within", "BLOCKS"), noise=r["note"]))
    return Html(html_table(rows, [Col("metric", "metric", "id"), Col("baseline", "baseline", "html"),
                                  Col("current", "now", "html"), Col("delta", "change", "html"),
                                  Col("tolerance", "allowed"), Col("result", "result", "html"),
                                  Col("noise", "noise test (informs; tolerances decide)")],
                           caption="Gated metrics against the baseline", bad=lambda r: "BLOCKS" in r["result"]))


def delta_chart(result: GateResult) -> Chart:
    """Each gated metric's movement against the baseline, with its tolerance drawn on the bad side."""
    d = result.metric_deltas.iloc[::-1]
    fig = _figure(7.6, 3.4)
    ax = fig.add_subplot()
    y = list(range(len(d)))
    deltas = d["delta"].fillna(0).to_numpy()
    ax.barh(y, deltas, color=[PASS_COLOR if p else FAIL_COLOR for p in d["passed"]], height=0.55)
    span = max(0.12, float(abs(deltas).max()) * 1.15)
    for i, r in enumerate(d.to_dict("records")):
        bad_side = -r["tolerance"] if r["direction"] == "higher" else r["tolerance"]
        edge = -span if r["direction"] == "higher" else span
        ax.fill_betweenx([i - 0.38, i + 0.38], bad_side, edge, color=FAIL_COLOR, alpha=0.08, lw=0)
        ax.plot([bad_side, bad_side], [i - 0.38, i + 0.38], color=FAIL_COLOR, lw=1.6)
        text = "not comparable" if math.isnan(r["delta"]) else f"{r['baseline']:.3f} → {r['current']:.3f} ({r['delta']:+.3f})"
        ax.text(span + 0.02, i, text, va="center", ha="left", fontsize=8.5)
    ax.set_xlim(-span, span + 0.42)
    ax.axvline(0, color="#888", lw=0.8)
    ax.set_yticks(y, [f"{m}{' (lower is better)' if dr == 'lower' else ''}" for m, dr in zip(d["metric"], d["direction"])],
                  fontsize=9)
    ax.set_xlabel("change against the baseline (red band: past the tolerance, blocks)")
    ax.spines[["top", "right"]].set_visible(False)
    return Chart(fig, "Movement of each gated metric against the baseline, with tolerances")


def blocking_cases(result: GateResult) -> Html:
    """Each case a failed tier names, once, with the tiers it trips and, when it regressed, the
    baseline's answer beside the new one."""
    ids = result.blocking_cases
    if not ids:
        return empty_note("No case blocks.")
    tripped: dict[str, list[tuple[str, str]]] = {}
    for r in result.failed_tiers.to_dict("records"):
        for cid in r["case_ids"]:
            tripped.setdefault(cid, []).append((r["tier"].split(": ", 1)[-1], "fail"))
    return drilldown(result.run, ids, baseline=result.baseline, tags=tripped, open_failing=True)


def not_blocking(result: GateResult) -> Html:
    """Failing cases that do not block, labelled with why (already failing in the baseline)."""
    blocking = set(result.blocking_cases)
    failing = [c for c in result.run.per_case.loc[~result.run.per_case["case_passed"], "case_id"] if c not in blocking]
    if not failing:
        return empty_note("No other case fails.")
    already = set(result.already_failing)
    tags = {c: [("already failing in the baseline", "was")] if c in already else [("not blocking", "was")] for c in failing}
    return drilldown(result.run, failing, baseline=result.baseline, tags=tags)


def gate_calibration(result: GateResult) -> Html:
    """With labels, whether the judge was trusted before it gated; without, say it was not checked."""
    if result.calibration is None:
        return empty_note("No labels were given (gate --labels FILE), so the judge was not checked against people "
                          "before its numbers gated this change.")
    return banner(result.calibration) + agreement_table(result.calibration)


# --------------------------------------------------------------------------- calibration


def agreement_table(result: CalibrationResult) -> Html:
    rows = []
    for r in result.agreement.to_dict("records"):
        n = r["n"]
        rows.append(dict(axis=r["axis"], n=n, exact=_num(r["exact"], n, 2),
                         exact_ci=format_interval(r["exact_low"], r["exact_high"], n, digits=2),
                         within=_num(r["within_one"], n, 2),
                         within_ci=format_interval(r["within_one_low"], r["within_one_high"], n, digits=2),
                         mae=_num(r["mae"], n, 2), kappa=_num(r["kappa"], None, 2),
                         result=mark(r["passed"], "ok", "NOT TRUSTED") if r["axis"] != "overall" else
                         '<span class="na">not gated</span>', status=r["status"]))
    note = ""
    if not result.ok and result.overall_clears_bar:
        note = ('<p>The overall figure clears the bar, yet the judge is refused: it is only as trustworthy as its '
                "weakest axis, and an average hides the axis where it is wrong.</p>")
    return Html(note + html_table(rows, [
        Col("axis", "axis", "id"), Col("n", "labels", "int"), Col("exact", "exact agreement", "htmlnum"),
        Col("exact_ci", "95% CI (Wilson)", "nowrap"), Col("within", "within one", "htmlnum"),
        Col("within_ci", "95% CI", "nowrap"), Col("mae", "MAE", "htmlnum"), Col("kappa", "kappa (quadratic)", "htmlnum"),
        Col("result", "result", "html"),
        Col("status", "why")], caption="Agreement with human labels per axis (kappa is NaN when there is no spread "
                                       "to agree on)", bad=lambda r: "NOT TRUSTED" in (r["result"] or "")))


def confusion_chart(result: CalibrationResult) -> Chart:
    axes = list(result.confusion)
    fig = _figure(3.0 * len(axes), 2.9)
    for k, axis in enumerate(axes):
        m = result.confusion[axis]
        ax = fig.add_subplot(1, len(axes), k + 1)
        ax.imshow(m.values, cmap="Blues", vmin=0, vmax=max(1, int(m.values.max())))
        for i in range(3):
            for j in range(3):
                v = int(m.values[i, j])
                ax.text(j, i, str(v), ha="center", va="center", fontsize=10,
                        color="#fff" if v and v > m.values.max() / 2 else "#222", fontweight="bold" if i == j else None)
        ax.set_xticks(range(3), ["0", "1", "2"])
        ax.set_yticks(range(3), ["0", "1", "2"])
        ax.set_xlabel("judge")
        ax.set_ylabel("human")
        weak = axis in result.weak_axes
        ax.set_title(f"{axis}{'  (not trusted)' if weak else ''}", fontsize=9.5, color=FAIL_COLOR if weak else "#222")
    return Chart(fig, "Confusion matrix per judge axis, human score by judge score")


def disagreements(result: CalibrationResult) -> Html:
    """Every label the judge disagrees with, largest gap first: the person's score and reason beside the
    judge's score, quote and rationale."""
    d = result.disagreements()
    if d.empty:
        return empty_note("The judge agrees with every compared label.")
    rows = [dict(case=r["case_id"], axis=r["axis"].replace("_", " "),
                 human=f"<b>{r['human']}</b> · {esc(r['reason'])}",
                 judge=f"<b>{_score(r['judge'])}</b>" + (f" · quote: “{esc(r['judge_quote'])}”" if r["judge_quote"] else "")
                 + (f" · {esc(r['judge_rationale'])}" if r["judge_rationale"] else ""))
            for r in d.to_dict("records")]
    return Html(html_table(rows, [Col("case", "case", "id"), Col("axis", "axis"), Col("human", "person", "html"),
                                  Col("judge", "judge", "html")], caption=f"{len(rows)} disagreement(s)"))


def agreeing_labels(result: CalibrationResult) -> Html:
    p = result.pairs
    rows = p[(p["status"] != "compared") | p["agree"].fillna(False).astype(bool)]
    if rows.empty:
        return empty_note("No label agrees.")
    table = [dict(case=r["case_id"], axis=r["axis"], human=r["human"], judge=_score(r["judge"]),
                  status=r["status"], reason=r["reason"]) for r in rows.to_dict("records")]
    return Html(html_table(table, [Col("case", "case", "id"), Col("axis", "axis"), Col("human", "person", "int"),
                                   Col("judge", "judge", "html"), Col("status", "status"), Col("reason", "person's reason")],
                           caption="Labels the judge agrees with, and labels left out (stale or not judged)",
                           bad=lambda r: r["status"] != "compared"))


# --------------------------------------------------------------------------- drift


def alarms_list(result: DriftResult) -> Html:
    if not result.alarms:
        return empty_note("No alarm: every metric is inside its band.")
    return Html('<ul class="qaeval-notes">' + "".join(f'<li class="bad">{esc(a["message"])}</li>'
                                                       for a in result.alarms) + "</ul>")


def _times(hist: pd.DataFrame) -> list[Any]:
    runs = hist.drop_duplicates("run").sort_values("run")
    out = []
    for t in runs["time"]:
        try:
            out.append(datetime.fromisoformat(t) if isinstance(t, str) else None)
        except ValueError:
            out.append(None)
    return out


def drift_chart(result: DriftResult) -> Chart:
    """One small panel per metric against time (the run's commit on its point), the band over the
    trailing window shaded, alarms marked ✕."""
    hist = result.history
    bands = result.bands.set_index("metric")
    runs = hist.drop_duplicates("run").sort_values("run")
    times = _times(hist)
    use_time = bool(times) and all(t is not None for t in times)
    xs = times if use_time else list(runs["run"])
    commits = [(c or "")[:7] for c in runs["commit"]]
    labels = [c if c and (i == 0 or c != commits[i - 1]) else "" for i, c in enumerate(commits)]  # where it changes
    metrics = list(bands.index)
    cols = 4
    rows = math.ceil(len(metrics) / cols)
    fig = _figure(3.3 * cols, 2.4 * rows)
    for k, metric in enumerate(metrics):
        ax = fig.add_subplot(rows, cols, k + 1)
        series = hist[hist["metric"] == metric].sort_values("run")
        ax.plot(xs, series["value"].to_numpy(), marker="o", ms=3.5, color=NEUTRAL, lw=1.3)
        b = bands.loc[metric]
        if not math.isnan(b["low"]) and len(xs) > 1:
            start = xs[max(0, len(xs) - 1 - int(b["window_n"]))]
            ax.fill_between([start, xs[-1]], b["low"], b["high"], color="#9fc5e8", alpha=0.45, lw=0)
        if b["alarm"]:
            ax.plot([xs[-1]], [b["current"]], marker="X", ms=11, color=FAIL_COLOR)
        if len(xs) <= 40:
            for x, v, c in zip(xs, series["value"], labels):
                if c and not math.isnan(v):
                    ax.annotate(plain(c, 8), (x, v), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=6,
                                color="#555")
        ax.set_ylim(-0.05, 1.12)
        ax.set_title(metric + ("  ALARM" if b["alarm"] else ""), fontsize=9.5,
                     color=FAIL_COLOR if b["alarm"] else "#222", fontweight="bold" if b["alarm"] else None)
        ax.tick_params(labelsize=7)
        if use_time:
            import matplotlib.dates as mdates

            ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(ax.xaxis.get_major_locator()))
        else:
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("run (no times recorded)", fontsize=7)
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle("Each metric over time (labels: the commit, where it changes); band = trailing mean ± max(3σ, 0.02); "
                 "✕ = alarm", fontsize=9.5)
    return Chart(fig, "Each metric's series over time with its band and alarms")


def bands_table(result: DriftResult) -> Html:
    rows = [dict(metric=r["metric"], now=_num(r["current"], None),
                 band=format_interval(r["low"], r["high"], r["window_n"]) or "no band yet",
                 runs=r["window_n"], rule=r["direction"], result=mark(not r["alarm"], "inside", "ALARM"))
            for r in result.bands.to_dict("records")]
    return Html(html_table(rows, [Col("metric", "metric", "id"), Col("now", "now", "html"), Col("band", "band"),
                                  Col("runs", "runs in band", "int"), Col("rule", "rule"), Col("result", "result", "html")],
                           caption="This run against each metric's band", bad=lambda r: "ALARM" in r["result"]))


# --------------------------------------------------------------------------- compare


def compare_metrics(c: Comparison) -> Html:
    rows = [dict(metric=r["metric"], before=_num(r["baseline"], r["n_baseline"]), after=_num(r["current"], r["n_current"]),
                 delta="—" if is_missing(r["delta"]) else f"{r['delta']:+.3f}", result=mark(r["passed"], "same or better", "worse"),
                 noise=r["note"]) for r in c.metric_deltas.to_dict("records")]
    return Html(html_table(rows, [Col("metric", "metric", "id"), Col("before", esc(c.before_label), "html"),
                                  Col("after", esc(c.after_label), "html"), Col("delta", "change", "html"),
                                  Col("result", "result", "html"), Col("noise", "paired sign-flip test")],
                           caption="Every metric, before and after", bad=lambda r: "worse" in r["result"]))


def compare_cases(c: Comparison) -> Html:
    changed = c.changed
    if changed.empty:
        return empty_note("No case changed.")
    before = baseline_view(c.before)
    tags = {}
    for r in changed.to_dict("records"):
        what = [("regressed", "fail")] if r["change"] == "regressed" else [("fixed", "pass")] if r["change"] == "fixed" else []
        what += [(x, "") for x, flag in (("answer changed", r["answer_changed"]), ("citations changed", r["citations_changed"]))
                 if flag is True]
        what += [(f"check {x}", "") for x in r["checks_flipped"]] + [(f"judge {x}", "") for x in r["scores_changed"]]
        if r["status"] != "matched":
            what.append((r["status"], "was"))
        tags[r["case_id"]] = what
    present = [cid for cid in changed["case_id"] if cid in c.after.suite]
    return drilldown(c.after, present, baseline=before, tags=tags, open_failing=True)


def baseline_view(run: RunResult) -> Baseline:
    from qaeval.record import baseline_from_run

    return baseline_from_run(run, "before")


# --------------------------------------------------------------------------- rich views for notebooks


def _view(result: Result) -> str:
    parts = [banner(result).markup]
    if isinstance(result, RunResult):
        parts.append(scoreboard_table(result).markup)
    elif isinstance(result, GateResult):
        parts.append(tier_table(result).markup + delta_table(result).markup)
    elif isinstance(result, CalibrationResult):
        parts.append(agreement_table(result).markup)
    elif isinstance(result, DriftResult):
        parts.append(alarms_list(result).markup + bands_table(result).markup)
    elif isinstance(result, Comparison):
        parts.append(compare_metrics(result).markup)
    return '<div class="qaeval-view">' + "".join(parts) + "</div>"


for _type in (RunResult, GateResult, CalibrationResult, DriftResult, Comparison):
    HTML_VIEWS[_type] = _view
