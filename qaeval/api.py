"""The verbs the command line and the notebooks share. Each checks its parameters against
``qaeval.core.params`` (an unknown keyword is a usage error that lists the known ones), runs, and returns a
result object (``qaeval.core.results``); none of them prints or exits.

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
from qaeval.core.options import BaselineOptions, CalibrateOptions, DriftOptions, GateOptions, MonitorOptions, RunOptions
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


if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from 3.11; under TYPE_CHECKING only, as no annotation runs

# --------------------------------------------------------------------------- the verbs


@holding_the_record
def run(data: str | None = None, **options: Unpack[RunOptions]) -> RunResult:
    """Run the system over the golden cases and score every layer.

    Args:
        data: The folder of golden cases (default ``golden``).
        **options: The command's other parameters, by their flags' names with ``_`` for ``-``
            (``RunOptions``: an editor lists them; the command-line reference says what each means). None
            means the default; an unknown one is a usage error that lists the known ones.
            The system is ``adapter``: a ``module:factory`` name, a zero-argument factory or an
            adapter object (default: the bundled reference system); ``judge`` a name, a factory or
            a judge object (default: the offline judge); ``record`` loads a saved run instead.

    Returns:
        The scored run; ``raise_for_status()`` raises TierOneFailed when it is RED.

    Raises:
        UsageError: A bad parameter or an adapter that cannot be built (exit 64).
        DatasetError: Cases that do not load (exit 65).
    """
    p = check_parameters("run", data=data, **options)
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
def baseline(data: str | None = None, **options: Unpack[BaselineOptions]) -> RunResult:
    """Run, then write the run record a gate compares against.

    A run that is not green (a failing deterministic check or an adapter error) is refused
    (BaselineRefused) unless ``allow_failing``, and then recorded as not green. A refused run keeps its
    journal beside ``out``, so that ``allow_failing`` with ``resume`` keeps it without calling the
    system again: its failed outputs and judge errors too (``keep_errors``), the failures it was
    refused for.

    Args:
        data: The folder of golden cases (default ``golden``).
        **options: The command's other parameters, by their flags' names with ``_`` for ``-``
            (``BaselineOptions``: an editor lists them; the command-line reference says what each means). None
            means the default; an unknown one is a usage error that lists the known ones.
            ``out`` is where the baseline record goes; ``allow_failing`` keeps a run that is not
            green (recorded as such).

    Returns:
        The run the baseline records.

    Raises:
        BaselineRefused: The run is not green and ``allow_failing`` was not given (exit 1).
    """
    p = check_parameters("baseline", data=data, **options)
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
def gate(data: str | None = None, **options: Unpack[GateOptions]) -> GateResult:
    """Gate a fresh run against a baseline record.

    With ``labels`` the judge is calibrated first and a judge it does not trust blocks (exit 2).

    Args:
        data: The folder of golden cases (default ``golden``).
        **options: The command's other parameters, by their flags' names with ``_`` for ``-``
            (``GateOptions``: an editor lists them; the command-line reference says what each means). None
            means the default; an unknown one is a usage error that lists the known ones.
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
    p = check_parameters("gate", data=data, **options)
    if p["record"]:
        return recorded("gate", p, GateResult)
    base = read_baseline(p["baseline"])  # a missing or corrupt baseline stops here, before anything runs
    notes = []
    if options.get("adapter") is None:  # no adapter named: gate the system the baseline was recorded from
        p, note = _baseline_adapter(p, base.adapter)
        notes.append(note)
    registers = bool(p["metric"]) or bool(installed("metrics"))  # their tolerances are known once they are built
    limits = None if registers else load_tolerances(p["tolerances"], p["tolerance"])  # bad ones cost no run
    if limits is not None:
        refuse_adaptive(limits, METRICS, bool(p.get("adaptive")))
    current = labelled_run(p, base.settled(), check=lambda suite: check_shares_cases(base, [c.id for c in suite]))
    limits = limits or load_tolerances(p["tolerances"], p["tolerance"], gated(current.metrics))
    calibration = None
    if current.labels is not None:
        calibration = calibrate_verdict(
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
    result = gate_verdict(current, base, limits, calibration=calibration, alpha=p["alpha"])
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
def calibrate(data: str | None = None, **options: Unpack[CalibrateOptions]) -> CalibrationResult:
    """Compare the judge with human labels: keyed labels on a fresh run of ``data``, or a labelled set
    that carries its own outputs (no adapter is called).

    Args:
        data: The folder of golden cases the labels are keyed to.
        **options: The command's other parameters, by their flags' names with ``_`` for ``-``
            (``CalibrateOptions``: an editor lists them; the command-line reference says what each means). None
            means the default; an unknown one is a usage error that lists the known ones.
            ``labels`` are keyed human labels (JSONL: case, axis, score, output fingerprint), or
            ``labelled`` a labelled set that carries its outputs (no adapter is called); ``axes`` the
            axes the verdict is on; ``min_agreement``, ``min_labels`` and ``min_kappa`` the bars.

    Returns:
        The calibration; ``raise_for_status()`` raises JudgeNotTrusted when an axis misses a bar.
    """
    p = check_parameters("calibrate", data=data, **options)
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
    result = calibrate_verdict(
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
def drift(data: str | None = None, **options: Unpack[DriftOptions]) -> DriftResult:
    """Re-run the frozen split, compare with the series' bands, append the run, alarm.

    Args:
        data: The folder of golden cases (its frozen split is run).
        **options: The command's other parameters, by their flags' names with ``_`` for ``-``
            (``DriftOptions``: an editor lists them; the command-line reference says what each means). None
            means the default; an unknown one is a usage error that lists the known ones.
            ``timeseries`` is the history file (JSONL) the run is compared with and appended to,
            ``window`` how many earlier runs a band is drawn from, ``notify`` a ``module:callable``
            (or callable) called with each alarm.

    Returns:
        The drift verdict; ``raise_for_status()`` raises DriftAlarm when a metric left its band.
    """
    p = check_parameters("drift", data=data, **options)
    if p["record"]:
        return recorded("drift", p, DriftResult)
    frozen = load_suite(p["data"]).select(split="frozen")
    hook = notify_hook_of(p, p["data"])  # before the run: a typo is a usage error before anything runs
    return finish(drift_verdict(evaluate_params(p, frozen), p["timeseries"], window=p["window"], notify=hook), p)


@holding_the_record
def monitor(logs: Any = None, **options: Unpack[MonitorOptions]) -> MonitorResult:
    """Score logged traffic without gold (``qaeval.commands.monitoring``).

    Args:
        logs: A JSONL, CSV or Parquet path, or a DataFrame, one row per logged answer; or OpenTelemetry
            traces as OTLP/JSON (``log_format="otlp"``, or found by the file's content).
        **options: The command's other parameters, by their flags' names with ``_`` for ``-``
            (``MonitorOptions``: an editor lists them; the command-line reference says what each means). None
            means the default; an unknown one is a usage error that lists the known ones.
            ``by`` are the columns to slice by, ``time_window`` a time span such as ``"1D"`` (the
            metrics per window), ``sample`` how many rows to judge (default: all), ``labels`` human
            labels for the logged rows (PPI estimates use them).

    Returns:
        The monitor's result; ``raise_for_status()`` raises DriftAlarm when a window alarmed.
    """
    from qaeval.commands.monitoring import monitor as monitor_logs

    table = logs if logs is not None and not isinstance(logs, (str, Path)) else None
    p = check_parameters("monitor", logs="<DataFrame>" if table is not None else logs, **options)
    if p["record"]:
        return recorded("monitor", p, MonitorResult)
    hook = notify_hook_of(p, None)
    with ExitStack() as stack:
        client = make_judge(p)
        stack.callback(clients.close_judge, client)
        result = monitor_logs(
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
            log_format=None if p["log_format"] == "auto" else p["log_format"],
            annotations=p["annotations"],
        )
    return finish(result, p)
