"""The verbs the command line and the notebooks share. Each checks its parameters against
``qaeval.core.params`` (an unknown keyword is a usage error that lists the known ones), runs, and returns a
result object; none of them prints or exits.

    import qaeval.api as qa
    run = qa.run("golden", concurrency=8)
    verdict = qa.gate("golden", baseline="golden/ci-baseline.json")
    verdict.raise_for_status()

``adapter`` may be a ``module:factory`` name, a zero-argument factory or an adapter object (shipped to
the worker processes with cloudpickle); ``judge`` a name, a factory or a judge object; ``executor`` a
``dask://HOST:PORT`` address or any ``concurrent.futures.Executor``.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qaeval.commands.common import (
    baseline_for_cases,
    check_parameters,
    drop_journal,
    evaluate_params,
    finish,
    labelled_run,
    make_judge,
    notify_hook_of,
    recorded,
    score_answers,
    suite_of,
)
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
from qaeval.core.locks import hold
from qaeval.core.options import BaselineOptions, CalibrateOptions, DriftOptions, GateOptions, MonitorOptions, RunOptions
from qaeval.core.settings import RunSettings, Settings
from qaeval.core.text import one_line
from qaeval.data.cases import Suite, load_suite
from qaeval.data.labels import load_labels
from qaeval.data.schema import AXES
from qaeval.host import clients
from qaeval.host.custom import installed
from qaeval.proposals.run import accept, propose  # noqa: F401 (qa.propose, qa.accept)
from qaeval.record.read import read_baseline
from qaeval.record.runs import runs_table as runs  # noqa: F401 (qa.runs(DIR))
from qaeval.record.write import write_record
from qaeval.scoring.metrics import METRICS
from qaeval.scoring.result import RunResult
from qaeval.system.answers import answers_by_trial
from qaeval.system.labelled import load_labelled_set
from qaeval.verdicts.baseline import check_shares_cases
from qaeval.verdicts.calibration import CalibrationResult, axes_to_assess
from qaeval.verdicts.calibration import calibrate as calibrate_verdict
from qaeval.verdicts.drift import DriftResult
from qaeval.verdicts.drift import drift as drift_verdict
from qaeval.verdicts.gate import GateResult
from qaeval.verdicts.gate import gate as gate_verdict
from qaeval.verdicts.monitor import MonitorResult
from qaeval.verdicts.tolerances import gated, load_tolerances, refuse_adaptive

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from 3.11; under TYPE_CHECKING only, as no annotation runs

BARS = ("min_agreement", "min_labels", "min_kappa")  # calibration's bars: parameters and keywords alike


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


def perform(s: Settings, *, log: bool = True, logs: Any = None) -> Any:
    """Do the command its settings were checked for (``check_parameters``), as each verb below does and the
    command line and the notebooks do, so nothing is checked twice. The command holds the lock of the record
    it writes while it runs; a saved record (``record``) is drawn instead of running.

    Args:
        s: The command's settings.
        log: Log the command to MLflow when its settings ask for it (the command line logs it itself,
            once its report exists to be attached).
        logs: monitor's logs when they are a DataFrame (its settings name them ``<DataFrame>``).

    Returns:
        The command's result.
    """
    if s.record:
        return recorded(s.record, s.command, _KINDS[s.command])
    with hold(s.writes):
        result = _monitor(s, logs) if s.command == "monitor" else _VERBS[s.command](s)
        return finish(result, s, track=log)


def run(data: str | None = None, **options: Unpack[RunOptions]) -> RunResult:
    """Run the system over the golden cases and score every layer.

    Args:
        data: The folder of golden cases (default ``golden``).
        **options: The command's other parameters (``RunOptions``), by their flags' names with ``_`` for
            ``-``; None means the default, an unknown one is a usage error that lists the known ones.
            The system is ``adapter``: a ``module:factory`` name, a zero-argument factory or an
            adapter object (default: the bundled reference system); ``judge`` a name, a factory or
            a judge object (default: the offline judge); ``record`` loads a saved run instead.

    Returns:
        The scored run; ``raise_for_status()`` raises TierOneFailed when it is RED.

    Raises:
        UsageError: A bad parameter or an adapter that cannot be built (exit 64).
        DatasetError: Cases that do not load (exit 65).
    """
    return perform(check_parameters("run", data=data, **options))


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
    s = check_parameters(
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
        isolation="none",
    )
    pass_k = P.check_value("pass_k", pass_k)
    with hold(s.writes):
        trials = answers_by_trial(loaded, answers)  # a bad answer costs no judge call
        s = replace(s, run=RunSettings(k=s.run.k, trials=len(trials), pass_k=pass_k, isolation="none"))
        label_frame = load_labels(s.labels, known_cases={c.id for c in loaded}) if s.labels else None
        result = score_answers(s, loaded, trials).with_labels(label_frame)
        return finish(result, s)


def baseline(data: str | None = None, **options: Unpack[BaselineOptions]) -> RunResult:
    """Run, then write the run record a gate compares against.

    A run that is not green (a failing deterministic check or an adapter error) is refused unless
    ``allow_failing``, and then recorded as not green. A refused run keeps its journal beside ``out``, so
    ``allow_failing`` with ``resume`` keeps it, failures included, without calling the system again.

    Args:
        data: The folder of golden cases (default ``golden``).
        **options: The command's other parameters (``BaselineOptions``), by their flags' names with ``_`` for
            ``-``; None means the default, an unknown one is a usage error that lists the known ones.
            ``out`` is where the baseline record goes; ``allow_failing`` keeps a run that is not
            green (recorded as such).

    Returns:
        The run the baseline records.

    Raises:
        BaselineRefused: The run is not green and ``allow_failing`` was not given (exit 1).
    """
    return perform(check_parameters("baseline", data=data, **options))


def _baseline(s: Settings) -> RunResult:
    result = evaluate_params(s)
    if not result.ok and not s.params["allow_failing"]:
        again = (
            "; add --resume as well to keep this very run (its outputs wait in the journal)" if s.resume.journal else ""
        )
        raise BaselineRefused(
            f"not a green run, so not a baseline: {result.reason}. Fix it, or keep it anyway with "
            f"--allow-failing (the baseline then says it was not green){again}",
            result,
        )
    write_record(result, s.params["out"], baseline=True, allowed_failing=not result.ok)
    drop_journal(s)
    return result


def gate(data: str | None = None, **options: Unpack[GateOptions]) -> GateResult:
    """Gate a fresh run against a baseline record.

    With ``labels`` the judge is calibrated first and a judge it does not trust blocks (exit 2).

    Args:
        data: The folder of golden cases (default ``golden``).
        **options: The command's other parameters (``GateOptions``), by their flags' names with ``_`` for
            ``-``; None means the default, an unknown one is a usage error that lists the known ones.
            ``baseline`` is the baseline record (``qaeval baseline``); without ``adapter`` the gate
            runs the adapter it names. ``tolerances`` (a JSON file) and ``tolerance`` (``METRIC=X``,
            one or a list) set how far each gated metric may move the wrong way;
            ``tolerance=["answer_correctness=0.05"]`` gates answer correctness. ``labels`` calibrates
            the judge first, against ``min_agreement``, ``min_labels`` and ``min_kappa``.

    Returns:
        The gate's verdict; ``raise_for_status()`` raises GateBlocked when it blocks.

    Raises:
        BaselineError: The baseline is missing or unreadable (exit 65).
    """
    return perform(check_parameters("gate", data=data, **options))


def _gate(s: Settings) -> GateResult:
    p = s.params  # the gate's own parameters
    tolerances = (p["tolerances"], p["tolerance"])
    base = read_baseline(p["baseline"])  # a missing or corrupt baseline stops here, before anything runs
    notes = []
    if "adapter" not in s.given:  # no adapter named: gate the system the baseline was recorded from
        s, note = _baseline_adapter(s, base.adapter)
        notes.append(note)
    registers = bool(s.metric) or bool(installed("metrics"))  # their tolerances are known once they are built
    limits = None if registers else load_tolerances(*tolerances)  # bad ones cost no run
    if limits is not None:
        refuse_adaptive(limits, METRICS, s.run.adaptive)
    current = labelled_run(s, base.settled(), check=lambda suite: check_shares_cases(base, [c.id for c in suite]))
    limits = limits or load_tolerances(*tolerances, gated(current.metrics))
    calibration = None
    if current.labels is not None:  # the run carries labels: it was given them
        calibration = calibrate_verdict(current, current.labels, **_bars(s), source=str(s.labels))
    if s.case or s.cases_from:  # some cases: against the baseline's figures over those cases
        base = baseline_for_cases(base, list(current.per_case["case_id"]))
        notes.append(
            f"only the {len(current.per_case)} case(s) --case and --cases-from name were run, and gated against "
            "the baseline's figures over those cases"
        )
    result = gate_verdict(current, base, limits, calibration=calibration, alpha=p["alpha"])
    result.notes[:0] = notes
    return result


def _baseline_adapter(s: Settings, recorded: str | None) -> tuple[Settings, str]:
    """The settings with the adapter a baseline records, when it records one by name, and a note
    saying which adapter is gated and why."""
    if recorded and P.is_plugin_name(recorded) and recorded.isprintable():
        return replace(s, adapter=recorded), f"no adapter given: gating {recorded}, the adapter the baseline records"
    return s, (
        f"no adapter given and the baseline names none by module:factory ({one_line(recorded or 'not recorded')}): "
        f"gating the default, {s.adapter}"
    )


def calibrate(data: str | None = None, **options: Unpack[CalibrateOptions]) -> CalibrationResult:
    """Compare the judge with human labels: keyed labels on a fresh run of ``data``, or a labelled set
    that carries its own outputs (no adapter is called).

    Args:
        data: The folder of golden cases the labels are keyed to.
        **options: The command's other parameters (``CalibrateOptions``), by their flags' names with ``_`` for
            ``-``; None means the default, an unknown one is a usage error that lists the known ones.
            ``labels`` are keyed human labels (JSONL: case, axis, score, output fingerprint), or
            ``labelled`` a labelled set that carries its outputs (no adapter is called); ``axes`` the
            axes the verdict is on; ``min_agreement``, ``min_labels`` and ``min_kappa`` the bars.

    Returns:
        The calibration; ``raise_for_status()`` raises JudgeNotTrusted when an axis misses a bar.
    """
    return perform(check_parameters("calibrate", data=data, **options))


def _calibrate(s: Settings) -> CalibrationResult:
    axes = s.params["axes"]
    if s.labelled:  # the set's own outputs scored (no adapter is called)
        suite, outputs, label_frame = load_labelled_set(s.labelled)
        chosen = axes_to_assess(axes, label_frame["axis"].unique().tolist())  # a bad axis costs no judge call
        current = score_answers(s, suite, [outputs], adapter=f"(outputs carried by {s.labelled})", data=s.labelled)
        source = s.labelled
    else:
        assert s.labels is not None  # calibrate needs labels or labelled (Settings)
        chosen = axes_to_assess(axes, AXES)
        suite = suite_of(s)
        label_frame = load_labels(s.labels, known_cases={c.id for c in suite})
        current = evaluate_params(s, suite)
        source = s.labels
    return calibrate_verdict(current, label_frame, **_bars(s), axes=chosen, source=source, labelled=bool(s.labelled))


def _bars(s: Settings) -> dict[str, Any]:
    """The bars a calibration is held to, from the command's parameters."""
    return {name: s.params[name] for name in BARS}


