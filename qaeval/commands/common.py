"""What every verb of ``qaeval.api`` does before and around its work: checking its parameters and
outputs, making the judge and the executor, running the suite (``evaluate_params``), and writing the
record and journal when done."""

from __future__ import annotations

import concurrent.futures as cf
import math
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from qaeval.commands.pipeline import evaluate, fewer_collections
from qaeval.commands.tracking import check_options, log_command
from qaeval.core import params as P
from qaeval.core.errors import FileAccessError, UsageError
from qaeval.core.files import check_writable, refuse_overwrite
from qaeval.data.cases import Suite, load_suite
from qaeval.data.labels import load_labels
from qaeval.host import clients, hooks
from qaeval.host.custom import close_custom, make_custom
from qaeval.record.read import load_run as _load_run
from qaeval.record.write import write_record
from qaeval.scoring.evaluate import RunResult, score_trials
from qaeval.scoring.judge import JudgeSettings, judge_config_of
from qaeval.worker.hardening import harness_guard


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
        raise UsageError(
            f"executor must be dask://HOST:PORT or a concurrent.futures.Executor, got {type(executor).__name__}"
        )
    if command == "calibrate" and not checked.get("record") and not checked["labels"] and not checked["labelled"]:
        raise UsageError("calibrate needs labels (keyed hand labels for a run) or labelled (a labelled set)")
    if command == "calibrate" and not checked.get("labelled") and not checked.get("record") and not checked["data"]:
        raise UsageError("calibrate with labels needs data (the cases the labels are for)")
    if command == "calibrate" and checked.get("labelled") and checked.get("resume"):
        raise UsageError("a labelled set carries its own outputs and no system is asked, so there is nothing to resume")
    if checked.get("executor") is not None and checked["isolation"] == "none":
        raise UsageError("an executor runs calls out of process; it cannot be combined with isolation none")
    check_output_paths(checked)
    check_options(checked)  # the mlflow extra is installed when tracking is asked for
    return checked


OUTPUT_PARAMS = {"save": "record", "out": "record", "sheet": "review", "annotations": "annotations"}


INPUT_PARAMS = ("labels", "labelled", "baseline", "tolerances", "record", "timeseries", "before", "after", "logs")


def check_output_paths(p: Mapping[str, Any], *, html: str | Path | None = None) -> None:
    """Before anything runs: refuse (UsageError) an output of a command (its parameters ``p``, and the
    ``html`` report the command line adds) that would overwrite one of its inputs, or data in its data
    folder (``qaeval.core.files.refuse_overwrite``), and (FileAccessError) one that cannot be written where it
    is asked for (``qaeval.core.files.check_writable``)."""
    outputs = [(name, p.get(name), kind) for name, kind in OUTPUT_PARAMS.items()] + [("html", html, "report")]
    record = record_path(p) if "resume" in p else None
    if record:  # a command that asks the system keeps its journal beside its record
        from qaeval.scoring.journal import journal_path

        outputs.append(("journal", str(journal_path(record)), "journal"))
    refuse_overwrite(outputs, [(name, p.get(name)) for name in INPUT_PARAMS], data=p.get("data"))
    check_writable(outputs)


def judge_settings(p: Mapping[str, Any]) -> JudgeSettings:
    """The judge's settings: explicit parameters over the environment (read here, at the edge)."""
    return JudgeSettings.from_env(
        model=p.get("judge_model"),
        base_url=p.get("judge_base_url"),
        concurrency=p.get("judge_concurrency"),
        cache=p.get("judge_cache"),
        show_progress=p.get("progress"),
    )


def make_judge(p: Mapping[str, Any]) -> Any:
    """The command's judge: a built-in one in this process, any other in its own process
    (``qaeval.host.clients``). Close it with ``close_judge``."""
    return clients.make_judge(
        p["judge"],
        settings=judge_settings(p),
        isolation=p["isolation"],
        timeout=p["judge_timeout"],
        startup=p["startup_timeout"],
        data_dir=p.get("data"),
    )


