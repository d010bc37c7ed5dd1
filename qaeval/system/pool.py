"""Driving a system adapter over a suite: isolated, concurrent, and every fault contained.

``run_suite(suite, adapter)`` asks the adapter for every case and returns one row per case, in suite
order, whatever order they finished in. Three ways to carry the calls:

isolation="process" (the default)
    ``concurrency`` worker processes, each a fresh interpreter (``qaeval.system.worker``) that builds
    the adapter once and answers the cases it is handed. A worker is sent only what the system may
    see (an opaque id, the question, the sources); every label stays in this process. Its argv names
    no data, its environment loses every variable that names the data folder, its working directory
    is not inside it. Results come back as JSON over a socket and are validated here; nothing from a
    worker is ever unpickled. A case that runs past ``timeout`` has its worker killed (with anything
    it started) and replaced; a worker that raises, exits (``sys.exit``, ``os._exit``) or crashes
    costs only the case it held, with the reason. What the adapter prints is captured per case
    (``logs``, the last ``LOG_LIMIT`` characters) and never reaches this process's output.
executor=...
    The same calls submitted to any ``concurrent.futures.Executor`` (a Dask cluster's, for
    scale-out), ``concurrency`` at a time. A timeout there abandons the call: the case is recorded as
    timed out, but an executor cannot kill a running task, so its worker stays busy until the adapter
    returns. Only Python-level output is captured.
isolation="none"
    In this process, on ``concurrency`` daemon threads, for stepping through an adapter under a
    debugger. Nothing is enforced: the adapter shares this process's memory, a timeout abandons its
    thread, and ``os._exit`` ends the harness. Every output of such a run says so.

Why not a pool library: multiprocessing-based pools hand each worker the parent's ``sys.argv`` and
import the parent's ``__main__`` into it, unpickle whatever a worker sends back, and either break the
whole pool when one worker dies (``concurrent.futures``, loky) or lose a task whose worker exits with
status 0 until its timeout (pebble). The boundary is the product's promise, so it is built here, on
``subprocess`` and ``multiprocessing.connection``.
"""

from __future__ import annotations

import base64
import concurrent.futures as cf
import contextlib
import io
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from qaeval.data.cases import Suite
from qaeval.errors import UsageError, describe
from qaeval.frames import frame
from qaeval.plugins import progress_bar
from qaeval.system.contract import (
    OUTPUT_SCHEMA, Payload, make_payload, output_row, validate_plain,
)
from qaeval.system.process import (
    DEFAULT_FRAME_LIMIT, FrameError, UserProcess, confined_env, exit_reason, harness_guard, hidden_folders, parse,
    scrub_sys_path,
)
from qaeval.system.worker import Caller, answer_one, build_adapter

LOG_LIMIT = 2000
ERROR_LIMIT = 2000
STOP_GRACE = 1.0
DEFAULT_STARTUP_TIMEOUT = 120.0
ISOLATIONS = ("process", "none")



# --------------------------------------------------------------------------- naming the adapter


@dataclass(frozen=True)
class AdapterSpec:
    """An adapter as the boundary carries it: a label for records, what a worker needs to build it,
    and how to build it in this process."""

    label: str
    wire: dict[str, str]
    build_here: Callable[[], Any]


def adapter_spec(adapter: Any, *, ship: bool) -> AdapterSpec:
    """From a ``module:factory`` name, a zero-argument factory, or an adapter object. With ``ship``,
    a factory or object is serialised with cloudpickle (as Dask does); one that cannot be is a usage
    error that suggests ``isolation="none"``."""
    if isinstance(adapter, str):
        return AdapterSpec(adapter, {"name": adapter}, lambda: build_adapter({"name": adapter}))
    if callable(getattr(adapter, "answer", None)):
        label = f"{type(adapter).__module__}.{type(adapter).__qualname__} (an object)"
        build_here: Callable[[], Any] = lambda: adapter  # noqa: E731
    elif callable(adapter):
        label = f"{getattr(adapter, '__module__', '?')}.{getattr(adapter, '__qualname__', repr(adapter))} (a factory)"
        build_here = lambda: build_adapter_from(adapter)  # noqa: E731
    else:
        raise UsageError(f"adapter must be a module:factory name, a zero-argument factory or an object with "
                         f"answer(case); got {type(adapter).__name__}")
    wire: dict[str, str] = {}
    if ship:
        import cloudpickle

        try:
            blob = cloudpickle.dumps(adapter)
        except Exception as exc:  # noqa: BLE001
            raise UsageError(f"the adapter cannot be shipped to worker processes ({describe(exc)}); build it in "
                             "the worker from a module:factory name or a zero-argument factory, or pass "
                             "isolation='none' to run it in this process") from None
        wire = {"pickle": base64.b64encode(blob).decode()}
    return AdapterSpec(label, wire, build_here)


