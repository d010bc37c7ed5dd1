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
import io
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from qaeval.data.cases import Suite, data_paths
from qaeval.errors import UsageError, describe
from qaeval.files import loads_strict
from qaeval.frames import frame
from qaeval.plugins import progress_bar
from qaeval.system.contract import (
    OUTPUT_COLUMNS, Payload, make_payload, output_row, validate_plain,
)
from qaeval.system.worker import FRAME_LIMIT, Caller, answer_one, build_adapter

LOG_LIMIT = 2000
STOP_GRACE = 1.0
ISOLATIONS = ("process", "none")

OUTPUT_SCHEMA = {
    "case_id": "text", "answer": "text", "citations": "object", "retrieved_ids": "object", "abstained": "bool",
    "model_was_called": "bool", "prompt_to_model": "text", "computed_aggregate": "object", "error": "text",
    "latency_s": "float", "logs": "text", "output_fingerprint": "text",
}
assert list(OUTPUT_SCHEMA) == OUTPUT_COLUMNS


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


def _reply_row(case_id: str, reply: Any, latency: float) -> dict[str, Any]:
    """A worker's reply (plain data, untrusted) as an outputs row."""
    if not isinstance(reply, dict):
        return output_row(case_id, None, "the worker sent something that is not a reply", latency)
    logs = reply.get("logs") if isinstance(reply.get("logs"), str) else ""
    if "error" in reply:
        error = reply["error"] if isinstance(reply["error"], str) and reply["error"] else "adapter failed"
        return output_row(case_id, None, error, latency, logs)
    fields, problems = validate_plain(reply.get("output"))
    if problems:
        return output_row(case_id, None, "malformed output: " + "; ".join(problems), latency, logs)
    return output_row(case_id, fields, None, latency, logs)


# --------------------------------------------------------------------------- worker processes


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        return f"was killed by {_signal_name(code)}"
    return f"exited with code {code}"


class _Worker:
    __slots__ = ("popen", "conn", "state", "index", "case_id", "deadline", "sent_at", "stderr")

    def __init__(self, popen: subprocess.Popen[bytes], conn: Any) -> None:
        self.popen, self.conn = popen, conn
        self.state = "starting"
        self.index = -1
        self.case_id = ""
        self.deadline = self.sent_at = 0.0
        self.stderr = popen.stderr

    def kill(self) -> None:
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)  # the worker leads its own process group
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.popen.kill()
        except OSError:
            pass

    def reap(self, wait: float = 2.0) -> int | None:
        try:
            return self.popen.wait(wait)
        except subprocess.TimeoutExpired:
            self.kill()
            try:
                return self.popen.wait(5)
            except subprocess.TimeoutExpired:
                return None

    def close(self) -> None:
        for handle in (self.conn, self.stderr):
            try:
                if handle is not None:
                    handle.close()
            except OSError:
                pass

    def startup_error(self) -> str:
        text = ""
        try:
            if self.stderr is not None:
                os.set_blocking(self.stderr.fileno(), False)
                text = (self.stderr.read() or b"").decode("utf-8", "replace")
        except (OSError, ValueError):
            pass
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else ""


