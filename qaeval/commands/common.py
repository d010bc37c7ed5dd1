"""What every verb of ``qaeval.api`` does before and around its work: its parameters checked once into its
``Settings`` (``check_parameters``), the judge made, the suite run (``evaluate_params``), the record written
(``finish``). Each takes the command's ``Settings``; none looks a setting up by name."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from qaeval.commands.pipeline import evaluate
from qaeval.commands.tracking import check_options, log_command
from qaeval.core import params as P
from qaeval.core.errors import FileAccessError, UsageError
from qaeval.core.files import check_writable, refuse_overwrite
from qaeval.core.settings import RunSettings, Settings
from qaeval.data.cases import Suite, load_suite
from qaeval.data.labels import load_labels
from qaeval.host import clients, hooks
from qaeval.host.custom import close_custom, make_custom
from qaeval.record.read import load_run as _load_run
from qaeval.record.write import write_record
from qaeval.scoring.evaluate import RunResult, score_trials
from qaeval.scoring.journal import journal_path
from qaeval.scoring.judge import JudgeSettings, judge_config_of
from qaeval.scoring.result import RunMeta
from qaeval.scoring.trials import combine_trials


def check_parameters(command: str, *, html: str | Path | None = None, **params: Any) -> Settings:
    """A command's parameters (from the CLI, the API or a notebook) checked once, before anything runs:
    against the parameter table, the rules that span them (``Settings``), its outputs against its inputs
    (``check_output_paths``; ``html``: the report the command line adds) and MLflow's (``check_options``).
    Raises UsageError (exit 64), or FileAccessError (74) for an output that cannot be written."""
    given = frozenset(name for name, value in params.items() if value is not None)
    executor = params.pop("executor", None)
    if executor is not None or "executor" in P.names_for(command):  # a command without one says so when given one
        params["executor"] = executor if isinstance(executor, str) or "executor" not in P.names_for(command) else None
    checked = P.check(command, params)
    if executor is not None and not isinstance(executor, str):
        checked["executor"] = executor  # an Executor object: RunSettings says whether it is one
    settings = Settings.from_params(command, checked, given)
    check_output_paths(checked, html=html)
    check_options(settings)  # the mlflow extra is installed when tracking is asked for
    return settings


OUTPUT_PARAMS = {"save": "record", "out": "record", "sheet": "review", "annotations": "annotations"}
INPUT_PARAMS = ("labels", "labelled", "baseline", "tolerances", "record", "timeseries", "before", "after", "logs")


def check_output_paths(p: Mapping[str, Any], *, html: str | Path | None = None) -> None:
    """Before anything runs: refuse (UsageError) an output of a command (its parameters ``p``, and the
    ``html`` report) that would overwrite one of its inputs or its data folder (``refuse_overwrite``), and
    (FileAccessError) one that cannot be written (``check_writable``)."""
    outputs = [(name, p.get(name), kind) for name, kind in OUTPUT_PARAMS.items()] + [("html", html, "report")]
    record = (p.get("save") or p.get("out")) if "resume" in p else None
    if record:  # a command that asks the system keeps its journal beside its record
        outputs.append(("journal", str(journal_path(record)), "journal"))
    refuse_overwrite(outputs, [(name, p.get(name)) for name in INPUT_PARAMS], data=p.get("data"))
    check_writable(outputs)


def make_judge(s: Settings) -> Any:
    """The command's judge: a built-in one in this process, any other in its own process
    (``qaeval.host.clients``). Close it with ``close_judge``."""
    setup = s.judging
    settings = JudgeSettings.from_env(  # explicit parameters over the environment, read here at the edge
        model=setup.judge_model,
        base_url=setup.judge_base_url,
        concurrency=setup.judge_concurrency,
        cache=setup.judge_cache,
        show_progress=s.run.show_progress,
    )
    return clients.make_judge(
        setup.judge,
        settings=settings,
        isolation=s.run.isolation,
        timeout=s.judging.judge_timeout,
        startup=s.run.startup_timeout,
        data_dir=s.data,
    )


def connected(run: RunSettings, stack: ExitStack) -> RunSettings:
    """The run's settings with its executor connected to, when given by its address (``dask://``), before
    anything runs: the client is closed by ``stack``, and the record names the executor by its address."""
    if not isinstance(run.executor, str):
        return run
    from qaeval.system.remote import executor_from_url

    executor, close = executor_from_url(run.executor)
    stack.callback(close)
    return replace(run, executor=executor, executor_label=run.executor)


def evaluate_params(s: Settings, suite: Suite | None = None, settled: Callable[[str], bool] | None = None) -> RunResult:
    """A fresh run of ``suite`` (else of ``data``) with the command's settings ``s``. ``settled``: for
    ``--adaptive``, whether a case whose first trial passed needs no more (the gate: its baseline's did)."""
    suite = chosen_cases(suite_of(s) if suite is None else suite, s)
    with ExitStack() as stack:
        run = connected(s.run, stack)
        judge, custom = judge_and_checks(s, stack)
        return evaluate(suite, s.adapter, judge, run, resume=s.resume, custom=custom, settled=settled)


def judge_and_checks(s: Settings, stack: ExitStack) -> tuple[Any, Any]:
    """The command's judge and its registered checks' runner, both closed by ``stack``. A bad name or
    declaration of a check is a usage error before the system is called."""
    judge = make_judge(s)
    stack.callback(clients.close_judge, judge)
    custom = make_custom(s)
    stack.callback(close_custom, custom)
    return judge, custom


def chosen_cases(suite: Suite, s: Settings) -> Suite:
    """The cases ``--case ID`` and ``--cases-from FILE`` name (every case when neither is given), in
    the suite's order; an id the suite does not hold is a usage error that names it."""
    if not s.case and not s.cases_from:
        return suite
    wanted = list(s.case) + (case_ids_from(s.cases_from) if s.cases_from else [])
    known = {c.id for c in suite}
    unknown = [c for c in dict.fromkeys(wanted) if c not in known]
    if unknown:
        shown = ", ".join(repr(c) for c in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise UsageError(f"no case {shown} in {suite.root} ({len(known)} cases): --case and --cases-from name case ids")
    if not wanted:
        raise UsageError(f"{s.cases_from} names no case: give one case id a line")
    chosen = set(wanted)
    return Suite(tuple(c for c in suite if c.id in chosen), suite.root, suite.corpus)


def baseline_for_cases(base: Any, ids: list[str]) -> Any:
    """The baseline over the chosen cases only (a gate of ``--case`` or ``--cases-from``): its cases, and
    each metric drawn again from those cases' units (a metric is its numerators' sum over its
    denominators'), so the cases left out neither count as gone nor move a metric."""
    kept = {cid: case for cid, case in base.cases.items() if cid in set(ids)}
    metrics = {}
    for name, (value, n) in base.metrics.items():
        units = [case.units[name] for case in kept.values() if name in case.units]
        if not units:  # the record keeps no unit of this metric: its figure stands
            metrics[name] = (value, n)
            continue
        den = sum(d for _, d in units)
        metrics[name] = (sum(num for num, _ in units) / den, int(den)) if den else (math.nan, 0)
    return replace(base, cases=kept, metrics=metrics)


def case_ids_from(path: str) -> list[str]:
    """The case ids a file lists, one a line; blank lines and lines starting with ``#`` are skipped."""
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc.__class__.__name__
        raise FileAccessError(path, f"--cases-from: cannot read the list of case ids ({why})") from None
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def drop_journal(s: Settings) -> None:
    """The record is written: the journal it replaces goes."""
    if s.resume.journal is not None:
        journal_path(s.resume.journal).unlink(missing_ok=True)


def finish(result: Any, s: Settings, *, track: bool = True) -> Any:
    """A verb's last step: the record written (``save``) and its journal dropped; with ``mlflow`` (and
    ``track``), the command logged."""
    if s.save:
        write_record(result, s.save)
        drop_journal(s)
    if track:
        log_command(result, s)  # with mlflow: one MLflow run; a tracker that fails is a warning, never another verdict
    return result


def labelled_run(
    s: Settings, settled: Callable[[str], bool] | None = None, check: Callable[[Suite], None] | None = None
) -> RunResult:
    """A fresh run carrying the human labels named by ``labels``, if any. The labels are read and checked
    against the suite, and ``check`` is given the suite, before the system is called, so a bad labels
    file (or a baseline of another golden set) costs no run."""
    suite = suite_of(s)
    if check is not None:
        check(suite)
    labels = load_labels(s.labels, known_cases={c.id for c in suite}) if s.labels else None
    return evaluate_params(s, suite, settled).with_labels(labels)


def suite_of(s: Settings) -> Suite:
    """The command's golden cases (``data``)."""
    if s.data is None:  # a Settings made by hand may lack it
        raise UsageError(f"{s.command} needs data ({P.BY_NAME['data'].help})")
    return load_suite(s.data)


def recorded(path: str, command: str, kind: type) -> Any:
    """The saved record ``path`` a command draws instead of running (``record``), of the kind it draws."""
    result = _load_run(path)
    if not isinstance(result, kind):
        raise UsageError(f"{path} is a {result.kind} record, not one the {command} report draws")
    return result


def score_answers(
    s: Settings, suite: Suite, trials: list[Any], *, adapter: str = "(answers given)", data: str | None = None
) -> RunResult:
    """Outputs a user already has (``trials``: each trial's outputs frame, ``qaeval.system.answers``, or a
    labelled set's) scored with the command's judge and registered checks, trial by trial, as a run
    scores what it collected; the judge's and the checks' processes are stopped whatever scoring raises."""
    with ExitStack() as stack:
        judge, custom = judge_and_checks(s, stack)
        meta = RunMeta.now(
            adapter=adapter,
            judge=judge_config_of(judge),
            isolation="none" if data is None else "process",
            k=s.run.k,
            data=data or str(suite.root),
        )  # each trial is scored as a run of one; combine_trials sets the trials
        runs = score_trials(suite, trials, judge, meta=meta, custom=custom)
    return runs[0] if len(runs) == 1 else combine_trials(runs, pass_k=s.run.pass_k, trials=len(runs))


def notify_hook_of(s: Settings, data_dir: str | None) -> Any:
    """The command's notify hook (``--notify``; None: none), built before anything runs."""
    if s.notify is None:
        return None
    return hooks.notify_hook(
        s.notify, isolation=s.run.isolation, timeout=s.hook_timeout, startup=s.run.startup_timeout, data_dir=data_dir
    )
