"""Registered checks and metrics, run out of process: the harness's side, and what the host does.

The checks and metrics given (``--check``, ``--metric``, or the API's ``check=``/``metric=``) and every entry
point of the ``qaeval.checks`` and ``qaeval.metrics`` groups (read from metadata, never imported here) run
together in one ``CustomProcess`` host, started as a custom judge's is, so none runs in the harness:

    harness -> host   {"setup": {"role": "custom", "spec": {"checks": [spec], "metrics": [spec]}, ...}}
    host -> harness   {"ready": true, "declared": {"checks": [...], "metrics": [...]}} or {"init_error": "..."}
    harness -> host   {"score": sample}  ->  {"checks": [[passed, reason] | {"error": why}],
                                              "metrics": [[num, den] | {"error": why}]}

Each case must be answered within ``timeout`` seconds (``--check-timeout``); a lost case fails every check
and metric with the reason and the next case gets a fresh process; after ``MAX_LOST`` cases lost in a row
the rest fail unasked. A name that does not resolve, something that is not a check or a ``Metric``, a bad
declaration or a built-in name is a usage error (exit 64). ``isolation="none"``: ``InProcess``."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

from qaeval.core.errors import UsageError
from qaeval.core.settings import Settings
from qaeval.core.text import USER_TEXT_LIMIT
from qaeval.host.clients import HostClient, spec_of
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
from qaeval.worker.plugins import contained

GROUPS = {"checks": "qaeval.checks", "metrics": "qaeval.metrics"}
MAX_LOST = 3


def installed(kind: str) -> list[str]:
    """The ``module:attr`` of every entry point in the ``qaeval.checks`` or ``qaeval.metrics`` group,
    sorted by name (metadata only: nothing is imported)."""
    return [ep.value for ep in sorted(metadata.entry_points(group=GROUPS[kind]), key=lambda e: (e.name, e.value))]


def specs(checks: Sequence[Any], metrics: Sequence[Any]) -> dict[str, list[dict[str, str]]]:
    """The specs a host builds from: those given, then the installed entry points (each once)."""
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


def _target(spec: Mapping[str, str], what: str) -> tuple[Any, str]:
    if "name" in spec:
        from qaeval.worker.plugins import resolve

        return resolve(spec["name"], what=what, want_callable=what == "check"), spec["name"]
    from qaeval.worker.plugins import unpickle

    target = unpickle(spec)
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
        said = {k: getattr(m, k) for k in ("name", "higher_is_better", "over", "meaning", "tolerance", "drift")}
        plain["metrics"].append(said | dict(sha256=code_hash(m.unit), source=label))
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
        ran = contained(fn, sample.case, sample.output, sample.passages, what=f"check {name}")
        out["checks"].append(_check_result(*ran, name))
    for m in metrics:
        ok, value = contained(m.unit, sample, what=f"metric {m.name}")
        unit = valid_unit(value) if ok else None
        if unit is not None:
            out["metrics"].append(list(unit))
        elif not ok:
            out["metrics"].append({"error": value})
        else:
            why = f"{_shown(value)}, not (numerator, denominator) with 0 <= numerator <= denominator"
            out["metrics"].append({"error": f"metric {m.name} returned {why}"})
    return out


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, (tuple, list, int, float)) else type(value).__name__
    return text[:80]


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


class CustomProcess(HostClient):
    """The registered checks and metrics in their own process, seen from the harness, asked one case at a
    time. ``keep_open``: set while a run streams its outputs to it (``qaeval.scoring.stream``), so the
    process and the count of cases lost in a row last from one ``score`` call to the next; otherwise each
    call ends with the process stopped."""

    role = "custom"
    what = "the check runner"
    doing = "while checking"
    late = "the checks and metrics did not finish within {timeout:g} s (--check-timeout)"
    interrupted = "not asked: the run was interrupted"
    unit, chunk, max_lost = "cases", 1, MAX_LOST
    keep_open = False

    def __init__(
        self,
        spec: Mapping[str, list[dict[str, str]]],
        *,
        timeout: float,
        startup: float,
        data_dir: str | os.PathLike[str] | None,
    ) -> None:
        super().__init__(dict(spec), settings=None, timeout=timeout, startup=startup, data_dir=data_dir)

    def take_ready(self, ready: dict[str, Any]) -> None:
        self.registered = declared(ready.get("declared"))

    def new_trial(self) -> None:
        """Cases lost in a row are counted within one trial (one ``score`` call when not streaming)."""
        self.lost_in_a_row, self.last_loss = 0, ""

    def score(self, samples: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Every case's rows, in order; the process is stopped at the end (unless ``keep_open``)."""
        try:
            return self.ask_all(samples)
        finally:
            if not self.keep_open:
                self.close()

    def request(self, chunk: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        return {"score": chunk[0][1]}

    def decode(self, reply: Any, chunk: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        cid, plain = chunk[0]
        return Outcomes(self.registered, cid).decode(reply, plain["error"])

    def errors(self, chunk: Sequence[tuple[str, dict[str, Any]]], why: str) -> list[dict[str, Any]]:
        return Outcomes(self.registered, chunk[0][0]).failed(why)

    def close(self) -> None:
        super().close()
        self.new_trial()


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
