"""The verbs the command line and the notebooks share. Each checks its parameters against
``qaeval.params`` (an unknown keyword is a usage error that lists the known ones), runs, and returns a
result object (``qaeval.results``); none of them prints or exits.

    import qaeval.api as qa
    run = qa.run("golden", concurrency=8)
    verdict = qa.gate_run("golden", baseline="golden/ci-baseline.json")
    verdict.raise_for_status()

``adapter`` may be a ``module:factory`` name, a zero-argument factory or an adapter object (shipped to
the worker processes with cloudpickle); ``judge`` a name, a factory or a judge object; ``executor`` a
``dask://HOST:PORT`` address or any ``concurrent.futures.Executor``.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from qaeval import params as P
from qaeval.data.cases import Suite, load_suite
from qaeval.data.labels import load_labels
from qaeval.system.labelled import load_labelled_set
from qaeval.data.schema import AXES
from qaeval.errors import BaselineRefused, UsageError
from qaeval.export import TrecExport, write_trec
from qaeval.files import check_writable, refuse_overwrite, write_atomic, write_jsonl
from qaeval.record import load_run as _load_run
from qaeval.record import read_baseline, write_record
from qaeval.pipeline import evaluate, fewer_collections
from qaeval.results import VIEW_LOADERS, Result
from qaeval.scoring.evaluate import RunResult, score_outputs
from qaeval.scoring.journal import holding_the_record
from qaeval.scoring.judge import JudgeSettings, judge_config_of
from qaeval.judges import hooks, usercode
from qaeval.judges.custom import close_custom, installed, make_custom
from qaeval.system.hardening import harness_guard
from qaeval.text import one_line
from qaeval.verdicts.calibration import CalibrationResult, axes_to_assess, calibrate
from qaeval.verdicts.compare import Comparison, compare as _compare
from qaeval.verdicts.drift import DriftResult, drift
from qaeval.verdicts.gate import GateResult, gate
from qaeval.verdicts.tiers import gated, load_tolerances
from qaeval.verdicts.sheets import export_sheet, import_sheet
from qaeval.verdicts.monitor import MonitorResult
from qaeval.runs import runs_table as runs  # noqa: F401 (qa.runs(DIR))
from qaeval.proposals.run import accept, propose  # noqa: F401 (qa.propose, qa.accept)
from qaeval.tracking import TrackingWarning, check_options, log_command, track  # noqa: F401 (TrackingWarning)

def _load_views() -> None:
    import qaeval.reports  # noqa: F401  (registers how each result draws itself)


VIEW_LOADERS.append(_load_views)  # loaded the first time a notebook displays a result, not before


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


def check_parameters(command: str, **params: Any) -> dict[str, Any]:
    """Validate a command's parameters (as given to the CLI, the API or a notebook's parameters cell)
    and fill in the defaults. Raises UsageError for an unknown name or a bad value."""
    executor = params.pop("executor", None)
    if executor is not None or "executor" in P.names_for(command):  # a command without one says so when given one
        params["executor"] = executor if isinstance(executor, str) or "executor" not in P.names_for(command) else None
    checked = P.check(command, params)
    if isinstance(executor, cf.Executor):
        checked["executor"] = executor
    elif executor is not None and not isinstance(executor, str):
        raise UsageError(f"executor must be dask://HOST:PORT or a concurrent.futures.Executor, got {type(executor).__name__}")
    if command == "calibrate" and not checked.get("record") and not checked["labels"] and not checked["labelled"]:
        raise UsageError("calibrate needs labels (keyed hand labels for a run) or labelled (a labelled set)")
    if command == "calibrate" and not checked.get("labelled") and not checked.get("record") and not checked["data"]:
        raise UsageError("calibrate with labels needs data (the cases the labels are for)")
    if checked.get("executor") is not None and checked["isolation"] == "none":
        raise UsageError("an executor runs calls out of process; it cannot be combined with isolation none")
    check_outputs(checked)
    check_options(checked)  # the mlflow extra is installed when tracking is asked for
    return checked


OUTPUT_PARAMS = {"save": "record", "out": "record", "sheet": "review"}
INPUT_PARAMS = ("labels", "labelled", "baseline", "tolerances", "record", "timeseries", "before", "after", "logs")


def check_outputs(p: Mapping[str, Any], *, html: str | Path | None = None) -> None:
    """Before anything runs: refuse (UsageError) an output of a command (its parameters ``p``, and the
    ``html`` report the command line adds) that would overwrite one of its inputs, or data in its data
    folder (``qaeval.files.refuse_overwrite``), and (FileAccessError) one that cannot be written where it
    is asked for (``qaeval.files.check_writable``)."""
    outputs = [(name, p.get(name), kind) for name, kind in OUTPUT_PARAMS.items()] + [("html", html, "report")]
    record = _record_path(p) if "trials" in p else None
    if record:  # a scoring command keeps its journal beside its record
        from qaeval.scoring.journal import journal_path

        outputs.append(("journal", str(journal_path(record)), "journal"))
    refuse_overwrite(outputs, [(name, p.get(name)) for name in INPUT_PARAMS], data=p.get("data"))
    check_writable(outputs)


def _settings(p: Mapping[str, Any]) -> JudgeSettings:
    """The judge's settings: explicit parameters over the environment (read here, at the edge)."""
    return JudgeSettings.from_env(model=p.get("judge_model"), base_url=p.get("judge_base_url"),
                                  concurrency=p.get("judge_concurrency"), cache=p.get("judge_cache"))


