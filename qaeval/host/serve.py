"""The process a custom judge, generator, notify hook or the registered checks run in:
``python -m qaeval.host.serve FD`` (its messages: ``qaeval.host.clients``).

It gives up ``CAP_SYS_PTRACE`` and is non-dumpable before any user code is imported, points file
descriptors 1 and 2 at a scratch file, builds the user's object and answers until told to stop or the
harness goes away. A raise, ``sys.exit`` or wrong return is sent back as text; ``os._exit`` or a hang is
caught by the harness's deadline."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from qaeval.core.text import USER_TEXT_LIMIT
from qaeval.worker.hardening import drop_ptrace, not_dumpable
from qaeval.worker.messages import read_message, write_message
from qaeval.worker.process import watch_parent


def build(role: str, spec: dict[str, Any], settings: dict[str, Any] | None) -> Any:
    """The judge, generator, hook or checks from its spec; UsageError (or whatever the user's code raised)
    if it cannot be."""
    from qaeval.core.errors import UsageError
    from qaeval.host.clients import settings_from_plain
    from qaeval.worker.plugins import build as build_plugin
    from qaeval.worker.plugins import resolve, unpickle

    if role == "custom":
        from qaeval.host.custom import build as build_custom

        return build_custom(spec)
    target = spec["name"] if "name" in spec else unpickle(spec)
    if role == "hook":
        target = resolve(target, what="notify hook") if "name" in spec else target
        if not callable(target):
            raise UsageError(f"the notify hook is a {type(target).__name__}, not callable")
        return target
    method = "generate" if role == "generator" else "judge"
    if not callable(getattr(target, method, None)):
        target = build_plugin(target, what=role, settings=settings_from_plain(settings or {}, os.environ))
    if role == "judge":
        from qaeval.scoring.judge import judge_config_of

        judge_config_of(target)
        return target
    if not callable(getattr(target, "generate", None)):
        raise UsageError(f"the generator is a {type(target).__name__}, with no generate(requests) method")
    config: Any = getattr(target, "config", None)
    from qaeval.judges.generator import GeneratorConfig

    GeneratorConfig.from_plain(to_dict(config))  # checked here too, so a bad one is the factory's error
    return target


def to_dict(config: Any) -> Any:
    return config.to_dict() if callable(getattr(config, "to_dict", None)) else config


def generate(obj: Any, plain_requests: list[dict[str, Any]]) -> dict[str, Any]:
    from qaeval.data.schema import Source
    from qaeval.judges.generator import GenerationReply, GenerationRequest
    from qaeval.worker.plugins import contained

    requests = [
        GenerationRequest(
            r["request_id"],
            r["kind"],
            tuple(Source(p["id"], p["text"], p.get("title")) for p in r["passages"]),
            tuple(r["messages"]),
        )
        for r in plain_requests
    ]
    ok, value = contained(obj.generate, requests, what="the generator")
    if not ok:
        return {"error": value}
    try:
        replies = list(value)
        return {"replies": [r.to_plain() if isinstance(r, GenerationReply) else None for r in replies]}
    except BaseException as exc:  # noqa: BLE001  (replies whose attributes fail when read)
        from qaeval.core.errors import describe

        return {"error": f"the generator's replies could not be read: {describe(exc)}"}


def judge(obj: Any, plain_requests: list[dict[str, Any]]) -> dict[str, Any]:
    from qaeval.core.errors import describe
    from qaeval.host.wire import request_from_plain, response_to_plain
    from qaeval.worker.plugins import contained

    requests = [request_from_plain(r) for r in plain_requests]
    ok, value = contained(obj.judge, requests, what="the judge")
    if not ok:
        return {"error": value}
    try:
        responses = list(value)
    except TypeError:
        return {"error": f"the judge returned {type(value).__name__}, not a list"}
    except BaseException as exc:  # noqa: BLE001  (an iterable that fails while read)
        return {"error": f"the judge's responses could not be read: {describe(exc)}"}
    try:
        return {"responses": [response_to_plain(r) for r in responses]}
    except BaseException as exc:  # noqa: BLE001  (a response whose attributes fail when read)
        return {"error": f"the judge's responses could not be read: {describe(exc)}"}


def notify(hook: Any, alarms: list[dict[str, Any]]) -> dict[str, Any]:
    from qaeval.worker.plugins import contained

    ok, why = contained(hook, alarms, what="the notify hook")
    return {"done": True} if ok else {"error": why}


def score(obj: Any, sample: dict[str, Any]) -> dict[str, Any]:
    from qaeval.host.custom import score as score_sample
    from qaeval.worker.plugins import contained

    ok, reply = contained(score_sample, *obj, sample, what="the checks")
    return reply if ok else {"error": reply}


HANDLERS: dict[str, Callable[[Any, Any], dict[str, Any]]] = {
    "judge": judge,
    "generate": generate,
    "notify": notify,
    "score": score,
}


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    try:
        write_message(sock, message)
    except (TypeError, ValueError) as exc:  # something the user's code produced that JSON cannot carry
        write_message(
            sock, {"error": f"the reply cannot be sent back ({str(exc)[:200]})", "answers": message.get("answers")}
        )


def main(fd: int) -> None:
    drop_ptrace()
    not_dumpable()  # a judge is sent the gold answers: no worker of the adapter may read them from here
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the harness's to handle
    sock = socket.socket(fileno=fd)
    setup = read_message(sock)["setup"]
    sys.argv = ["qaeval-host"]
    sys.path[:] = list(setup["sys_path"]) + [p for p in sys.path if p not in setup["sys_path"]]
    threading.Thread(target=watch_parent, args=(os.getppid(),), daemon=True, name="qaeval-parent-watch").start()
    from qaeval.worker.serve import FdCapture

    capture = FdCapture(USER_TEXT_LIMIT)
    role = setup["role"]
    ready: dict[str, Any] = {"ready": True}
    try:
        obj = build(role, setup["spec"], setup["settings"])
        if role in ("judge", "generator"):
            ready["config"] = to_dict(obj.config)
        elif role == "custom":
            obj, ready["declared"] = obj[:2], obj[2]
    except BaseException as exc:  # noqa: BLE001  (whatever building raises is the user's to fix)
        from qaeval.core.errors import UsageError, describe

        what = {"judge": "judge", "hook": "notify hook", "generator": "generator"}.get(role, "checks and metrics")
        message = str(exc) if isinstance(exc, UsageError) else f"the {what} could not be built: {describe(exc)}"
        _send(sock, {"init_error": message})
        os._exit(0)
    _send(sock, ready)
    capture.take()
    while True:
        try:
            message = read_message(sock)
        except (EOFError, OSError):
            break
        kind = next((k for k in HANDLERS if k in message), None)
        if kind is None:
            break
        reply = HANDLERS[kind](obj, message[kind])
        reply["logs"] = capture.take()
        reply["answers"] = message.get("n")  # which request this answers (Channel.ask)
        try:
            _send(sock, reply)
        except OSError:
            break
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]))
