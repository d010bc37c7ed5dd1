"""The keywords of each verb, typed, so an editor shows them: ``qaeval.gate(data, **options)`` takes
``GateOptions``. Each is a parameter of the table in ``qaeval.core.params`` (``tests/test_layers.py`` holds
the two to the same names), where its default, its bounds and what it means are defined once; every
keyword may be None, which means the default, as a notebook's ``k = None`` does.

The groups below are what several verbs share; each verb's options are the groups it takes and its own.
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any, Literal, TypedDict


class SystemOptions(TypedDict, total=False):
    """How the system is called, and the checks of your own run beside it."""

    adapter: Any | None  # a module:factory name, a zero-argument factory or an adapter object
    k: int | None
    timeout: float | None
    startup_timeout: float | None
    max_reply_mb: float | None
    concurrency: int | None
    isolation: Literal["process", "none"] | None
    executor: str | Executor | None  # dask://HOST:PORT or any concurrent.futures.Executor
    resume: bool | None
    keep_errors: bool | None
    check: list[str] | str | None
    metric: list[str] | str | None
    check_timeout: float | None


class JudgeOptions(TypedDict, total=False):
    """The judge: which, and how it is asked."""

    judge: Any | None  # a name, a factory or a judge object
    judge_model: str | None
    judge_base_url: str | None
    judge_concurrency: int | None
    judge_cache: bool | None
    judge_timeout: float | None


class TrialOptions(TypedDict, total=False):
    """Several trials per case."""

    trials: int | None
    pass_k: int | None
    adaptive: bool | None


class TrackedOptions(TypedDict, total=False):
    """A saved record read back instead of running, and MLflow."""

    record: str | None
    mlflow: str | bool | None
    mlflow_experiment: str | None


class ProgressOptions(TypedDict, total=False):
    """What is drawn while it runs."""

    progress: bool | None  # False: no progress bar (the CLI's --quiet); None: in a terminal or a notebook


class CaseOptions(TypedDict, total=False):
    """Only some of the cases."""

    case: list[str] | str | None
    cases_from: str | None


class LabelBars(TypedDict, total=False):
    """What a judge must reach against human labels to be trusted."""

    min_agreement: float | None
    min_labels: int | None
    min_kappa: float | None


class RunOptions(SystemOptions, JudgeOptions, TrialOptions, TrackedOptions, CaseOptions, ProgressOptions, total=False):
    """The keywords of ``qaeval.run``."""

    labels: str | None
    save: str | None


class BaselineOptions(SystemOptions, JudgeOptions, TrialOptions, CaseOptions, ProgressOptions, total=False):
    """The keywords of ``qaeval.baseline``."""

    out: str | None
    allow_failing: bool | None
    save: str | None


class GateOptions(RunOptions, LabelBars, total=False):
    """The keywords of ``qaeval.gate``."""

    baseline: str | None
    tolerances: str | None
    tolerance: list[str] | str | None
    alpha: float | None


class CalibrateOptions(SystemOptions, JudgeOptions, TrackedOptions, LabelBars, ProgressOptions, total=False):
    """The keywords of ``qaeval.calibrate``."""

    labels: str | None
    labelled: str | None
    axes: list[str] | str | None
    save: str | None


class DriftOptions(
    SystemOptions, JudgeOptions, TrialOptions, TrackedOptions, CaseOptions, ProgressOptions, total=False
):
    """The keywords of ``qaeval.drift``."""

    timeseries: str | None
    window: int | None
    notify: Any | None  # a module:function name or a callable
    hook_timeout: float | None
    save: str | None


class MonitorOptions(JudgeOptions, TrackedOptions, ProgressOptions, total=False):
    """The keywords of ``qaeval.monitor``."""

    startup_timeout: float | None
    isolation: Literal["process", "none"] | None
    labels: str | None
    timeseries: str | None
    notify: Any | None
    hook_timeout: float | None
    save: str | None
    by: list[str] | str | None
    time_window: str | None
    sample: int | None
    seed: int | None
    band_window: int | None
    min_rows: int | None
    log_format: Literal["auto", "jsonl", "csv", "parquet", "otlp"] | None
    annotations: str | None


OPTIONS: dict[str, type] = {
    "run": RunOptions,
    "baseline": BaselineOptions,
    "gate": GateOptions,
    "calibrate": CalibrateOptions,
    "drift": DriftOptions,
    "monitor": MonitorOptions,
}  # each verb's keywords, by command: the parameter table names the same ones (less its positional data)
