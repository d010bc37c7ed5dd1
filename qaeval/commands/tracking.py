"""One MLflow run per command (the ``mlflow`` extra): its parameters, headline metrics with their intervals,
verdict, record, report and per-case table (docs/guides/records.md lists them), logged where MLflow would
log (else the URI and experiment given).

MLflow runs in a process of its own (``qaeval.commands.mlflow_log``): its HTTP retries and timeouts bounded
in that process's environment (``HTTP_LIMITS``, unless the environment sets them), and the whole logging
given a deadline (``QAEVAL_MLFLOW_DEADLINE``, else ``DEADLINE`` seconds), past which it is killed: MLflow's
timeout is per read, so a server that drips its replies would otherwise hold the command for ever. Nothing
here changes a verdict or an exit code: a failure is the returned ``Tracked.error``. Credentials in a
tracking URI never reach a message.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from qaeval.core.deadline import DeadlineExceeded
from qaeval.core.errors import UsageError, install_extra
from qaeval.core.results import Result
from qaeval.core.settings import Settings
from qaeval.record.write import write_record
from qaeval.scoring.outcomes import reasons_text
from qaeval.worker.process import environ_now

EXTRA = install_extra("mlflow")
HTTP_LIMITS = {  # MLflow's documented variables; what the environment sets wins
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
DEADLINE = 120.0  # seconds the whole logging may take (QAEVAL_MLFLOW_DEADLINE): every call, every artifact
IMPORT_TIMEOUT = 120.0  # seconds MLflow's process may take to import MLflow, before the deadline starts
PARAM_LIMIT = 500  # characters MLflow keeps in a parameter's value on every store it supports
# (the MLflow metric's name after the metric's, the headline's column)
HEADLINE = (("", "value"), ("_ci_low", "ci_low"), ("_ci_high", "ci_high"), ("_n", "n"))
PPI = (
    ("_ppi", "ppi_value"),
    ("_ppi_ci_low", "ppi_ci_low"),
    ("_ppi_ci_high", "ppi_ci_high"),
    ("_n_labelled", "n_labelled"),
)
# a calibration's, per axis: (the MLflow metric's name, the agreement frame's column)
AGREEMENT = (
    ("agreement_{}", "exact"),
    ("agreement_{}_ci_low", "exact_low"),
    ("agreement_{}_ci_high", "exact_high"),
    ("agreement_{}_n", "n"),
    ("kappa_{}", "kappa"),
)


class TrackingWarning(UserWarning):
    """The result was not logged to MLflow; the verdict, exit code and saved record stand."""


@dataclass(frozen=True)
class Tracked:
    """What logging a result to MLflow did: where (credentials removed), which run, or why it failed."""

    where: str
    experiment: str
    run_id: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def message(self) -> str:
        if self.ok:
            return f"MLflow: logged run {self.run_id} to experiment {self.experiment!r} at {self.where}"
        return (
            f"could not log to MLflow at {self.where} ({self.error}); the verdict, the exit code and any "
            "saved record are unaffected"
        )


def require() -> None:
    """UsageError (exit 64) naming the extra to install when MLflow is not installed."""
    try:
        import mlflow  # noqa: F401  (only whether the mlflow extra is installed)
    except ImportError as exc:
        raise UsageError(f"logging to MLflow needs the mlflow package ({exc}); {EXTRA}") from None


def redact(text: str) -> str:
    """``text`` with the user and password of every URL in it (``scheme://user:secret@host``) removed."""
    return re.sub(r"(?<=://)[^/\s]*@", "***@", text)  # up to the last "@" before the host: a password may hold "@"


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def params_of(result: Result) -> dict[str, str]:
    run: Any = getattr(result, "run", result)
    meta, judge = run.meta, run.meta.judge
    values = dict(
        adapter=meta.adapter,
        judge_name=judge.name,
        judge_model=judge.model,
        judge_temperature=judge.temperature,
        judge_seed=judge.seed,
        judge_rubric=judge.prompt_version,
        k=meta.k,
        concurrency=meta.concurrency,
        isolation=meta.isolation,
        executor=meta.executor,
        timeout=meta.timeout,
        data=meta.data,
        data_fingerprint=run.suite.fingerprint,
        corpus_fingerprint=run.suite.corpus_fingerprint,
        qaeval_version=meta.qaeval_version,
    )
    return {k: redact(str(v))[:PARAM_LIMIT] for k, v in values.items() if v is not None}


def _per_row(result: Result) -> tuple[pd.DataFrame, str]:
    """The per-row table and its file name: a monitor's rows, else the run's per-case table."""
    rows = getattr(result, "rows", None)
    if isinstance(rows, pd.DataFrame):
        return rows, "per_row.csv"
    run: Any = getattr(result, "run", result)
    per_case = run.per_case.copy()
    per_case["fail_reasons"] = per_case["fail_reasons"].map(reasons_text)  # their messages, as people read them
    return per_case, "per_case.csv"


def metrics_of(result: Result) -> dict[str, float]:
    out: dict[str, float] = {}
    for row in result.headline().to_dict("records"):
        with_ppi = HEADLINE + (PPI if not math.isnan(_number(row.get("ppi_value"))) else ())
        out.update({row["metric"] + suffix: _number(row[column]) for suffix, column in with_ppi})
    agreement = getattr(result, "agreement", None)
    if agreement is not None:  # a calibration: how far the judge agrees with people, per axis
        for row in agreement.to_dict("records"):
            out.update({name.format(row["axis"]): _number(row[column]) for name, column in AGREEMENT})
    return out


def tags_of(result: Result) -> dict[str, str]:
    run: Any = getattr(result, "run", result)
    tags = {"kind": result.kind, "verdict": result.verdict, "mlflow.runName": f"qaeval {result.kind}"}
    if run.meta.git_commit:
        tags.update({"commit": run.meta.git_commit, "mlflow.source.git.commit": run.meta.git_commit})
    return tags


def _artifacts(result: Result, folder: Path, record: str | Path | None, html: str | Path | None) -> list[Path]:
    saved = folder / "record.json"
    if record is not None:
        shutil.copyfile(record, saved)  # the very file saved, under the name every run's record has
    else:
        write_record(result, saved)
    rows, name = _per_row(result)
    rows.to_csv(folder / name, index=False)
    report = [Path(shutil.copyfile(html, folder / "report.html"))] if html is not None else []
    return [saved, folder / name, *report]


class _NotLogged(Exception):
    """What MLflow's process said when it did not log the run (``Type: message``)."""


def child_environment() -> dict[str, str]:
    """The environment MLflow's process gets: this one's, with ``HTTP_LIMITS`` where it sets none (what
    the environment sets wins). Only that process's: this one's is not written."""
    env = environ_now()
    env.update({k: v for k, v in HTTP_LIMITS.items() if k not in env})
    package_root = str(Path(__file__).resolve().parents[2])  # qaeval importable there, however it is here
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


def _log(job: dict[str, Any], seconds: float) -> str:
    """Log ``job`` from MLflow's own process; the run id. Raises ``_NotLogged`` saying why not, or
    ``DeadlineExceeded`` past ``seconds`` (the process is killed)."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "qaeval.commands.mlflow_log"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=child_environment(),
        )
        try:
            out = _reply(proc, job, seconds)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):  # a pipe the child left broken
                        stream.close()
        err.seek(0)
        last = (err.read().strip().splitlines() or ["nothing on stderr"])[-1]
    try:
        reply = json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise _NotLogged(f"MLflow's process ended with exit code {proc.returncode} before it said: {last}") from None
    if "error" in reply:
        raise _NotLogged(reply["error"])
    return str(reply["run_id"])


def _reply(proc: subprocess.Popen[str], job: dict[str, Any], seconds: float) -> str:
    """What MLflow's process prints once it is given ``job``. The deadline starts when it has imported
    MLflow (its ``ready`` line, within ``IMPORT_TIMEOUT``), as it did when MLflow was imported here."""
    assert proc.stdout is not None
    if not select.select([proc.stdout], [], [], IMPORT_TIMEOUT)[0]:
        raise _NotLogged(f"MLflow's process did not import MLflow within {IMPORT_TIMEOUT:g} s")
    if proc.stdout.readline() != "ready\n":  # it ended before: what it printed says why
        return proc.communicate()[0]
    try:
        return proc.communicate(json.dumps(job), timeout=seconds)[0]
    except subprocess.TimeoutExpired:
        raise DeadlineExceeded(seconds) from None


def track(
    result: Result,
    uri: str | bool | None = True,
    experiment: str | None = None,
    *,
    record: str | Path | None = None,
    html: str | Path | None = None,
) -> Tracked:
    """Log ``result`` as one MLflow run at ``uri`` (True or None: MLflow's own choice) in ``experiment``
    (else ``MLFLOW_EXPERIMENT_NAME``, else ``Default``). ``record`` is the saved run record to attach (else
    one is written for it), ``html`` its report. Never raises for the tracker's sake: a failure is the
    returned ``Tracked.error``."""
    require()
    target = uri if isinstance(uri, str) else None
    name = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or "Default"
    where = redact(target or os.environ.get("MLFLOW_TRACKING_URI") or "MLflow's local default store")
    seconds = deadline()
    with tempfile.TemporaryDirectory(prefix="qaeval-mlflow-") as tmp:
        try:
            files = _artifacts(result, Path(tmp), record, html)
            job = dict(
                uri=target,
                experiment=name,
                tags=tags_of(result),
                metrics=metrics_of(result),
                params=params_of(result),
                files=[str(f) for f in files],
            )
            run_id = _log(job, seconds)
        except DeadlineExceeded:
            return Tracked(
                where, name, error=f"the tracker did not finish within {seconds:g} s (QAEVAL_MLFLOW_DEADLINE)"
            )
        except Exception as exc:  # noqa: BLE001  (whatever the tracker does, the verdict stands)
            said = str(exc) if isinstance(exc, _NotLogged) else f"{type(exc).__name__}: {exc}"
            return Tracked(where, name, error=redact(_one_line(said)))
    return Tracked(where, name, run_id=run_id)


def deadline() -> float:
    """Seconds the whole logging may take: ``QAEVAL_MLFLOW_DEADLINE``, else ``DEADLINE``."""
    raw = os.environ.get("QAEVAL_MLFLOW_DEADLINE", "").strip()
    try:
        seconds = float(raw) if raw else DEADLINE
    except ValueError:
        raise UsageError(f"QAEVAL_MLFLOW_DEADLINE={raw!r} is not a number of seconds") from None
    if not seconds > 0 or seconds == float("inf"):
        raise UsageError(f"QAEVAL_MLFLOW_DEADLINE={raw!r} must be a positive number of seconds")
    return seconds


def log_command(result: Result, s: Settings) -> Tracked | None:
    """A verb's last step: with ``mlflow`` in its settings ``s``, log ``result`` (and the record it saved);
    a failure is a ``TrackingWarning``, never an exception."""
    if not s.mlflow:
        return None
    tracked = track(result, s.mlflow, s.mlflow_experiment, record=s.save)
    if not tracked.ok:
        warnings.warn(tracked.message, TrackingWarning, stacklevel=4)
    return tracked


def _one_line(text: str, limit: int = 500) -> str:
    """A message on one line (a message that breaks into lines, such as MLflow's "use either of the
    following methods:", keeps what follows), cut at ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def check_options(s: Settings) -> None:
    """Before anything runs: the extra is installed when tracking is asked for, and the tracking URI has a
    scheme. (That an experiment is only named together with tracking, and a saved record is never logged,
    ``Settings`` says.)"""
    if s.mlflow:
        uri = s.mlflow
        if isinstance(uri, str) and re.fullmatch(r"[\w.-]+:\d+/?", uri.strip()):
            raise UsageError(
                f"mlflow {uri!r} has no scheme, so MLflow would take it for a folder: "
                f"give http://{uri.strip()} for a tracking server"
            )
        require()
        deadline()
