"""A whole-call deadline for a network call qaeval makes (the judge, the generator, MLflow).

HTTP clients time out per read: a server that sends one byte every half second never trips a read
timeout of two seconds, and holds the call for as long as it keeps dripping. ``within`` runs the call in a
daemon thread and waits for it until the deadline, whatever the call does meanwhile: past it, the caller
gets ``DeadlineExceeded`` and goes on. The abandoned call is left to end with its connection (its result,
if it ever comes, is dropped); being a daemon thread, it never keeps the process from exiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class DeadlineExceeded(TimeoutError):
    """The call did not finish within its deadline (``seconds``). Never reaches a user: each caller turns
    it into its own error (a judge error, a generation error, a tracking warning)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"did not finish within {seconds:g} s")
        self.seconds = seconds


def within(seconds: float, call: Callable[[], T], *, name: str = "qaeval-call") -> T:
    """``call()``'s result, or what it raised, if it ends within ``seconds``; else ``DeadlineExceeded``."""
    done = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001  (handed to the waiting caller, which raises it)
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    if not done.wait(seconds):
        raise DeadlineExceeded(seconds)
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]  # what call() returned