def build_adapter_from(factory: Callable[[], Any]) -> Any:
    adapter = factory()
    if not callable(getattr(adapter, "answer", None)):
        raise UsageError(f"the adapter factory returned {type(adapter).__name__}, which has no answer(case) method")
    return adapter


# --------------------------------------------------------------------------- results


Done = Callable[[int, dict[str, Any]], None]


def _bounded_logs(value: Any, limit: int) -> str:
    if not isinstance(value, str):
        return ""
    if len(value) <= limit:
        return value
    return f"[... {len(value) - limit} earlier characters dropped by the harness]\n" + value[-limit:]


def _reply_row(case_id: str, reply: Any, latency: float, log_limit: int = LOG_LIMIT) -> dict[str, Any]:
    """A worker's reply (plain data, untrusted) as an outputs row. Every limit is enforced here again:
    the worker's own truncation is not trusted."""
    if not isinstance(reply, dict):
        return output_row(case_id, None, "the worker sent something that is not a reply", latency)
    logs = _bounded_logs(reply.get("logs"), log_limit)
    if "error" in reply:
        error = reply["error"] if isinstance(reply["error"], str) and reply["error"] else "adapter failed"
        if len(error) > ERROR_LIMIT:
            error = error[:ERROR_LIMIT] + f" [... {len(error) - ERROR_LIMIT} more characters]"
        return output_row(case_id, None, error, latency, logs)
    fields, problems = validate_plain(reply.get("output"))
    if problems:
        return output_row(case_id, None, "malformed output: " + "; ".join(problems)[:ERROR_LIMIT], latency, logs)
    return output_row(case_id, fields, None, latency, logs)


# --------------------------------------------------------------------------- worker processes


@dataclass(frozen=True)
class Limits:
    """What one case may take and send back. ``timeout``: seconds per case; ``startup``: seconds for a
    worker to build the adapter; ``frame``: bytes in one reply; ``logs``: characters of output kept."""

    timeout: float = 60.0
    startup: float = DEFAULT_STARTUP_TIMEOUT
    frame: int = DEFAULT_FRAME_LIMIT
    logs: int = LOG_LIMIT


def _worker_env(data_dir: str | None) -> tuple[dict[str, str], list[str]]:
    """The environment and sys.path a worker gets: nothing that names the data folder."""
    folders = hidden_folders(data_dir)
    env = confined_env(os.environ, folders)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env, scrub_sys_path(sys.path, folders, os.getcwd())


def _start_worker(spec: AdapterSpec, env: Mapping[str, str], sys_path: list[str], limits: Limits) -> UserProcess:
    try:
        proc = UserProcess("qaeval.system.worker", env=env, limit=limits.frame, what="the adapter's worker")
    except OSError as exc:
        raise UsageError(str(exc)) from None
    setup = {"adapter": spec.wire, "sys_path": sys_path, "log_limit": limits.logs, "frame_limit": limits.frame}
    try:
        proc.channel.send({"setup": setup}, time.monotonic() + limits.startup)
    except FrameError:
        pass  # it died already, or does not read: its start-up deadline or its closed socket says so
    return proc


