"""Registered checks and metrics, run out of process: the harness's side, and what the host does.

``--check module:function`` and ``--metric module:name`` (each repeatable), ``check=`` and ``metric=`` in
the API (names, or the functions and ``Metric`` objects themselves, shipped with cloudpickle), and every
entry point of the ``qaeval.checks`` and ``qaeval.metrics`` groups of the installed distributions (read
from their metadata; nothing of theirs is imported here) are run together by one ``CustomProcess``: a
fresh interpreter (``python -m qaeval.host.serve``, role ``custom``) started like a custom judge's (its
own process group, a scratch folder, no data folder in its environment, no ``CAP_SYS_PTRACE``), so
no check or metric runs, or is even imported, in the harness's process: none can patch what decides a
verdict. The messages:

    harness -> host   {"setup": {"role": "custom", "spec": {"checks": [spec], "metrics": [spec]}, ...}}
    host -> harness   {"ready": true, "declared": {"checks": [...], "metrics": [...]}} or {"init_error": "..."}
    harness -> host   {"score": sample}  ->  {"checks": [[passed, reason] | {"error": why}],
                                              "metrics": [[num, den] | {"error": why}]}

Each case must be answered within ``timeout`` seconds (``--check-timeout``). A case whose process hangs,
exits or breaks the protocol fails every check and metric with the reason, its process is killed, and
the next case gets a fresh one; after ``MAX_LOST`` cases lost in a row the rest are not asked and fail
too. A name that does not resolve, a factory that is not a check or a ``Metric``, a bad declaration
or a name taken by a built-in one is a usage error (exit 64) before the system is called.
With ``isolation="none"`` they run in this process (``InProcess``), for a debugger.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

from qaeval.core.errors import UsageError
from qaeval.core.settings import Settings
from qaeval.core.text import USER_TEXT_LIMIT
from qaeval.scoring.custom import (
    ATTRIBUTE,
    Outcomes,
    Registered,
    code_hash,
    registered_from_plain,
    sample_from_plain,
    valid_unit,
)
from qaeval.scoring.metrics import Metric
from qaeval.worker.hardening import harness_guard
from qaeval.worker.messages import MessageError
from qaeval.worker.plugins import UserCodeFailed, contained
from qaeval.worker.process import UserProcess

GROUPS = {"checks": "qaeval.checks", "metrics": "qaeval.metrics"}
MAX_LOST = 3


def installed(kind: str) -> list[str]:
    """The ``module:attr`` of every entry point in the ``qaeval.checks`` or ``qaeval.metrics`` group,
    sorted by name (metadata only: nothing is imported)."""
    return [ep.value for ep in sorted(metadata.entry_points(group=GROUPS[kind]), key=lambda e: (e.name, e.value))]


def specs(checks: Sequence[Any], metrics: Sequence[Any]) -> dict[str, list[dict[str, str]]]:
    """The specs a host builds from: those given, then the installed entry points (each once)."""
    from qaeval.host.clients import spec_of

    out: dict[str, list[dict[str, str]]] = {}
    for kind, given in (("checks", checks), ("metrics", metrics)):
        named = list(given) + [v for v in installed(kind) if v not in given]
        out[kind] = [spec_of(x, what=kind[:-1]) for x in named]
    return out


def reserved_names() -> set[str]:
    from qaeval.data.schema import AXES
    from qaeval.scoring.checks import CHECKS
    from qaeval.scoring.metrics import METRIC_NAMES, logged_keys
    from qaeval.scoring.outcomes import PER_CASE_SCHEMA
    from qaeval.scoring.trials import TRIAL_COLUMNS

    logged = {key for name in (*METRIC_NAMES, "pass_hat_k", "pass_at_k") for key in logged_keys(name)}
    agreement = {
        f"{kind}_{a}{suffix}"
        for a in AXES
        for kind in ("agreement", "kappa")
        for suffix in ("", "_ci_low", "_ci_high", "_n")
    }
    return {*CHECKS, *PER_CASE_SCHEMA, *TRIAL_COLUMNS, *logged, *agreement}


def declared(plain: Any) -> Registered:
    try:
        return registered_from_plain(plain, reserved_names())
    except ValueError as exc:
        raise UsageError(f"registered checks and metrics: {exc}") from None


# --------------------------------------------------------------------------- in the host (the user's code)


def _target(spec: Mapping[str, str], what: str) -> tuple[Any, str]:
    if "name" in spec:
        from qaeval.worker.plugins import resolve

        return resolve(spec["name"], what=what, want_callable=what == "check"), spec["name"]
    import base64

    import cloudpickle

    target = cloudpickle.loads(base64.b64decode(spec["pickle"]))
    return target, f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', type(target).__name__)}"


def build(spec: Mapping[str, Any]) -> tuple[list[Any], list[Metric], dict[str, Any]]:
    """(check functions, metrics, their declaration) from the specs; UsageError when one is not a check
    or a Metric."""
    checks, metrics = [], []
    plain: dict[str, list[dict[str, Any]]] = {"checks": [], "metrics": []}
    for s in spec["checks"]:
        fn, label = _target(s, "check")
        if not callable(fn):
            raise UsageError(f"check {label} is a {type(fn).__name__}, not a function")
        info = getattr(fn, ATTRIBUTE, None) or {"tier": None, "name": getattr(fn, "__name__", "")}
        checks.append(fn)
        plain["checks"].append(dict(name=info.get("name"), tier=info.get("tier"), sha256=code_hash(fn), source=label))
    for s in spec["metrics"]:
        m, label = _target(s, "metric")
        if not isinstance(m, Metric) or not callable(m.unit):
            raise UsageError(f"metric {label} is a {type(m).__name__}, not a qaeval.Metric with a unit function")
        metrics.append(m)
        plain["metrics"].append(
            dict(
                name=m.name,
                higher_is_better=m.higher_is_better,
                over=m.over,
                meaning=m.meaning,
                tolerance=m.tolerance,
                drift=m.drift,
                sha256=code_hash(m.unit),
                source=label,
            )
        )
    return checks, metrics, plain


def _check_result(ok: bool, value: Any, name: str) -> Any:
    if not ok:
        return {"error": value}
    if isinstance(value, bool):
        return [value, "passed" if value else "failed"]
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], bool) and isinstance(value[1], str):
        return [value[0], value[1].encode("utf-8", "backslashreplace").decode("utf-8")[:USER_TEXT_LIMIT]]
    return {"error": f"check {name} returned {type(value).__name__}, not True/False or (passed, reason)"}


def score(checks: Sequence[Any], metrics: Sequence[Metric], plain: Mapping[str, Any]) -> dict[str, Any]:
    """One case's reply: every check and metric run on it, each failure contained and described."""
    sample = sample_from_plain(plain)
    out: dict[str, list[Any]] = {"checks": [], "metrics": []}
    for fn in checks:
        name = str((getattr(fn, ATTRIBUTE, None) or {}).get("name") or getattr(fn, "__name__", "?"))
        if sample.error is not None:
            out["checks"].append({"error": "adapter error"})  # not run: the harness says why
            continue
        out["checks"].append(
            _check_result(*contained(fn, sample.case, sample.output, sample.passages, what=f"check {name}"), name)
        )
    for m in metrics:
        ok, value = contained(m.unit, sample, what=f"metric {m.name}")
        unit = valid_unit(value) if ok else None
        if unit is not None:
            out["metrics"].append(list(unit))
        else:
            out["metrics"].append(
                {
                    "error": value
                    if not ok
                    else f"metric {m.name} returned "
                    f"{_shown(value)}, not (numerator, denominator) with 0 <= numerator <= denominator"
                }
            )
    return out


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, (tuple, list, int, float)) else type(value).__name__
    return text[:80]


