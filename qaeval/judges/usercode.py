"""Custom judges and notify hooks, run out of process: the harness's side.

A judge other than the two built-in ones (``qaeval.judges.offline:make_judge``, the mechanical default,
and ``qaeval.judges.openai:make_judge``), and every notify hook, is the user's code. Like an adapter it
runs in a fresh interpreter (``python -m qaeval.judges.host FD``, started by
``qaeval.system.process.UserProcess``): its own process group, a private scratch working directory, an
environment without the data folder, and (Linux) no ``CAP_SYS_PTRACE``, while the harness is
non-dumpable (``harness_guard``). Only plain JSON crosses, in frames, and every read has a deadline:

    harness -> host   {"setup": {"role": "judge"|"hook", "spec": {...}, "sys_path": [...], "settings": {...}}}
    host -> harness   {"ready": true, "config": {...}}   or   {"init_error": "..."}
    harness -> host   {"judge": [request, ...]}          ->   {"responses": [...]}   or   {"error": "..."}
                      {"notify": [alarm, ...]}           ->   {"done": true, "logs": "..."}  or  {"error": "..."}
                      {"stop": true}

``spec`` is ``{"name": "module:factory"}`` or ``{"pickle": base64 cloudpickle}`` (a factory or an
object given to the API). The judge factory's ``settings`` cross as JSON without the API key, which the
host reads from its own environment.

**Judges.** ``JudgeProcess`` is a ``JudgeClient``: its ``config`` is what the judge's own ``config``
said, checked, and ``judge(requests)`` sends the requests in chunks of ``CHUNK``. The process must
start within ``startup`` seconds (``--startup-timeout``) and answer each chunk within ``timeout``
seconds (``--judge-timeout``). A chunk whose process hangs, exits or breaks the protocol is lost: its
process is killed, each of its requests is a judge error saying why, and the next chunk gets a fresh
process. After ``MAX_LOST`` chunks lost in a row the judge is not asked again and the remaining
requests are judge errors too, so a judge that never answers costs at most ``MAX_LOST`` x ``timeout``
(plus the time its replacement takes to start). What comes back is decoded strictly into
``JudgeResponse`` objects; anything malformed is a judge error for its case, and ``verdict_frame``
validates the rest as it does for any judge. Nothing the judge does can reach a verdict except its
responses.

**Hooks.** ``HookProcess`` is called with the alarms, in a fresh process per call, which must start
within ``startup`` seconds and finish within ``timeout`` seconds (``--hook-timeout``). If it raises,
exits, hangs or breaks the protocol it raises ``UserCodeFailed`` saying so, which ``contained`` turns
into a note; the alarm (exit 3) stands.

With ``isolation="none"`` judges and hooks run in this process, as adapters do.
"""

from __future__ import annotations

import base64
import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from qaeval.errors import UsageError, describe
from qaeval.plugins import UserCodeFailed, build, resolve
from qaeval.scoring.judge import (
    NOT_UNICODE, AxisVerdict, CitedSource, JudgeConfig, JudgeRequest, JudgeResponse, JudgeSettings, judge_config_of,
    not_unicode,
)
from qaeval.system.hardening import harness_guard
from qaeval.system.process import (
    FrameError, UserProcess, confined_env, exit_reason, hidden_folders, parse, scrub_sys_path,
)

BUILTIN_JUDGES = ("qaeval.judges.offline:make_judge", "qaeval.judges.openai:make_judge")
HOST = "qaeval.judges.host"
CHUNK = 16
MAX_LOST = 2
TEXT_LIMIT = 2000


# --------------------------------------------------------------------------- what runs where


def _builtin_judge(judge: Any) -> bool:
    """The two judges qaeval ships, named or as their own factories or objects (not subclasses)."""
    from qaeval.judges import offline, openai

    if isinstance(judge, str):
        return judge in BUILTIN_JUDGES
    if judge is offline.make_judge or judge is openai.make_judge:
        return True
    return type(judge) in (offline.OfflineJudge, openai.OpenAIJudge)