class _Worker:
    __slots__ = ("proc", "state", "index", "case_id", "opaque", "deadline", "sent_at", "answered")

    def __init__(self, proc: UserProcess, startup: float) -> None:
        self.proc = proc
        self.state = "starting"
        self.index, self.case_id, self.opaque = -1, "", ""
        self.deadline = time.monotonic() + startup
        self.sent_at = 0.0
        self.answered: tuple[int, str, str] | None = None  # (index, case id, opaque id) of its last answer

    def fileno(self) -> int:
        return self.proc.fileno()


class ProcessPool:
    """Worker processes for one run (see the module docstring)."""

    def __init__(self, spec: AdapterSpec, *, size: int, limits: Limits, data_dir: str | None) -> None:
        self.spec, self.size, self.limits = spec, size, limits
        self.env, self.sys_path = _worker_env(data_dir)

    def run(self, suite: Suite, done: Done) -> None:
        with harness_guard():
            _PoolRun(self, suite, done).go()


class _PoolRun:
    """One pass of a pool over a suite: hand cases to idle workers, read replies as they arrive, enforce
    every deadline, replace what failed."""

    def __init__(self, pool: ProcessPool, suite: Suite, done: Done) -> None:
        self.pool, self.limits, self.done = pool, pool.limits, done
        self.cases = iter(enumerate(suite.cases))
        self.undispatched = self.remaining = len(suite)
        self.workers: list[_Worker] = []
        self.ever_ready = False
        self.start_failures = 0
        self.last_start_error = ""

    def go(self) -> None:
        try:
            for _ in range(min(self.pool.size, self.remaining)):
                self.start()
            while self.remaining > 0:
                self.dispatch()
                if not self.workers:  # no worker could be started: the cases left cannot be answered
                    self.fail_undispatched()
                    return
                self.wait()
                self.expire()
        finally:
            self.shutdown()

    # ---- workers coming and going

    def start(self) -> None:
        proc = _start_worker(self.pool.spec, self.pool.env, self.pool.sys_path, self.limits)
        self.workers.append(_Worker(proc, self.limits.startup))

    def retire(self, w: _Worker, reason: str) -> None:
        """Stop a worker for good; its case (if it held one) fails with ``reason``; start another while
        there are cases left to hand out."""
        if w.state == "busy":
            self.finish(w, output_row(w.case_id, None, reason, time.perf_counter() - w.sent_at))
        elif w.state == "starting":
            self.start_failures += 1
            self.last_start_error = reason
        w.proc.kill()
        w.proc.reap(0.5)
        w.proc.close()
        self.workers.remove(w)
        if self.undispatched and self.start_failures <= 2 * self.pool.size:
            self.start()

    def shutdown(self) -> None:
        for w in list(self.workers):  # a reply that arrived with or after the last answer is still checked
            if w.state == "idle":
                self.read(w)
        deadline = time.monotonic() + STOP_GRACE
        for w in self.workers:
            with contextlib.suppress(FrameError):
                w.proc.channel.send({"stop": True}, time.monotonic() + 0.1)
        for w in self.workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.proc.popen.wait(max(0.0, deadline - time.monotonic()))
            w.proc.kill()  # the group too: nothing the adapter started outlives the run
            w.proc.reap(1.0)
            w.proc.close()

    def fail_undispatched(self) -> None:
        reason = f"the adapter could not start in a worker: {self.last_start_error or 'no reason given'}"
        for index, case in self.cases:
            self.done(index, output_row(case.id, None, reason, 0.0))

    # ---- cases going out and answers coming back

    def dispatch(self) -> None:
        for w in self.workers:
            if w.state != "idle" or not self.undispatched:
                continue
            w.index, case = next(self.cases)
            self.undispatched -= 1
            payload: Payload = make_payload(case)
            w.case_id, w.opaque = case.id, payload[0]
            w.state, w.sent_at = "busy", time.perf_counter()
            w.deadline = time.monotonic() + self.limits.timeout
            with contextlib.suppress(FrameError):  # a worker that has gone or stopped reading: see expire()
                w.proc.channel.send({"case": payload}, w.deadline)

    def finish(self, w: _Worker, row: dict[str, Any]) -> None:
        self.done(w.index, row)
        self.remaining -= 1
        w.answered = (w.index, w.case_id, w.opaque)
        w.state, w.index = "idle", -1

    def wait(self) -> None:
        from multiprocessing.connection import wait

        now = time.monotonic()
        deadlines = [w.deadline for w in self.workers if w.state in ("starting", "busy")]
        timeout = min(0.5, max(0.0, min(deadlines) - now)) if deadlines else 0.5
        for w in wait(list(self.workers), timeout=timeout):
            if w in self.workers:
                self.read(w)  # type: ignore[arg-type]

    def read(self, w: _Worker) -> None:
        try:
            frames = w.proc.channel.pump()
        except FrameError as exc:
            self.broken(w, str(exc))
            return
        for raw in frames:
            try:
                message = parse(raw, what="the worker")
            except FrameError as exc:
                self.retire(w, f"{exc} (it was stopped)")
                return
            self.handle(w, message)
            if w not in self.workers:
                return
        if w.proc.channel.closed and w in self.workers:
            self.broken(w, "closed its end")

    def broken(self, w: _Worker, reason: str) -> None:
        """The worker's socket closed, or it broke the framing."""
        if w.proc.channel.closed:
            code = w.proc.reap(0.5)
            if w.state == "starting":
                detail = w.proc.stderr_tail()
                reason = f"worker {exit_reason(code)} before the adapter was built" + (f": {detail}" if detail else "")
            else:
                reason = f"adapter process {exit_reason(code)}"
        else:
            reason = f"{reason} (it was stopped)"
        self.retire(w, reason)

    def handle(self, w: _Worker, message: Any) -> None:
        if w.state == "starting":
            self.on_setup_reply(w, message)
            return
        answers = message.get("id") if isinstance(message, dict) else None
        if w.state == "busy" and answers == w.opaque:
            self.finish(w, _reply_row(w.case_id, message, time.perf_counter() - w.sent_at, self.limits.logs))
            return
        if w.answered is not None and answers == w.answered[2]:  # a second reply to a case it already answered
            index, case_id, _ = w.answered
            self.done(index, output_row(case_id, None, "its worker sent a second reply for it (it was stopped)", 0.0))
        why = "a reply for a case it was not asked" if w.state == "busy" else "a reply nobody asked for"
        self.retire(w, f"its worker sent {why} (it was stopped)")

    def on_setup_reply(self, w: _Worker, message: Any) -> None:
        if isinstance(message, dict) and message.get("ready") is True:
            w.state = "idle"
            w.proc.started()
            self.ever_ready = True
            return
        error = message.get("init_error") if isinstance(message, dict) else None
        error = error[:ERROR_LIMIT] if isinstance(error, str) and error else "the worker could not build the adapter"
        if not self.ever_ready:
            usage = isinstance(message, dict) and message.get("usage") is True
            raise UsageError(error if usage else f"adapter {self.pool.spec.label}: {error}")
        self.retire(w, error)

    def expire(self) -> None:
        now = time.monotonic()
        for w in [w for w in self.workers if w.state in ("starting", "busy") and now >= w.deadline]:
            if w.state == "busy":
                self.retire(w, f"timed out after {self.limits.timeout:g} s (its worker was stopped and replaced)")
            elif not self.ever_ready:
                raise UsageError(f"adapter {self.pool.spec.label} did not start: its factory had not returned "
                                 f"after {self.limits.startup:g} s (--startup-timeout), so its worker was stopped")
            else:
                self.retire(w, f"a replacement worker did not start within {self.limits.startup:g} s")
        for w in [w for w in self.workers if w.proc.popen.poll() is not None]:
            self.read(w)  # what it sent before it went
            if w in self.workers:
                self.broken(w, "exited")


