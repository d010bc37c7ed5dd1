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
    baseline_for_cases,
    check_parameters,
    drop_journal,
    evaluate_params,
    finish,
    labelled_run,
    make_judge,
    notify_hook_of,
    record_path,
    recorded,
    score_answers,
    score_labelled_set,
)
from qaeval.commands.pipeline import fewer_collections
from qaeval.commands.records import (  # noqa: F401 (the verbs on records: qa.load_run, qa.compare...)
    add_case,
    as_run,
    compare,
    export_trec,
    import_cases,
    label_export,
    label_import,
    load_run,
)
from qaeval.commands.tracking import TrackingWarning, track  # noqa: F401 (qa.TrackingWarning, qa.track)
from qaeval.core import params as P
from qaeval.core.errors import BaselineRefused
from qaeval.core.locks import holding_the_record
from qaeval.core.text import one_line
from qaeval.data.cases import Suite, load_suite
from qaeval.data.labels import load_labels
from qaeval.data.schema import AXES
from qaeval.proposals.run import accept, propose  # noqa: F401 (qa.propose, qa.accept)
from qaeval.record.read import read_baseline
from qaeval.record.runs import runs_table as runs  # noqa: F401 (qa.runs(DIR))
from qaeval.record.write import write_record
from qaeval.scoring.result import RunResult
from qaeval.system.answers import answers_by_trial
from qaeval.system.labelled import load_labelled_set
from qaeval.verdicts.baseline import check_shares_cases
from qaeval.verdicts.calibration import CalibrationResult, axes_to_assess, calibrate
from qaeval.verdicts.drift import DriftResult, drift
from qaeval.verdicts.gate import GateResult, gate
from qaeval.verdicts.monitor import MonitorResult
from qaeval.verdicts.tolerances import gated, load_tolerances


def version() -> str:
    """qaeval's version.

    Returns:
        The version of the installed qaeval.
    """
    from qaeval import __version__

    return __version__


