"""Reading a run record back: the file checked line by line and field by field (``read_record``),
the result it holds rebuilt and checked against itself (``load_run``), and a baseline for the gate
(``read_baseline``, which also reads a baseline record beside a moved one by name).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from qaeval.core.audit import Audit
from qaeval.core.errors import BaselineError, DatasetError, RecordError
from qaeval.core.files import read_text
from qaeval.core.frames import frame
from qaeval.core.jsonfile import loads_strict
from qaeval.core.results import Result
from qaeval.data.cases import suite_from_raw
from qaeval.data.labels import labelled_suite_from_raw
from qaeval.data.logs import sample_suite_from_raw
from qaeval.data.schema import LABEL_SCHEMA
from qaeval.record.check import audit_board, audit_custom, audit_layers, audit_outcomes
from qaeval.record.shape import read_meta, refuse_malformed, shape_problems
from qaeval.record.write import FORMAT, KINDS, LEGACY_BASELINE, VERSION, StoredCorpus
from qaeval.scoring.checks import CHECK_SCHEMA
from qaeval.scoring.judge import VERDICT_SCHEMA
from qaeval.scoring.lane import assemble
from qaeval.scoring.metrics import METRIC_NAMES, SCOREBOARD_SCHEMA, SLICE_SCHEMA, scoreboard_and_slices
from qaeval.scoring.result import RunResult
from qaeval.scoring.retrieval import RETRIEVAL_SCHEMA
from qaeval.scoring.trajectory import TRAJECTORY_SCHEMA
from qaeval.scoring.trials import combine_trials
from qaeval.system.contract import OUTPUT_SCHEMA
from qaeval.verdicts.baseline import Baseline, baseline_from_run


def read_record(path: str | Path, *, what: str = "run record") -> dict[str, Any]:
    """Read and check a record's envelope. Raises RecordError naming the problem (exit 65)."""
    where = str(path)
    try:
        text = read_text(path, what)
    except DatasetError as exc:
        raise RecordError(exc.problems) from None
    try:
        data = loads_strict(text)
    except ValueError as exc:
        raise RecordError(f"not valid JSON ({exc})", file=where) from None
    if not isinstance(data, dict):
        raise RecordError("not a qaeval run record (the file is not a JSON object)", file=where)
    if data.get("format") == LEGACY_BASELINE:
        raise RecordError(
            "a qaeval 0.1 baseline: it holds metrics and per-case outcomes but no outputs, so it "
            "can be gated against but not reported or compared; write a new one with "
            "`qaeval baseline`",
            file=where,
        )
    if data.get("format") != FORMAT:
        raise RecordError(f"not a qaeval run record (expected format {FORMAT!r})", file=where)
    if data.get("version") != VERSION:
        why = {
            1: "version 1 was written before fail reasons carried codes",
            2: "version 2 was written before trials (qaeval 0.3)",
        }.get(data["version"] if isinstance(data.get("version"), int) else 0)
        again = (
            f"; {why}: make it again with the qaeval installed now (run its "
            "command again, e.g. `qaeval baseline --data DIR --out FILE`)"
            if why
            else ""
        )
        raise RecordError(
            f"record version {data.get('version')!r} is not one this qaeval reads ({VERSION}){again}", file=where
        )
    problems = []
    for key, kind in (("kind", str), ("meta", dict), ("cases", list), ("scoreboard", list), ("slices", list)):
        if not isinstance(data.get(key), kind):
            problems.append(f"field {key!r} missing or not a {kind.__name__}")
    if not problems and data["kind"] not in KINDS:
        problems.append(f"kind {data['kind']!r} is not one of {', '.join(KINDS)}")
    if problems:
        raise RecordError("record is malformed: " + "; ".join(problems), file=where)
    return data


def run_from_record(data: Mapping[str, Any], where: str) -> RunResult:
    """The RunResult a record holds (its frames equal the ones saved). A field missing or of the wrong
    type is a RecordError naming it; anything raised after that check is a bug (exit 70)."""
    refuse_malformed(shape_problems(data), where)
    try:
        return _run_from_record(data, where)
    except DatasetError as exc:
        raise RecordError([p for p in exc.problems]) from None