# --------------------------------------------------------------------------- an executor (Dask)


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
            return cls._shared

    def _take(self, spec_json: str, limits: Limits) -> UserProcess | str:
        with self._lock:
            pool = self.idle.setdefault(spec_json, [])
            if pool:
                return pool.pop()
        env, sys_path = _worker_env(None)
        spec = AdapterSpec("remote", json.loads(spec_json), lambda: None)
        proc = _start_worker(spec, env, sys_path, limits)
        try:
            ready = parse(proc.channel.receive(time.monotonic() + limits.startup), what="the worker")
        except FrameError as exc:
            proc.kill()
            proc.reap(0.5)
            detail = proc.stderr_tail()
            proc.close()
            return f"adapter could not start: {exc}" + (f": {detail}" if detail else "")
        if not (isinstance(ready, dict) and ready.get("ready") is True):
            error = ready.get("init_error") if isinstance(ready, dict) else None
            proc.stop()
            return f"adapter could not start: {error if isinstance(error, str) else 'no reason given'}"[:ERROR_LIMIT]
        proc.started()
        return proc

    def ask(self, spec_json: str, payload: list[Any], *, timeout: float, startup_timeout: float,
            frame_limit: int) -> str:
        limits = Limits(timeout=timeout, startup=startup_timeout, frame=frame_limit)
        proc = self._take(spec_json, limits)
        if isinstance(proc, str):
            return json.dumps({"id": payload[0], "error": proc})
        deadline = time.monotonic() + timeout
        try:
            proc.channel.send({"case": payload}, deadline)
            reply = parse(proc.channel.receive(deadline), what="the worker")
            if not isinstance(reply, dict) or reply.get("id") != payload[0]:
                raise FrameError("the worker sent a reply for another case")
        except FrameError as exc:
            proc.kill()
            code = proc.reap(0.5)
            proc.close()
            why = f"timed out after {timeout:g} s (its worker was stopped)" if "in time" in str(exc) else \
                f"adapter process {exit_reason(code)}" if proc.channel.closed else f"{exc} (it was stopped)"
            return json.dumps({"id": payload[0], "error": why})
        with self._lock:
            self.idle.setdefault(spec_json, []).append(proc)
        return json.dumps(reply, allow_nan=False)