def spec_of(obj: Any, *, what: str) -> dict[str, str]:
    """How a host process builds user code: by name, or from a cloudpickle of a factory or object."""
    if isinstance(obj, str):
        return {"name": obj}
    import cloudpickle

    try:
        blob = cloudpickle.dumps(obj)
    except Exception as exc:  # noqa: BLE001  (whatever pickling raises means it cannot be shipped)
        raise UsageError(f"the {what} cannot be shipped to its own process ({describe(exc)}); name it as "
                         "module:factory, or pass isolation='none' to run it in this process") from None
    return {"pickle": base64.b64encode(blob).decode()}


def settings_to_plain(settings: JudgeSettings) -> dict[str, Any]:
    """A judge factory's settings as JSON: without the API key (the host reads it from its environment),
    and with the cache folder made absolute (the host runs in a scratch folder)."""
    plain = {k: v for k, v in asdict(settings).items() if k != "api_key"}
    plain["cache_dir"] = os.path.abspath(plain["cache_dir"])
    for name, value in plain.items():
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise UsageError(f"judge setting {name} is a {type(value).__name__}, which cannot be sent to the judge")
    return plain


def settings_from_plain(plain: Mapping[str, Any], environ: Mapping[str, str]) -> JudgeSettings:
    known = {f.name for f in fields(JudgeSettings)} - {"api_key"}
    return JudgeSettings(**{k: v for k, v in plain.items() if k in known},
                         api_key=environ.get("OPENAI_API_KEY") or None)


class _Launch:
    """What every host process of one command is given: environment and import path."""

    def __init__(self, data_dir: str | os.PathLike[str] | None) -> None:
        folders = hidden_folders(data_dir)
        self.env = confined_env(os.environ, folders)
        package_root = str(Path(__file__).resolve().parents[2])
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, self.env.get("PYTHONPATH")) if p)
        here = os.getcwd()
        paths = list(sys.path)
        if here not in paths and "" not in paths:  # module:factory names resolve from here, as in the harness
            paths.insert(0, here)
        self.sys_path = scrub_sys_path(paths, folders, here)

    def start(self, role: str, spec: dict[str, str], settings: dict[str, Any] | None, deadline: float, *,
              what: str, timeout: float) -> tuple[UserProcess, dict[str, Any]]:
        """A started host with its user code built: (process, its ready message). UserCodeFailed when it
        could not be built in time; UsageError when the user's code is at fault (a bad name, a factory
        that raises or exits)."""
        try:
            proc = UserProcess(HOST, env=self.env, what=what)
        except OSError as exc:
            raise UserCodeFailed(f"{what} could not start: {exc}") from None
        setup = {"role": role, "spec": spec, "sys_path": self.sys_path, "settings": settings}
        try:
            proc.channel.send({"setup": setup}, deadline)
            reply = parse(proc.channel.receive(deadline), what=what)
        except FrameError as exc:
            raise UserCodeFailed(lost(proc, exc, deadline, late=f"{what} did not start within {timeout:g} s "
                                      "(--startup-timeout)", doing="before it was ready")) from None
        if isinstance(reply, dict) and reply.get("ready") is True:
            proc.started()
            return proc, reply
        proc.stop(0.2)
        if isinstance(reply, dict) and isinstance(reply.get("init_error"), str):
            raise UsageError(_text(reply["init_error"], 500))
        raise UserCodeFailed(f"{what} sent something other than its start-up reply")


def lost(proc: UserProcess, exc: FrameError, deadline: float, *, late: str, doing: str) -> str:
    """Kill and clean up a host that failed us, and say why: it exited (``doing`` what), it took too long
    (``late``), or it broke the protocol."""
    if proc.channel.closed:
        why = f"{proc.channel.what}'s process {exit_reason(proc.reap(2.0))} {doing}"
        tail = proc.stderr_tail()
        if tail:
            why += f" ({_text(tail, 300)})"
    else:
        proc.kill()
        why = f"{late} (its process was killed)" if time.monotonic() >= deadline else \
            f"{_text(str(exc), 300)} (its process was killed)"
    proc.reap(1.0)
    proc.close()
    return why


def _text(value: Any, limit: int = TEXT_LIMIT) -> str:
    """Text from the other side, fit to print and record: bounded, and valid Unicode."""
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- judges: the wire


def request_to_plain(req: JudgeRequest) -> dict[str, Any]:
    return dict(case_id=req.case_id, question=req.question, answer=req.answer, gold_answer=req.gold_answer,
                citations=[dict(source_id=c.source_id, claim=c.claim, text=c.text, decoy_id=c.decoy_id,
                                decoy_text=c.decoy_text) for c in req.citations],
                messages=[dict(m) for m in req.messages])


