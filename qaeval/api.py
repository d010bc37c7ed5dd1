"""The verbs the command line and the notebooks share. Each checks its parameters against
``qaeval.core.params`` (an unknown keyword is a usage error that lists the known ones), runs, and returns a
result object (``qaeval.core.results``); none of them prints or exits.

    import qaeval.api as qa
    run = qa.run("golden", concurrency=8)
    verdict = qa.gate_run("golden", baseline="golden/ci-baseline.json")
    verdict.raise_for_status()

``adapter`` may be a ``module:factory`` name, a zero-argument factory or an adapter object (shipped to
the worker processes with cloudpickle); ``judge`` a name, a factory or a judge object; ``executor`` a
``dask://HOST:PORT`` address or any ``concurrent.futures.Executor``.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

from qaeval.boundary import clients
from qaeval.boundary.custom import installed
from qaeval.commands.common import (
    check_parameters,
    drop_journal,
    evaluate_params,
    finish,
    labelled_run,
    make_judge,
    notify_hook_of,
    record_path,
    recorded,
    score_labelled_set,
)
from qaeval.commands.export import TrecExport, write_trec
from qaeval.commands.pipeline import fewer_collections
from qaeval.commands.tracking import TrackingWarning, track  # noqa: F401 (qa.TrackingWarning, qa.track)
from qaeval.core import params as P
from qaeval.core.errors import BaselineRefused, UsageError
from qaeval.core.files import refuse_overwrite, write_atomic
from qaeval.core.jsonfile import write_jsonl
from qaeval.core.locks import holding_the_record
from qaeval.core.results import Result
from qaeval.core.text import one_line
from qaeval.data.cases import load_suite
from qaeval.data.labels import LABELS_HEADER, load_labels
from qaeval.data.schema import AXES
from qaeval.proposals.run import accept, propose  # noqa: F401 (qa.propose, qa.accept)
from qaeval.record.read import load_run as _load_run
from qaeval.record.read import read_baseline
from qaeval.record.runs import runs_table as runs  # noqa: F401 (qa.runs(DIR))
from qaeval.record.write import write_record
from qaeval.scoring.result import RunResult
from qaeval.system.labelled import load_labelled_set
from qaeval.verdicts.calibration import CalibrationResult, axes_to_assess, calibrate
from qaeval.verdicts.compare import Comparison
from qaeval.verdicts.compare import compare as _compare
from qaeval.verdicts.drift import DriftResult, drift
from qaeval.verdicts.gate import GateResult, gate
from qaeval.verdicts.monitor import MonitorResult
from qaeval.verdicts.sheets import export_sheet, import_sheet
from qaeval.verdicts.tolerances import gated, load_tolerances


def version() -> str:
    from qaeval import __version__

    return __version__


def validate(data: str) -> str:
    """Load a suite strictly and describe it (raises DatasetError listing every problem)."""
    suite = load_suite(data)
    lines = [f"{len(suite)} valid case(s) in {data} (fingerprint {suite.fingerprint[:12]})"]
    for name, counts in suite.summary().items():
        lines.append(f"  by {name.replace('_', ' ')}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return "\n".join(lines)


# --------------------------------------------------------------------------- the verbs


@holding_the_record
def run(
    data: str | None = None,
    *,
    adapter: Any = None,
    judge: Any = None,
    k: int | None = None,
    timeout: float | None = None,
    concurrency: int | None = None,
    isolation: str | None = None,
    executor: Any = None,
    labels: str | None = None,
    save: str | None = None,
    judge_model: str | None = None,
    judge_base_url: str | None = None,
    judge_concurrency: int | None = None,
    judge_cache: bool | None = None,
    record: str | None = None,
    trials: int | None = None,
    pass_k: int | None = None,
    **unknown: Any,
) -> RunResult:
    """Run the system over the golden cases and score every layer (``record``: load a saved run).
    ``trials``: run each case that many times (``qaeval.scoring.trials``)."""
    given = dict(
        data=data,
        adapter=adapter,
        judge=judge,
        k=k,
        timeout=timeout,
        concurrency=concurrency,
        isolation=isolation,
        executor=executor,
        labels=labels,
        save=save,
        judge_model=judge_model,
        judge_base_url=judge_base_url,
        judge_concurrency=judge_concurrency,
        judge_cache=judge_cache,
        record=record,
        trials=trials,
        pass_k=pass_k,
    )
    p = check_parameters("run", **given, **unknown)
    if p["record"]:
        return recorded("run", p, RunResult)
    return finish(labelled_run(p), p)


@holding_the_record
def baseline(
    data: str | None = None, *, out: str | None = None, allow_failing: bool | None = None, **options: Any
) -> RunResult:
    """Run, then write the run record a gate compares against. A run that is not green (a failing
    deterministic check or an adapter error) is refused (BaselineRefused) unless ``allow_failing``,
    and then recorded as not green. A refused run keeps its journal beside ``out``, so that
    ``allow_failing`` with ``resume`` keeps it without calling the system again."""
    p = check_parameters("baseline", data=data, out=out, allow_failing=allow_failing, **options)
    result = evaluate_params(p)
    if not result.ok and not p["allow_failing"]:
        again = (
            "; add --resume as well to keep this very run (its outputs wait in the journal)" if record_path(p) else ""
        )
        raise BaselineRefused(
            f"not a green run, so not a baseline: {result.reason}. Fix it, or keep it anyway with "
            f"--allow-failing (the baseline then says it was not green){again}",
            result,
        )
    write_record(result, p["out"], baseline=True, allowed_failing=not result.ok)
    drop_journal(p)
    return finish(result, p)


@holding_the_record
def gate_run(
    data: str | None = None,
    *,
    baseline: str | None = None,
    tolerances: str | None = None,
    tolerance: list[str] | str | None = None,
    labels: str | None = None,
    min_agreement: float | None = None,
    min_labels: int | None = None,
    min_kappa: float | None = None,
    **options: Any,
) -> GateResult:
    """Gate a fresh run against a baseline record. With ``labels`` the judge is calibrated first and a
    judge it does not trust blocks (exit 2)."""
    p = check_parameters(
        "gate",
        data=data,
        baseline=baseline,
        tolerances=tolerances,
        tolerance=tolerance,
        labels=labels,
        min_agreement=min_agreement,
        min_labels=min_labels,
        min_kappa=min_kappa,
        **options,
    )
    if p["record"]:
        return recorded("gate", p, GateResult)
    base = read_baseline(p["baseline"])  # a missing or corrupt baseline stops here, before anything runs
    notes = []
    if options.get("adapter") is None:  # no adapter named: gate the system the baseline was recorded from
        p, note = _baseline_adapter(p, base.adapter)
        notes.append(note)
    registers = bool(p["metric"]) or bool(installed("metrics"))  # their tolerances are known once they are built
    limits = None if registers else load_tolerances(p["tolerances"], p["tolerance"])  # bad ones cost no run
    current = labelled_run(p, base.settled())
    limits = limits or load_tolerances(p["tolerances"], p["tolerance"], gated(current.metrics))
    calibration = None
    if current.labels is not None:
        calibration = calibrate(
            current,
            current.labels,
            min_agreement=p["min_agreement"],
            min_labels=p["min_labels"],
            min_kappa=p["min_kappa"],
            source=p["labels"],
        )
    result = gate(current, base, limits, calibration=calibration, alpha=p["alpha"])
    result.notes[:0] = notes
    return finish(result, p)


def _baseline_adapter(p: dict[str, Any], recorded: str | None) -> tuple[dict[str, Any], str]:
    """The parameters with the adapter a baseline records, when it records one by name, and a note
    saying which adapter is gated and why."""
    if recorded and P.is_plugin_name(recorded) and recorded.isprintable():
        return {**p, "adapter": recorded}, f"no adapter given: gating {recorded}, the adapter the baseline records"
    return p, (
        f"no adapter given and the baseline names none by module:factory ({one_line(recorded or 'not recorded')}): "
        f"gating the default, {p['adapter']}"
    )


@holding_the_record
def calibrate_run(
    data: str | None = None,
    *,
    labels: str | None = None,
    labelled: str | None = None,
    min_agreement: float | None = None,
    min_labels: int | None = None,
    min_kappa: float | None = None,
    axes: list[str] | str | None = None,
    **options: Any,
) -> CalibrationResult:
    """Compare the judge with human labels: keyed labels on a fresh run of ``data``, or a labelled set
    that carries its own outputs (no adapter is called). The verdict is on ``axes`` (default: the axes
    a labelled set labels; all three for keyed labels)."""
    p = check_parameters(
        "calibrate",
        data=data,
        labels=labels,
        labelled=labelled,
        min_agreement=min_agreement,
        min_labels=min_labels,
        min_kappa=min_kappa,
        axes=axes,
        **options,
    )
    if p["record"]:
        return recorded("calibrate", p, CalibrationResult)
    if p["labelled"]:
        suite, outputs, label_frame = load_labelled_set(p["labelled"])
        chosen = axes_to_assess(p["axes"], label_frame["axis"].unique().tolist())  # a bad axis costs no judge call
        current = score_labelled_set(p, suite, outputs)
        source = p["labelled"]
    else:
        chosen = axes_to_assess(p["axes"], AXES)
        with fewer_collections():
            suite = load_suite(p["data"])
            label_frame = load_labels(p["labels"], known_cases={c.id for c in suite})
            current = evaluate_params(p, suite)
        source = p["labels"]
    result = calibrate(
        current,
        label_frame,
        min_agreement=p["min_agreement"],
        min_labels=p["min_labels"],
        min_kappa=p["min_kappa"],
        axes=chosen,
        source=source,
        labelled=bool(p["labelled"]),
    )
    return finish(result, p)


@holding_the_record
def drift_run(
    data: str | None = None,
    *,
    timeseries: str | None = None,
    window: int | None = None,
    notify: Any = None,
    **options: Any,
) -> DriftResult:
    """Re-run the frozen split, compare with the series' bands, append the run, alarm."""
    p = check_parameters("drift", data=data, timeseries=timeseries, window=window, notify=notify, **options)
    if p["record"]:
        return recorded("drift", p, DriftResult)
    frozen = load_suite(p["data"]).select(split="frozen")
    hook = notify_hook_of(p, p["data"])  # before the run: a typo is a usage error before anything runs
    return finish(drift(evaluate_params(p, frozen), p["timeseries"], window=p["window"], notify=hook), p)


