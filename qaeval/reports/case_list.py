"""Every case of a run as a collapsible section, failing first (``drilldown``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from qaeval.reports.cases import CaseDetail, Tags, case_html
from qaeval.reports.html import Html, empty_note
from qaeval.scoring.index import CaseIndex
from qaeval.scoring.result import RunResult
from qaeval.verdicts.baseline import Baseline

FULL_DRILLDOWN = 200  # failing cases drawn in full; the rest get the short form
ALL_FULL_UP_TO = 60  # suites this small get every case in full


def drilldown(
    run: RunResult,
    case_ids: Sequence[str] | None = None,
    *,
    baseline: Baseline | None = None,
    tags: Mapping[str, Tags] | None = None,
    open_failing: bool = False,
    gold: bool = True,
) -> Html:
    """One collapsible section per case, failing first. Suites of up to ``ALL_FULL_UP_TO`` cases get
    every case in full; larger ones get the first ``FULL_DRILLDOWN`` failing cases in full and the
    rest in short form (question, answer, cited passages), so the page stays usable at thousands."""
    idx = CaseIndex(run)
    ids = list(case_ids) if case_ids is not None else list(run.per_case["case_id"])
    if not ids:
        return empty_note("No case to show.")
    failing = [c for c in ids if not idx.passed(c)]
    passing = [c for c in ids if idx.passed(c)]
    everything_full = len(run.suite) <= ALL_FULL_UP_TO
    trial_indexes = [CaseIndex(r) for r in run.trial_runs]
    parts = []
    for n, cid in enumerate([*failing, *passing]):
        view = CaseDetail(
            run.suite[cid],
            idx[cid],
            full=everything_full or (cid in failing and n < FULL_DRILLDOWN),
            baseline=baseline.cases.get(cid) if baseline is not None else None,
            corpus=run.suite.corpus,
            trials=tuple(t[cid] for t in trial_indexes if cid in t),
            gold=gold,
        )
        parts.append(case_html(view, (tags or {}).get(cid, ()), open_=open_failing and cid in failing and n < 5))
    note = ""
    if not everything_full and len(failing) > FULL_DRILLDOWN:
        note = (
            f'<p class="qaeval-empty">The first {FULL_DRILLDOWN} failing cases are drawn in full, the rest in '
            "short form; the run record holds everything.</p>"
        )
    return Html(note + "".join(parts))
