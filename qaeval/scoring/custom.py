"""The user's own checks and metrics: how they are declared, what they are given, what comes back.

A **check** (``@qaeval.check``) is called with the case, the output and the passages it used and returns
``(passed, reason)`` or ``passed``; it also shows as a metric of its name (the share of cases passing).
A **metric** is a ``qaeval.Metric`` whose ``unit`` takes a ``Sample`` and returns the case's
``(numerator, denominator)``, 0 <= numerator <= denominator. Both run in a process of their own
(``qaeval.host.custom``), plain JSON crossing; whatever they do wrong for a case fails that case, with
the reason (a metric then counts its worst value), and is never a pass.

The outcomes are one frame, ``CUSTOM_SCHEMA``: one row per (case, check or metric) with ``kind``
(check or metric), ``blocks`` (a tier-1 check), ``passed``, ``reason`` and the case's unit ``num`` and
``den``. ``Registered`` is what ran: each name with its declaration and the sha256 of its code.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from qaeval.core.text import bounded_text
from qaeval.data.corpus import Passage
from qaeval.data.schema import GoldenCase, Source
from qaeval.scoring.metrics import CaseFacts, Metric, logged_keys
from qaeval.system.contract import Citation, SUTOutput

CUSTOM_SCHEMA = {
    "case_id": "text",
    "name": "text",
    "kind": "text",
    "blocks": "bool",
    "passed": "bool",
    "reason": "text",
    "num": "float",
    "den": "float",
}
NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
DECLARATION_LIMIT = 500
DRIFT_RULES = ("drop", "rise", "both")
ATTRIBUTE = "__qaeval_check__"


def check(fn: Callable[..., Any] | None = None, *, tier: int | None = None, name: str | None = None) -> Any:
    """Declare a check: ``@check`` (informational), ``@check(tier=1)`` (blocks the gate), and its name
    (default: the function's).

    Args:
        fn: The check, when used bare as ``@check``: called with ``(case, output, passages)``, it
            returns True when the case passes (or ``(passed, reason)``).
        tier: 1 when a failure blocks the gate, None (default) when the check is informational.
        name: The check's name in scoreboards and records (default: the function's name).

    Returns:
        The function itself, marked (or, without ``fn``, a decorator that marks one).

    Raises:
        ValueError: When ``tier`` is neither 1 nor None.
    """
    if tier not in (1, None):
        raise ValueError(f"a check's tier is 1 (blocks the gate) or None (informational), not {tier!r}")

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        setattr(f, ATTRIBUTE, {"tier": tier, "name": name or getattr(f, "__name__", "")})
        return f

    return mark(fn) if fn is not None else mark


@dataclass(frozen=True)
class Sample:
    """One case as a registered metric's ``unit`` sees it (a check is called with the first three).

    Attributes:
        case: The golden case, labels included.
        output: The system's ``SUTOutput`` for it.
        passages: ``{id: text}`` of the passages the system used.
        facts: What the four layers found (``CaseFacts``).
        error: The adapter's error when it failed (the output is then empty), else None.
    """

    case: GoldenCase
    output: Any
    passages: Mapping[str, str]
    facts: CaseFacts
    error: str | None = None


@dataclass(frozen=True)
class CheckSpec:
    name: str
    tier: int | None
    sha256: str
    source: str

    @property
    def blocks(self) -> bool:
        return self.tier == 1

    def metric(self) -> Metric:
        kind = "tier-1" if self.blocks else "informational"
        return Metric(self.name, True, "cases", f"cases passing the {kind} check {self.name}", unit=_stored)


@dataclass(frozen=True)
class MetricSpec:
    metric: Metric
    sha256: str
    source: str


def _stored(facts: CaseFacts) -> tuple[float, float]:
    raise TypeError("a registered check or metric is computed in its own process; its units are stored")


@dataclass(frozen=True)
class Registered:
    """The checks and metrics a run registered, in the order they ran."""

    checks: tuple[CheckSpec, ...] = ()
    metrics: tuple[MetricSpec, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.checks or self.metrics)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.checks] + [m.metric.name for m in self.metrics]

    def all_metrics(self) -> tuple[Metric, ...]:
        """What joins the scoreboard: a pass rate per check, then each registered metric."""
        return tuple(c.metric() for c in self.checks) + tuple(m.metric for m in self.metrics)

    def hashes(self) -> dict[str, str]:
        return {**{c.name: c.sha256 for c in self.checks}, **{m.metric.name: m.sha256 for m in self.metrics}}

    def to_plain(self) -> dict[str, Any]:
        return dict(
            checks=[asdict(c) for c in self.checks],
            metrics=[dict(_metric_plain(m.metric), sha256=m.sha256, source=m.source) for m in self.metrics],
        )

    def changes_since(self, then: Mapping[str, str]) -> list[str]:
        """What differs from an earlier set (``then``: its ``hashes()``): names added or removed, code changed."""
        now = self.hashes()
        out = [f"+{n}" for n in now if n not in then] + [f"-{n}" for n in then if n not in now]
        return out + [f"{n} (code changed)" for n in now if n in then and now[n] != then[n]]


NONE_REGISTERED = Registered()  # a run with no registered check or metric
DECLARED = ("name", "higher_is_better", "over", "meaning", "tolerance", "drift")  # a metric's fields a record keeps


def _metric_plain(m: Metric) -> dict[str, Any]:
    return {k: getattr(m, k) for k in DECLARED}


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise ValueError(
            f"{what} is named {bounded_text(value, 80)!r}: a name is lower-case letters, digits and _, "
            "starting with a letter, at most 64 characters"
        )
    return value


def _hash_and_source(plain: Mapping[str, Any], what: str) -> tuple[str, str]:
    sha, source = plain.get("sha256"), plain.get("source")
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha) or not isinstance(source, str):
        raise ValueError(f"{what} has no sha256 of its code or no source")
    return sha, bounded_text(source, 300)


def registered_from_plain(plain: Any, reserved: set[str]) -> Registered:
    """A ``Registered`` from JSON (a checks process's declaration, or a record's), checked field by field:
    ValueError saying what is wrong. ``reserved``: names a registered one may not take."""
    if not isinstance(plain, dict) or not all(isinstance(plain.get(k), list) for k in ("checks", "metrics")):
        raise ValueError("the declaration of checks and metrics is not an object with checks and metrics lists")
    checks = []
    for c in plain["checks"]:
        if not isinstance(c, dict) or c.get("tier") not in (1, None) or isinstance(c.get("tier"), bool):
            raise ValueError("a check's declaration is malformed (its tier is 1 or null)")
        checks.append(CheckSpec(_name(c.get("name"), "a check"), c["tier"], *_hash_and_source(c, "a check")))
    metrics = [MetricSpec(metric_from_plain(m), *_hash_and_source(m, "a metric")) for m in plain["metrics"]]
    done = Registered(tuple(checks), tuple(metrics))
    names = done.names
    others = {n: {k for m in names if m != n for k in logged_keys(m)} for n in set(names)}
    clash = sorted({n for n in names if n in reserved or names.count(n) > 1 or n in others[n]})
    if clash:
        raise ValueError(
            f"{', '.join(clash)}: a name taken by a built-in check, metric, column or logged key "
            "(such as faithfulness_rate_n), or registered twice"
        )
    return done


def metric_from_plain(m: Any) -> Metric:
    if not isinstance(m, dict):
        raise ValueError("a metric's declaration is not an object")
    name = _name(m.get("name"), "a metric")
    tol, drift = m.get("tolerance"), m.get("drift")
    if not isinstance(m.get("higher_is_better"), bool):
        raise ValueError(f"metric {name}: higher_is_better is not true or false")
    if not all(isinstance(m.get(k), str) and 0 < len(m[k]) <= DECLARATION_LIMIT for k in ("over", "meaning")):
        raise ValueError(f"metric {name}: over and meaning must be text of 1 to {DECLARATION_LIMIT} characters")
    if tol is not None and (
        isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < 0
    ):
        raise ValueError(f"metric {name}: its tolerance is {bounded_text(tol, 40)}, not null or a finite number >= 0")
    if drift not in DRIFT_RULES:
        raise ValueError(
            f"metric {name}: its drift rule is {bounded_text(drift, 40)}, not one of {', '.join(DRIFT_RULES)}"
        )
    return Metric(
        name,
        m["higher_is_better"],
        bounded_text(m["over"], DECLARATION_LIMIT),
        bounded_text(m["meaning"], DECLARATION_LIMIT),
        unit=_stored,
        tolerance=None if tol is None else float(tol),
        drift=drift,
    )


SENT = tuple(f.name for f in fields(SUTOutput))  # an output's fields a checks process is sent


def sample_to_plain(
    case: GoldenCase, out: Mapping[str, Any], bodies: Mapping[str, str], facts: CaseFacts
) -> dict[str, Any]:
    """What a checks process is sent for one case (JSON): the case with its labels, the output, the
    passages it used and the facts."""
    output = {k: out[k] for k in SENT}
    plain_facts = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(facts).items()}
    error = out.get("error")
    return dict(
        case=dict(case.to_raw(), sources=[asdict(s) for s in case.sources]),
        output=output,
        passages=dict(bodies),
        facts=plain_facts,
        error=error if isinstance(error, str) else None,
    )


def sample_from_plain(plain: Mapping[str, Any]) -> Sample:
    """The ``Sample`` a checks process builds from what it was sent (in that process)."""
    raw = plain["case"]
    case = GoldenCase(
        id=raw["id"],
        question=raw["question"],
        sources=tuple(Source(**s) for s in raw["sources"]),
        gold_answer=raw.get("gold_answer"),
        gold_source_ids=tuple(raw["gold_source_ids"]),
        expected_behavior=raw["expected_behavior"],
        difficulty=raw["difficulty"],
        split=raw["split"],
        adversarial=raw.get("adversarial"),
        checkpoints=tuple(raw.get("checkpoints") or ()),
    )
    o = dict(plain["output"])
    o.update(
        citations=[Citation(c["source_id"], c["claim"]) for c in o["citations"]],
        retrieved_ids=list(o["retrieved_ids"]),
        passages=[Passage(p["id"], p["text"], p.get("title")) for p in o["passages"]],
    )
    output = SUTOutput(**{k: o[k] for k in SENT})
    values: dict[str, Any] = {
        k: (math.nan if v is None and k in ("recall_at_k", "mrr") else v) for k, v in plain["facts"].items()
    }
    facts = CaseFacts(**values)
    return Sample(case, output, dict(plain["passages"]), facts, plain.get("error"))


@dataclass
class Outcomes:
    """The rows of ``CUSTOM_SCHEMA`` for one case, from what came back (checked strictly)."""

    registered: Registered
    case_id: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, name: str, kind: str, blocks: bool, passed: bool, reason: str, num: float, den: float) -> None:
        reason = bounded_text(reason, DECLARATION_LIMIT)
        self.rows.append(dict(zip(CUSTOM_SCHEMA, (self.case_id, name, kind, blocks, passed, reason, num, den))))

    def add_check(self, c: CheckSpec, passed: bool, reason: str) -> None:
        self.add(c.name, "check", c.blocks, passed, reason, float(passed), 1.0)

    def add_failed_metric(self, m: MetricSpec, why: str) -> None:
        self.add(m.metric.name, "metric", False, False, why, *worst(m.metric))

    def failed(self, why: str) -> list[dict[str, Any]]:
        """Every check and metric failed for this case, for one reason (an adapter error, a lost process)."""
        for c in self.registered.checks:
            self.add_check(c, False, why)
        for m in self.registered.metrics:
            self.add_failed_metric(m, why)
        return self.rows

    def decode(self, reply: Any, error: str | None) -> list[dict[str, Any]]:
        """One case's reply: ``{"checks": [[passed, reason] | {"error": why}], "metrics": [[num, den] |
        {"error": why}]}``; anything else fails the case's checks and metrics saying so."""
        if isinstance(reply, dict) and isinstance(reply.get("error"), str):
            return self.failed(reply["error"])
        sizes = {"checks": len(self.registered.checks), "metrics": len(self.registered.metrics)}
        if not isinstance(reply, dict) or any(
            not isinstance(reply.get(k), list) or len(reply[k]) != n for k, n in sizes.items()
        ):
            return self.failed("the checks' process sent a malformed reply")
        for c, got in zip(self.registered.checks, reply["checks"]):
            if error is not None:
                self.add_check(c, False, f"adapter error: {error}")
            elif isinstance(got, list) and len(got) == 2 and isinstance(got[0], bool) and isinstance(got[1], str):
                self.add_check(c, *got)
            else:
                self.add_check(c, False, _why(got, "check"))
        for m, got in zip(self.registered.metrics, reply["metrics"]):
            unit = valid_unit(got)
            if unit is None:
                self.add_failed_metric(m, _why(got, "metric"))
            else:
                self.add(m.metric.name, "metric", False, True, "", *unit)
        return self.rows