def request_from_plain(plain: Mapping[str, Any]) -> JudgeRequest:
    citations = tuple(CitedSource(**c) for c in plain["citations"])
    return JudgeRequest(plain["case_id"], plain["question"], plain["answer"], plain["gold_answer"], citations,
                        tuple(plain["messages"]))


def _scalar(value: Any) -> Any:
    """A score as JSON can carry it; anything else is shown by its type, and is not a score."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**63 else f"<int of {len(str(abs(value)))} digits>"
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    return f"<{type(value).__name__}>"


def response_to_plain(resp: Any) -> dict[str, Any]:
    """One of the judge's responses as JSON (in the host). A JudgeResponse in name only is sent as what it is."""
    if not isinstance(resp, JudgeResponse):
        return {"not_a_response": type(resp).__name__}
    if any(not_unicode(getattr(v, name, "")) for v in (resp.verdicts if isinstance(resp.verdicts, list) else [])
           for name in ("axis", "quote", "rationale", "target")):
        return {"case_id": resp.case_id if isinstance(resp.case_id, str) else "", "verdicts": [], "error": NOT_UNICODE}
    verdicts: Any = resp.verdicts
    if isinstance(verdicts, list):
        verdicts = [dict(axis=v.axis if isinstance(v.axis, str) else "", score=_scalar(v.score),
                         quote=v.quote if isinstance(v.quote, str) else "",
                         rationale=v.rationale if isinstance(v.rationale, str) else "",
                         target=v.target if isinstance(v.target, str) else "")
                    if isinstance(v, AxisVerdict) else None for v in verdicts]
    else:
        verdicts = f"<{type(verdicts).__name__}>"

    def count(value: Any) -> Any:
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else None

    return dict(case_id=resp.case_id if isinstance(resp.case_id, str) else f"<{type(resp.case_id).__name__}>",
                verdicts=verdicts, error=None if resp.error is None else _text(str(resp.error)),
                prompt_tokens=count(resp.prompt_tokens), completion_tokens=count(resp.completion_tokens),
                cached=resp.cached is True)


_VERDICT_TEXT = ("axis", "quote", "rationale", "target")


def response_from_plain(plain: Any, req: JudgeRequest) -> JudgeResponse:
    """A response from the judge's process, decoded strictly (in the harness). Whatever is malformed is a
    judge error for ``req``'s case: the process is the user's and may send anything."""
    def bad(why: str) -> JudgeResponse:
        return JudgeResponse(req.case_id, error=why)

    if not isinstance(plain, dict):
        return bad("the judge's process sent a response that is not an object")
    if "not_a_response" in plain:
        return bad(f"the judge returned {_text(plain['not_a_response'], 100)}, not a JudgeResponse")
    case_id, verdicts, error = plain.get("case_id"), plain.get("verdicts"), plain.get("error")
    if not isinstance(case_id, str) or not (error is None or isinstance(error, str)):
        return bad("the judge's process sent a response without a case id or with an error that is not text")
    if isinstance(verdicts, str):
        return bad(f"the judge's verdicts are {_text(verdicts, 100).strip('<>')}, not a list")
    if not isinstance(verdicts, list):
        return bad("the judge's process sent verdicts that are not a list")
    decoded = []
    for v in verdicts:
        if v is None:
            continue  # the judge put something other than an AxisVerdict there: no verdict for that axis
        if not isinstance(v, dict) or not all(isinstance(v.get(k), str) for k in _VERDICT_TEXT) or \
                isinstance(v.get("score"), (dict, list)):
            return bad("the judge's process sent a malformed verdict")
        decoded.append(AxisVerdict(v["axis"], v.get("score"), v["quote"], v["rationale"], target=v["target"]))
    tokens = [plain.get(k) for k in ("prompt_tokens", "completion_tokens")]
    tokens = [t if isinstance(t, int) and not isinstance(t, bool) else None for t in tokens]
    return JudgeResponse(case_id, decoded, error=None if error is None else _text(error),
                         prompt_tokens=tokens[0], completion_tokens=tokens[1], cached=plain.get("cached") is True)