@holding_the_record
def score_logs(
    logs: Any = None,
    *,
    judge: Any = None,
    by: list[str] | str | None = None,
    window: str | None = None,
    sample: int | None = None,
    labels: str | None = None,
    **options: Any,
) -> MonitorResult:
    """Score logged traffic without gold (``qaeval.commands.monitoring``): ``logs`` a JSONL, CSV or Parquet path or a
    DataFrame; ``by`` slice columns; ``window`` a time span such as "1D"; ``sample`` rows to judge."""
    from qaeval.commands.monitoring import monitor

    table = logs if logs is not None and not isinstance(logs, (str, Path)) else None
    options.setdefault("time_window", window)
    p = check_parameters(
        "monitor",
        logs="<DataFrame>" if table is not None else logs,
        judge=judge,
        by=by,
        sample=sample,
        labels=labels,
        **options,
    )
    if p["record"]:
        return recorded("monitor", p, MonitorResult)
    hook = notify_hook_of(p, None)
    with ExitStack() as stack:
        client = make_judge(p)
        stack.callback(clients.close_judge, client)
        result = monitor(
            table if table is not None else p["logs"],
            client,
            by=p["by"],
            every=p["time_window"],
            sample=p["sample"],
            seed=p["seed"],
            labels=p["labels"],
            timeseries=p["timeseries"],
            band_window=p["band_window"],
            min_rows=p["min_rows"],
            notify=hook,
        )
    return finish(result, p)