def _why(got: Any, what: str) -> str:
    if isinstance(got, dict) and isinstance(got.get("error"), str):
        return got["error"]
    return f"the {what}'s process sent a malformed result"


def worst(metric: Metric) -> tuple[float, float]:
    """The unit a metric counts for a case it failed on: its worst value, over one."""
    return (0.0, 1.0) if metric.higher_is_better else (1.0, 1.0)


def valid_unit(got: Any) -> tuple[float, float] | None:
    """(num, den) when ``got`` is two finite numbers with 0 <= num <= den, else None."""
    if (
        not isinstance(got, (list, tuple))
        or len(got) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in got)
    ):
        return None
    try:
        num, den = float(got[0]), float(got[1])
    except OverflowError:  # a whole number past any float (a check's process sent 400 digits)
        return None
    if not (math.isfinite(num) and math.isfinite(den)) or not 0.0 <= num <= den:
        return None
    return num, den


def code_hash(obj: Any) -> str:
    """sha256 of a check's or a metric unit's source (of its compiled code when the source is not to be
    had, as for a function shipped from a notebook)."""
    import marshal

    try:
        text = inspect.getsource(obj).encode()
    except (OSError, TypeError):
        try:
            text = marshal.dumps(obj.__code__)
        except (AttributeError, ValueError):
            text = repr(obj).encode()
    return hashlib.sha256(text).hexdigest()


def custom_reasons(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """Why a case fails by its registered checks and metrics: (kind, name, message) for each."""
    return [
        (
            r["kind"],
            r["name"],
            f"{r['name']}: {r['reason']}" if r["kind"] == "check" else f"metric {r['name']} failed: {r['reason']}",
        )
        for r in rows
        if not r["passed"]
    ]


def custom_units(
    by_case: Mapping[str, list[dict[str, Any]]], registered: Registered, case_ids: list[str]
) -> dict[str, list[tuple[float, float]]]:
    """{name: [(num, den) per case]} for every registered check and metric, in ``case_ids`` order."""
    found = {(cid, r["name"]): (r["num"], r["den"]) for cid, rows in by_case.items() for r in rows}
    return {name: [found[(cid, name)] for cid in case_ids] for name in registered.names}
