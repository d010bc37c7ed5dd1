"""Notify hooks, run out of process: ``HookProcess`` runs the hook in a fresh host process per call,
which must start within ``startup`` seconds and finish within ``timeout`` (``--hook-timeout``). A hook that
raises, exits, hangs or breaks the protocol raises ``UserCodeFailed``, which ``contained`` turns into a
note; the alarm (exit 3) stands. With ``isolation="none"`` the hook runs in this process."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from qaeval.core.errors import UsageError
from qaeval.core.text import bounded_text
from qaeval.host.clients import Launch, lost, spec_of
from qaeval.worker.hardening import harness_guard
from qaeval.worker.messages import MessageError
from qaeval.worker.plugins import UserCodeFailed, resolve
from qaeval.worker.process import UserProcess


def _plain_alarm(alarm: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in alarm.items()}


class HookProcess:
    """A notify hook in a fresh process per call. Calling it returns None, or raises UserCodeFailed
    saying how it failed; ``output`` holds the end of what it printed."""

    def __init__(
        self, spec: dict[str, str], *, timeout: float, startup: float, data_dir: str | os.PathLike[str] | None
    ) -> None:
        self.spec, self.timeout, self.startup = spec, timeout, startup
        self.launch = Launch(data_dir)
        self.output = ""

    def check(self) -> None:
        """Build the hook once without calling it, so a bad name or a factory that fails is a usage error
        before anything runs."""
        with harness_guard():
            proc, _ = self._start()
            proc.stop(0.5)

    def _start(self) -> tuple[UserProcess, dict[str, Any]]:
        return self.launch.start("hook", self.spec, None, what="the notify hook", timeout=self.startup)

    def __call__(self, alarms: list[dict[str, Any]]) -> None:
        with harness_guard():
            try:
                proc, _ = self._start()
            except UsageError as exc:
                raise UserCodeFailed(str(exc)) from None
            deadline = time.monotonic() + self.timeout
            try:
                reply = proc.channel.ask(
                    {"notify": [_plain_alarm(a) for a in alarms]}, deadline, what="the notify hook"
                )
            except MessageError as exc:
                late = f"the notify hook did not finish within {self.timeout:g} s"
                raise UserCodeFailed(lost(proc, exc, deadline, late=late, doing="before it finished")) from None
            proc.stop(0.5)
        if isinstance(reply, dict) and isinstance(reply.get("logs"), str):
            self.output = bounded_text(reply["logs"], 500).strip()
        if isinstance(reply, dict) and reply.get("done") is True:
            return
        if isinstance(reply, dict) and isinstance(reply.get("error"), str):
            raise UserCodeFailed(bounded_text(reply["error"], 500))
        raise UserCodeFailed("the notify hook's process sent something other than its reply")


def notify_hook(
    hook: Any, *, isolation: str, timeout: float, startup: float, data_dir: str | os.PathLike[str] | None
) -> Callable[[list[dict[str, Any]]], Any]:
    """The hook for ``drift``: in this process with ``isolation="none"``, else a checked ``HookProcess``."""
    if isolation == "none":
        return resolve(hook, what="notify hook") if isinstance(hook, str) else hook
    if not isinstance(hook, str) and not callable(hook):
        raise UsageError(f"notify must be a module:function name or a function, got {type(hook).__name__}")
    proc = HookProcess(spec_of(hook, what="notify hook"), timeout=timeout, startup=startup, data_dir=data_dir)
    try:
        proc.check()
    except UserCodeFailed as exc:
        raise UsageError(f"{exc}; the notify hook could not be checked") from None
    return proc
