"""Every parameter of every command, defined once: its default, its type and what it means.

The command line builds its flags from this table, the API's verbs validate their keywords against
it, and the notebooks' validation cells check what papermill injected against it. A parameter set to
None takes the default listed here, so a notebook's ``k = None`` and a CLI run without ``--k`` mean the
same thing. A name the command does not know is a usage error that lists the names it does know.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from qaeval.core.errors import UsageError

SCORING = ("run", "baseline", "gate", "calibrate", "drift")
TRACKED = ("run", "gate", "calibrate", "drift", "monitor")  # the commands that log to MLflow (qaeval.commands.tracking)

DEFAULT_ADAPTER = "qaeval.system.reference:make_adapter"
DEFAULT_JUDGE = "qaeval.judges.offline:make_judge"
DEFAULT_K = 5  # the cut-off of the retrieval metrics
MAX_TIMEOUT = 7 * 24 * 3600.0


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # str, int, float, bool, list, choice, plugin (module:attr, or an object in the API), plugins (list), tracker
    default: Any
    help: str
    commands: tuple[str, ...]
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    metavar: str | None = None
    required: tuple[str, ...] = ()  # commands for which it must be given
    cli_flag: str | None = None  # the flag, when it is not --NAME (two parameters may not share a name)

    @property
    def flag(self) -> str:
        return self.cli_flag or "--" + self.name.replace("_", "-")


# The table is kept as a reader scans it, a parameter to a line or two: not formatted.
# fmt: off
PARAMS: tuple[Param, ...] = (
    Param("data", "str", None, "folder whose *.jsonl files are the golden cases", SCORING + ("validate",),
          metavar="DIR", required=("run", "baseline", "gate", "drift", "validate")),
    Param("adapter", "plugin", DEFAULT_ADAPTER, "the system under test, as module:factory", SCORING,
          metavar="MODULE:FACTORY"),
    Param("judge", "plugin", DEFAULT_JUDGE, "the judge, as module:factory (default: the offline mechanical judge)",
          SCORING, metavar="MODULE:FACTORY"),
    Param("k", "int", DEFAULT_K, "cut-off for retrieval metrics", SCORING, minimum=1),
    Param("trials", "int", 1, "run each case this many times, each an independent call of the system; the gate "
          "then tells a flaky case from a regression", ("run", "baseline", "gate", "drift"), minimum=1, maximum=100,
          metavar="K"),
    Param("pass_k", "int", None, "the k of pass_hat_k and pass_at_k (default: --trials)", ("run", "baseline", "gate",
          "drift"), minimum=1, maximum=100, metavar="K"),
    Param("adaptive", "bool", False, "with --trials K: every case gets one trial, and the other K - 1 go only to the "
          "cases it does not settle (it failed, or the gate's baseline had the case flaky or failing); only with "
          "--isolation none, as being asked again tells the system its answer failed",
          ("run", "baseline", "gate", "drift")),
    Param("case", "list", (), "run only the case with this id (repeatable); the others are not run", ("run",
          "baseline", "gate", "drift"), metavar="ID"),
    Param("cases_from", "str", None, "run only the cases whose ids FILE lists, one a line (blank lines and lines "
          "starting with # are skipped); with --case, the cases of both", ("run", "baseline", "gate", "drift"),
          metavar="FILE"),
    Param("resume", "bool", False, "reuse what the journal beside the record (--save, or baseline's --out) holds "
          "from an interrupted run, and ask the system only for the rest", SCORING),
    Param("keep_errors", "bool", False, "with --resume, keep the outputs that failed instead of asking again",
          SCORING),
    Param("timeout", "float", 60.0, "seconds one case may take before its worker is replaced", SCORING,
          minimum=0.001, maximum=MAX_TIMEOUT, metavar="SECONDS"),
    Param("startup_timeout", "float", 120.0, "seconds a worker may take to build the adapter; past it the worker "
          "is stopped, and the run fails if none started", SCORING, minimum=0.001, maximum=MAX_TIMEOUT,
          metavar="SECONDS"),
    Param("max_reply_mb", "float", 8.0, "largest reply one case may send back, in MiB; a bigger one stops its "
          "worker and fails the case", SCORING, minimum=0.001, maximum=1024.0, metavar="MIB"),
    Param("concurrency", "int", 4, "cases in flight at once (one worker process each)", SCORING, minimum=1,
          maximum=512, metavar="N"),
    Param("isolation", "choice", "process", "process: adapters run in worker processes that never see a label; "
          "none: in this process, for a debugger (the run says the boundary was not enforced)", SCORING,
          choices=("process", "none")),
    Param("executor", "executor", None, "run adapter calls on an executor instead of local workers: "
          "dask://HOST:PORT (needs the dask extra)", SCORING, metavar="URL"),
    Param("labels", "str", None, "hand labels (JSONL): calibrate compares the judge with them; run and gate "
          "add prediction-powered (PPI) estimates, and gate first refuses a judge they do not trust",
          ("run", "gate", "calibrate"), metavar="FILE"),
    Param("labelled", "str", None, "a labelled set that carries its own outputs (no adapter is called)",
          ("calibrate",), metavar="FILE"),
    Param("min_agreement", "float", 0.7, "exact agreement every judge axis must reach", ("calibrate", "gate"),
          minimum=0.0, maximum=1.0, metavar="X"),
    Param("min_labels", "int", 10, "labels an axis needs before its agreement can certify the judge",
          ("calibrate", "gate"), minimum=1, metavar="N"),
    Param("min_kappa", "float", 0.4, "quadratic-weighted kappa every judge axis must reach where the people's "
          "scores vary (0.4: moderate agreement; a judge that always gives one score has 0)", ("calibrate", "gate"),
          minimum=0.0, maximum=1.0, metavar="X"),
    Param("axes", "list", (), "an axis the verdict is on (repeatable, or comma-separated; default: the axes a "
          "labelled set labels, all three for keyed labels)", ("calibrate",), metavar="AXIS"),
    Param("baseline", "str", None, "the baseline run record to gate against", ("gate",), metavar="FILE",
          required=("gate",)),
    Param("tolerances", "str", None, 'JSON file {"metric": tolerance} over the defaults', ("gate",), metavar="FILE"),
    Param("alpha", "float", 0.05, "with several trials on either side, the chance that tier 2 blocks an unchanged "
          "system, at most (split between the cases and the gated metrics)", ("gate",), minimum=0.0001,
          maximum=0.5, metavar="P"),
    Param("tolerance", "list", (), "override one tolerance, metric=value (repeatable)", ("gate",),
          metavar="METRIC=VALUE"),
    Param("out", "str", None, "where to write the baseline record", ("baseline",), metavar="FILE",
          required=("baseline",)),
    Param("allow_failing", "bool", False, "write the baseline even though tier 1 failed (it is marked not green)",
          ("baseline",)),
    Param("timeseries", "str", None, "the drift history (JSONL, append-only)", ("drift",), metavar="FILE",
          required=("drift",)),
    Param("window", "int", 10, "trailing runs that make a metric's band", ("drift",), minimum=1, metavar="N"),
    Param("notify", "plugin", None, "called with the list of alarms, as module:function", ("drift",),
          metavar="MODULE:FUNCTION"),
    Param("save", "str", None, "write this command's run record to FILE", SCORING, metavar="FILE"),
    Param("judge_model", "str", None, "model id for an HTTP judge (else QAEVAL_JUDGE_MODEL)", SCORING, metavar="NAME"),
    Param("judge_base_url", "str", None, "endpoint for an HTTP judge (else OPENAI_BASE_URL)", SCORING, metavar="URL"),
    Param("judge_concurrency", "int", None, "judge calls in flight at once (else QAEVAL_JUDGE_CONCURRENCY, else 8)",
          SCORING, minimum=1, maximum=256, metavar="N"),
    Param("judge_cache", "bool", None, "reuse cached verdicts (else QAEVAL_JUDGE_CACHE, else on)", SCORING),
    Param("record", "str", None, "draw this saved run record instead of running anything",
          ("run", "gate", "calibrate", "drift"), metavar="FILE"),
    Param("judge_timeout", "float", 300.0, "seconds a custom judge (one run in its own process) may take to "
          "answer each chunk of 16 requests; past it its process is killed and those cases are judge errors, "
          "and after two chunks lost in a row it is not asked again (the built-in judges do not use it: the "
          "HTTP judge has its own per-call timeout)", SCORING, minimum=0.001, maximum=MAX_TIMEOUT,
          metavar="SECONDS"),
    Param("check", "plugins", (), "a check of your own, as module:function, run on every case in its own process "
          "(repeatable; @qaeval.check(tier=1) blocks the gate; the qaeval.checks entry points are added)", SCORING,
          metavar="MODULE:FUNCTION"),
    Param("metric", "plugins", (), "a metric of your own, as module:name of a qaeval.Metric (repeatable; the "
          "qaeval.metrics entry points are added)", SCORING, metavar="MODULE:NAME"),
    Param("check_timeout", "float", 60.0, "seconds the registered checks and metrics may take on one case; past "
          "it their process is killed and that case fails them", SCORING, minimum=0.001, maximum=MAX_TIMEOUT,
          metavar="SECONDS"),
    Param("hook_timeout", "float", 60.0, "seconds the notify hook (run in its own process) may take; past it "
          "its process is killed, noted, and the alarm stands", ("drift",), minimum=0.001, maximum=MAX_TIMEOUT,
          metavar="SECONDS"),
    Param("mlflow", "tracker", None, "log the command as one MLflow run (parameters, metrics with intervals, verdict, "
          "record, report) to TRACKING_URI; with no value to MLFLOW_TRACKING_URI, else MLflow's local default "
          "(needs the mlflow extra). A tracker that fails is a warning: the verdict and exit code stand", TRACKED,
          metavar="TRACKING_URI"),
    Param("mlflow_experiment", "str", None, "the MLflow experiment to log to (else MLFLOW_EXPERIMENT_NAME, else "
          "Default)", TRACKED, metavar="NAME"),
    Param("progress", "bool", None, "no progress bar (else one is drawn in a terminal or a notebook for 50 cases "
          "or more, unless QAEVAL_PROGRESS=0); in the API progress=False", SCORING + ("monitor",), cli_flag="--quiet"),
)
MONITOR_SHARED = ("judge", "isolation", "labels", "timeseries", "notify", "save", "judge_model", "judge_base_url",
                  "judge_concurrency", "judge_cache", "record", "judge_timeout", "startup_timeout", "hook_timeout")
PARAMS = tuple(replace(p, commands=p.commands + ("monitor",)) if p.name in MONITOR_SHARED else p for p in PARAMS) + (
    Param("logs", "str", None, "the logged traffic: JSONL, CSV (list columns JSON-encoded), Parquet, one answered "
          "request per row, or OpenTelemetry traces as OTLP/JSON (propose: the log a monitor record was made from, when it is no longer where the record "
          "says)", ("monitor",), metavar="FILE", required=("monitor",)),
    Param("log_format", "choice", "auto", "the log's format: auto (by its name, and OTLP/JSON by its content), "
          "jsonl, csv, parquet or otlp", ("monitor",), choices=("auto", "jsonl", "csv", "parquet", "otlp")),
    Param("annotations", "str", None, "write each row's check results back as span annotations, one row per (span, "
          "metric): JSONL, CSV or Parquet (Phoenix's SpanEvaluations shape) or, for a name ending in .otlp.jsonl "
          "or .otlp.json, OTLP/JSON with a gen_ai.evaluation.result event per metric (logs read from traces)",
          ("monitor",), metavar="PATH"),
    Param("by", "list", (), "a slice column to break every metric down by (repeatable); the judged sample is "
          "stratified by it", ("monitor",), metavar="COLUMN"),
    Param("time_window", "str", None, "a time span (1D, 1W, 6h, 30min, ...): every metric per window of the timestamp column",
          ("monitor",), metavar="SPAN", cli_flag="--window"),
    Param("sample", "int", None, "judge a uniform random N of the answered rows (default: all); the checks run on "
          "every row", ("monitor",), minimum=1, metavar="N"),
    Param("seed", "int", 0, "seed of the judged sample (monitor) or of the draw (propose)", ("monitor",), minimum=0, maximum=2**32 - 1, metavar="S"),
    Param("band_window", "int", 10, "trailing windows of the history that make a metric's band", ("monitor",),
          minimum=1, metavar="N"),
    Param("min_rows", "int", 30, "rows a time window needs before it is compared with its band", ("monitor",),
          minimum=1, metavar="N"),
)
PROPOSE_SHARED = ("data", "logs", "seed", "isolation", "startup_timeout")
PARAMS = tuple(replace(p, commands=p.commands + ("propose",)) if p.name in PROPOSE_SHARED else p for p in PARAMS) + (
    Param("from_monitor", "str", None, "a record `qaeval monitor --save` wrote: propose the logged rows that failed a "
          "check, were judged unfaithful or abstained", ("propose",), metavar="RECORD"),
    Param("from_corpus", "str", None, "a folder holding corpus.jsonl (or the file): generate candidates from its "
          "passages and verify them", ("propose",), metavar="DIR"),
    Param("sheet", "str", None, "where to write the review sheet (CSV)", ("propose",), metavar="SHEET.csv",
          required=("propose",), cli_flag="--out"),
    Param("n", "int", 50, "how many candidates", ("propose",), minimum=1, maximum=100_000, metavar="N"),
    Param("generator", "plugin", "qaeval.judges.generator:make_generator", "(--from-corpus) the generator, as "
          "module:factory (default: an OpenAI-compatible model); any other runs in its own process", ("propose",),
          metavar="MODULE:FACTORY"),
    Param("generator_model", "str", None, "(--from-corpus) the generator's model (else QAEVAL_GENERATOR_MODEL, else "
          "QAEVAL_JUDGE_MODEL)", ("propose",), metavar="NAME"),
    Param("generator_base_url", "str", None, "(--from-corpus) the generator's endpoint (else OPENAI_BASE_URL)",
          ("propose",), metavar="URL"),
    Param("generator_concurrency", "int", None, "(--from-corpus) generator calls in flight at once (else "
          "QAEVAL_JUDGE_CONCURRENCY, else 8)", ("propose",), minimum=1, maximum=256, metavar="N"),
    Param("generator_cache", "bool", None, "(--from-corpus) reuse cached generator replies (else QAEVAL_JUDGE_CACHE, "
          "else on)", ("propose",)),
    Param("generator_timeout", "float", 300.0, "(--from-corpus) seconds a custom generator may take on each chunk of "
          "16 requests; past it its process is killed and those candidates are lost", ("propose",), minimum=0.001,
          maximum=MAX_TIMEOUT, metavar="SECONDS"),
    Param("max_calls", "int", None, "(--from-corpus) stop after this many generator calls (default: 3 N + 10)",
          ("propose",), minimum=1, metavar="N"),
)
BY_NAME: dict[str, Param] = {p.name: p for p in PARAMS}
# fmt: on


def names_for(command: str) -> list[str]:
    return [p.name for p in PARAMS if command in p.commands]


def default(name: str) -> Any:
    value = BY_NAME[name].default
    return list(value) if isinstance(value, tuple) else value


def is_plugin_name(value: Any) -> bool:
    """Whether ``value`` names user code as ``module:attribute``."""
    return isinstance(value, str) and value.count(":") == 1 and all(value.split(":"))


def _check_value(p: Param, value: Any) -> Any:
    what = f"{p.name} must be"
    if p.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise UsageError(f"{what} a whole number, got {value!r}")
    elif p.kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UsageError(f"{what} a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise UsageError(f"{what} a finite number, got {value!r}")
    elif p.kind == "bool":
        if not isinstance(value, bool):
            raise UsageError(f"{what} True or False, got {value!r}")
    elif p.kind == "list":
        if isinstance(value, str):  # papermill's -p tolerance faithfulness_rate=0.5 arrives as one string
            value = [value]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{what} a list of strings, got {value!r}")
        value = list(value)
    elif p.kind == "choice":
        if value not in p.choices:
            raise UsageError(f"{what} one of {', '.join(p.choices)}, got {value!r}")
    elif p.kind == "executor":
        if not isinstance(value, str) or not value.startswith("dask://"):
            raise UsageError(f"{p.name} must be dask://HOST:PORT, got {value!r}")
    elif p.kind == "tracker":  # True (or a flag without a value): MLflow's own default; else a tracking URI
        if not isinstance(value, bool) and (not isinstance(value, str) or not value.strip()):
            raise UsageError(f"{what} True, False or a tracking URI, got a {type(value).__name__}")
    elif p.kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise UsageError(f"{what} a non-empty string, got {value!r}")
    elif p.kind == "plugins":
        value = list(value) if isinstance(value, (list, tuple)) else [value]
        for v in value:
            if isinstance(v, str) and (v.count(":") != 1 or not all(v.split(":"))):
                raise UsageError(f"{p.name} must be named as module:attribute, got {v!r}")
    elif p.kind == "plugin":
        if isinstance(value, str):
            if not is_plugin_name(value):
                raise UsageError(f"{p.name} must be named as module:callable, got {value!r}")
        elif not callable(value) and not hasattr(value, "answer") and p.name == "adapter":
            raise UsageError(
                f"adapter must be a module:factory name, a factory or an object with answer(case), "
                f"got {type(value).__name__}"
            )
    if p.minimum is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < p.minimum:
            raise UsageError(f"{what} at least {p.minimum:g}, got {value!r}")
    if p.maximum is not None and isinstance(value, (int, float)) and not isinstance(value, bool) and value > p.maximum:
        raise UsageError(f"{what} at most {p.maximum:g}, got {value!r}")
    return value


def check_value(name: str, value: Any) -> Any:
    """One parameter's value checked as ``check`` checks it (None: its default)."""
    return default(name) if value is None else _check_value(BY_NAME[name], value)


def check(command: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a command's parameters; returns every known parameter with defaults filled in.

    Unknown names are usage errors that list the known ones; a value of the wrong type or out of range
    is a usage error that says what was expected.
    """
    known = names_for(command)
    if not known:
        raise UsageError(f"unknown command {command!r}")
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise UsageError(
            f"{command} has no parameter {', '.join(repr(u) for u in unknown)}; its parameters are: {', '.join(known)}"
        )
    out: dict[str, Any] = {}
    has_record = params.get("record") is not None
    for name in known:
        p = BY_NAME[name]
        value = params.get(name)
        if value is None:
            if command in p.required and not has_record:
                raise UsageError(f"{command} needs {name} ({p.help})")
            out[name] = default(name)
            continue
        out[name] = _check_value(p, value)
    return out