def load_run(path: str | Path) -> Result:
    """A saved run record as the result it was (RunResult, GateResult, CalibrationResult, DriftResult)."""
    return _load_run(path)


def compare(before: str | Path | Result, after: str | Path | Result) -> Comparison:
    """Two runs (records or results) side by side."""

    def labelled(x: Any) -> tuple[RunResult, str]:
        run_ = _golden_run(
            x,
            "compare takes two runs over golden cases (watch traffic over time with monitor "
            "--timeseries, or list records with qaeval runs)",
        )
        return run_, str(x) if isinstance(x, (str, Path)) else run_.meta.adapter

    (b, b_label), (a, a_label) = labelled(before), labelled(after)
    return _compare(b, a, before_label=b_label, after_label=a_label)


def export_trec(record: str | Path | Result, out: str | Path) -> TrecExport:
    """Write a run's retrieval as ``out/run.trec`` and ``out/qrels.trec`` for trec_eval, ir-measures and ranx;
    returns what was written."""
    run_ = _golden_run(record, "it has no gold passages to write qrels from: export trec takes a run over golden cases")
    return write_trec(run_, out, where=str(record) if isinstance(record, (str, Path)) else "<run>")


def _golden_run(record: str | Path | Result, why: str) -> RunResult:
    """The run over golden cases a record or result holds; a monitor's (a judged sample of logged traffic)
    is a UsageError saying ``why`` it does not serve."""
    result = _load_run(record) if isinstance(record, (str, Path)) else record
    if isinstance(result, MonitorResult):
        name = record if isinstance(record, (str, Path)) else "a monitor result"
        raise UsageError(f"{name} is a monitor record of logged traffic; {why}")
    return as_run(result)


