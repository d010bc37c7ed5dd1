"""What the run report draws: how the run was made, the scoreboard, every metric by slice, and every
case on one line (the drill-down is ``qaeval.reports.cases``)."""

from __future__ import annotations

from typing import Any

from qaeval.core.frames import is_missing
from qaeval.data.schema import AXES
from qaeval.reports.html import Col, Html, esc, first_reason, mark, score, shorten, table, trial_marks
from qaeval.scoring.checks import CHECKS
from qaeval.scoring.metrics import format_interval, format_number, format_value
from qaeval.scoring.result import RunResult
from qaeval.scoring.retrieval import unknown_ids_note


def run_facts(run: RunResult) -> dict[str, Any]:
    """The facts line of a run: its size, system, boundary, judge and what the judge cost."""
    usage = run.judge_usage
    meta = run.meta
    return {
        "cases": len(run.suite),
        "adapter": meta.adapter,
        "boundary": "enforced (worker processes)"
        if meta.boundary_enforced and not meta.executor
        else f"executor {meta.executor}"
        if meta.executor
        else "NOT enforced (isolation none)",
        "concurrency": meta.concurrency,
        "judge": meta.judge.label(),
        **(
            {
                "trials": f"{'up to ' if meta.adaptive else ''}{run.trials} per case "
                f"({int(run.per_case['trials'].sum())} system calls)"
            }
            if run.trials > 1
            else {}
        ),
        "judge calls": f"{usage['calls']} ({usage['cached']} cached, {usage['errors']} errors)",
        "tokens": f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion",
        "data": run.suite.root,
        "fingerprint": run.dataset_fingerprint[:12],
        "retrieval": retrieval_scope(run),
        "commit": (meta.git_commit or "")[:10] or None,
        "time": meta.created,
        **({"your checks and metrics": registered_line(run)} if run.registered else {}),
    }


def retrieval_scope(run: RunResult) -> str:
    """What retrieval was measured over: the cutoff k, and the corpus's size when the folder has one
    (a record keeps an excerpt of the corpus and the size of the whole)."""
    corpus = run.suite.corpus
    if corpus is None:
        return f"top {run.meta.k} over each case's own passages"
    size = getattr(corpus, "size", None) or len(corpus)
    own = sum(1 for case in run.suite if not case.from_corpus)
    mixed = f"; {own} case(s) over their own passages" if own else ""
    return f"top {run.meta.k} over a frozen corpus of {size:,} passages{mixed}"


def registered_line(run: RunResult) -> str:
    """Each registered check (tier 1 or informational) and metric, with the start of its code's sha256."""
    reg = run.registered
    return ", ".join(
        [f"{c.name} (tier {'1' if c.blocks else 'info'}, {c.sha256[:8]})" for c in reg.checks]
        + [f"{m.metric.name} (metric, {m.sha256[:8]})" for m in reg.metrics]
    )


def run_notes(run: RunResult) -> list[str]:
    return (
        list(run.notes)
        + unknown_ids_note(run.suite, run.outputs)
        + ([] if run.meta.boundary_enforced else ["isolation none: the boundary was NOT enforced in this run"])
    )


def metric_columns(ppi: bool, labelled: str = "labelled") -> list[Col]:
    """A metric's value, interval and n; with human labels, its PPI estimate and interval beside them."""
    cols = [
        Col("value", "value", get=lambda r: format_value(r["value"], r["n"])),
        Col("ci", "95% CI", get=lambda r: format_interval(r["ci_low"], r["ci_high"], r["n"])),
        Col("n", "n", "int"),
    ]
    if ppi:
        cols += [
            Col(
                "ppi",
                "PPI estimate",
                get=lambda r: format_number(r["ppi_value"], missing="") if r["n_labelled"] else "",
            ),
            Col(
                "ppi_ci",
                "PPI 95% CI",
                get=lambda r: format_interval(r["ppi_ci_low"], r["ppi_ci_high"], r["n_labelled"]),
            ),
            Col("n_labelled", labelled, get=lambda r: r["n_labelled"] or ""),
        ]
    return cols


def scoreboard_table(run: RunResult) -> Html:
    """Each headline metric with its interval and n; with human labels, the PPI estimate beside it."""
    board = run.scoreboard
    ppi = bool((board["n_labelled"] > 0).any())
    cols = [
        Col("metric", "metric", "id"),
        *metric_columns(ppi),
        Col("better", "better", get=lambda r: f"{r['direction']} ({r['over']})"),
    ]
    caption = "Headline metrics with 95% bootstrap intervals over cases"
    if ppi:
        caption += "; PPI: corrected by human labels (prediction-powered inference), with its own interval"
    return table(board.to_dict("records"), cols, caption=caption)