def config_from_plain(plain: Any) -> JudgeConfig:
    """The judge's config as its process reported it, checked field by field."""
    import re

    def fail(why: str) -> UsageError:
        return UsageError(f"the judge's config {why}")

    if not isinstance(plain, dict):
        raise fail("did not arrive")
    for name in ("name", "model", "prompt_version"):
        if not isinstance(plain.get(name), str) or not plain[name]:
            raise fail(f"has no {name}")
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", plain["prompt_version"]):
        raise fail(f"names rubric {_text(plain['prompt_version'], 80)!r}, which is not a rubric version")
    temperature, seed, base_url = plain.get("temperature"), plain.get("seed"), plain.get("base_url")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature):
        raise fail("has a temperature that is not a number")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise fail("has a seed that is not a whole number")
    if base_url is not None and not isinstance(base_url, str):
        raise fail("has a base_url that is not text")
    texts = [plain["name"], plain["model"], base_url or ""]
    if any(len(t) > 500 or _text(t) != t for t in texts):
        raise fail("has a name, model or base_url that is too long or not valid Unicode")
    return JudgeConfig(name=plain["name"], model=plain["model"], temperature=float(temperature), seed=seed,
                       prompt_version=plain["prompt_version"], base_url=base_url)


# --------------------------------------------------------------------------- judges: the proxy