# --------------------------------------------------------------------------- labels


def label_export(
    record: str | Path | RunResult, out: str | Path, *, sample: int | None = None, seed: int = 0
) -> tuple[Path, int]:
    """Write an annotation sheet (CSV) for a run's answered cases; returns (path, cases in it)."""
    if sample is not None and (isinstance(sample, bool) or not isinstance(sample, int) or sample < 1):
        raise UsageError(f"sample must be a whole number >= 1, got {sample!r}")
    result = _load_run(record) if isinstance(record, (str, Path)) else record
    run_ = as_run(result)
    refuse_overwrite([("out", out, "sheet")], [("record", record)], data=run_.meta.data)
    axes = ("faithfulness", "citation_correctness") if isinstance(result, MonitorResult) else AXES  # no gold in logs
    text, n = export_sheet(run_, sample=sample, seed=seed, axes=axes)
    return write_atomic(out, text), n


def label_import(sheet: str | Path, record: str | Path | RunResult, out: str | Path) -> tuple[Path, int, int]:
    """Check a filled sheet against the run it is for and write keyed labels (JSONL); returns
    (path, labels written, rows left blank)."""
    run_ = as_run(record)
    refuse_overwrite([("out", out, "labels")], [("sheet", sheet), ("record", record)], data=run_.meta.data)
    labels, blank = import_sheet(sheet, run_)
    return write_jsonl(out, [LABELS_HEADER, *labels]), len(labels), blank


def as_run(record: str | Path | Result) -> RunResult:
    """The run inside a record path or a result (a gate, calibration or drift result holds one)."""
    result = _load_run(record) if isinstance(record, (str, Path)) else record
    run_ = result if isinstance(result, RunResult) else getattr(result, "run", None)
    if not isinstance(run_, RunResult):
        raise UsageError(f"{record!r} holds no run")
    return run_


# --------------------------------------------------------------------------- growing the golden set


def import_cases(
    format: str,
    source: str | Path,
    out: str | Path,
    *,
    limit: int | None = None,
    seed: int | None = None,
    split: str = "frozen",
    prefix: str | None = None,
    labelled: bool = False,
    corpus: bool = False,
) -> Any:
    """Convert a public dataset into golden cases (or, for wice/expertqa/ares, a labelled set); returns the
    import report (what was imported, what was refused and why). With ``corpus`` (squad2, hotpotqa,
    musique), every paragraph of the file goes into ``OUT/corpus.jsonl`` and the cases carry no sources."""
    from qaeval.data.importers import LABELLED_FORMATS, import_file

    if labelled and format not in LABELLED_FORMATS:
        raise UsageError(f"--labelled is for {', '.join(LABELLED_FORMATS)}; {format} holds QA cases")
    return import_file(format, source, out, limit=limit, seed=seed, split=split, prefix=prefix, corpus=corpus)


def add_case(data: str | Path, miss: Any = None, *, interactive: bool = False) -> tuple[str, Path]:
    """Append one production miss (a miss file, or a dict in the golden case's field names) to the living
    split; returns (its new id, the file it went to)."""
    from qaeval.data.misses import add_case as _add

    if miss is None and not interactive:
        raise UsageError("add-case needs --from MISS.json (or --interactive)")
    return _add(data, miss if miss is not None else {}, ask=input if interactive else None)