def make_judge(p: Mapping[str, Any]) -> Any:
    """The command's judge: a built-in one in this process, any other in its own process
    (``qaeval.judges.usercode``). Close it with ``close_judge``."""
    return usercode.make_judge(p["judge"], settings=_settings(p), isolation=p["isolation"],
                               timeout=p["judge_timeout"], startup=p["startup_timeout"], data_dir=p.get("data"))


def _executor(p: Mapping[str, Any], stack: ExitStack) -> tuple[Any, str | None]:
    value = p.get("executor")
    if value is None:
        return None, None
    if isinstance(value, str):
        from qaeval.system.remote import executor_from_url

        executor, close = executor_from_url(value)
        stack.callback(close)
        return executor, value
    return value, type(value).__name__


def _evaluate(p: Mapping[str, Any], suite: Suite | None = None,
              settled: Callable[[str], bool] | None = None) -> RunResult:
    """A fresh run of ``suite`` (else of ``data``) with the command's checked parameters ``p``.
    ``settled``: for ``--adaptive``, whether a case whose first trial passed needs no more (the gate: its
    baseline passed every trial)."""
    if suite is None:
        return _evaluate(p, load_suite(p["data"]), settled)
    if p.get("resume") and not _record_path(p):
        raise UsageError("--resume reads the journal kept beside the run's record: give the record's path "
                         "(--save FILE, or baseline's --out FILE) as the interrupted run did")
    if p.get("adaptive") and (p.get("trials") or 1) < 2:
        raise UsageError("--adaptive spreads --trials K over the cases that need them: give --trials 2 or more")
    if p.get("pass_k") is not None and p["pass_k"] > (p.get("trials") or 1):
        raise UsageError(f"--pass-k {p['pass_k']} needs at least that many --trials (pass^k and pass@k draw k of a "
                         "case's trials)")
    if p.get("keep_errors") and not p.get("resume"):
        raise UsageError("--keep-errors says what --resume keeps: give --resume too")
    judge = make_judge(p)
    with ExitStack() as stack:
        stack.callback(usercode.close_judge, judge)
        custom = make_custom(p)  # a bad name or declaration is a usage error before the system is called
        stack.callback(close_custom, custom)
        executor, label = _executor(p, stack)
        if p["isolation"] == "process":
            stack.enter_context(harness_guard())  # the judge and anything the adapter left behind included
        result = evaluate(suite, p["adapter"], judge, k=p["k"], timeout=p["timeout"], concurrency=p["concurrency"],
                          isolation=p["isolation"], executor=executor, executor_label=label,
                          startup_timeout=p["startup_timeout"], max_reply_bytes=int(p["max_reply_mb"] * 1024 * 1024),
                          custom=custom, trials=p.get("trials") or 1, pass_k=p.get("pass_k"),
                          journal=_record_path(p), resume=bool(p.get("resume")), keep_errors=bool(p.get("keep_errors")),
                          adaptive=bool(p.get("adaptive")), settled=settled)
    return result


