"""The explorable case list (``case_explorer``): every case of a result, filtered, searched, grouped and
sorted in the page itself, with no server and nothing fetched.

The cases are embedded once as JSON in ``<script type="application/json">``, with every ``<``, ``>``,
``&``, U+2028 and U+2029 escaped, so no text from a case can end the element. ``template/qaeval/explorer.js``
(allowed by its sha256 in the page's Content-Security-Policy) draws the rows with ``textContent`` only;
with JavaScript off, the static markup it wraps shows instead.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qaeval.core.errors import ReportError
from qaeval.core.frames import is_missing
from qaeval.core.params import DEFAULT_ADAPTER, is_plugin_name
from qaeval.reports.html import Html
from qaeval.scoring.index import CaseIndex
from qaeval.scoring.result import RunResult
from qaeval.verdicts.baseline import Baseline, baseline_from_run
from qaeval.verdicts.compare import Comparison
from qaeval.verdicts.drift import DriftResult
from qaeval.verdicts.gate import GateResult
from qaeval.verdicts.monitor import MonitorResult

TEMPLATE = Path(__file__).resolve().parent / "template" / "qaeval"
SCRIPT = (TEMPLATE / "explorer.js").read_text("utf-8")
SCRIPT_HASH = "'sha256-" + base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii") + "'"
JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(value: Any) -> str:
    """``value`` as JSON that is safe inside a ``<script>`` element: no ``<``, ``>``, ``&``, U+2028 or
    U+2029 is left as itself, so ``</script>`` or ``<!--`` in a case cannot end or change the element."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return "".join(JSON_ESCAPES.get(ch, ch) for ch in text)


@dataclass
class Explorer:
    """What one explorer draws: the cases (JSON-ready), the slice columns, the tabs and the rerun command."""

    cases: list[dict[str, Any]]
    slices: list[str]
    gold: bool = True
    baseline: bool = False
    tabs: list[dict[str, Any]] = field(default_factory=list)
    command: str = ""
    static: str = ""  # the markup shown instead with JavaScript off

    def html(self) -> Html:
        data = {k: v for k, v in vars(self).items() if k != "static"} | {"tabs": self.tabs or None}
        return Html(  # the static markup after the script, so the list is drawn before it is parsed
            '<div class="qaeval-explorer"><style>.qaeval-explorer[data-ready]>.qx-static{display:none}</style>'
            '<div class="qx-live" hidden></div>'
            f'<script type="application/json" class="qx-data">{script_json(data)}</script>'
            f'<script>{SCRIPT}</script><div class="qx-static">{self.static}</div></div>'
        )


# --------------------------------------------------------------------------- one case as data


def _answer(out: Mapping[str, Any]) -> str:
    if not is_missing(out.get("error")):
        return f"adapter error: {out['error']}"
    if out.get("abstained"):
        return "(abstained)"
    answer = out.get("answer")
    return "(not recorded)" if answer is None or is_missing(answer) else str(answer)


def _reason_key(reason: Any) -> str:
    """What a failure is grouped by: its registered check's or metric's name, else its code."""
    return str(getattr(reason, "name", None) or getattr(reason, "code", None) or reason)


def _result_word(passed: bool, error: bool, trials: Sequence[bool]) -> str:
    if error:
        return "error"
    if len(trials) > 1 and any(trials) and not all(trials):
        return "flaky"
    return "pass" if passed else "fail"


CASE_SLICES = ("split", "behavior")


def _baseline_data(b: Any) -> dict[str, Any]:
    trials = list(b.trial_passed) if b.trial_passed else None
    answer = "(abstained)" if b.abstained else b.answer
    return {"p": b.pass_count, "n": b.trials, "tr": trials, "a": answer}


