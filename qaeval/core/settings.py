"""A command's settings as frozen, typed objects, built once at the edge and handed down.

The parameter table (``qaeval.core.params``) defines each parameter once; the command line, the API's
verbs and the notebooks' parameters are checked against it (``qaeval.commands.common.check_parameters``)
and the checked values become one ``Settings``, through ``Settings.from_params``, its one constructor from
the table. Below the verbs nothing looks a setting up by name in a dict: the run's settings travel as
``RunSettings`` down to the worker pool, under the table's names (``max_reply_mb`` from the flag to the
worker's reply limit), the judge's as ``JudgeSetup``, the journal's as ``ResumeSettings``.

Every rule that spans fields is checked here, in the ``__post_init__`` of the object that holds the
fields, so no object that breaks one can be made, by the CLI, the API, a notebook or a library caller
alike: a ``UsageError`` (exit 64) that says which settings do not go together.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from qaeval.core import params as P
from qaeval.core.errors import UsageError

ISOLATIONS = ("process", "none")
T = TypeVar("T")

ADAPTIVE_REFUSED = (
    "--adaptive is refused while the boundary is enforced (--isolation process, the default): being asked "
    "a case again would tell the system that its first answer failed, a verdict drawn from the gold labels "
    "the boundary keeps from it; use fixed --trials K, or --isolation none, which gives the boundary up and "
    "says so"
)


def _table(name: str) -> Any:
    """The parameter's default in the table: every default below is the table's."""
    return P.BY_NAME[name].default


def _from_params(cls: type[T], p: Mapping[str, Any], **computed: Any) -> T:
    """``cls`` with each field the parameter of its name holds; a parameter left to None (or one the
    command does not take) keeps the field's default, which is the table's; a field that is no parameter
    of the table is never read from ``p``. ``computed``: fields that are not a parameter as it stands."""
    names = [name for name in cls.__dataclass_fields__ if name in P.BY_NAME and name not in computed]  # type: ignore[attr-defined]
    return cls(**{name: p[name] for name in names if p.get(name) is not None}, **computed)


@dataclass(frozen=True)
class RunSettings:
    """How the system under test is asked, and its run scored: what ``evaluate`` and ``run_suite`` take.

    Attributes:
        k: The cut-off of the retrieval metrics.
        trials: How many times each case is asked.
        pass_k: The k of pass_hat_k and pass_at_k (None: ``trials``); at most ``trials``.
        adaptive: Every case gets one trial, and the other ``trials - 1`` go only to the cases it does not
            settle; needs ``trials`` of 2 or more and ``isolation`` none.
        timeout: Seconds one case may take.
        startup_timeout: Seconds a worker may take to build the adapter.
        max_reply_mb: The largest reply one case may send back, in MiB.
        concurrency: Cases in flight at once.
        isolation: ``process`` (workers that never see a label) or ``none`` (this process).
        executor: A ``concurrent.futures.Executor`` (or a ``dask://HOST:PORT`` address, which the verbs
            connect to) to run the calls on instead of local workers; needs ``isolation`` process.
        executor_label: How the record names the executor (default: its address, else its type).
        bootstrap_seed: The seed of the metrics' bootstrap intervals.
        show_progress: Whether to draw a progress bar (the table's ``progress``; None: ``QAEVAL_PROGRESS``,
            else for 50 cases or more in a terminal or a notebook).
    """

    k: int = _table("k")
    trials: int = _table("trials")
    pass_k: int | None = None
    adaptive: bool = False
    timeout: float = _table("timeout")
    startup_timeout: float = _table("startup_timeout")
    max_reply_mb: float = _table("max_reply_mb")
    concurrency: int = _table("concurrency")
    isolation: str = _table("isolation")
    executor: str | cf.Executor | None = None
    executor_label: str | None = None
    bootstrap_seed: int = 0
    show_progress: bool | None = None

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATIONS:
            raise UsageError(f"isolation must be one of {', '.join(ISOLATIONS)}, got {self.isolation!r}")
        if self.executor is not None and not isinstance(self.executor, (str, cf.Executor)):
            raise UsageError(
                "executor must be dask://HOST:PORT or a concurrent.futures.Executor, "
                f"got {type(self.executor).__name__}"
            )
        if self.executor is not None and self.isolation == "none":
            raise UsageError("an executor runs calls out of process; it cannot be combined with isolation none")
        if self.adaptive and self.trials < 2:
            raise UsageError("--adaptive spreads --trials K over the cases that need them: give --trials 2 or more")
        if self.adaptive and self.isolation != "none":
            raise UsageError(ADAPTIVE_REFUSED)
        if self.pass_k is not None and self.pass_k > self.trials:
            raise UsageError(
                f"--pass-k {self.pass_k} needs at least that many --trials "
                "(pass^k and pass@k draw k of a case's trials)"
            )

    @classmethod
    def from_params(cls, p: Mapping[str, Any]) -> RunSettings:
        """The run's settings from a command's checked parameters.

        Args:
            p: The checked parameters (``qaeval.core.params.check``); one the command does not take is
                the table's default.

        Returns:
            The settings, their rules checked.
        """
        return _from_params(cls, p, adaptive=bool(p.get("adaptive")), show_progress=p.get("progress"))

    @property
    def max_reply_bytes(self) -> int:
        """``max_reply_mb`` in bytes, as the wire counts it."""
        return int(self.max_reply_mb * 1024 * 1024)

    @property
    def executor_name(self) -> str | None:
        """How the record names the executor: its label, its address, else its type (None: no executor)."""
        if self.executor is None:
            return None
        if self.executor_label:
            return self.executor_label
        return self.executor if isinstance(self.executor, str) else type(self.executor).__name__


@dataclass(frozen=True)
class JudgeSetup:
    """Which judge, and how it is asked (the ``judge*`` parameters, under their names).

    ``qaeval.scoring.judge.JudgeSettings`` is what an HTTP judge's factory is given: the verbs build it from
    these over the environment.

    Attributes:
        judge: The judge: a module:factory name, a factory or a judge object.
        judge_model: The HTTP judge's model (None: its factory's default, or the environment's).
        judge_base_url: The HTTP judge's endpoint (None: the environment's).
        judge_concurrency: Judge requests in flight at once (None: the judge's own default).
        judge_cache: Whether verdicts are cached on disk (None: the judge's own default).
        judge_timeout: Seconds one judge request may take.
    """

    judge: Any = _table("judge")
    judge_model: str | None = None
    judge_base_url: str | None = None
    judge_concurrency: int | None = None
    judge_cache: bool | None = None
    judge_timeout: float = _table("judge_timeout")

    @classmethod
    def from_params(cls, p: Mapping[str, Any]) -> JudgeSetup:
        """The judge's settings from a command's checked parameters.

        Args:
            p: The checked parameters (``qaeval.core.params.check``).

        Returns:
            The settings.
        """
        return _from_params(cls, p)


@dataclass(frozen=True)
class ResumeSettings:
    """The journal a run keeps beside its record, and what a resumed run takes from it.

    Attributes:
        journal: The record's path the journal is kept beside (``--save``, or baseline's ``--out``);
            None: no journal.
        resume: Reuse what the journal holds; needs ``journal``.
        keep_errors: Reuse the failed outputs too; needs ``resume``.
    """

    journal: str | None = None
    resume: bool = False
    keep_errors: bool = False

    def __post_init__(self) -> None:
        if self.resume and not self.journal:
            raise UsageError(
                "--resume reads the journal kept beside the run's record: give the record's path "
                "(--save FILE, or baseline's --out FILE) as the interrupted run did"
            )
        if self.keep_errors and not self.resume:
            raise UsageError("--keep-errors says what --resume keeps: give --resume too")

    @classmethod
    def from_params(cls, command: str, p: Mapping[str, Any]) -> ResumeSettings:
        """The journal's settings from a command's checked parameters; ``baseline --allow-failing
        --resume`` keeps the refused run as it was: its failed outputs too.

        Args:
            command: The command the parameters are for.
            p: The checked parameters (``qaeval.core.params.check``).

        Returns:
            The settings, their rules checked.
        """
        resume = bool(p.get("resume"))
        keeps_the_refused = command == "baseline" and resume and bool(p.get("allow_failing"))
        return cls(
            journal=p.get("save") or p.get("out"),
            resume=resume,
            keep_errors=bool(p.get("keep_errors")) or keeps_the_refused,
        )


@dataclass(frozen=True)
class Settings:
    """One command's settings, checked: built once at the edge (``from_params``), then handed down.

    Attributes:
        command: The command (``run``, ``baseline``, ``gate``, ``calibrate``, ``drift``, ``monitor``...).
        params: Every checked parameter of the command, read-only: the verb reads its own (gate's
            ``alpha``, drift's ``window``) here; what is shared below the verbs is in the fields.
        given: The parameters given a value (not left to their default).
        data: The golden folder.
        adapter: The system under test: a module:factory name, a factory or an adapter object.
        run: How the system is asked and the run scored.
        judging: The judge.
        resume: The journal.
        check: Checks of the user's own (module:function names or functions).
        metric: Metrics of the user's own.
        check_timeout: Seconds the registered checks and metrics may take on one case.
        case: Only these cases (with ``cases_from``; neither: every case).
        cases_from: A file listing the cases to run.
        labels: Hand labels (JSONL).
        labelled: A labelled set that carries its own outputs (calibrate).
        save: Where the run record is written.
        out: Where baseline writes the baseline record.
        record: A saved record drawn instead of running.
        mlflow: Log the command to MLflow (True, or a tracking URI).
        mlflow_experiment: The MLflow experiment.
        notify: The hook called with drift's alarms.
        hook_timeout: Seconds the notify hook may take.
    """

    command: str = "run"
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    given: frozenset[str] = frozenset()
    data: str | None = None
    adapter: Any = _table("adapter")
    run: RunSettings = field(default_factory=RunSettings)
    judging: JudgeSetup = field(default_factory=JudgeSetup)
    resume: ResumeSettings = field(default_factory=ResumeSettings)
    check: tuple[Any, ...] = ()
    metric: tuple[Any, ...] = ()
    check_timeout: float = _table("check_timeout")
    case: tuple[str, ...] = ()
    cases_from: str | None = None
    labels: str | None = None
    labelled: str | None = None
    save: str | None = None
    out: str | None = None
    record: str | None = None
    mlflow: str | bool | None = None
    mlflow_experiment: str | None = None
    notify: Any = None
    hook_timeout: float = _table("hook_timeout")

    def __post_init__(self) -> None:
        if self.command == "calibrate" and not self.record:
            if not self.labels and not self.labelled:
                raise UsageError("calibrate needs labels (keyed hand labels for a run) or labelled (a labelled set)")
            if not self.labelled and not self.data:
                raise UsageError("calibrate with labels needs data (the cases the labels are for)")
        if self.command == "calibrate" and self.labelled and self.resume.resume:
            raise UsageError(
                "a labelled set carries its own outputs and no system is asked, so there is nothing to resume"
            )
        if self.mlflow_experiment and not self.mlflow:
            raise UsageError("mlflow_experiment names the MLflow experiment to log to; it needs mlflow as well")
        if self.mlflow and self.record:
            raise UsageError("mlflow logs a fresh run; a saved record (record) is only drawn")

    @classmethod
    def from_params(cls, command: str, p: Mapping[str, Any], given: frozenset[str] | None = None) -> Settings:
        """The one constructor from a command's checked parameters.

        Args:
            command: The command the parameters are for.
            p: The checked parameters (``qaeval.core.params.check``).
            given: The parameters the caller gave a value (default: those that are not None).

        Returns:
            The settings, every rule that spans fields checked.
        """
        return _from_params(
            cls,
            p,
            command=command,
            params=MappingProxyType(dict(p)),
            given=frozenset(n for n, v in p.items() if v is not None) if given is None else given,
            resume=ResumeSettings.from_params(command, p),
            run=RunSettings.from_params(p),
            judging=JudgeSetup.from_params(p),
            check=tuple(p.get("check") or ()),
            metric=tuple(p.get("metric") or ()),
            case=tuple(p.get("case") or ()),
        )

    @property
    def writes(self) -> str | None:
        """The record this command writes (``save``, or baseline's ``out``), which it holds the lock of;
        None when it draws a saved record or writes none."""
        return None if self.record else self.out or self.save


@dataclass(frozen=True)
class ProposeSettings:
    """``propose``'s settings (``qaeval.proposals.run``), under the table's names: exactly one source of
    candidates (``from_monitor`` or ``from_corpus``) and a review sheet that is a CSV file."""

    sheet: str
    from_monitor: str | None = None
    from_corpus: str | None = None
    n: int = _table("n")
    seed: int = _table("seed")
    data: str | None = None
    logs: str | None = None
    generator: Any = _table("generator")
    generator_model: str | None = None
    generator_base_url: str | None = None
    generator_concurrency: int | None = None
    generator_cache: bool | None = None
    generator_timeout: float = _table("generator_timeout")
    startup_timeout: float = _table("startup_timeout")
    isolation: str = _table("isolation")
    max_calls: int | None = None

    def __post_init__(self) -> None:
        if (self.from_monitor is None) == (self.from_corpus is None):
            raise UsageError("propose needs exactly one of --from-monitor RECORD and --from-corpus DIR")
        if not str(self.sheet).lower().endswith(".csv"):
            raise UsageError(f"the review sheet is a CSV file: give a path ending in .csv, not {self.sheet!r}")

    @classmethod
    def from_params(cls, p: Mapping[str, Any]) -> ProposeSettings:
        """From propose's checked parameters (``qaeval.core.params.check("propose", ...)``)."""
        return _from_params(cls, p)