# --------------------------------------------------------------------------- the harness's side


class InProcess:
    """Checks and metrics run in this process (``isolation="none"``): nothing is enforced."""

    def __init__(self, spec: Mapping[str, list[dict[str, str]]]) -> None:
        ok, value = contained(build, spec, what="building the checks and metrics")
        if not ok:
            raise UsageError(value)
        self.checks, self.metrics, plain = value
        self.registered = declared(plain)

    def score(self, samples: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        rows = []
        for cid, plain in samples:
            ok, reply = contained(score, self.checks, self.metrics, plain, what="the checks")
            out = Outcomes(self.registered, cid)
            rows += out.decode(reply, plain["error"]) if ok else out.failed(reply)
        return rows

    def close(self) -> None:
        pass


class CustomProcess:
    """The registered checks and metrics in their own process, seen from the harness. ``keep_open``: set
    while a run streams its outputs to it one at a time (``qaeval.scoring.stream``), so the process and the
    count of cases lost in a row last from one ``score`` call to the next; otherwise each call ends with
    the process stopped."""

    keep_open = False
    stopped = False  # the run was interrupted: no process is started again

    def __init__(
        self,
        spec: Mapping[str, list[dict[str, str]]],
        *,
        timeout: float,
        startup: float,
        data_dir: str | os.PathLike[str] | None,
    ) -> None:
        from qaeval.host.clients import Launch

        self.spec, self.timeout, self.startup = dict(spec), timeout, startup
        self.launch = Launch(data_dir)
        self.proc: UserProcess | None = None
        self.lost_in_a_row, self.last_loss = 0, ""
        self._guard = contextlib.ExitStack()
        self._guard.enter_context(harness_guard())
        try:
            ready = self._start()
            self.registered = declared(ready.get("declared"))
        except UserCodeFailed as exc:
            self.close()
            raise UsageError(str(exc)) from None
        except BaseException:
            self.close()
            raise

    def new_trial(self) -> None:
        """Cases lost in a row are counted within one trial (one ``score`` call when not streaming)."""
        self.lost_in_a_row, self.last_loss = 0, ""

    def _start(self) -> dict[str, Any]:
        if self.stopped:
            raise UserCodeFailed("not asked: the run was interrupted")
        self.proc, ready = self.launch.start(
            "custom", self.spec, None, time.monotonic() + self.startup, what="the check runner", timeout=self.startup
        )
        if self.stopped:  # interrupted while it started: it is not left running
            self.close()
            raise UserCodeFailed("not asked: the run was interrupted")
        return ready

    def score(self, samples: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Every case's rows, in order; the process is stopped at the end (unless ``keep_open``)."""
        rows: list[dict[str, Any]] = []
        try:
            for cid, plain in samples:
                out = Outcomes(self.registered, cid)
                if self.lost_in_a_row >= MAX_LOST:
                    rows += out.failed(f"not asked: {self.lost_in_a_row} cases in a row were lost ({self.last_loss})")
                    continue
                reply, why = self._ask(plain)
                rows += out.decode(reply, plain["error"]) if not why else out.failed(why)
                self.lost_in_a_row, self.last_loss = (self.lost_in_a_row + 1, why) if why else (0, "")
        finally:
            if not self.keep_open:
                self.close()
        return rows

    def _ask(self, plain: dict[str, Any]) -> tuple[Any, str]:
        """(the reply, "") or (None, why the case and its process were lost)."""
        from qaeval.host.clients import lost

        deadline = time.monotonic() + self.timeout
        try:
            if self.proc is None:
                self._start()
                deadline = time.monotonic() + self.timeout  # starting has its own deadline
            assert self.proc is not None
            return self.proc.channel.ask({"score": plain}, deadline, what="the check runner"), ""
        except (UserCodeFailed, UsageError) as exc:
            return None, str(exc)
        except MessageError as exc:
            proc, self.proc = self.proc, None
            if proc is None:  # closed under it (the run was interrupted)
                return None, f"not asked: the check runner was stopped ({exc})"
            return None, lost(
                proc,
                exc,
                deadline,
                late=f"the checks and metrics did not finish within {self.timeout:g} s (--check-timeout)",
                doing="while checking",
            )

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.stop(0.5)
        self._guard.close()
        self.lost_in_a_row, self.last_loss = 0, ""


def make_custom(s: Settings) -> CustomProcess | InProcess | None:
    """The runner of a command's checks and metrics (its settings ``s``: check, metric, check_timeout,
    the run's isolation and startup_timeout, data), or None when none is given or installed."""
    spec = specs(s.check, s.metric)
    if not spec["checks"] and not spec["metrics"]:
        return None
    if s.run.isolation == "none":
        return InProcess(spec)
    return CustomProcess(spec, timeout=s.check_timeout, startup=s.run.startup_timeout, data_dir=s.data)


def close_custom(runner: Any) -> None:
    if runner is not None:
        runner.close()
