"""The process a custom judge, a notify hook or the registered checks and metrics run in:
``python -m qaeval.host.serve FD``.

Started by ``qaeval.host.clients`` (which describes the messages it speaks over socket FD). It gives
up ``CAP_SYS_PTRACE`` before any user code is imported, points file descriptors 1 and 2 at a scratch
file (nothing the user's code prints reaches the harness's terminal), builds the judge or hook, and
answers until told to stop or until the harness goes away. Every way the user's code can fail in a
call (raise, ``sys.exit``, return the wrong thing) is sent back as text; ``os._exit`` or a hang ends
the call from the harness's side instead.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import sys
import threading
from typing import Any

from qaeval.core.text import USER_TEXT_LIMIT
from qaeval.worker.hardening import drop_ptrace, not_dumpable
from qaeval.worker.messages import read_message, write_message
from qaeval.worker.process import watch_parent


def build(role: str, spec: dict[str, str], settings: dict[str, Any] | None) -> Any:
    """The judge or hook from its spec; UsageError (or whatever the user's code raised) if it cannot be."""
    from qaeval.core.errors import UsageError
    from qaeval.host.clients import settings_from_plain
    from qaeval.scoring.judge import judge_config_of
    from qaeval.worker.plugins import build as build_plugin
    from qaeval.worker.plugins import resolve

    what = {"judge": "judge", "generator": "generator"}.get(role, "notify hook")
    if role == "generator":
        return build_generator(spec, settings)
    if role == "custom":
        from qaeval.host.custom import build as build_custom

        return build_custom(spec)
    if "name" in spec:
        target: Any = spec["name"] if role == "judge" else resolve(spec["name"], what=what)
    else:
        import cloudpickle

        target = cloudpickle.loads(base64.b64decode(spec["pickle"]))
    if role == "hook":
        if not callable(target):
            raise UsageError(f"the notify hook is a {type(target).__name__}, not callable")
        return target
    if not callable(getattr(target, "judge", None)):
        target = build_plugin(target, what="judge", settings=settings_from_plain(settings or {}, os.environ))
    judge_config_of(target)
    return target


def build_generator(spec: dict[str, str], settings: dict[str, Any] | None) -> Any:
    from qaeval.core.errors import UsageError
    from qaeval.host.clients import settings_from_plain
    from qaeval.worker.plugins import build as build_plugin

    if "name" in spec:
        target: Any = spec["name"]
    else:
        import cloudpickle

        target = cloudpickle.loads(base64.b64decode(spec["pickle"]))
    if not callable(getattr(target, "generate", None)):
        target = build_plugin(target, what="generator", settings=settings_from_plain(settings or {}, os.environ))
    if not callable(getattr(target, "generate", None)):
        raise UsageError(f"the generator is a {type(target).__name__}, with no generate(requests) method")
    config: Any = getattr(target, "config", None)
    plain = config.to_dict() if callable(getattr(config, "to_dict", None)) else config
    from qaeval.judges.generator import GeneratorConfig

    GeneratorConfig.from_plain(plain)  # checked here too, so a bad one is the factory's error
    return target


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
            config = obj.config
            ready["config"] = config.to_dict() if callable(getattr(config, "to_dict", None)) else config
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
        if "judge" in message:
            reply = judge(obj, message["judge"])
        elif "generate" in message:
            reply = generate(obj, message["generate"])
        elif "notify" in message:
            reply = notify(obj, message["notify"])
        elif "score" in message:
            reply = score(obj, message["score"])
        else:
            break
        reply["logs"] = capture.take()
        reply["answers"] = message.get("n")  # which request this answers (Channel.ask)
        try:
            _send(sock, reply)
        except OSError:
            break
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]))