class ProcessPool:
    """Worker processes for one run (see the module docstring)."""

    def __init__(self, spec: AdapterSpec, *, size: int, timeout: float, data_dir: str | None,
                 log_limit: int = LOG_LIMIT) -> None:
        self.spec, self.size, self.timeout, self.log_limit = spec, size, timeout, log_limit
        hidden = data_paths(data_dir) if data_dir else []
        self.env = {k: v for k, v in os.environ.items() if not any(h in v for h in hidden)}
        package_root = str(Path(__file__).resolve().parents[2])
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, self.env.get("PYTHONPATH")) if p)
        here = os.getcwd()
        self.cwd = here if not any(Path(here).resolve().is_relative_to(Path(h).resolve()) for h in hidden
                                   if os.path.isabs(h)) else os.path.expanduser("~")
        self.sys_path = [os.path.abspath(p) if p else here for p in sys.path
                         if not any(h in (p or here) for h in hidden if os.path.isabs(h))]

    def _start(self) -> _Worker:
        parent_end, child_end = socket.socketpair()
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", "qaeval.system.worker", str(child_end.fileno())],
                pass_fds=[child_end.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, env=self.env, cwd=self.cwd, start_new_session=True)
        except OSError as exc:
            parent_end.close()
            raise UsageError(f"cannot start a worker process ({exc.strerror or exc})") from None
        finally:
            child_end.close()
        from multiprocessing.connection import Connection

        worker = _Worker(popen, Connection(parent_end.detach()))
        setup = {"adapter": self.spec.wire, "sys_path": self.sys_path, "log_limit": self.log_limit}
        try:
            worker.conn.send_bytes(json.dumps({"setup": setup}).encode())
        except OSError:
            pass  # it died already; the loop notices
        return worker

    def run(self, suite: Suite, done: Done) -> None:
        from multiprocessing.connection import wait

        cases = iter(enumerate(suite.cases))
        undispatched = remaining = len(suite)
        workers = [self._start() for _ in range(min(self.size, remaining))]
        ever_ready = False
        start_failures = 0
        last_start_error = ""

        def finish(w: _Worker, row: dict[str, Any]) -> None:
            nonlocal remaining
            done(w.index, row)
            remaining -= 1
            w.state, w.index = "idle", -1

        def retire(w: _Worker, reason: str) -> None:
            """Stop a worker for good; its case (if it held one) fails with ``reason``; start another
            while there are cases left to hand out."""
            nonlocal start_failures, last_start_error
            if w.state == "busy":
                finish(w, output_row(w.case_id, None, reason, time.perf_counter() - w.sent_at))
            elif w.state == "starting":
                start_failures += 1
                last_start_error = reason
            w.kill()
            w.reap(0.5)
            w.close()
            workers.remove(w)
            if undispatched and start_failures <= 2 * self.size:
                workers.append(self._start())

        try:
            while remaining > 0:
                for w in workers:
                    if w.state != "idle" or not undispatched:
                        continue
                    w.index, case = next(cases)
                    undispatched -= 1
                    w.case_id = case.id
                    payload: Payload = make_payload(case)
                    w.state, w.sent_at = "busy", time.perf_counter()
                    w.deadline = w.sent_at + self.timeout
                    try:
                        w.conn.send_bytes(json.dumps({"case": payload}).encode())
                    except OSError:
                        pass  # the worker is gone; its end of the socket says so below
                if not workers:  # no worker could be started: the cases left cannot be answered
                    reason = f"the adapter could not start in a worker: {last_start_error or 'no reason given'}"
                    for index, case in cases:
                        done(index, output_row(case.id, None, reason, 0.0))
                    return
                now = time.perf_counter()
                deadlines = [w.deadline for w in workers if w.state == "busy"]
                wait_for = min(0.5, max(0.0, min(deadlines) - now)) if deadlines else 0.5
                for conn in wait([w.conn for w in workers], timeout=wait_for):
                    w = next(x for x in workers if x.conn is conn)
                    self._receive(w, finish, retire, ever_ready)
                    ever_ready = ever_ready or w.state in ("idle", "busy")
                now = time.perf_counter()
                for w in [w for w in workers if w.state == "busy" and now >= w.deadline]:
                    retire(w, f"timed out after {self.timeout:g} s (its worker was stopped and replaced)")
                for w in [w for w in workers if w.popen.poll() is not None]:
                    if not w.conn.poll():  # dead, and nothing left to read from it
                        retire(w, f"adapter process {_exit_reason(w.popen.returncode)}")
        finally:
            self._shutdown(workers)

    def _receive(self, w: _Worker, finish: Callable[[_Worker, dict[str, Any]], None],
                 retire: Callable[[_Worker, str], None], ever_ready: bool) -> None:
        try:
            raw = w.conn.recv_bytes(FRAME_LIMIT)
        except (EOFError, OSError):
            code = w.reap()
            if w.state == "busy":
                retire(w, f"adapter process {_exit_reason(code)}")
            else:
                detail = w.startup_error()
                retire(w, f"worker {_exit_reason(code)} before the adapter was built" + (f": {detail}" if detail else ""))
            return
        try:
            message = loads_strict(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            retire(w, "the worker sent something that is not JSON (it was stopped)")
            return
        if w.state == "busy":
            finish(w, _reply_row(w.case_id, message, time.perf_counter() - w.sent_at))
        elif w.state == "starting":
            if isinstance(message, dict) and message.get("ready") is True:
                w.state = "idle"
                if w.stderr is not None:
                    w.stderr.close()
                    w.stderr = None
                return
            error = message.get("init_error") if isinstance(message, dict) else None
            error = error if isinstance(error, str) else "the worker could not build the adapter"
            if not ever_ready:
                raise UsageError(f"adapter {self.spec.label}: {error}")
            retire(w, error)

    def _shutdown(self, workers: list[_Worker]) -> None:
        for w in workers:
            try:
                w.conn.send_bytes(b'{"stop": true}')
            except OSError:
                pass
        deadline = time.monotonic() + STOP_GRACE
        for w in workers:
            try:
                w.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            w.kill()  # the group too: nothing the adapter started outlives the run
            w.reap(1.0)
            w.close()


# --------------------------------------------------------------------------- an executor (Dask)


def _run_on_executor(executor: cf.Executor, spec: AdapterSpec, suite: Suite, *, concurrency: int,
                     timeout: float, done: Done) -> None:
    from qaeval.system.worker import answer_remote

    spec_json = json.dumps(spec.wire)
    pending: Iterator[tuple[int, Any]] = iter(enumerate(suite.cases))
    in_flight: dict[cf.Future[str], tuple[int, str, float]] = {}
    exhausted = False
    while True:
        while not exhausted and len(in_flight) < concurrency:
            item = next(pending, None)
            if item is None:
                exhausted = True
                break
            index, case = item
            try:
                future = executor.submit(answer_remote, spec_json, list(make_payload(case)))
            except Exception as exc:  # noqa: BLE001  (a shut-down or broken executor)
                done(index, output_row(case.id, None, f"the executor refused the call: {describe(exc)}", 0.0))
                continue
            in_flight[future] = (index, case.id, time.perf_counter())
        if not in_flight:
            return
        now = time.perf_counter()
        first_deadline = min(t for _, _, t in in_flight.values()) + timeout
        finished, _ = cf.wait(list(in_flight), timeout=max(0.0, first_deadline - now),
                              return_when=cf.FIRST_COMPLETED)
        for future in finished:
            index, case_id, sent = in_flight.pop(future)
            latency = time.perf_counter() - sent
            try:
                reply = loads_strict(future.result())
            except BaseException as exc:  # noqa: BLE001
                if isinstance(exc, KeyboardInterrupt):
                    raise
                done(index, output_row(case_id, None, f"the executor failed the call: {describe(exc)}", latency))
                continue
            done(index, _reply_row(case_id, reply, latency))
        now = time.perf_counter()
        for future, (index, case_id, sent) in list(in_flight.items()):
            if now - sent >= timeout:
                future.cancel()
                del in_flight[future]
                done(index, output_row(case_id, None, f"timed out after {timeout:g} s on the executor (the call "
                                       "was abandoned; the executor cannot stop it)", now - sent))


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
              show_progress: bool | None = None, data_dir: str | None = None) -> pd.DataFrame:
    """Ask the adapter for every case of the suite.

    ``adapter`` is a ``module:factory`` name, a zero-argument factory or an adapter object. Returns
    one row per case, in suite order:

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
    rows: list[dict[str, Any] | None] = [None] * len(suite)
    with progress_bar(len(suite), desc="cases", enabled=show_progress) as bar:
        def done(index: int, row: dict[str, Any]) -> None:
            rows[index] = row
            bar.update()

        if executor is not None:
            _run_on_executor(executor, spec, suite, concurrency=concurrency, timeout=timeout, done=done)
        elif isolation == "process":
            ProcessPool(spec, size=concurrency, timeout=timeout,
                        data_dir=data_dir if data_dir is not None else suite.root).run(suite, done)
        else:
            _run_in_process(spec, suite, concurrency=concurrency, timeout=timeout, done=done)
    missing = [c.id for c, r in zip(suite.cases, rows) if r is None]
    if missing:  # pragma: no cover  (every path above answers every case)
        raise RuntimeError(f"no result for {len(missing)} case(s), first {missing[0]}")
    return frame(rows, OUTPUT_SCHEMA)  # type: ignore[arg-type]

