"""What every way of calling an adapter shares: naming it, starting a worker under the run's limits
(``RunSettings``), and reading a reply (untrusted plain data) into an outputs row."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from qaeval.core.errors import UsageError
from qaeval.core.settings import RunSettings
from qaeval.core.text import USER_TEXT_LIMIT
from qaeval.system.contract import output_row
from qaeval.system.validate import validate_plain
from qaeval.worker.messages import MessageError
from qaeval.worker.plugins import pickled
from qaeval.worker.process import UserProcess, child_launch
from qaeval.worker.serve import build_adapter, call_factory, is_adapter_object, is_factory

if TYPE_CHECKING:
    from qaeval.data.corpus import Corpus


@dataclass(frozen=True)
class AdapterSpec:
    """An adapter as the boundary carries it: a label for records, what a worker needs to build it,
    how to build it in this process, and the corpus a factory with a ``corpus`` parameter receives."""

    label: str
    wire: dict[str, str]
    build_here: Callable[[], Any]
    corpus: Corpus | None = None


def adapter_spec(adapter: Any, *, ship: bool, corpus: Corpus | None = None) -> AdapterSpec:
    """From a ``module:factory`` name, a zero-argument factory (or one taking ``corpus``), or an
    adapter object. With ``ship``, a factory or object is serialised with cloudpickle (as Dask does);
    one that cannot be is a usage error that suggests ``isolation="none"``."""
    if isinstance(adapter, str):
        return AdapterSpec(adapter, {"name": adapter}, lambda: build_adapter({"name": adapter}, corpus), corpus)
    if is_factory(adapter):  # a class too: its answer is a function that wants an instance
        label = f"{adapter_label(adapter)} (a factory)"
        build_here: Callable[[], Any] = lambda: build_adapter_from(adapter, corpus)  # noqa: E731  (the two ways to build, side by side)
    elif is_adapter_object(adapter):
        label = f"{adapter_label(adapter)} (an object)"
        build_here = lambda: adapter  # noqa: E731  (the two ways to build, side by side)
    else:
        raise UsageError(
            f"adapter must be a module:factory name, a zero-argument factory or an object with "
            f"answer(case); got {type(adapter).__name__}"
        )
    cannot = (
        "the adapter cannot be shipped to worker processes ({}); build it in the worker from a "
        "module:factory name or a zero-argument factory, or pass isolation='none' to run it in this process"
    )
    return AdapterSpec(label, pickled(adapter, cannot=cannot) if ship else {}, build_here, corpus)


def adapter_label(adapter: Any) -> str:
    """The adapter as a run records it: the name given, a factory's (or class's) module and name, else
    the object's class."""
    if isinstance(adapter, str):
        return adapter
    if is_factory(adapter):
        return f"{getattr(adapter, '__module__', '?')}.{getattr(adapter, '__qualname__', type(adapter).__qualname__)}"
    return f"{type(adapter).__module__}.{type(adapter).__qualname__}"


def build_adapter_from(factory: Callable[..., Any], corpus: Corpus | None = None) -> Any:
    adapter = call_factory(factory, corpus)
    if not is_adapter_object(adapter):
        raise UsageError(f"the adapter factory returned {type(adapter).__name__}, which has no answer(case) method")
    return adapter


Done = Callable[[int, dict[str, Any]], None]


def _bounded_logs(value: Any, limit: int) -> str:
    if not isinstance(value, str):
        return ""
    if len(value) <= limit:
        return value
    return f"[... {len(value) - limit} earlier characters dropped by the harness]\n" + value[-limit:]


def reply_row(case_id: str, reply: Any, latency: float, log_limit: int = USER_TEXT_LIMIT) -> dict[str, Any]:
    """A worker's reply (plain data, untrusted) as an outputs row. Every limit is enforced here again:
    the worker's own truncation is not trusted."""
    if not isinstance(reply, dict):
        return output_row(case_id, None, "the worker sent something that is not a reply", latency)
    logs = _bounded_logs(reply.get("logs"), log_limit)
    if "error" in reply:
        error = reply["error"] if isinstance(reply["error"], str) and reply["error"] else "adapter failed"
        if len(error) > USER_TEXT_LIMIT:
            error = error[:USER_TEXT_LIMIT] + f" [... {len(error) - USER_TEXT_LIMIT} more characters]"
        return output_row(case_id, None, error, latency, logs)
    fields, problems = validate_plain(reply.get("output"))
    if problems:
        return output_row(case_id, None, "malformed output: " + "; ".join(problems)[:USER_TEXT_LIMIT], latency, logs)
    return output_row(case_id, fields, None, latency, logs)


def worker_env(data_dir: str | None) -> tuple[dict[str, str], list[str]]:
    """The environment and sys.path a worker gets: nothing that names the data folder."""
    return child_launch(data_dir)


def spawn_worker(env: Mapping[str, str], message_limit: int) -> UserProcess:
    """A worker interpreter that has started and waits for its setup (no user code runs before it)."""
    try:
        return UserProcess("qaeval.worker.serve", env=env, limit=message_limit, what="the adapter's worker")
    except OSError as exc:
        raise UsageError(str(exc)) from None


def start_worker(spec: AdapterSpec, env: Mapping[str, str], sys_path: list[str], settings: RunSettings) -> UserProcess:
    """A new worker building the adapter, held to the run's reply limit (``max_reply_mb``) and, while it
    builds the adapter, to its ``startup_timeout``."""
    proc = spawn_worker(env, settings.max_reply_bytes)
    setup = {
        "adapter": spec.wire,
        "sys_path": sys_path,
        "log_limit": USER_TEXT_LIMIT,
        "message_limit": settings.max_reply_bytes,
    }
    if spec.corpus is not None:  # a link (or copy) in the worker's own scratch folder: no data folder path
        setup["corpus"] = str(spec.corpus.export(proc.scratch))
    try:
        proc.channel.send({"setup": setup}, time.monotonic() + settings.startup_timeout)
    except MessageError:
        pass  # it died already, or does not read: its start-up deadline or its closed socket says so
    return proc