def executor_of(p: Mapping[str, Any], stack: ExitStack) -> tuple[Any, str | None]:
    value = p.get("executor")
    if value is None:
        return None, None
    if isinstance(value, str):
        from qaeval.system.remote import executor_from_url

        executor, close = executor_from_url(value)
        stack.callback(close)
        return executor, value
    return value, type(value).__name__


ADAPTIVE_REFUSED = (
    "--adaptive is refused while the boundary is enforced (--isolation process, the default): being asked "
    "a case again would tell the system that its first answer failed, a verdict drawn from the gold labels "
    "the boundary keeps from it; use fixed --trials K, or --isolation none, which gives the boundary up and "
    "says so"
)


def evaluate_params(
    p: Mapping[str, Any], suite: Suite | None = None, settled: Callable[[str], bool] | None = None
) -> RunResult:
    """A fresh run of ``suite`` (else of ``data``) with the command's checked parameters ``p``.
    ``settled``: for ``--adaptive``, whether a case whose first trial passed needs no more (the gate: its
    baseline passed every trial)."""
    if suite is None:
        return evaluate_params(p, load_suite(p["data"]), settled)
    suite = chosen_cases(suite, p)
    if p.get("resume") and not record_path(p):
        raise UsageError(
            "--resume reads the journal kept beside the run's record: give the record's path "
            "(--save FILE, or baseline's --out FILE) as the interrupted run did"
        )
    if p.get("adaptive") and (p.get("trials") or 1) < 2:
        raise UsageError("--adaptive spreads --trials K over the cases that need them: give --trials 2 or more")
    if p.get("adaptive") and p.get("isolation", "process") != "none":
        raise UsageError(ADAPTIVE_REFUSED)
    if p.get("pass_k") is not None and p["pass_k"] > (p.get("trials") or 1):
        raise UsageError(
            f"--pass-k {p['pass_k']} needs at least that many --trials (pass^k and pass@k draw k of a case's trials)"
        )
    if p.get("keep_errors") and not p.get("resume"):
        raise UsageError("--keep-errors says what --resume keeps: give --resume too")
    judge = make_judge(p)
    with ExitStack() as stack:
        stack.callback(clients.close_judge, judge)
        custom = make_custom(p)  # a bad name or declaration is a usage error before the system is called
        stack.callback(close_custom, custom)
        executor, label = executor_of(p, stack)
        if p["isolation"] == "process":
            stack.enter_context(harness_guard())  # the judge and anything the adapter left behind included
        return evaluate(
            suite,
            p["adapter"],
            judge,
            k=p["k"],
            timeout=p["timeout"],
            concurrency=p["concurrency"],
            isolation=p["isolation"],
            executor=executor,
            executor_label=label,
            startup_timeout=p["startup_timeout"],
            max_reply_bytes=int(p["max_reply_mb"] * 1024 * 1024),
            custom=custom,
            trials=p.get("trials") or 1,
            pass_k=p.get("pass_k"),
            journal=record_path(p),
            resume=bool(p.get("resume")),
            keep_errors=bool(p.get("keep_errors")),
            adaptive=bool(p.get("adaptive")),
            settled=settled,
            show_progress=p.get("progress"),
        )