def case_records(
    run: RunResult,
    case_ids: Sequence[str] | None = None,
    *,
    baseline: Baseline | None = None,
    columns: Sequence[str] = CASE_SLICES,
    slices: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Each case as the explorer's JSON reads it: id, question, answer, result, what failed, why,
    difficulty, tag, the values of the slice ``columns`` (a case's split and behavior, else ``slices``:
    by case id, a logged row's columns), each trial's outcome (and answers, when they differ), the
    baseline's."""
    logged = slices or {}
    idx = CaseIndex(run)
    trial_idx = [CaseIndex(r) for r in run.trial_runs]
    ids = list(case_ids) if case_ids is not None else list(run.per_case["case_id"])
    ids.sort(key=idx.passed)  # failing first, as the static table
    out = []
    for cid in ids:
        case, rows = run.suite[cid], idx[cid]
        trials = [bool(t[cid].outcome["case_passed"]) for t in trial_idx if cid in t] or [
            bool(rows.outcome["case_passed"])
        ]
        reasons = list(rows.outcome["fail_reasons"])
        answers = [_answer(t[cid].output) for t in trial_idx if cid in t]
        record: dict[str, Any] = {
            "id": cid,
            "q": case.question,
            "g": case.gold_answer,
            "a": _answer(rows.output),
            "r": _result_word(bool(rows.outcome["case_passed"]), not is_missing(rows.output["error"]), trials),
            "f": list(dict.fromkeys(_reason_key(r) for r in reasons)),
            "k": _reason_key(reasons[0]) if reasons else "",
            "why": [str(r) for r in reasons],
            "d": case.difficulty,
            "t": case.adversarial or "",
            "s": [
                {"split": case.split, "behavior": case.expected_behavior, **logged.get(cid, {})}.get(col, "")
                for col in columns
            ],
            "tr": trials,
        }
        if len(set(answers)) > 1:
            record["ta"] = answers
        if baseline is not None and cid in baseline.cases:
            record["b"] = _baseline_data(baseline.cases[cid])
        out.append(record)
    return out


# --------------------------------------------------------------------------- the rerun command


def rerun_command(verb: str, run: RunResult, **options: str | None) -> str:
    """The command that reruns a result's cases (the explorer adds ``--case ID`` or ``--cases-from``);
    "" when no command can: answers given to ``qaeval.score``, or an adapter object rather than a name."""
    parts = ["qaeval", verb, "--data", run.suite.root]
    adapter = run.meta.adapter
    if not is_plugin_name(adapter):
        return ""
    if adapter != DEFAULT_ADAPTER:
        parts += ["--adapter", adapter]
    if run.trials > 1:
        parts += ["--trials", str(run.trials)]
    for name, value in options.items():
        if value:
            parts += [f"--{name.replace('_', '-')}", value]
    return " ".join(shlex.quote(str(p)) for p in parts)


# --------------------------------------------------------------------------- each result


def _run_explorer(run: RunResult) -> Explorer:
    from qaeval.reports.run import cases_table

    return Explorer(
        case_records(run), list(CASE_SLICES), command=rerun_command("run", run), static=cases_table(run).markup
    )


def gate_tabs(result: GateResult) -> list[dict[str, Any]]:
    """The gate's tabs: every case, then the regressed, new, flaky and fixed ones."""
    base, pc = result.baseline.cases, result.run.per_case
    passed = dict(zip(pc["case_id"], pc["case_passed"]))
    fixed = [c for c in result.match.matched if not base[c].passed and passed.get(c)]
    return [
        ALL_TAB,
        _tab("regressed", result.regressed["case_id"]),
        _tab("new", dict.fromkeys([*result.match.new, *result.new_failing["case_id"]])),
        _tab("flaky", result.flaky["case_id"]),
        _tab("fixed", fixed),
    ]


ALL_TAB = {"key": "all", "label": "every case", "ids": None}


def _tab(key: str, ids: Any) -> dict[str, Any]:
    return {"key": key, "label": key, "ids": list(ids)}


def _gate_explorer(result: GateResult) -> Explorer:
    run = result.run
    return Explorer(
        case_records(run, baseline=result.baseline),
        list(CASE_SLICES),
        baseline=True,
        tabs=gate_tabs(result),
        command=rerun_command("gate", run, baseline=result.baseline.path),
    )


def _compare_explorer(c: Comparison) -> Explorer:
    present = list(c.after.per_case["case_id"])
    changes = {r["case_id"]: r["change"] for r in c.cases.to_dict("records")}
    tabs = [ALL_TAB] + [
        _tab(k, [cid for cid in present if changes.get(cid) == k]) for k in ("regressed", "fixed", "flaky")
    ]
    return Explorer(
        case_records(c.after, present, baseline=baseline_from_run(c.before, "before")),
        list(CASE_SLICES),
        baseline=True,
        tabs=tabs,
        command=rerun_command("run", c.after),
    )


def _monitor_explorer(result: MonitorResult) -> Explorer:
    judged = result.rows[result.rows["sampled"]]
    slices = {
        str(r["row_id"]): {col: ("" if is_missing(r.get(col)) else str(r.get(col))) for col in result.by}
        for r in judged.to_dict("records")
    }
    ids = list(result.run.per_case["case_id"])
    return Explorer(case_records(result.run, ids, columns=result.by, slices=slices), list(result.by), gold=False)


def case_explorer(result: Any) -> Html:
    """The explorable case list of a run, gate, comparison, drift result (its last run) or monitor (its
    judged rows): filters (result, what failed, difficulty, tag, trials, slices), a search over ids,
    questions and answers, failures grouped by their first reason, sorting by any column, a link to each
    case kept in the URL fragment, and the command that reruns the cases shown."""
    if isinstance(result, GateResult):
        return _gate_explorer(result).html()
    if isinstance(result, Comparison):
        return _compare_explorer(result).html()
    if isinstance(result, MonitorResult):
        return _monitor_explorer(result).html()
    if isinstance(result, DriftResult):
        return _run_explorer(result.run).html()  # rerun with run: a drift would append to the history
    if isinstance(result, RunResult):
        return _run_explorer(result).html()
    raise ReportError(
        f"case_explorer takes a run, gate, comparison, drift or monitor result, not {type(result).__name__}"
    )
