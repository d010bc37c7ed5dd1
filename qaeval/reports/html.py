"""The markup every report is made of: escaping, the ``Html`` and ``Chart`` wrappers, tables, banners.

Everything that came from a case or a system's answer goes through ``esc`` before it reaches markup.
A table's column takes its value from its key or its ``get``, its kind decides how the cell is drawn
(``CELLS``), and a row is marked bad from its data (``bad=``), never from its cells' markup.
"""

from __future__ import annotations

import html
import io
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from qaeval.core.frames import is_missing
from qaeval.core.results import Result
from qaeval.scoring.metrics import format_number

PASS_COLOR, FAIL_COLOR, NEUTRAL, LOWER_COLOR = "#1b7f3b", "#b3261e", "#4a6fa5", "#8a5a9e"
NA = '<span class="na">—</span>'
KICKERS = {
    "run": "qaeval run · tier 1",
    "gate": "qaeval gate",
    "calibrate": "qaeval calibration",
    "drift": "qaeval drift",
    "compare": "qaeval compare",
}


def trial_marks(outcomes: Any) -> str:
    """Each trial's outcome as a mark, in order (✓ passed, ✗ failed), titled with the count; "" for one
    trial. Inline colours, so the marks read the same outside the qaeval template."""
    outcomes = list(outcomes)
    if len(outcomes) < 2:
        return ""
    marks = "".join(  # a run of the same outcome in one span: a page of thousands of cases stays light
        f'<span style="color:{PASS_COLOR}">{"✓" * len(list(run))}</span>'
        if ok
        else f'<span style="color:{FAIL_COLOR};font-weight:600">{"✗" * len(list(run))}</span>'
        for ok, run in itertools.groupby(bool(o) for o in outcomes)
    )
    passed = sum(bool(ok) for ok in outcomes)
    return (
        f'<span class="trials" title="{passed} of {len(outcomes)} trials passed" '
        f'aria-label="{passed} of {len(outcomes)} trials passed">{marks}</span>'
    )


def esc(value: Any) -> str:
    """HTML-escape anything for inclusion in report markup."""
    return html.escape("" if value is None else str(value), quote=True)


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


# --------------------------------------------------------------------------- words and numbers


def failed(flag: Any) -> bool:
    """A pass/fail flag that says fail (missing is neither)."""
    return not is_missing(flag) and not flag


def mark(flag: Any, yes: str = "pass", no: str = "FAIL") -> str:
    """A boolean as a word a reviewer reads (never True/False); missing as an em dash."""
    if is_missing(flag):
        return NA
    if flag:
        return f'<span class="ok" style="color:{PASS_COLOR}">✓ {esc(yes)}</span>'
    return f'<span class="bad" style="color:{FAIL_COLOR};font-weight:600">✗ {esc(no)}</span>'


def num(value: Any, n: Any = 1, digits: int = 3) -> str:
    """A number with fixed digits; ``NaN (n=0)`` when nothing was measured, an em dash when missing."""
    if n == 0:
        return '<span class="na">NaN (n=0)</span>'
    return format_number(value, digits, missing=NA)


def score(value: Any) -> str:
    """A judge's 0 to 2 score, or an em dash."""
    return NA if is_missing(value) else esc(int(value))


def delta(value: Any) -> str:
    """A signed change with three digits, or an em dash."""
    return "—" if is_missing(value) else f"{value:+.3f}"


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def first_reason(reasons: Sequence[Any], limit: int = 110) -> str:
    """The first of a case's fail reasons (``FailReason``), its message shortened to ``limit`` characters."""
    return shorten(str(reasons[0]), limit) if reasons else ""


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class Col:
    key: str
    header: str
    kind: str = "text"  # a key of CELLS
    digits: int = 3
    get: Callable[[Any], Any] | None = None  # the cell's value from the row (else row[key])


def _blank(value: Any) -> Any:
    return "" if is_missing(value) else value


CELLS: dict[str, tuple[str, Callable[[Any, Col], str]]] = {  # kind: (the cell's class, the value as markup)
    "text": ("", lambda v, c: esc(_blank(v))),
    "html": ("", lambda v, c: "" if v is None else str(v)),  # already markup
    "htmlnum": ("num", lambda v, c: "" if v is None else str(v)),  # already markup, right-aligned
    "nowrap": ("nowrap", lambda v, c: esc(_blank(v))),
    "num": ("num", lambda v, c: num(v, None, c.digits)),
    "int": ("num", lambda v, c: "" if _blank(v) == "" else esc(int(v))),
    "id": ("id", lambda v, c: f"<code>{esc(v)}</code>"),
}


def cell(value: Any, col: Col) -> str:
    css, markup = CELLS[col.kind]
    attr = f' class="{css}"' if css else ""
    return f"<td{attr}>{markup(value, col)}</td>"


def html_table(
    rows: Iterable[Mapping[str, Any]],
    columns: Sequence[Col],
    *,
    caption: str | None = None,
    bad: Callable[[Mapping[str, Any]], bool] | None = None,
) -> str:
    """A table of ``rows`` (mappings that may hold more keys than ``columns`` draw); ``bad(row)``
    decides from the row's data whether it is highlighted as failing."""
    head = "".join(f"<th>{esc(c.header)}</th>" for c in columns)
    body = []
    for row in rows:
        attr = ' class="bad"' if bad is not None and bad(row) else ""
        cells = "".join(cell(c.get(row) if c.get else row.get(c.key), c) for c in columns)
        body.append(f"<tr{attr}>{cells}</tr>")
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f'<table class="qaeval">{cap}<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def table(rows: Iterable[Mapping[str, Any]], columns: Sequence[Col], **options: Any) -> Html:
    """``html_table`` as ``Html``."""
    return Html(html_table(rows, columns, **options))


# --------------------------------------------------------------------------- facts, notes, banners


def facts_html(facts: Mapping[str, Any]) -> str:
    return (
        '<div class="qaeval-facts">'
        + "".join(f"<span><b>{esc(k)}</b>{esc(v)}</span>" for k, v in facts.items() if v is not None)
        + "</div>"
    )


def notes_html(notes: Sequence[str]) -> str:
    return '<ul class="qaeval-notes">' + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>" if notes else ""


def empty_note(text: str) -> Html:
    return Html(f'<p class="qaeval-empty">{esc(text)}</p>')


def banner_html(verdict: str, detail: str, ok: bool, kicker: str = "") -> str:
    kind = "pass" if ok else "block"
    kick = f'<div class="detail" style="opacity:.9">{esc(kicker)}</div>' if kicker else ""
    colour = PASS_COLOR if ok else FAIL_COLOR  # inline too, so the banner keeps its colour inside Jupyter
    return (
        f'<div class="qaeval-banner qaeval-{kind}" role="status" style="background:{colour};color:#fff;'
        f'padding:12px 20px;border-radius:8px">{kick}<div class="verdict" style="font-size:28px;font-weight:700">'
        f'{esc(verdict)}</div><div class="detail">{esc(detail)}</div></div>'
    )


def banner(result: Result) -> Html:
    """The verdict at the top of every report: the word, and why in a line or two."""
    word = getattr(result, "banner_word", result.verdict)  # a monitor's says what its OK means
    return Html(banner_html(word, result.reason, result.ok, KICKERS.get(result.kind, "")))