def heat(goodness: float) -> str:
    """A background from red (0) through yellow to green (1), light enough to read text on."""
    g = min(1.0, max(0.0, goodness))
    red, green = (255, int(180 + 75 * g * 2)) if g < 0.5 else (int(255 - 120 * (g - 0.5) * 2), 235)
    return f"rgb({red},{min(green, 235)},{150 + int(40 * g)})"


def _slice_cell(value: Any, n: int, higher: bool) -> str:
    if n == 0 or is_missing(value):
        return '<td class="num" style="background:#eceff1"><span class=na>n=0</span></td>'
    return (
        f'<td class="num" style="background:{heat(value if higher else 1 - value)}">{value:.2f}'
        f"<br><span class=na>n={n}</span></td>"
    )


def slice_table(run: RunResult) -> Html:
    """Every metric for every group of every slice (difficulty, adversarial tag, split) as a colour-coded
    table: green is good whatever the metric's direction, grey has nothing to measure (n = 0)."""
    s = run.slices
    groups = list(dict.fromkeys(zip(s["slice"], s["group"])))
    value = {(r.slice, r.group, r.metric): (r.value, r.n) for r in s.itertuples(index=False)}
    head = "".join(f"<th>{esc(g)}<br><span class=na>{esc(sl)}</span></th>" for sl, g in groups)
    rows = []
    by_name = {m.name: m for m in run.metrics}
    for m in run.scoreboard["metric"]:
        higher = by_name[m].higher_is_better
        cells = "".join(_slice_cell(*value[(sl, g, m)], higher) for sl, g in groups)
        label = f"{m} (lower is better)" if not higher else m
        rows.append(f"<tr><td class=id><code>{esc(label)}</code></td>{cells}</tr>")
    return Html(
        f'<table class="qaeval"><caption>Every metric by slice: green is good, grey has nothing to measure'
        f"</caption><thead><tr><th>metric</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def trial_outcomes(run: RunResult) -> dict[str, list[bool]]:
    """Each case's trials, passed or not, in order (one entry with one trial)."""
    out: dict[str, list[bool]] = {}
    for r in run.runs:
        for cid, ok in zip(r.per_case["case_id"], r.per_case["case_passed"]):
            out.setdefault(cid, []).append(bool(ok))
    return out


QUESTION_CHARS = 90  # of a question under its case id in the case table (the drill-down has it whole)


def _case_row(r: dict[str, Any], registered: list[str], trials: list[bool]) -> dict[str, Any]:
    failed_checks = [c.replace("_", " ") for c in (*CHECKS, *registered) if not r[c]]
    question = shorten(r["question"], QUESTION_CHARS)
    return dict(
        case_id=f'<code>{esc(r["case_id"])}</code><br><span class="na">{esc(question)}</span>',
        result=mark(r["case_passed"]) + (" " + trial_marks(trials) if len(trials) > 1 else ""),
        kind=esc(f"{r['difficulty']}{' · ' + r['adversarial'] if r['adversarial'] else ''}"),
        checks=mark(not failed_checks, "all", ", ".join(failed_checks) or "failed"),
        retrieval="—" if is_missing(r["recall_at_k"]) else f"R@k {r['recall_at_k']:.2f} · MRR {r['mrr']:.2f}",
        judge=" · ".join(f"{a[0].upper()} {score(r[a])}" for a in AXES),
        trajectory=mark(r["trajectory_success"], "reached", "failed"),
        why=esc(first_reason(r["fail_reasons"])),
    )


def cases_table(run: RunResult) -> Html:
    """Every case on one line (failing first), narrow enough not to scroll sideways."""
    pc = run.per_case.sort_values("case_passed", kind="stable")
    outcomes = trial_outcomes(run)
    rows = [
        _case_row(r, [c.name for c in run.registered.checks], outcomes[r["case_id"]]) for r in pc.to_dict("records")
    ]
    cols = [
        Col("case_id", "case · question", "html"),
        Col("result", "result", "html"),
        Col("kind", "difficulty · tag", "html"),
        Col("checks", "checks", "html"),
        Col("retrieval", "retrieval"),
        Col("judge", "judge F · A · C", "html"),
        Col("trajectory", "trajectory", "html"),
        Col("why", "first reason", "html"),
    ]
    caption = (
        "Every case (failing first); F, A, C: the judge's faithfulness, answer correctness and citation "
        "correctness, 0 to 2"
    )
    if run.trials > 1:
        caption += (
            f"; {run.trials} trials per case, each drawn as a mark (✓ passed, ✗ failed), and a case passes "
            "when every trial does (the judge scores are the first trial's)"
        )
    return table(rows, cols, caption=caption)