def answer_remote(spec_json: str, payload: list[Any], timeout: float, startup_timeout: float, frame_limit: int) -> str:
    """One case on an executor's worker (a Dask worker): the adapter runs in a worker process of its own
    started from there (``RemoteWorkers``), never in the executor's process, so it cannot touch what the
    executor sends back. Returns the reply as JSON text."""
    return RemoteWorkers.shared().ask(spec_json, payload, timeout=timeout, startup_timeout=startup_timeout,
                                      frame_limit=frame_limit)


def _run_on_executor(executor: cf.Executor, spec: AdapterSpec, suite: Suite, *, concurrency: int,
                     limits: Limits, done: Done) -> None:
    spec_json = json.dumps(spec.wire)
    pending: Iterator[tuple[int, Any]] = iter(enumerate(suite.cases))
    in_flight: dict[cf.Future[Any], tuple[int, str, str, float]] = {}
    # The executor side stops a case at its own deadline; this one only catches a lost executor worker.
    backstop = limits.timeout + limits.startup + 5.0
    exhausted = False
    while True:
        while not exhausted and len(in_flight) < concurrency:
            item = next(pending, None)
            if item is None:
                exhausted = True
                break
            index, case = item
            payload = make_payload(case)
            try:
                future = executor.submit(answer_remote, spec_json, list(payload), limits.timeout, limits.startup,
                                         limits.frame)
            except Exception as exc:  # noqa: BLE001  (a shut-down or broken executor)
                done(index, output_row(case.id, None, f"the executor refused the call: {describe(exc)}", 0.0))
                continue
            in_flight[future] = (index, case.id, payload[0], time.perf_counter())
        if not in_flight:
            return
        now = time.perf_counter()
        first_deadline = min(t for *_, t in in_flight.values()) + backstop
        finished, _ = cf.wait(list(in_flight), timeout=max(0.0, first_deadline - now),
                              return_when=cf.FIRST_COMPLETED)
        for future in finished:
            index, case_id, opaque, sent = in_flight.pop(future)
            done(index, _executor_row(future, case_id, opaque, time.perf_counter() - sent, limits))
        now = time.perf_counter()
        for future, (index, case_id, _, sent) in list(in_flight.items()):
            if now - sent >= backstop:
                future.cancel()
                del in_flight[future]
                done(index, output_row(case_id, None, f"the executor did not return the call within {backstop:g} s "
                                       "(it was abandoned)", now - sent))