def validate(data: str) -> str:
    """Load a suite strictly and describe it, and its corpus if it has one.

    Args:
        data: The folder of golden cases.

    Returns:
        A few lines: how many cases, the suite's fingerprint, the corpus checked (if any) and the
        counts by split, difficulty, expected behaviour and adversarial tag.

    Raises:
        DatasetError: Listing every problem, each with its file and line (exit 65).
    """
    suite = load_suite(data)
    lines = [f"{len(suite)} valid case(s) in {data} (fingerprint {suite.fingerprint[:12]})"]
    if suite.corpus is not None:
        uses = sum(c.from_corpus for c in suite)
        lines.append(
            f"  corpus: {suite.corpus.path}, {len(suite.corpus)} valid passage(s) "
            f"(fingerprint {suite.corpus.fingerprint[:12]}); {uses} case(s) retrieve from it"
        )
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
    """Run the system over the golden cases and score every layer.

    Args:
        data: The folder of golden cases (default ``golden``).
        adapter: The system: a ``module:factory`` name, a zero-argument factory or an adapter
            object (default: the bundled reference system).
        judge: The judge: a name, a factory or a judge object (default: the offline judge).
        k: How many retrieved passages the retrieval metrics look at (default 5).
        timeout: Seconds one case may take (default 60).
        concurrency: Worker processes, each on one case at a time (default 4).
        isolation: ``process`` (default) or ``none`` (in this process, for a debugger).
        executor: A ``dask://HOST:PORT`` address or a ``concurrent.futures.Executor``.
        labels: Human labels (JSONL): PPI estimates use them beside the judge's scores.
        save: Where to save the run record.
        judge_model: The HTTP judge's model (``QAEVAL_JUDGE_MODEL``).
        judge_base_url: The HTTP judge's endpoint (``OPENAI_BASE_URL``).
        judge_concurrency: The HTTP judge's requests in flight.
        judge_cache: Whether the judge's verdicts are cached on disk.
        record: A saved run record to load instead of running anything.
        trials: Run each case that many times (``qaeval.scoring.trials``).
        pass_k: The k of pass_hat_k and pass_at_k (default: ``trials``).
        **unknown: Any other parameter of ``qaeval run`` by its flag's name (``resume``, ``check``,
            ``metric``, ...); an unknown one is a usage error that lists the known ones.

    Returns:
        The scored run; ``raise_for_status()`` raises TierOneFailed when it is RED.

    Raises:
        UsageError: A bad parameter or an adapter that cannot be built (exit 64).
        DatasetError: Cases that do not load (exit 65).
    """
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
def score(
    suite: Suite | str | Path,
    answers: Any,
    *,
    judge: Any = None,
    k: int | None = None,
    labels: str | None = None,
    save: str | None = None,
    judge_model: str | None = None,
    judge_base_url: str | None = None,
    judge_concurrency: int | None = None,
    judge_cache: bool | None = None,
    judge_timeout: float | None = None,
    pass_k: int | None = None,
) -> RunResult:
    """Score answers you already have, with the same checks, judge and scoreboard as a run.

    Args:
        suite: the golden cases: a ``Suite`` or a golden folder's path.
        answers: one answer per case (and trial): a DataFrame, a list of dicts, or a dict of case id to
            ``SUTOutput`` or dict. Rows are keyed by ``case_id`` (and ``trial``: 0, 1, ... for several
            trials) and carry ``SUTOutput``'s field names as columns (``qaeval.system.answers``).
        judge: the judge, as ``run`` takes it (default: the offline judge).
        k: the cut-off of the retrieval metrics (default 5).
        labels: hand labels (JSONL) for prediction-powered estimates beside the judge's.
        save: write the run record here.
        judge_model: the HTTP judge's model, as for ``run``.
        judge_base_url: the HTTP judge's endpoint, as for ``run``.
        judge_concurrency: judge calls in flight, as for ``run``.
        judge_cache: whether the judge's signed cache is used, as for ``run``.
        judge_timeout: each judge call's deadline in seconds, as for ``run``.
        pass_k: the k of pass_hat_k and pass_at_k with several trials.

    Returns:
        The ``RunResult``, its adapter named "(answers given)".

    Raises:
        DatasetError: an answer that is not well formed (each named by its row), a case answered twice,
            an answer for no case of the suite, or a case left without one (exit 65).
    """
    loaded = suite if isinstance(suite, Suite) else load_suite(suite)
    p = check_parameters(
        "run",
        data=str(loaded.root),
        judge=judge,
        k=k,
        labels=labels,
        save=save,
        judge_model=judge_model,
        judge_base_url=judge_base_url,
        judge_concurrency=judge_concurrency,
        judge_cache=judge_cache,
        judge_timeout=judge_timeout,
        pass_k=pass_k,
        isolation="none",
    )
    trials = answers_by_trial(loaded, answers)  # a bad answer costs no judge call
    label_frame = load_labels(p["labels"], known_cases={c.id for c in loaded}) if p["labels"] else None
    result = score_answers(p, loaded, trials).with_labels(label_frame)
    return finish(result, p)