def _record_path(p: Mapping[str, Any]) -> str | None:
    """Where the command writes its run's record (``--save``, or baseline's ``--out``): the journal is
    kept beside it while the run goes (``qaeval.scoring.journal``)."""
    return p.get("save") or p.get("out")


def _drop_journal(p: Mapping[str, Any]) -> None:
    """The record is written: the journal it replaces goes."""
    from qaeval.scoring.journal import journal_path

    path = _record_path(p)
    if path is not None:
        journal_path(path).unlink(missing_ok=True)


def _finish(result: Any, p: Mapping[str, Any]) -> Any:
    if p.get("save"):
        write_record(result, p["save"])
        _drop_journal(p)
    log_command(result, p)  # with mlflow: one MLflow run; a tracker that fails is a warning, never another verdict
    return result


def _labelled_run(p: Mapping[str, Any], settled: Callable[[str], bool] | None = None) -> RunResult:
    """A fresh run carrying the human labels named by ``labels``, if any. The labels are read and checked
    against the suite before the system is called, so a bad labels file costs no run."""
    with fewer_collections():  # loading the cases too
        suite = load_suite(p["data"])
        labels = load_labels(p["labels"], known_cases={c.id for c in suite}) if p.get("labels") else None
        return _evaluate(p, suite, settled).with_labels(labels)


def _recorded(command: str, p: Mapping[str, Any], kind: type) -> Any:
    result = _load_run(p["record"])
    if not isinstance(result, kind):
        raise UsageError(f"{p['record']} is a {result.kind} record, not one the {command} report draws")
    return result


# --------------------------------------------------------------------------- the verbs


@holding_the_record
def run(data: str | None = None, *, adapter: Any = None, judge: Any = None, k: int | None = None,
        timeout: float | None = None, concurrency: int | None = None, isolation: str | None = None,
        executor: Any = None, labels: str | None = None, save: str | None = None, judge_model: str | None = None,
        judge_base_url: str | None = None, judge_concurrency: int | None = None, judge_cache: bool | None = None,
        record: str | None = None, trials: int | None = None, pass_k: int | None = None,
        **unknown: Any) -> RunResult:
    """Run the system over the golden cases and score every layer (``record``: load a saved run).
    ``trials``: run each case that many times (``qaeval.scoring.trials``)."""
    given = dict(data=data, adapter=adapter, judge=judge, k=k, timeout=timeout, concurrency=concurrency,
                 isolation=isolation, executor=executor, labels=labels, save=save, judge_model=judge_model,
                 judge_base_url=judge_base_url, judge_concurrency=judge_concurrency, judge_cache=judge_cache,
                 record=record, trials=trials, pass_k=pass_k)
    p = check_parameters("run", **given, **unknown)
    if p["record"]:
        return _recorded("run", p, RunResult)
    return _finish(_labelled_run(p), p)


@holding_the_record
def baseline(data: str | None = None, *, out: str | None = None, allow_failing: bool | None = None,
             **options: Any) -> RunResult:
    """Run, then write the run record a gate compares against. A run that is not green (a failing
    deterministic check or an adapter error) is refused (BaselineRefused) unless ``allow_failing``,
    and then recorded as not green. A refused run keeps its journal beside ``out``, so that
    ``allow_failing`` with ``resume`` keeps it without calling the system again."""
    p = check_parameters("baseline", data=data, out=out, allow_failing=allow_failing, **options)
    result = _evaluate(p)
    if not result.ok and not p["allow_failing"]:
        again = "; add --resume as well to keep this very run (its outputs wait in the journal)" \
            if _record_path(p) else ""
        raise BaselineRefused(f"not a green run, so not a baseline: {result.reason}. Fix it, or keep it anyway with "
                              f"--allow-failing (the baseline then says it was not green){again}", result)
    write_record(result, p["out"], baseline=True, allowed_failing=not result.ok)
    _drop_journal(p)
    return _finish(result, p)


