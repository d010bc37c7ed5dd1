"""Adapter calls on a ``concurrent.futures.Executor`` (a Dask cluster's). The executor runs
``answer_remote``, qaeval's own code; the adapter runs in a worker process ``RemoteWorkers`` starts beside
it under the local pool's rules, so the executor carries back JSON text qaeval wrote, checked here like a
socket reply."""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from qaeval.core.errors import UsageError, describe, install_extra
from qaeval.core.settings import RunSettings
from qaeval.data.cases import Suite
from qaeval.system.calls import USER_TEXT_LIMIT, AdapterSpec, Done, reply_row, start_worker, worker_env
from qaeval.system.contract import make_payload, output_row
from qaeval.worker.messages import MessageError, encode_case, parse
from qaeval.worker.process import UserProcess, stopped_because


class RemoteWorkers:
    """Adapter worker processes kept by one executor process (a Dask worker): built once per adapter,
    one per thread that asks, each case under its deadline. The executor's own process runs only this
    code, so what it returns is JSON text qaeval wrote, whatever the adapter does."""

    _shared: RemoteWorkers | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.idle: dict[str, list[UserProcess]] = {}

    @classmethod
    def shared(cls) -> RemoteWorkers:
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls()
                # When the executor's process ends, its idle workers are stopped and their scratch folders
                # removed: at interpreter exit, or (a multiprocessing child, as a Dask worker is, which skips
                # atexit) at the end of the child.
                atexit.register(cls._shared.close)
                from multiprocessing import util

                util.Finalize(cls._shared, cls._shared.close, exitpriority=10)
            return cls._shared

    def close(self) -> None:
        """Stop every idle worker and remove its scratch folder. Idempotent."""
        with self._lock:
            idle = [proc for procs in self.idle.values() for proc in procs]
            self.idle.clear()
        for proc in idle:
            proc.stop(0.2)

    def _take(self, spec_json: str, settings: RunSettings) -> UserProcess | tuple[str, bool]:
        """A started worker for the adapter, or why it could not start and whether that is a usage error
        (a factory that does not resolve: the message names the adapter)."""
        with self._lock:
            pool = self.idle.setdefault(spec_json, [])
            if pool:
                return pool.pop()
        env, sys_path = worker_env(None)
        spec = AdapterSpec("remote", json.loads(spec_json), lambda: None)
        proc = start_worker(spec, env, sys_path, settings)
        try:
            ready = _reply(proc, time.monotonic() + settings.startup_timeout)
        except MessageError as exc:
            return _lost(proc, exc, f"did not start within {settings.startup_timeout:g} s (--startup-timeout)"), False
        if not (isinstance(ready, dict) and ready.get("ready") is True):
            error = ready.get("init_error") if isinstance(ready, dict) else None
            proc.stop()
            usage = isinstance(ready, dict) and ready.get("usage") is True
            return (error if isinstance(error, str) and error else "no reason given")[:USER_TEXT_LIMIT], usage
        proc.started()
        return proc

    def ask(self, spec_json: str, payload: list[Any], settings: RunSettings) -> str:
        proc = self._take(spec_json, settings)
        if isinstance(proc, tuple):  # said apart, so the harness can refuse an adapter that never starts
            why, usage = proc
            return json.dumps(
                {
                    "id": payload[0],
                    "error": f"adapter could not start: {why}",
                    "not_started": {"why": why, "usage": usage},
                }
            )
        deadline = time.monotonic() + settings.timeout
        try:
            proc.channel.send_message(encode_case(_as_payload(payload)), deadline)
            reply = _reply(proc, deadline)
            if not isinstance(reply, dict) or reply.get("id") != payload[0]:
                raise MessageError("the worker sent a reply for another case")
        except MessageError as exc:
            why = _lost(proc, exc, f"timed out after {settings.timeout:g} s (its worker was stopped)", starting=False)
            return json.dumps({"id": payload[0], "error": why})
        with self._lock:
            self.idle.setdefault(spec_json, []).append(proc)
        return json.dumps(reply, allow_nan=False)


def _reply(proc: UserProcess, deadline: float) -> Any:
    """The worker's next message, parsed; MessageError when it breaks the protocol, exits or is late."""
    return parse(proc.channel.receive(deadline, ended=lambda: proc.popen.poll() is not None), what="the worker")


def _lost(proc: UserProcess, exc: MessageError, late: str, *, starting: bool = True) -> str:
    """Why a worker failed (``late`` when it missed its deadline), once it is killed and cleaned up."""
    why = late if exc.timed_out else stopped_because(proc, str(exc), closed=exc.closed, starting=starting)
    proc.end(0.5)
    return why


def _as_payload(sent: list[Any]) -> Any:
    """The payload ``make_payload`` made, as the executor handed it over (a list, its sources perhaps lists)."""
    opaque, question, sources = sent
    return opaque, question, tuple(tuple(source) for source in sources)