def _trial_data(data: Mapping[str, Any], trial: int) -> Mapping[str, Any]:
    """The record as if it held only trial ``trial`` (0: the layers of each line, else its trials[t-1])."""
    if trial == 0:
        return data
    lines = [
        {k: line[k] for k in ("case_id", "case", "fingerprint")} | line["trials"][trial - 1]
        for line in data["cases"]
        if len(line.get("trials", ())) >= trial
    ]  # with adaptive trials, the cases that had this one
    return {**data, "cases": lines}


def _run_from_record(data: Mapping[str, Any], where: str) -> RunResult:
    meta = read_meta(data["meta"], where)
    if meta.trials == 1:
        return _trial_from_record(data, where, meta, whole=True)
    one = replace(meta, trials=1, pass_k=None, adaptive=False)
    runs = [
        _trial_from_record(_trial_data(data, t), where, one, whole=False, trial=t)
        for t in range(meta.trials)
        if t == 0 or any(len(line.get("trials", ())) >= t for line in data["cases"])
    ]
    run = combine_trials(runs, skip_scoreboard=True, pass_k=meta.pass_k, trials=meta.trials, adaptive=meta.adaptive)
    return _with_stored_board(data, where, run)


def _trial_from_record(data: Mapping[str, Any], where: str, meta: Any, *, whole: bool, trial: int = 0) -> RunResult:
    """One trial's run from the record (``whole``: the record has one trial, so its scoreboard, slices
    and labels are this run's, and are checked here; ``trial``: which, for its prompt template)."""
    lines = data["cases"]
    section = data.get("calibration")
    labelled = data["kind"] == "calibrate" and isinstance(section, dict) and section.get("labelled") is True
    build = labelled_suite_from_raw if labelled else suite_from_raw  # a labelled set's cases are checked as such
    if data["kind"] == "monitor":  # the judged log rows: no gold, perhaps no passages
        build = sample_suite_from_raw
    corpus = StoredCorpus(data["corpus"], where) if "corpus" in data else None
    extra: dict[str, Any] = {"corpus": corpus} if corpus is not None else {}
    suite = build(
        [line["case"] for line in lines],
        meta.data or where,
        file=where,
        fingerprints={line["case_id"]: line["fingerprint"] for line in lines},
        **extra,
    )
    outputs, checks, retrieval, verdicts, trajectory = [], [], [], [], []
    for line in lines:
        cid = line["case_id"]
        out = dict(line["output"])
        if "prompt_sha256" in out:
            out.pop("prompt_sha256")
            out["prompt_to_model"] = None
        out.setdefault("latency_s", None)
        out.setdefault("logs", "")
        out.setdefault("passages", [])  # a record written before systems returned passages
        outputs.append({"case_id": cid, **out})
        checks += [dict(case_id=cid, check=c, passed=p, reason=r) for c, p, r in line["checks"]]
        if line["retrieval"] is not None:
            retrieval.append({"case_id": cid, **line["retrieval"]})
        verdicts += [{"case_id": cid, "cached": False, **v} for v in line["verdicts"]]  # a baseline keeps no "cached"
        trajectory += [{"case_id": cid, **t} for t in line["trajectory"]]
    outputs_frame = frame(outputs, OUTPUT_SCHEMA)
    audit = Audit(where, meta.qaeval_version)
    audit_layers(audit, data, suite, outputs_frame, meta.k, trial)
    registered, custom = audit_custom(audit, data)
    audit.done()  # before anything is added up from the layers
    run = assemble(
        suite,
        meta,
        outputs_frame,
        frame(checks, CHECK_SCHEMA),
        frame(retrieval, RETRIEVAL_SCHEMA),
        frame(verdicts, VERDICT_SCHEMA),
        frame(trajectory, TRAJECTORY_SCHEMA),
        skip_scoreboard=True,
        custom=custom,
        registered=registered,
    )
    audit_outcomes(audit, data, run)
    if not whole:
        audit.done()
        return run
    return _with_stored_board(data, where, run, audit)  # one list of what the cases and the board get wrong