@holding_the_record
def gate_run(data: str | None = None, *, baseline: str | None = None, tolerances: str | None = None,
             tolerance: list[str] | str | None = None, labels: str | None = None, min_agreement: float | None = None,
             min_labels: int | None = None, min_kappa: float | None = None, **options: Any) -> GateResult:
    """Gate a fresh run against a baseline record. With ``labels`` the judge is calibrated first and a
    judge it does not trust blocks (exit 2)."""
    p = check_parameters("gate", data=data, baseline=baseline, tolerances=tolerances, tolerance=tolerance,
                         labels=labels, min_agreement=min_agreement, min_labels=min_labels, min_kappa=min_kappa,
                         **options)
    if p["record"]:
        return _recorded("gate", p, GateResult)
    base = read_baseline(p["baseline"])  # a missing or corrupt baseline stops here, before anything runs
    notes = []
    if options.get("adapter") is None:  # no adapter named: gate the system the baseline was recorded from
        p, note = _baseline_adapter(p, base.adapter)
        notes.append(note)
    registers = bool(p["metric"]) or bool(installed("metrics"))  # their tolerances are known once they are built
    limits = None if registers else load_tolerances(p["tolerances"], p["tolerance"])  # bad ones cost no run
    current = _labelled_run(p, lambda cid: cid not in base.cases or base.cases[cid].pass_count == base.cases[cid].trials)
    limits = limits or load_tolerances(p["tolerances"], p["tolerance"], gated(current.metrics))
    calibration = None
    if current.labels is not None:
        calibration = calibrate(current, current.labels, min_agreement=p["min_agreement"], min_labels=p["min_labels"],
                                min_kappa=p["min_kappa"], source=p["labels"])
    result = gate(current, base, limits, calibration=calibration, alpha=p["alpha"])
    result.notes[:0] = notes
    return _finish(result, p)


def _baseline_adapter(p: dict[str, Any], recorded: str | None) -> tuple[dict[str, Any], str]:
    """The parameters with the adapter a baseline records, when it records one by name, and a note
    saying which adapter is gated and why."""
    if recorded and P.is_plugin_name(recorded) and recorded.isprintable():
        return {**p, "adapter": recorded}, f"no adapter given: gating {recorded}, the adapter the baseline records"
    return p, (f"no adapter given and the baseline names none by module:factory ({one_line(recorded or 'not recorded')}): "
               f"gating the default, {p['adapter']}")


def calibrate_run(data: str | None = None, *, labels: str | None = None, labelled: str | None = None,
                  min_agreement: float | None = None, min_labels: int | None = None, min_kappa: float | None = None,
                  axes: list[str] | str | None = None, **options: Any) -> CalibrationResult:
    """Compare the judge with human labels: keyed labels on a fresh run of ``data``, or a labelled set
    that carries its own outputs (no adapter is called). The verdict is on ``axes`` (default: the axes
    a labelled set labels; all three for keyed labels)."""
    p = check_parameters("calibrate", data=data, labels=labels, labelled=labelled, min_agreement=min_agreement,
                         min_labels=min_labels, min_kappa=min_kappa, axes=axes, **options)
    if p["record"]:
        return _recorded("calibrate", p, CalibrationResult)
    if p["labelled"]:
        suite, outputs, label_frame = load_labelled_set(p["labelled"])
        chosen = axes_to_assess(p["axes"], label_frame["axis"].unique().tolist())  # a bad axis costs no judge call
        from qaeval.scoring.evaluate import RunMeta

        with ExitStack() as stack:
            judge = make_judge(p)
            stack.callback(usercode.close_judge, judge)  # whatever scoring raises, its process is stopped
            custom = make_custom(p)
            stack.callback(close_custom, custom)
            meta = RunMeta.now(adapter=f"(outputs carried by {p['labelled']})", judge=judge_config_of(judge),
                               isolation="process", k=p["k"], data=p["labelled"])
            current = score_outputs(suite, outputs, judge, meta=meta, custom=custom)
        source = p["labelled"]
    else:
        chosen = axes_to_assess(p["axes"], AXES)
        with fewer_collections():
            suite = load_suite(p["data"])
            label_frame = load_labels(p["labels"], known_cases={c.id for c in suite})
            current = _evaluate(p, suite)
        source = p["labels"]
    result = calibrate(current, label_frame, min_agreement=p["min_agreement"], min_labels=p["min_labels"],
                       min_kappa=p["min_kappa"], axes=chosen, source=source, labelled=bool(p["labelled"]))
    return _finish(result, p)