def answer_remote(
    spec_json: str, payload: list[Any], timeout: float, startup_timeout: float, max_reply_mb: float
) -> str:
    """One case on an executor's worker (a Dask worker): the adapter runs in a worker process of its own
    started from there (``RemoteWorkers``), never in the executor's process, so it cannot touch what the
    executor sends back. The run's limits travel as plain numbers, under their settings' names. Returns
    the reply as JSON text."""
    settings = RunSettings(timeout=timeout, startup_timeout=startup_timeout, max_reply_mb=max_reply_mb)
    return RemoteWorkers.shared().ask(spec_json, payload, settings)


def run_on_executor(
    executor: cf.Executor, spec: AdapterSpec, suite: Suite, settings: RunSettings, *, done: Done
) -> None:
    spec_json = json.dumps(spec.wire)
    pending: Iterator[tuple[int, Any]] = iter(enumerate(suite.cases))
    in_flight: dict[cf.Future[Any], tuple[int, str, str, float]] = {}
    # The executor side stops a case at its own deadline; this one only catches a lost executor worker.
    backstop = settings.timeout + settings.startup_timeout + 5.0
    exhausted = False
    started = False  # whether the adapter has answered a case yet (in any of the executor's workers)
    # An adapter that could not start, before any has answered: nothing more is handed out until the calls
    # in flight are back. One of them answering shows a worker that started (this one only failed its
    # case); none doing so refuses the run, as local workers do when none ever starts.
    doubt: tuple[str, bool] | None = None
    while True:
        while not exhausted and doubt is None and len(in_flight) < settings.concurrency:
            item = next(pending, None)
            if item is None:
                exhausted = True
                break
            index, case = item
            payload = make_payload(case)
            limits = (settings.timeout, settings.startup_timeout, settings.max_reply_mb)
            try:
                future = executor.submit(answer_remote, spec_json, list(payload), *limits)
            except Exception as exc:  # noqa: BLE001  (a shut-down or broken executor)
                done(index, output_row(case.id, None, f"the executor refused the call: {describe(exc)}", 0.0))
                continue
            in_flight[future] = (index, case.id, payload[0], time.perf_counter())
        if not in_flight:
            if doubt is not None:
                why, usage = doubt
                raise UsageError(
                    f"{why} (on the executor's workers)"
                    if usage
                    else f"adapter {spec.label} could not start on the executor's workers: {why}"
                )
            return
        now = time.perf_counter()
        first_deadline = min(t for *_, t in in_flight.values()) + backstop
        finished, _ = cf.wait(list(in_flight), timeout=max(0.0, first_deadline - now), return_when=cf.FIRST_COMPLETED)
        for future in finished:
            index, case_id, opaque, sent = in_flight.pop(future)
            row, not_started = _executor_row(future, case_id, opaque, time.perf_counter() - sent, settings)
            if isinstance(not_started, tuple) and not started:
                doubt = doubt or not_started
            elif not_started is False:
                started, doubt = True, None
            done(index, row)
        now = time.perf_counter()
        for future, (index, case_id, _, sent) in list(in_flight.items()):
            if now - sent >= backstop:
                future.cancel()
                del in_flight[future]
                why = f"the executor did not return the call within {backstop:g} s (it was abandoned)"
                done(index, output_row(case_id, None, why, now - sent))


def _executor_row(
    future: cf.Future[Any], case_id: str, opaque: str, latency: float, settings: RunSettings
) -> tuple[dict[str, Any], tuple[str, bool] | bool | None]:
    """The reply an executor returned (JSON text written by qaeval on the executor's side, checked like a
    socket reply) as an outputs row, and (why, whether a usage error) when it says the adapter could not
    start there, else False (None: no reply came back to say either way)."""
    try:
        text = future.result()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return output_row(case_id, None, f"the executor failed the call: {describe(exc)}", latency), None
    if not isinstance(text, str) or len(text) > settings.max_reply_bytes:
        return output_row(
            case_id, None, "the executor returned something that is not a reply within the limits", latency
        ), None
    try:
        reply = parse(text.encode("utf-8", "surrogatepass"), what="the executor")
    except MessageError as exc:
        return output_row(case_id, None, str(exc), latency), None
    if not isinstance(reply, dict) or reply.get("id") != opaque:
        return output_row(case_id, None, "the executor returned a reply for another case", latency), None
    found = reply.get("not_started")
    not_started = (
        (found["why"], found["usage"])
        if (isinstance(found, dict) and isinstance(found.get("why"), str) and isinstance(found.get("usage"), bool))
        else False
    )
    return reply_row(case_id, reply, latency, USER_TEXT_LIMIT), not_started


def executor_from_url(url: str) -> tuple[cf.Executor, Callable[[], None]]:
    """``dask://HOST:PORT`` -> (an executor on that Dask scheduler, a function that closes it)."""
    if not url.startswith("dask://"):
        raise UsageError(f"executor must be dask://HOST:PORT, got {url!r}")
    try:
        from distributed import Client
    except ImportError:
        raise UsageError(f"--executor dask:// needs the distributed package: {install_extra('dask')}") from None
    try:
        client = Client("tcp://" + url.removeprefix("dask://"), timeout="10s")
    except Exception as exc:  # noqa: BLE001  (whatever the client raises means the scheduler cannot be reached)
        raise UsageError(f"cannot reach the Dask scheduler at {url}: {describe(exc)}") from None
    return client.get_executor(), client.close