def _executor_row(future: cf.Future[Any], case_id: str, opaque: str, latency: float, limits: Limits) -> dict[str, Any]:
    """The reply an executor returned: JSON text written by qaeval on the executor's side, checked like
    a socket reply."""
    try:
        text = future.result()
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        return output_row(case_id, None, f"the executor failed the call: {describe(exc)}", latency)
    if not isinstance(text, str) or len(text) > limits.frame:
        return output_row(case_id, None, "the executor returned something that is not a reply within the limits",
                          latency)
    try:
        reply = parse(text.encode("utf-8", "surrogatepass"), what="the executor")
    except FrameError as exc:
        return output_row(case_id, None, str(exc), latency)
    if not isinstance(reply, dict) or reply.get("id") != opaque:
        return output_row(case_id, None, "the executor returned a reply for another case", latency)
    return _reply_row(case_id, reply, latency, limits.logs)


def executor_from_url(url: str) -> tuple[cf.Executor, Callable[[], None]]:
    """``dask://HOST:PORT`` -> (an executor on that Dask scheduler, a function that closes it)."""
    if not url.startswith("dask://"):
        raise UsageError(f"executor must be dask://HOST:PORT, got {url!r}")
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("--executor dask:// needs the dask extra: pip install 'qaeval-harness[dask]'") from None
    try:
        client = Client("tcp://" + url.removeprefix("dask://"), timeout="10s")
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"cannot reach the Dask scheduler at {url}: {describe(exc)}") from None
    return client.get_executor(), client.close


# --------------------------------------------------------------------------- in this process


class _ThreadOutput(io.TextIOBase):
    """Stands in for sys.stdout/sys.stderr during an in-process run: writes from an adapter's thread go
    to that thread's buffer, everything else to the real stream."""

    def __init__(self, real: Any, buffers: dict[int, io.StringIO]) -> None:
        self.real, self.buffers = real, buffers

    def write(self, text: str) -> int:
        buffer = self.buffers.get(threading.get_ident())
        if buffer is None:
            return self.real.write(text)
        return buffer.write(text)

    def flush(self) -> None:
        if threading.get_ident() not in self.buffers:
            self.real.flush()

    def isatty(self) -> bool:
        return bool(getattr(self.real, "isatty", lambda: False)())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.real, "encoding", "utf-8")


def _run_in_process(spec: AdapterSpec, suite: Suite, *, concurrency: int, timeout: float, done: Done) -> None:
    try:
        adapter = spec.build_here()
    except UsageError:
        raise
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise UsageError(f"adapter {spec.label}: the factory {describe(exc)}") from None
    if not callable(getattr(adapter, "answer", None)):
        raise UsageError(f"the adapter ({type(adapter).__name__}) has no answer(case) method")
    jobs: queue.SimpleQueue[tuple[int, str, Payload] | None] = queue.SimpleQueue()
    results: queue.SimpleQueue[tuple[int, dict[str, Any], str]] = queue.SimpleQueue()
    started: dict[int, tuple[str, float]] = {}
    buffers: dict[int, io.StringIO] = {}

    def loop() -> None:
        call = Caller(adapter)
        buffer = buffers[threading.get_ident()] = io.StringIO()
        while True:
            job = jobs.get()
            if job is None:
                return
            index, case_id, payload = job
            started[index] = (case_id, time.perf_counter())
            reply = answer_one(call, payload)
            text = buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
            results.put((index, reply, text[-LOG_LIMIT:]))

    def spawn() -> None:
        threading.Thread(target=loop, daemon=True, name="qaeval-adapter").start()

    real_out, real_err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _ThreadOutput(real_out, buffers), _ThreadOutput(real_err, buffers)
    remaining = len(suite)
    recorded: set[int] = set()
    try:
        for index, case in enumerate(suite.cases):
            jobs.put((index, case.id, make_payload(case)))
        for _ in range(min(concurrency, remaining)):
            spawn()
        while remaining:
            try:
                index, reply, logs = results.get(timeout=0.05)
            except queue.Empty:
                now = time.perf_counter()
                for i, (case_id, t0) in list(started.items()):
                    if i not in recorded and now - t0 >= timeout:
                        recorded.add(i)
                        remaining -= 1
                        done(i, output_row(case_id, None, f"timed out after {timeout:g} s (isolation none: its "
                                           "thread was abandoned, not stopped)", now - t0))
                        spawn()  # the stuck thread keeps its slot busy; add one in its place
                continue
            if index in recorded:
                continue
            recorded.add(index)
            remaining -= 1
            case_id, t0 = started[index]
            done(index, _reply_row(case_id, json.loads(json.dumps(reply)), time.perf_counter() - t0)
                 | {"logs": logs})
    finally:
        sys.stdout, sys.stderr = real_out, real_err
        for _ in range(concurrency + len(suite)):
            jobs.put(None)


