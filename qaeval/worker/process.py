"""A process that runs user code (an adapter's worker, a judge's, hook's or checks' host): a fresh
interpreter whose environment loses every variable naming the data folder as a path (``confined_env``),
whose working directory is a private scratch folder and whose argv names no data, talking to the harness
in messages (``qaeval.worker.messages``). Nothing here imports pandas."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping

from qaeval.worker.hardening import managed
from qaeval.worker.messages import DEFAULT_MESSAGE_LIMIT, Channel, MessageError


def watch_parent(parent: int) -> None:
    """Run on a daemon thread in a child: exit when the harness that started it is gone."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(3)


def _path_tokens(value: str) -> Iterator[str]:
    for part in value.split(os.pathsep):
        for token in part.replace("=", " ").replace(",", " ").replace(";", " ").split():
            yield token.strip("'\"")


def _names_folder(token: str, folders: list[str]) -> bool:
    if token.startswith("file://"):
        token = token[len("file://") :]
    if "://" in token or not token:
        return False
    candidates = {os.path.abspath(token)}
    with contextlib.suppress(OSError, ValueError):
        candidates.add(os.path.realpath(token))
    return any(c == f or c.startswith(f.rstrip(os.sep) + os.sep) for c in candidates for f in folders)


def hidden_folders(data_dir: str | os.PathLike[str] | None) -> list[str]:
    """The data folder as absolute paths (as given and with symlinks resolved)."""
    if data_dir is None:
        return []
    given = os.fspath(data_dir)
    folders = {os.path.abspath(given)}
    with contextlib.suppress(OSError, ValueError):
        folders.add(os.path.realpath(given))
    return sorted(f for f in folders if f != os.sep)


def environ_now(tries: int = 100) -> dict[str, str]:
    """A copy of ``os.environ`` taken whole while another thread (MLflow's telemetry) may be changing it."""
    for _ in range(tries):
        try:
            return dict(os.environ)
        except (KeyError, RuntimeError):  # a variable came or went during the copy: take it again
            continue
    return dict(os.environ)


def confined_env(environ: Mapping[str, str], folders: list[str]) -> dict[str, str]:
    """``environ`` less every variable whose value names one of ``folders`` (or a path inside one) as a
    path: whole path components only, so ``--data data`` keeps ``HF_HOME=/mnt/data/hf`` and URLs."""
    if not folders:
        return dict(environ)
    return {k: v for k, v in environ.items() if not any(_names_folder(t, folders) for t in _path_tokens(v))}


def scrub_sys_path(paths: Iterable[str], folders: list[str], here: str) -> list[str]:
    """``sys.path`` for a child: absolute, and without entries inside the data folder."""
    full = [os.path.abspath(p) if p else here for p in paths]
    return [p for p in full if not _names_folder(p, folders)]


LAUNCHED_FROM = "QAEVAL_LAUNCHED_FROM"  # the folder qaeval was run from, as a child process is told it


def child_launch(data_dir: str | os.PathLike[str] | None) -> tuple[dict[str, str], list[str]]:
    """The environment and ``sys.path`` of every process that runs user code: nothing that names the data
    folder, qaeval importable, and the working directory first when this process's path has neither it
    nor "" (the ``qaeval`` command), so ``module:factory`` names resolve from the folder qaeval was run
    from. ``QAEVAL_LAUNCHED_FROM`` tells the child that folder (empty when it is the data folder)."""
    folders = hidden_folders(data_dir)
    env = confined_env(environ_now(), folders)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    here = os.getcwd()
    paths = list(sys.path)
    if here not in paths and "" not in paths:
        paths.insert(0, here)
    scrubbed = scrub_sys_path(paths, folders, here)
    env[LAUNCHED_FROM] = here if here in scrubbed else ""
    return env, scrubbed


class UserProcess:
    """``python -m MODULE FD`` in a fresh interpreter: its own process group, a private scratch working
    directory, the confined environment, stdout discarded, stderr kept (it explains a start-up failure)."""

    def __init__(
        self, module: str, *, env: Mapping[str, str], limit: int = DEFAULT_MESSAGE_LIMIT, what: str = "the process"
    ) -> None:
        parent_end, child_end = socket.socketpair()
        # blocking whatever socket.setdefaulttimeout() says: the child inherits the descriptor's flags
        child_end.setblocking(True)
        self.scratch = tempfile.mkdtemp(prefix="qaeval-scratch-")
        try:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", module, str(child_end.fileno())],
                pass_fds=[child_end.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=dict(env),
                cwd=self.scratch,
                start_new_session=True,
            )
        except OSError as exc:
            parent_end.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise OSError(f"cannot start a worker process ({exc.strerror or exc})") from None
        finally:
            child_end.close()
        managed(self.popen.pid, True)
        self.channel = Channel(parent_end, limit=limit, what=what)
        self.stderr = self.popen.stderr

    @property
    def pid(self) -> int:
        return self.popen.pid

    def fileno(self) -> int:
        return self.channel.fileno()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # the process leads its own group
        with contextlib.suppress(OSError):
            self.popen.kill()

    def exit_code(self, wait: float) -> int | None:
        """Its exit code if it exits within ``wait`` seconds on its own, else None (it is left running)."""
        try:
            return self.popen.wait(wait)
        except subprocess.TimeoutExpired:
            return None

    def reap(self, wait: float = 2.0) -> int | None:
        """Its exit code once it has exited, killed (with its group) if it has not within ``wait`` seconds;
        None if even that did not end it within 5 s."""
        code = self.exit_code(wait)
        if code is None:
            self.kill()
            code = self.exit_code(5)
        if code is not None:
            managed(self.popen.pid, False)
        return code

    def close(self) -> None:
        managed(self.popen.pid, False)
        self.channel.close()
        self.started()  # closes its stderr
        shutil.rmtree(self.scratch, ignore_errors=True)

    def stop(self, grace: float = 1.0) -> None:
        """Ask it to stop, give it ``grace`` seconds, then kill its group and clean up."""
        with contextlib.suppress(MessageError):
            self.channel.send({"stop": True}, time.monotonic() + min(grace, 0.2))
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(grace)
        self.end(1.0)

    def end(self, wait: float) -> None:
        """Kill it with its group, reap it (``wait``: as ``reap``) and clean up."""
        self.kill()
        self.reap(wait)
        self.close()

    def stderr_tail(self) -> str:
        text = ""
        try:
            if self.stderr is not None:
                os.set_blocking(self.stderr.fileno(), False)
                text = (self.stderr.read(1 << 16) or b"").decode("utf-8", "replace")
        except (OSError, ValueError):
            pass
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        return lines[-1][:500] if lines else ""

    def started(self) -> None:
        """The process said it is ready: its stderr is no longer read."""
        if self.stderr is not None:
            with contextlib.suppress(OSError):
                self.stderr.close()
        self.stderr = None


def stopped_because(proc: UserProcess, reason: str, *, closed: bool, starting: bool) -> str:
    """Why a worker is stopped: it broke the framing (``reason``), or went away (``closed``: its socket
    closed or its process ended; given half a second to exit, one still running hung up). ``starting``: it
    had not built the adapter yet (what it printed is added)."""
    if not closed:
        return f"{reason} (it was stopped)"
    code = proc.exit_code(0.5)
    if code is None:
        return (
            "worker closed its connection before the adapter was built"
            if starting
            else "adapter process closed its connection and kept running"
        ) + " (it was stopped)"
    if not starting:
        return f"adapter process {exit_reason(code)}"
    detail = proc.stderr_tail()
    return f"worker {exit_reason(code)} before the adapter was built" + (f": {detail}" if detail else "")


def exit_reason(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