@holding_the_record
def drift_run(data: str | None = None, *, timeseries: str | None = None, window: int | None = None,
              notify: Any = None, **options: Any) -> DriftResult:
    """Re-run the frozen split, compare with the series' bands, append the run, alarm."""
    p = check_parameters("drift", data=data, timeseries=timeseries, window=window, notify=notify, **options)
    if p["record"]:
        return _recorded("drift", p, DriftResult)
    frozen = load_suite(p["data"]).select(split="frozen")
    hook: Callable[..., Any] | None = None
    if p["notify"] is not None:  # checked before the run: a typo is a usage error before anything runs
        hook = hooks.notify_hook(p["notify"], isolation=p["isolation"], timeout=p["hook_timeout"],
                                 startup=p["startup_timeout"], data_dir=p["data"])
    return _finish(drift(_evaluate(p, frozen), p["timeseries"], window=p["window"], notify=hook), p)


def score_logs(logs: Any = None, *, judge: Any = None, by: list[str] | str | None = None, window: str | None = None,
               sample: int | None = None, labels: str | None = None, **options: Any) -> MonitorResult:
    """Score logged traffic without gold (``qaeval.monitoring``): ``logs`` a JSONL, CSV or Parquet path or a
    DataFrame; ``by`` slice columns; ``window`` a time span such as "1D"; ``sample`` rows to judge."""
    from qaeval.monitoring import monitor

    table = logs if logs is not None and not isinstance(logs, (str, Path)) else None
    options.setdefault("time_window", window)
    p = check_parameters("monitor", logs="<DataFrame>" if table is not None else logs, judge=judge, by=by,
                         sample=sample, labels=labels, **options)
    if p["record"]:
        return _recorded("monitor", p, MonitorResult)
    hook = hooks.notify_hook(p["notify"], isolation=p["isolation"], timeout=p["hook_timeout"],
                             startup=p["startup_timeout"], data_dir=None) if p["notify"] is not None else None
    with ExitStack() as stack:
        client = make_judge(p)
        stack.callback(usercode.close_judge, client)
        result = monitor(table if table is not None else p["logs"], client, by=p["by"], every=p["time_window"],
                         sample=p["sample"], seed=p["seed"], labels=p["labels"], timeseries=p["timeseries"],
                         band_window=p["band_window"], min_rows=p["min_rows"], notify=hook)
    return _finish(result, p)


def load_run(path: str | Path) -> Result:
    """A saved run record as the result it was (RunResult, GateResult, CalibrationResult, DriftResult)."""
    return _load_run(path)


def compare(before: str | Path | Result, after: str | Path | Result) -> Comparison:
    """Two runs (records or results) side by side."""
    def labelled(x: Any) -> tuple[RunResult, str]:
        run_ = _golden_run(x, "compare takes two runs over golden cases (watch traffic over time with monitor "
                              "--timeseries, or list records with qaeval runs)")
        return run_, str(x) if isinstance(x, (str, Path)) else run_.meta.adapter

    (b, b_label), (a, a_label) = labelled(before), labelled(after)
    return _compare(b, a, before_label=b_label, after_label=a_label)


def export_trec(record: str | Path | Result, out: str | Path) -> TrecExport:
    """Write a run's retrieval as ``out/run.trec`` and ``out/qrels.trec`` for trec_eval, ir-measures and ranx;
    returns what was written."""
    run_ = _golden_run(record, "it has no gold passages to write qrels from: export trec takes a run over golden "
                               "cases")
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


def label_export(record: str | Path | RunResult, out: str | Path, *, sample: int | None = None,
                 seed: int = 0) -> tuple[Path, int]:
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
    return write_jsonl(out, labels), len(labels), blank


def as_run(record: str | Path | Result) -> RunResult:
    """The run inside a record path or a result (a gate, calibration or drift result holds one)."""
    result = _load_run(record) if isinstance(record, (str, Path)) else record
    run_ = result if isinstance(result, RunResult) else getattr(result, "run", None)
    if not isinstance(run_, RunResult):
        raise UsageError(f"{record!r} holds no run")
    return run_


# --------------------------------------------------------------------------- growing the golden set


def import_cases(format: str, source: str | Path, out: str | Path, *, limit: int | None = None, seed: int | None = None,
                 split: str = "frozen", prefix: str | None = None, labelled: bool = False, corpus: bool = False) -> Any:
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