# --------------------------------------------------------------------------- the runner


def run_suite(suite: Suite, adapter: Any, *, timeout: float = 60.0, concurrency: int = 4,
              isolation: str = "process", executor: cf.Executor | None = None,
              show_progress: bool | None = None, data_dir: str | None = None,
              startup_timeout: float = DEFAULT_STARTUP_TIMEOUT, max_reply_bytes: int = DEFAULT_FRAME_LIMIT) -> pd.DataFrame:
    """Ask the adapter for every case of the suite.

    ``adapter`` is a ``module:factory`` name, a zero-argument factory or an adapter object. A worker that
    has not built the adapter within ``startup_timeout`` seconds is stopped (a usage error when none
    ever started); a reply over ``max_reply_bytes`` stops its worker and fails its case. Returns one row
    per case, in suite order:

    ==================  ==================================================================
    case_id             readable case id (the adapter only ever saw an opaque one)
    answer              answer text ("" on abstention or error)
    citations           list of {source_id, claim}
    retrieved_ids       list of source ids, best first
    abstained           bool
    model_was_called    bool
    prompt_to_model     str or None
    computed_aggregate  number, str or None
    error               None, or why the case failed: raised, exited, crashed, timed out, malformed
    latency_s           seconds from handing the case over to having its answer
    logs                the last characters the adapter printed while answering this case
    output_fingerprint  hash of answer, citations, abstention and error (what a labeller saw)
    ==================  ==================================================================
    """
    if isolation not in ISOLATIONS:
        raise UsageError(f"isolation must be one of {', '.join(ISOLATIONS)}, got {isolation!r}")
    if executor is not None and isolation == "none":
        raise UsageError("an executor runs calls out of process; it cannot be combined with isolation='none'")
    spec = adapter_spec(adapter, ship=isolation == "process")
    limits = Limits(timeout=timeout, startup=startup_timeout, frame=max_reply_bytes)
    rows: list[dict[str, Any] | None] = [None] * len(suite)
    with progress_bar(len(suite), desc="cases", enabled=show_progress) as bar:
        def done(index: int, row: dict[str, Any]) -> None:
            if rows[index] is None:
                bar.update()
            rows[index] = row  # a later row for the same case is a failure found after it was answered

        if executor is not None:
            _run_on_executor(executor, spec, suite, concurrency=concurrency, limits=limits, done=done)
        elif isolation == "process":
            ProcessPool(spec, size=concurrency, limits=limits,
                        data_dir=data_dir if data_dir is not None else suite.root).run(suite, done)
        else:
            _run_in_process(spec, suite, concurrency=concurrency, timeout=timeout, done=done)
    missing = [c.id for c, r in zip(suite.cases, rows) if r is None]
    if missing:  # pragma: no cover  (every path above answers every case)
        raise RuntimeError(f"no result for {len(missing)} case(s), first {missing[0]}")
    return frame(rows, OUTPUT_SCHEMA)  # type: ignore[arg-type]