def chosen_cases(suite: Suite, p: Mapping[str, Any]) -> Suite:
    """The cases ``--case ID`` and ``--cases-from FILE`` name (every case when neither is given), in
    the suite's order; an id the suite does not hold is a usage error that names it."""
    wanted = list(p.get("case") or [])
    if p.get("cases_from"):
        wanted += case_ids_from(p["cases_from"])
    if not p.get("case") and not p.get("cases_from"):
        return suite
    known = {c.id for c in suite}
    unknown = [c for c in dict.fromkeys(wanted) if c not in known]
    if unknown:
        shown = ", ".join(repr(c) for c in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise UsageError(f"no case {shown} in {suite.root} ({len(known)} cases): --case and --cases-from name case ids")
    if not wanted:
        raise UsageError(f"{p['cases_from']} names no case: give one case id a line")
    chosen = set(wanted)
    return Suite(tuple(c for c in suite if c.id in chosen), suite.root, suite.corpus)


def baseline_for_cases(base: Any, ids: list[str]) -> Any:
    """The baseline over the chosen cases only (a gate of ``--case`` or ``--cases-from``): its cases, and
    each metric drawn again from those cases' units (a metric is its numerators' sum over its
    denominators'), so the cases left out neither count as gone nor move a metric."""
    from dataclasses import replace

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


def record_path(p: Mapping[str, Any]) -> str | None:
    """Where the command writes its run's record (``--save``, or baseline's ``--out``): the journal is
    kept beside it while the run goes (``qaeval.scoring.journal``)."""
    return p.get("save") or p.get("out")


def drop_journal(p: Mapping[str, Any]) -> None:
    """The record is written: the journal it replaces goes."""
    from qaeval.scoring.journal import journal_path

    path = record_path(p)
    if path is not None:
        journal_path(path).unlink(missing_ok=True)


def finish(result: Any, p: Mapping[str, Any]) -> Any:
    if p.get("save"):
        write_record(result, p["save"])
        drop_journal(p)
    log_command(result, p)  # with mlflow: one MLflow run; a tracker that fails is a warning, never another verdict
    return result


def labelled_run(
    p: Mapping[str, Any], settled: Callable[[str], bool] | None = None, check: Callable[[Suite], None] | None = None
) -> RunResult:
    """A fresh run carrying the human labels named by ``labels``, if any. The labels are read and checked
    against the suite, and ``check`` is given the suite, before the system is called, so a bad labels
    file (or a baseline of another golden set) costs no run."""
    with fewer_collections():  # loading the cases too
        suite = load_suite(p["data"])
        if check is not None:
            check(suite)
        labels = load_labels(p["labels"], known_cases={c.id for c in suite}) if p.get("labels") else None
        return evaluate_params(p, suite, settled).with_labels(labels)


def recorded(command: str, p: Mapping[str, Any], kind: type) -> Any:
    result = _load_run(p["record"])
    if not isinstance(result, kind):
        raise UsageError(f"{p['record']} is a {result.kind} record, not one the {command} report draws")
    return result


def score_labelled_set(p: Mapping[str, Any], suite: Suite, outputs: Any) -> RunResult:
    """A labelled set's own outputs scored with the command's judge and registered checks (no adapter is
    called)."""
    return score_answers(p, suite, [outputs], adapter=f"(outputs carried by {p['labelled']})", data=p["labelled"])


def score_answers(
    p: Mapping[str, Any], suite: Suite, trials: list[Any], *, adapter: str = "(answers given)", data: str | None = None
) -> RunResult:
    """Outputs a user already has (``trials``: each trial's outputs frame, ``qaeval.system.answers``, or a
    labelled set's) scored with the command's judge and registered checks, trial by trial, as a run
    scores what it collected; the judge's and the checks' processes are stopped whatever scoring raises."""
    from qaeval.scoring.result import RunMeta
    from qaeval.scoring.trials import combine_trials

    with ExitStack() as stack:
        judge = make_judge(p)
        stack.callback(clients.close_judge, judge)
        custom = make_custom(p)
        stack.callback(close_custom, custom)
        meta = RunMeta.now(
            adapter=adapter,
            judge=judge_config_of(judge),
            isolation="none" if data is None else "process",
            k=p["k"],
            data=data or str(suite.root),
        )  # each trial is scored as a run of one; combine_trials sets the trials
        runs = score_trials(suite, trials, judge, meta=meta, custom=custom)
    if len(runs) == 1:
        return runs[0]
    return combine_trials(runs, pass_k=p.get("pass_k"), trials=len(runs))


def notify_hook_of(p: Mapping[str, Any], data_dir: str | None) -> Any:
    """The command's notify hook (``--notify``), built before anything runs so a typo costs nothing; None
    when there is none."""
    if p["notify"] is None:
        return None
    return hooks.notify_hook(
        p["notify"],
        isolation=p["isolation"],
        timeout=p["hook_timeout"],
        startup=p["startup_timeout"],
        data_dir=data_dir,
    )