@holding_the_record
def baseline(
    data: str | None = None, *, out: str | None = None, allow_failing: bool | None = None, **options: Any
) -> RunResult:
    """Run, then write the run record a gate compares against.

    A run that is not green (a failing deterministic check or an adapter error) is refused
    (BaselineRefused) unless ``allow_failing``, and then recorded as not green. A refused run keeps its
    journal beside ``out``, so that ``allow_failing`` with ``resume`` keeps it without calling the
    system again: its failed outputs and judge errors too (``keep_errors``), the failures it was
    refused for.

    Args:
        data: The folder of golden cases (default ``golden``).
        out: Where to write the baseline record.
        allow_failing: Keep a run that is not green (recorded as such).
        **options: Any other parameter of the command, by its flag's name with ``_`` for ``-``
            (``adapter``, ``judge``, ``trials``, ``save``, ...): see the command-line reference.
            An unknown one is a usage error that lists the known ones.

    Returns:
        The run the baseline records.

    Raises:
        BaselineRefused: The run is not green and ``allow_failing`` was not given (exit 1).
    """
    p = check_parameters("baseline", data=data, out=out, allow_failing=allow_failing, **options)
    if p["allow_failing"] and p.get("resume"):
        p = {**p, "keep_errors": True}
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
    """Gate a fresh run against a baseline record.

    With ``labels`` the judge is calibrated first and a judge it does not trust blocks (exit 2).

    Args:
        data: The folder of golden cases (default ``golden``).
        baseline: The baseline record (``qaeval baseline``). Without ``adapter``, the gate runs the
            adapter the baseline names.
        tolerances: A tolerances file (JSON) of ``{metric: how far it may move the wrong way}``.
        tolerance: ``METRIC=X`` overrides, one or a list.
        labels: Human labels (JSONL) to calibrate the judge against first.
        min_agreement: The least agreement an axis needs for the judge to be trusted.
        min_labels: The fewest labels an axis needs.
        min_kappa: The least Cohen's kappa an axis needs.
        **options: Any other parameter of the command, by its flag's name with ``_`` for ``-``
            (``adapter``, ``judge``, ``trials``, ``save``, ...): see the command-line reference.
            An unknown one is a usage error that lists the known ones.

    Returns:
        The gate's verdict; ``raise_for_status()`` raises GateBlocked when it blocks.

    Raises:
        BaselineError: The baseline is missing or unreadable (exit 65).
    """
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
    current = labelled_run(p, base.settled(), check=lambda suite: check_shares_cases(base, [c.id for c in suite]))
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
    if p["case"] or p["cases_from"]:  # some cases: against the baseline's figures over those cases
        base = baseline_for_cases(base, list(current.per_case["case_id"]))
        notes.append(
            f"only the {len(current.per_case)} case(s) --case and --cases-from name were run, and gated against "
            "the baseline's figures over those cases"
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
    that carries its own outputs (no adapter is called).

    Args:
        data: The folder of golden cases the labels are keyed to.
        labels: Keyed human labels (JSONL: case, axis, score, output fingerprint).
        labelled: A labelled set instead: cases with their outputs and labels (no adapter is called).
        min_agreement: The least agreement an axis needs for the judge to be trusted.
        min_labels: The fewest labels an axis needs.
        min_kappa: The least Cohen's kappa an axis needs.
        axes: The axes the verdict is on (default: the axes a labelled set labels; all three for
            keyed labels).
        **options: Any other parameter of the command, by its flag's name with ``_`` for ``-``
            (``adapter``, ``judge``, ``trials``, ``save``, ...): see the command-line reference.
            An unknown one is a usage error that lists the known ones.

    Returns:
        The calibration; ``raise_for_status()`` raises JudgeNotTrusted when an axis misses a bar.
    """
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
    """Re-run the frozen split, compare with the series' bands, append the run, alarm.

    Args:
        data: The folder of golden cases (its frozen split is run).
        timeseries: The history file (JSONL) the run is compared with and appended to.
        window: How many earlier runs a band is drawn from.
        notify: A ``module:callable`` (or callable) called with each alarm.
        **options: Any other parameter of the command, by its flag's name with ``_`` for ``-``
            (``adapter``, ``judge``, ``trials``, ``save``, ...): see the command-line reference.
            An unknown one is a usage error that lists the known ones.

    Returns:
        The drift verdict; ``raise_for_status()`` raises DriftAlarm when a metric left its band.
    """
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
    """Score logged traffic without gold (``qaeval.commands.monitoring``).

    Args:
        logs: A JSONL, CSV or Parquet path, or a DataFrame, one row per logged answer.
        judge: The judge: a name, a factory or a judge object (default: the offline judge).
        by: The columns to slice by.
        window: A time span such as ``"1D"``: the metrics per window.
        sample: How many rows to judge (default: all).
        labels: Human labels for the logged rows (PPI estimates use them).
        **options: Any other parameter of the command, by its flag's name with ``_`` for ``-``
            (``adapter``, ``judge``, ``trials``, ``save``, ...): see the command-line reference.
            An unknown one is a usage error that lists the known ones.

    Returns:
        The monitor's result; ``raise_for_status()`` raises DriftAlarm when a window alarmed.
    """
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