class JudgeProcess:
    """A custom judge in its own process, seen from the harness as a ``JudgeClient``."""

    def __init__(self, spec: dict[str, str], *, settings: JudgeSettings, timeout: float, startup: float,
                 data_dir: str | os.PathLike[str] | None) -> None:
        self.spec, self.timeout, self.startup = spec, timeout, startup
        self.settings = settings_to_plain(settings)
        self.launch = _Launch(data_dir)
        self.proc: UserProcess | None = None
        self._guard: contextlib.ExitStack | None = None
        try:
            ready = self._start()
        except UserCodeFailed as exc:
            raise UsageError(str(exc)) from None
        try:
            self.config = config_from_plain(ready.get("config"))
        except UsageError:
            self.close()
            raise

    def _start(self) -> dict[str, Any]:
        """Start the judge's process under the harness guard (kept until ``close``)."""
        if self._guard is None:
            self._guard = contextlib.ExitStack()
            self._guard.enter_context(harness_guard())
        try:
            self.proc, ready = self.launch.start("judge", self.spec, self.settings, time.monotonic() + self.startup,
                                                 what="the judge", timeout=self.startup)
        except BaseException:
            self.close()
            raise
        return ready

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        """Every request's response, in order; the judge's process is stopped at the end."""
        out: list[JudgeResponse] = []
        lost_in_a_row, last_loss = 0, ""
        try:
            for start in range(0, len(requests), CHUNK):
                chunk = requests[start:start + CHUNK]
                if lost_in_a_row >= MAX_LOST:
                    out += self._errors(chunk, f"not asked: {lost_in_a_row} chunks in a row were lost ({last_loss})")
                    continue
                responses, loss = self._ask(chunk)
                out += responses
                lost_in_a_row, last_loss = (lost_in_a_row + 1, loss) if loss else (0, "")
        finally:
            self.close()
        return out

    def _ask(self, chunk: Sequence[JudgeRequest]) -> tuple[list[JudgeResponse], str]:
        """(responses, "") or (judge errors, why the chunk and its process were lost)."""
        try:
            if self.proc is None:
                self._start()
            assert self.proc is not None
            deadline = time.monotonic() + self.timeout
            self.proc.channel.send({"judge": [request_to_plain(r) for r in chunk]}, deadline)
            reply = parse(self.proc.channel.receive(deadline), what="the judge")
        except (UserCodeFailed, UsageError) as exc:
            return self._errors(chunk, str(exc)), str(exc)
        except FrameError as exc:
            proc, self.proc = self.proc, None
            assert proc is not None
            why = lost(proc, exc, deadline, late=f"the judge did not answer within {self.timeout:g} s",
                       doing="while judging")
            return self._errors(chunk, why), why
        return self._decode(reply, chunk), ""

    @staticmethod
    def _errors(chunk: Sequence[JudgeRequest], why: str) -> list[JudgeResponse]:
        return [JudgeResponse(r.case_id, error=why) for r in chunk]

    def _decode(self, reply: Any, chunk: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        if isinstance(reply, dict) and isinstance(reply.get("error"), str):
            return self._errors(chunk, _text(reply["error"]))
        responses = reply.get("responses") if isinstance(reply, dict) else None
        if not isinstance(responses, list):
            return self._errors(chunk, "the judge's process sent something other than responses")
        if len(responses) != len(chunk):
            return self._errors(chunk, f"the judge returned {len(responses)} responses for {len(chunk)} requests")
        return [response_from_plain(p, r) for p, r in zip(responses, chunk)]

    def close(self) -> None:
        """Stop the judge's process (if any) and end the harness guard it was started under."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.stop(0.5)
        guard, self._guard = self._guard, None
        if guard is not None:
            guard.close()


def make_judge(judge: Any, *, settings: JudgeSettings, isolation: str, timeout: float, startup: float,
               data_dir: str | os.PathLike[str] | None) -> Any:
    """The judge for a command: a built-in one (or any judge with ``isolation="none"``) in this process,
    any other in its own (``JudgeProcess``)."""
    if _builtin_judge(judge) or isolation == "none":
        built = build(judge, what="judge", settings=settings)
        judge_config_of(built)
        return built
    return JudgeProcess(spec_of(judge, what="judge"), settings=settings, timeout=timeout, startup=startup,
                        data_dir=data_dir)


def close_judge(judge: Any) -> None:
    if isinstance(judge, JudgeProcess):
        judge.close()


# --------------------------------------------------------------------------- notify hooks


def _plain_alarm(alarm: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in alarm.items()}


class HookProcess:
    """A notify hook in a fresh process per call. Calling it returns None, or raises UserCodeFailed
    saying how it failed; ``output`` holds the end of what it printed."""

    def __init__(self, spec: dict[str, str], *, label: str, timeout: float, startup: float,
                 data_dir: str | os.PathLike[str] | None) -> None:
        self.spec, self.label, self.timeout, self.startup = spec, label, timeout, startup
        self.launch = _Launch(data_dir)
        self.output = ""

    def check(self) -> None:
        """Build the hook once without calling it, so a bad name or a factory that fails is a usage error
        before anything runs."""
        with harness_guard():
            proc, _ = self._start()
            proc.stop(0.5)

    def _start(self) -> tuple[UserProcess, dict[str, Any]]:
        return self.launch.start("hook", self.spec, None, time.monotonic() + self.startup, what="the notify hook",
                                 timeout=self.startup)

    def __call__(self, alarms: list[dict[str, Any]]) -> None:
        with harness_guard():
            try:
                proc, _ = self._start()
            except UsageError as exc:
                raise UserCodeFailed(str(exc)) from None
            deadline = time.monotonic() + self.timeout
            try:
                proc.channel.send({"notify": [_plain_alarm(a) for a in alarms]}, deadline)
                reply = parse(proc.channel.receive(deadline), what="the notify hook")
            except FrameError as exc:
                raise UserCodeFailed(lost(proc, exc, deadline, doing="before it finished",
                                          late=f"the notify hook did not finish within {self.timeout:g} s")) from None
            proc.stop(0.5)
        if isinstance(reply, dict) and isinstance(reply.get("logs"), str):
            self.output = _text(reply["logs"], 500).strip()
        if isinstance(reply, dict) and reply.get("done") is True:
            return
        if isinstance(reply, dict) and isinstance(reply.get("error"), str):
            raise UserCodeFailed(_text(reply["error"], 500))
        raise UserCodeFailed("the notify hook's process sent something other than its reply")


def notify_hook(hook: Any, *, isolation: str, timeout: float, startup: float,
                data_dir: str | os.PathLike[str] | None) -> Callable[[list[dict[str, Any]]], Any]:
    """The hook for ``drift``: in this process with ``isolation="none"``, else a checked ``HookProcess``."""
    if isolation == "none":
        return resolve(hook, what="notify hook") if isinstance(hook, str) else hook
    if not isinstance(hook, str) and not callable(hook):
        raise UsageError(f"notify must be a module:function name or a function, got {type(hook).__name__}")
    label = hook if isinstance(hook, str) else getattr(hook, "__qualname__", repr(hook))
    proc = HookProcess(spec_of(hook, what="notify hook"), label=label, timeout=timeout, startup=startup,
                       data_dir=data_dir)
    try:
        proc.check()
    except UserCodeFailed as exc:
        raise UsageError(f"{exc}; the notify hook could not be checked") from None
    return proc
