"""A run record checked against itself: every layer that is a pure function of the stored case and output
(checks, retrieval, trajectory, whether each judge verdict counts) is derived again, then what the layers
add up to (per-case outcomes, units, green, scoreboard, slices); ``qaeval.core.audit`` collects the
disagreements. Registered checks' and metrics' outcomes are the user's code: taken as stored, checked for
shape and consistency (``audit_custom``), never run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from qaeval.core.audit import Audit, same
from qaeval.core.frames import frame, frame_rows
from qaeval.data.cases import GoldenCase, Suite
from qaeval.data.schema import CITATION_CORRECTNESS
from qaeval.scoring.checks import case_bodies, check_outputs
from qaeval.scoring.custom import CUSTOM_SCHEMA, Registered, registered_from_plain, valid_unit, worst
from qaeval.scoring.judge import AxisVerdict
from qaeval.scoring.metrics import scoreboard_and_slices
from qaeval.scoring.ppi import apply_ppi
from qaeval.scoring.quotes import validate_verdict
from qaeval.scoring.result import RunResult
from qaeval.scoring.retrieval import score_retrieval
from qaeval.scoring.trajectory import score_trajectories


def audit_layers(
    audit: Audit, data: Mapping[str, Any], suite: Suite, outputs: pd.DataFrame, k: int, trial: int = 0
) -> None:
    lines = data["cases"]
    if not isinstance(data.get("baseline"), bool):
        audit.problem(f"baseline is {data.get('baseline')!r}, not true or false")
    elif data["baseline"] and data["kind"] != "run":
        audit.problem(f"is a baseline (prompts kept as hashes) of kind {data['kind']!r}; only a run can be")
    hashed = bool(data.get("baseline"))
    for i, (line, case) in enumerate(zip(lines, suite.cases)):
        if line["case_id"] != case.id:
            audit.disagree(f"cases[{i}].case_id", line["case_id"], case.id, "its case")
        if ("prompt_sha256" in line["output"]) != hashed:
            audit.problem(
                f"cases[{i}].output ({case.id}) keeps its prompt "
                f"{'in full' if hashed else 'as a hash'}, but the record is "
                f"{'a baseline' if hashed else 'not a baseline'}"
            )
    if audit.problems:
        return
    cases, sources = suite.to_frame(), suite.sources_frame()
    _audit_checks(audit, lines, check_outputs(cases, outputs, sources, suite.corpus, trial=trial), hashed)
    _audit_retrieval(audit, lines, score_retrieval(cases, outputs, k=k))
    _audit_trajectory(audit, lines, score_trajectories(cases, outputs))
    _audit_verdicts(audit, lines, suite)


BASIS = "its case and output"


def _by_case(df: pd.DataFrame, columns: tuple[str, ...]) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    for cid, *values in zip(df["case_id"].tolist(), *(df[c].tolist() for c in columns)):
        out.setdefault(cid, []).append(tuple(values))
    return out


def _audit_checks(audit: Audit, lines: list[Any], computed: pd.DataFrame, hashed: bool) -> None:
    """Each check's pass/fail (a baseline's grounding_isolation, whose prompts are hashes, as recorded)."""
    recorded = [(row[0], row[1]) for line in lines for row in line["checks"]]
    if not any(name == "passage_fidelity" for name, _ in recorded):  # a record written before that check
        computed = computed[computed["check"] != "passage_fidelity"]
    if recorded == list(zip(computed["check"].tolist(), computed["passed"].tolist())):
        return  # the common case, cheaply: every check as recorded (a stored 1 reads as true, as it loads)
    expected = _by_case(computed, ("check", "passed"))
    for i, line in enumerate(lines):
        cid, stored = line["case_id"], line["checks"]
        rows = expected[cid]
        if not audit.same(f"cases[{i}].checks ({cid}) names", [row[0] for row in stored], [c for c, _ in rows], BASIS):
            continue
        for j, (row, (check, passed)) in enumerate(zip(stored, rows)):
            if not same(row[1], passed) and not (hashed and check == "grounding_isolation"):
                audit.disagree(f"cases[{i}].checks[{j}] ({cid}, {check}) passed", row[1], passed, BASIS)


RETRIEVAL_VALUES = ("k", "n_gold", "n_retrieved", "recall_at_k", "precision_at_k", "mrr", "ndcg_at_k")


def _audit_retrieval(audit: Audit, lines: list[Any], computed: pd.DataFrame) -> None:
    expected = {
        row[0]: row for row in zip(computed["case_id"].tolist(), *(computed[c].tolist() for c in RETRIEVAL_VALUES))
    }
    for i, line in enumerate(lines):
        cid, stored, row = line["case_id"], line["retrieval"], expected.get(line["case_id"])
        if (stored is None) != (row is None):
            audit.problem(
                f"cases[{i}].retrieval ({cid}) is {'missing' if stored is None else 'present'}, but the "
                f"case has {'gold sources' if row is not None else 'no gold source'}"
            )
            continue
        for name, value in zip(RETRIEVAL_VALUES, (row or ())[1:]):
            if not same(stored.get(name), value):
                audit.disagree(f"cases[{i}].retrieval.{name} ({cid})", stored.get(name), value, BASIS)


TRAJECTORY_VALUES = ("step", "kind", "passed", "success")


def _audit_trajectory(audit: Audit, lines: list[Any], computed: pd.DataFrame) -> None:
    expected = _by_case(computed, TRAJECTORY_VALUES)
    for i, line in enumerate(lines):
        cid, stored, rows = line["case_id"], line["trajectory"], expected.get(line["case_id"], [])
        if not audit.same(
            f"cases[{i}].trajectory ({cid}) steps", [t.get("step") for t in stored], [row[0] for row in rows], BASIS
        ):
            continue
        for j, (step, row) in enumerate(zip(stored, rows)):
            for name, value in zip(TRAJECTORY_VALUES[1:], row[1:]):
                if not same(step.get(name), value):
                    audit.disagree(f"cases[{i}].trajectory[{j}].{name} ({cid})", step.get(name), value, BASIS)


def judged_texts(case: GoldenCase, out: Mapping[str, Any], corpus: Any = None) -> list[tuple[str, str, str]]:
    """(axis, target, the text its quote must come from) for every verdict an output gets: none when it
    failed or abstained; faithfulness against the cited sources, answer correctness against the answer,
    and one citation verdict per citation against its source (as ``qaeval.scoring.stream.request_for`` builds them)."""
    if out.get("error") is not None or out["abstained"]:
        return []
    bodies = case_bodies(case, {**out, "passages": out.get("passages") or []}, corpus)
    bodies.update((s.id, s.text) for s in case.sources)  # what the judge was sent: a case's own ids, its own text
    cited: dict[str, str] = {}
    for c in out["citations"]:
        cited.setdefault(c["source_id"], bodies.get(c["source_id"], ""))
    return [
        ("faithfulness", "", "\n".join(cited.values())),
        ("answer_correctness", "", out["answer"]),
        *((CITATION_CORRECTNESS, c["source_id"], bodies.get(c["source_id"], "")) for c in out["citations"]),
    ]


def _audit_verdicts(audit: Audit, lines: list[Any], suite: Suite) -> None:
    """The judge's scores and quotes are what the judge said; whether each verdict counts (valid, credit)
    follows from them and the sources, as ``quotes.validate_verdict`` decides it."""
    basis = "its quote and sources"
    for i, (line, case) in enumerate(zip(lines, suite.cases)):
        cid, stored = line["case_id"], line["verdicts"]
        texts = judged_texts(case, line["output"], suite.corpus)
        if not audit.same(
            f"cases[{i}].verdicts ({cid}) axes",
            [[v.get("axis"), v.get("target")] for v in stored],
            [[axis, target] for axis, target, _ in texts],
            "its output",
        ):
            continue
        for j, (v, (axis, target, text)) in enumerate(zip(stored, texts)):
            if v.get("error") is None:
                score, valid, _ = validate_verdict(AxisVerdict(axis, v.get("score"), v.get("quote") or ""), text)
            else:  # a judge error: no score, never valid
                score, valid = None, False
            for name, value in (("score", score), ("valid", valid), ("credit", valid and score == 2)):
                if not same(v.get(name), value):
                    audit.disagree(
                        f"cases[{i}].verdicts[{j}] ({cid}, {axis}{' ' + target if target else ''}).{name}",
                        v.get(name),
                        value,
                        basis,
                    )


def audit_outcomes(audit: Audit, data: Mapping[str, Any], run: RunResult) -> None:
    """Per-case pass/fail and units (of one trial: ``data`` holds that trial's layers in its lines)."""
    basis = "its layers"
    lines = data["cases"]
    for i, (line, passed, reasons) in enumerate(
        zip(lines, run.per_case["case_passed"].tolist(), run.per_case["fail_reasons"].tolist())
    ):
        if not same(line["passed"], passed):
            audit.disagree(f"cases[{i}].passed ({line['case_id']})", line["passed"], passed, basis)
            continue  # its reasons disagree too; one line says so
        stored = [[r["code"], r.get("name")] for r in line["fail_reasons"]]
        if not same(stored, [[r.code, r.name] for r in reasons]):  # the codes decide; messages are for people
            audit.disagree(
                f"cases[{i}].fail_reasons codes ({line['case_id']})",
                [c for c, _ in stored],
                [r.code for r in reasons],
                basis,
            )
    for m in [x.name for x in run.metrics]:  # a unit the record predates is left out of it, and recomputed
        pairs = zip(run.units[f"{m}__num"].tolist(), run.units[f"{m}__den"].tolist())
        for i, (line, (num, den)) in enumerate(zip(lines, pairs)):
            stored = line["units"].get(m, ...)
            if stored is not ... and not same(stored, [num, den]):
                audit.disagree(f"cases[{i}].units.{m} ({line['case_id']})", stored, [num, den], basis)


def audit_board(audit: Audit, data: Mapping[str, Any], run: RunResult, labels: pd.DataFrame | None) -> None:
    """Green, and the scoreboard's and slices' values, n and PPI columns, from the run's units (every
    trial's). Bootstrap intervals are not drawn again (they cost as much as the rest of a load and
    decide nothing)."""
    audit.same("green", data.get("green"), run.ok)
    board, slices = scoreboard_and_slices(run.units, run.per_case, resamples=0, metrics=run.metrics)
    if labels is not None:
        board, _ = apply_ppi(board, run.units, run.per_case, labels)
    # a metric the record predates is recomputed, not compared; a row for a metric its run does not compute
    # (pass^k on one trial, a name no metric has) is refused: the report would read it as a figure
    computes = set(board["metric"])
    for name in ("scoreboard", "slices"):
        for j, row in enumerate(data[name]):
            if row.get("metric") not in computes:
                audit.problem(f"{name}[{j}] ({_row_label(row)}) is a row for a metric {_not_computed(row, run)}")
    named = {row.get("metric") for row in data["scoreboard"]} & computes | set(run.registered.names)
    _audit_rows(
        audit,
        "scoreboard",
        data["scoreboard"],
        board[board["metric"].isin(named)],
        ("metric",),
        ("value", "n", "direction", "ppi_value", "ppi_ci_low", "ppi_ci_high", "n_labelled"),
    )
    _audit_rows(
        audit,
        "slices",
        data["slices"],
        slices[slices["metric"].isin(named)],
        ("slice", "group", "metric"),
        ("value", "n"),
    )


def _row_label(row: Mapping[str, Any]) -> str:
    return ", ".join(str(row.get(k)) for k in ("slice", "group", "metric") if k in row)


def _not_computed(row: Mapping[str, Any], run: RunResult) -> str:
    if row.get("metric") in ("pass_hat_k", "pass_at_k") and run.trials == 1:
        return "of several trials, and the record has one trial per case"
    return "its run does not compute"


def _audit_rows(
    audit: Audit, name: str, stored: list[Any], computed: pd.DataFrame, key: tuple[str, ...], values: tuple[str, ...]
) -> None:
    """Stored rows against computed ones matched on ``key`` (its last part the metric): each computed
    row stored exactly once, no row the cases do not give (rows of metrics not computed are left alone)."""
    expected = {tuple(r[k] for k in key): r for r in frame_rows(computed)}
    metrics = {ident[-1] for ident in expected}
    seen: set[tuple[Any, ...]] = set()
    for j, row in enumerate(stored):
        ident = tuple(row.get(k) for k in key)
        label = ", ".join(str(v) for v in ident)
        if ident[-1] not in metrics:
            continue
        if ident in seen or ident not in expected:
            audit.problem(
                f"{name}[{j}] ({label}) is {'a repeated row' if ident in seen else 'a row its cases do not give'}"
            )
            continue
        seen.add(ident)
        for column in values:
            audit.same(f"{name}[{j}].{column} ({label})", row.get(column), expected[ident][column])
    for ident in expected.keys() - seen:
        audit.problem(f"{name} has no row for {', '.join(str(v) for v in ident)}, which its cases give")


def audit_custom(audit: Audit, data: Mapping[str, Any]) -> tuple[Registered, pd.DataFrame | None]:
    """The registered checks and metrics a record declares, and their per-case outcomes as stored.
    Checked: the declaration (names, tiers, rules, code hashes); every case lists each of them once, in
    order, with passed true or false and a reason; a check's unit is 1 or 0 of 1 as it passed; a
    metric's unit is a rate, and its worst value when it failed on the case."""
    from qaeval.host.custom import reserved_names

    lines = data["cases"]
    if "custom" not in data:
        if any("custom" in line for line in lines):
            audit.problem("cases carry outcomes of registered checks or metrics, but the record declares none")
        return Registered(), None
    try:
        registered = registered_from_plain(data["custom"], reserved_names())
    except ValueError as exc:
        audit.problem(f"custom is malformed: {exc}")
        return Registered(), None
    kinds: dict[str, tuple[str, bool, Any]] = {c.name: ("check", c.blocks, None) for c in registered.checks}
    kinds |= {m.metric.name: ("metric", False, m.metric) for m in registered.metrics}
    rows = []
    for i, line in enumerate(lines):
        cid, stored = line["case_id"], line.get("custom")
        if (
            not isinstance(stored, list)
            or not all(isinstance(r, list) and len(r) == 3 for r in stored)
            or [r[0] for r in stored] != registered.names
        ):
            audit.problem(
                f"cases[{i}].custom ({cid}) does not list the registered checks and metrics "
                f"({', '.join(registered.names)}) once each, in order, as [name, passed, reason]"
            )
            continue
        for name, passed, reason in stored:
            unit, (kind, blocks, metric) = valid_unit(line["units"].get(name)), kinds[name]
            if not isinstance(passed, bool) or not isinstance(reason, str) or unit is None:
                audit.problem(
                    f"cases[{i}].custom ({cid}, {name}) needs passed true or false, a reason and a unit "
                    "[numerator, denominator] with 0 <= numerator <= denominator"
                )
                continue
            expected = (float(passed), 1.0) if kind == "check" else None if passed else worst(metric)
            if expected is not None:
                audit.same(f"cases[{i}].units.{name} ({cid})", list(unit), list(expected), "its outcome")
            rows.append(dict(zip(CUSTOM_SCHEMA, (cid, name, kind, blocks, passed, reason, *unit))))
    return registered, frame(rows, CUSTOM_SCHEMA)