def _with_stored_board(data: Mapping[str, Any], where: str, run: RunResult, audit: Audit | None = None) -> RunResult:
    """``run`` with the record's labels, notes, scoreboard and slices, once they are checked against its
    units (``audit_board``)."""
    labels = data.get("labels")
    labels = frame(labels, LABEL_SCHEMA) if labels is not None else None
    audit = audit or Audit(where, run.meta.qaeval_version)
    audit_board(audit, data, run, labels)
    audit.done()
    notes = list(data.get("notes") or [])
    board, slices = frame(data["scoreboard"], SCOREBOARD_SCHEMA), frame(data["slices"], SLICE_SCHEMA)
    missing = [m for m in METRIC_NAMES if m not in set(board["metric"])]
    if missing:  # written before these metrics existed: every metric is recomputed from the stored layers
        board, slices = scoreboard_and_slices(run.units, run.per_case, metrics=run.metrics)
        notes.append(f"scoreboard recomputed from the stored layers: the record predates {', '.join(missing)}")
    return replace(run, scoreboard=board, slices=slices, labels=labels, notes=notes)


def load_run(path: str | Path) -> Result:
    """A saved record as the result it was: RunResult, GateResult, CalibrationResult, DriftResult or
    MonitorResult. Its run and its verdict section are type-checked first (``record_shape.shape_problems``, the
    result class's ``section_problems``): a field missing or of the wrong type is a RecordError naming it;
    what is raised while building from checked fields is a bug in qaeval (exit 70).

    Args:
        path: The record (JSON) a command saved.

    Returns:
        The result it holds, of the kind it was saved as.

    Raises:
        RecordError: The record is missing, of an unknown version, or malformed (exit 65).
    """
    where = str(path)
    data = read_record(path)
    kind = KINDS[data["kind"]]
    section = data.get(kind.section) if kind.section is not None else None
    if kind.section is not None and not isinstance(section, dict):
        raise RecordError(f"a {kind.name} record without its {kind.section} section", file=where)
    run = run_from_record(data, where)
    if section is None:
        return run
    refuse_malformed(kind.result.section_problems(section, kind.section), where)
    result: Any = kind.result.from_section(run, section)
    audit = Audit(where, run.meta.qaeval_version)
    result.audit_section(audit, section)
    audit.done()
    return result


def _beside(path: Path) -> str:
    """ "; did you mean golden/ci-baseline.json?" when a file beside a missing ``path`` has a name close to it."""
    import difflib

    try:
        names = [p.name for p in path.parent.iterdir() if p.is_file()] if path.parent.is_dir() else []
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.7)
    return f"; did you mean {path.parent / close[0]}?" if close else ""


def read_baseline(path: str | Path | None) -> Baseline:
    """Read the baseline to gate against. Missing or corrupt is a BaselineError (exit 65), never a pass."""
    if path is None:
        raise BaselineError("no baseline given: write one with `qaeval baseline --data DIR --out FILE`")
    where = str(path)
    if not Path(path).exists():
        raise BaselineError(f"baseline not found{_beside(Path(path))} (write one with `qaeval baseline`)", file=where)
    try:
        text = read_text(path, "baseline")
        data = loads_strict(text)
    except DatasetError as exc:
        raise BaselineError(exc.problems) from None
    except ValueError as exc:
        raise BaselineError(f"baseline is not valid JSON ({exc})", file=where) from None
    if isinstance(data, dict) and data.get("format") == LEGACY_BASELINE:
        raise BaselineError(
            "a qaeval 0.1 baseline (qaeval-baseline/1), which this version no longer reads: "
            "write a new one with `qaeval baseline`",
            file=where,
        )
    try:
        record = read_record(path, what="baseline")
        if record["kind"] != "run":
            raise BaselineError(
                f"a {record['kind']} record, not a run's: a baseline is the record of a run (write one with "
                "`qaeval baseline --data DIR --out FILE`, or `qaeval run --save FILE`)",
                file=where,
            )
        run = run_from_record(record, where)
    except RecordError as exc:
        raise BaselineError([p for p in exc.problems]) from None
    return baseline_from_run(run, where, record)