def drift(data: str | None = None, **options: Unpack[DriftOptions]) -> DriftResult:
    """Re-run the frozen split, compare with the series' bands, append the run, alarm.

    Args:
        data: The folder of golden cases (its frozen split is run).
        **options: The command's other parameters (``DriftOptions``), by their flags' names with ``_`` for
            ``-``; None means the default, an unknown one is a usage error that lists the known ones.
            ``timeseries`` is the history file (JSONL) the run is compared with and appended to,
            ``window`` how many earlier runs a band is drawn from, ``notify`` a ``module:callable``
            (or callable) called with each alarm.

    Returns:
        The drift verdict; ``raise_for_status()`` raises DriftAlarm when a metric left its band.
    """
    return perform(check_parameters("drift", data=data, **options))


def _drift(s: Settings) -> DriftResult:
    frozen = suite_of(s).select(split="frozen")
    hook = notify_hook_of(s, s.data)  # before the run: a typo is a usage error before anything runs
    return drift_verdict(evaluate_params(s, frozen), s.params["timeseries"], window=s.params["window"], notify=hook)


def monitor(logs: Any = None, **options: Unpack[MonitorOptions]) -> MonitorResult:
    """Score logged traffic without gold (``qaeval.commands.monitoring``).

    Args:
        logs: A JSONL, CSV or Parquet path, or a DataFrame, one row per logged answer; or OpenTelemetry
            traces as OTLP/JSON (``log_format="otlp"``, or found by the file's content).
        **options: The command's other parameters (``MonitorOptions``), by their flags' names with ``_`` for
            ``-``; None means the default, an unknown one is a usage error that lists the known ones.
            ``by`` are the columns to slice by, ``time_window`` a time span such as ``"1D"`` (the
            metrics per window), ``sample`` how many rows to judge (default: all), ``labels`` human
            labels for the logged rows (PPI estimates use them).

    Returns:
        The monitor's result; ``raise_for_status()`` raises DriftAlarm when a window alarmed.
    """
    table = logs if logs is not None and not isinstance(logs, (str, Path)) else None
    s = check_parameters("monitor", logs="<DataFrame>" if table is not None else logs, **options)
    return perform(s, logs=table)


def _monitor(s: Settings, table: Any = None) -> MonitorResult:
    from qaeval.commands.monitoring import monitor as monitor_logs

    p = s.params  # monitor's own parameters
    hook = notify_hook_of(s, None)
    with ExitStack() as stack:
        client = make_judge(s)
        stack.callback(clients.close_judge, client)
        return monitor_logs(
            table if table is not None else p["logs"],
            client,
            by=p["by"],
            every=p["time_window"],
            sample=p["sample"],
            seed=p["seed"],
            labels=s.labels,
            timeseries=p["timeseries"],
            band_window=p["band_window"],
            min_rows=p["min_rows"],
            notify=hook,
            log_format=None if p["log_format"] == "auto" else p["log_format"],
            annotations=p["annotations"],
        )


_VERBS: dict[str, Any] = {
    "run": labelled_run,
    "baseline": _baseline,
    "gate": _gate,
    "calibrate": _calibrate,
    "drift": _drift,
}
_KINDS: dict[str, type] = {
    "run": RunResult,
    "gate": GateResult,
    "calibrate": CalibrationResult,
    "drift": DriftResult,
    "monitor": MonitorResult,
}  # what a saved record drawn by each command must be
