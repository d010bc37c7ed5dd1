"""What Linux gives the boundary: a child that gives up ``CAP_SYS_PTRACE`` before any user code runs
(``drop_ptrace``), and a harness that, while ``harness_guard`` is held, is non-dumpable and a child
subreaper, so a descendant that escapes its process group is killed when the guard ends. Elsewhere each
is a no-op that says so. Nothing here imports pandas."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from pathlib import Path
from typing import Any

from qaeval.core.shared import WhileAnyRun

_CAP_SYS_PTRACE = 19
_PR_CAPBSET_DROP = 24
_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_ptrace() -> bool:
    """Linux: give up CAP_SYS_PTRACE for this process and everything it starts (the bounding set), so a
    root worker cannot read a non-dumpable harness's memory. Returns whether it is now without it."""
    libc = _libc()
    if libc is None:
        return False
    libc.prctl(_PR_CAPBSET_DROP, _CAP_SYS_PTRACE, 0, 0, 0)  # needs CAP_SETPCAP; harmless without
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return False
    mask = ~(1 << _CAP_SYS_PTRACE) & 0xFFFFFFFF
    data[0].effective &= mask
    data[0].permitted &= mask
    data[0].inheritable &= mask
    if libc.capset(ctypes.byref(header), data) != 0:
        return False
    return not has_ptrace()


def has_ptrace() -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> _CAP_SYS_PTRACE & 1)
    except OSError:
        pass
    return False


def not_dumpable() -> bool:
    """Linux: make this process non-dumpable for good, so no other process without CAP_SYS_PTRACE (an
    adapter's worker, or a descendant that escaped it) can open its ``/proc/<pid>/mem``, ``fd/`` or
    ``environ``: for a host of user code that holds what a system must not see (a judge is sent the gold
    answers). Returns whether it is now non-dumpable."""
    libc = _libc()
    if libc is None:
        return False
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    return libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


# The user processes qaeval started and still runs: each is stopped by its owner, so a guard's sweep
# (when another client's guard ends) passes over them.
_managed: set[int] = set()


def managed(pid: int, running: bool) -> None:
    """Say that qaeval runs the user process ``pid`` (``running``) or has stopped or let go of it."""
    (_managed.add if running else _managed.discard)(pid)


def _children_of(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(x) for x in text.split()]
    except (OSError, ValueError):
        pass
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def sweep_escaped(keep: set[int]) -> int:
    """Kill and reap every child of this process that is not in ``keep`` (escaped descendants that
    were reparented here), nor a user process qaeval still runs (``managed``). Returns how many were
    killed."""
    me, killed = os.getpid(), 0
    for _ in range(20):  # killing one may orphan its own children onto us: repeat until none are left
        strays = [p for p in _children_of(me) if p not in keep and p not in _managed]
        if not strays:
            break
        for pid in strays:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        for pid in strays:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)
    return killed


def _guard_begin() -> tuple[int, int, set[int]] | None:
    """Make the harness non-dumpable and a child subreaper; what was there before (None: not Linux)."""
    libc = _libc()
    if libc is None:
        return None
    was_dumpable = libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)
    flag = ctypes.c_int(0)
    libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
    saved = (was_dumpable, flag.value, set(_children_of(os.getpid())))
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    return saved


def _guard_end(saved: tuple[int, int, set[int]] | None) -> None:
    """Kill every descendant that escaped, then put both flags back as they were."""
    libc = _libc()
    if libc is None or saved is None:
        return
    was_dumpable, subreaper, before = saved
    sweep_escaped(before)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, subreaper, 0, 0, 0)
    if was_dumpable == 1:
        libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)


# While user code runs out of process (Linux): the harness is non-dumpable and a child subreaper; when
# the last of the nested or overlapping guards ends, escaped descendants are killed and both flags put back.
harness_guard = WhileAnyRun(_guard_begin, _guard_end)
