"""Custom judges and generators, run out of process: the harness's side.

A judge other than the two built-in ones (``BUILTIN_JUDGES``), a custom generator, and every notify hook
is the user's code. It runs in a fresh interpreter (``python -m qaeval.host.serve FD``, started by
``qaeval.worker.process.UserProcess``, under the harness guard) and only plain JSON crosses, every read
with a deadline:

    harness -> host   {"setup": {"role": "judge"|"generator"|"hook"|"custom", "spec": {...}, "sys_path": [...],
                                 "settings": {...}}}
    host -> harness   {"ready": true, "config": {...}}   or   {"init_error": "..."}
    harness -> host   {"judge": [request, ...]}          ->   {"responses": [...]}   or   {"error": "..."}
                      {"notify": [alarm, ...]}           ->   {"done": true, "logs": "..."}  or  {"error": "..."}
                      {"stop": true}

``spec`` is ``{"name": "module:factory"}`` or ``{"pickle": base64 cloudpickle}``. Judge settings cross
without the API key, which the host reads from its own environment.

``JudgeProcess`` sends requests in chunks of ``CHUNK``; the process must start within ``startup`` seconds
and answer each chunk within ``timeout``. A chunk whose process hangs, exits or breaks the protocol is
lost: the process is killed, each request is a judge error saying why, and the next chunk gets a fresh
process. After ``MAX_LOST`` chunks lost in a row nothing more is asked. Responses are decoded strictly
(``qaeval.host.wire``): nothing the judge does reaches a verdict except its responses.
With ``isolation="none"`` judges and hooks run in this process."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from typing import Any

from qaeval.core.errors import UsageError
from qaeval.core.text import bounded_text
from qaeval.host.wire import config_from_plain, request_to_plain, response_from_plain
from qaeval.scoring.judge import JudgeRequest, JudgeResponse, JudgeSettings, judge_config_of
from qaeval.worker.hardening import harness_guard
from qaeval.worker.messages import MessageError, parse
from qaeval.worker.plugins import UserCodeFailed, build, pickled
from qaeval.worker.process import UserProcess, child_launch, exit_reason

BUILTIN_JUDGES = ("qaeval.judges.offline:make_judge", "qaeval.judges.openai:make_judge")
HOST = "qaeval.host.serve"
CHUNK = 16
MAX_LOST = 2


def _builtin_judge(judge: Any) -> bool:
    """The two judges qaeval ships, named or as their own factories, and an offline judge's object exactly
    as qaeval makes it (``offline.made_by_qaeval``: all of it can be checked). Any other object is its
    user's code, an ``OpenAIJudge`` object too: its client and cache are objects whose insides the harness
    cannot vouch for (name it, ``qaeval.judges.openai:make_judge``, with its settings)."""
    from qaeval.judges import offline, openai

    if isinstance(judge, str):
        return judge in BUILTIN_JUDGES
    if judge is offline.make_judge or judge is openai.make_judge:
        return True
    return offline.made_by_qaeval(judge)


def spec_of(obj: Any, *, what: str) -> dict[str, str]:
    """How a host process builds user code: by name, or from a cloudpickle of a factory or object."""
    if isinstance(obj, str):
        return {"name": obj}
    cannot = f"the {what} cannot be shipped to its own process ({{}}); name it as module:factory, or pass "
    return pickled(obj, cannot=cannot + "isolation='none' to run it in this process")


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
    return JudgeSettings(
        **{k: v for k, v in plain.items() if k in known}, api_key=environ.get("OPENAI_API_KEY") or None
    )


class Launch:
    """What every host process of one command is given: environment and import path."""

    def __init__(self, data_dir: str | os.PathLike[str] | None) -> None:
        self.env, self.sys_path = child_launch(data_dir)

    def start(
        self, role: str, spec: dict[str, Any], settings: dict[str, Any] | None, *, what: str, timeout: float
    ) -> tuple[UserProcess, dict[str, Any]]:
        """A started host with its user code built within ``timeout`` seconds: (process, its ready message).
        UserCodeFailed when it could not be built in time; UsageError when the user's code is at fault (a
        bad name, a factory that raises or exits)."""
        deadline = time.monotonic() + timeout
        try:
            proc = UserProcess(HOST, env=self.env, what=what)
        except OSError as exc:
            raise UserCodeFailed(f"{what} could not start: {exc}") from None
        setup = {"role": role, "spec": spec, "sys_path": self.sys_path, "settings": settings}
        try:
            proc.channel.send({"setup": setup}, deadline)
            reply = parse(proc.channel.receive(deadline), what=what)
        except MessageError as exc:
            late = f"{what} did not start within {timeout:g} s (--startup-timeout)"
            raise UserCodeFailed(lost(proc, exc, deadline, late=late, doing="before it was ready")) from None
        if isinstance(reply, dict) and reply.get("ready") is True:
            proc.started()
            return proc, reply
        proc.stop(0.2)
        if isinstance(reply, dict) and isinstance(reply.get("init_error"), str):
            raise UsageError(bounded_text(reply["init_error"], 500))
        raise UserCodeFailed(f"{what} sent something other than its start-up reply")


def lost(proc: UserProcess, exc: MessageError, deadline: float, *, late: str, doing: str) -> str:
    """Kill and clean up a host that failed us, and say why: it exited (``doing`` what), it took too long
    (``late``), or it broke the protocol."""
    if proc.channel.closed:
        why = f"{proc.channel.what}'s process {exit_reason(proc.reap(2.0))} {doing}"
        tail = proc.stderr_tail()
        if tail:
            why += f" ({bounded_text(tail, 300)})"
    else:
        proc.kill()
        why = (
            f"{late} (its process was killed)"
            if time.monotonic() >= deadline
            else f"{bounded_text(str(exc), 300)} (its process was killed)"
        )
    proc.reap(1.0)
    proc.close()
    return why


class HostClient:
    """User code in its own process, asked in chunks of ``chunk`` items under the harness guard: what a custom
    judge, a custom generator and the registered checks share. A subclass names its ``role``, reads the
    ready message (``take_ready``), says how a chunk is sent (``request``) and read back (``decode``), and
    what a lost chunk's items become (``errors``)."""

    role = "judge"
    what = "the judge"
    doing = "while judging"
    late = "{what} did not answer within {timeout:g} s"
    interrupted = "not asked: {what} was stopped (the run was interrupted)"
    unit = "chunks"
    chunk: int | None = None  # None: the module's CHUNK and MAX_LOST, read when asked
    max_lost: int | None = None
    stopped = False  # the run was interrupted: no process is started again

    def __init__(
        self,
        spec: dict[str, Any],
        *,
        settings: JudgeSettings | None,
        timeout: float,
        startup: float,
        data_dir: str | os.PathLike[str] | None,
    ) -> None:
        self.spec, self.timeout, self.startup = spec, timeout, startup
        self.settings = settings_to_plain(settings) if settings is not None else None
        self.launch = Launch(data_dir)
        self.proc: UserProcess | None = None
        self._guard: contextlib.ExitStack | None = None
        self.lost_in_a_row, self.last_loss = 0, ""
        try:
            self.take_ready(self._start())
        except UserCodeFailed as exc:
            self.close()
            raise UsageError(str(exc)) from None
        except BaseException:
            self.close()
            raise

    def _start(self) -> dict[str, Any]:
        """Start the process under the harness guard (kept until ``close``)."""
        if self.stopped:
            raise UserCodeFailed(self.interrupted.format(what=self.what))
        if self._guard is None:
            self._guard = contextlib.ExitStack()
            self._guard.enter_context(harness_guard())
        try:
            self.proc, ready = self.launch.start(
                self.role, self.spec, self.settings, what=self.what, timeout=self.startup
            )
        except BaseException:
            self._end()  # not ``close``: a start that failed counts as a lost chunk
            raise
        if self.stopped:  # interrupted while it started: it is not left running
            self.close()
            raise UserCodeFailed(self.interrupted.format(what=self.what))
        return ready

    def take_ready(self, ready: dict[str, Any]) -> None:
        raise NotImplementedError

    def request(self, chunk: Sequence[Any]) -> dict[str, Any]:
        raise NotImplementedError

    def decode(self, reply: Any, chunk: Sequence[Any]) -> list[Any]:
        raise NotImplementedError

    def errors(self, chunk: Sequence[Any], why: str) -> list[Any]:
        raise NotImplementedError

    def not_asked(self, chunk: Sequence[Any], why: str) -> list[Any]:
        """The answers of a chunk that was not asked, because the process was given up on."""
        return self.errors(chunk, why)

    def ask_all(self, items: Sequence[Any]) -> list[Any]:
        """Every item's answers, in order; after ``max_lost`` chunks lost in a row (counted across calls: a
        generator is asked many times) nothing more is asked."""
        out: list[Any] = []
        size, max_lost = self.chunk or CHUNK, self.max_lost or MAX_LOST
        for start in range(0, len(items), size):
            chunk = items[start : start + size]
            if self.lost_in_a_row >= max_lost:
                why = f"not asked: {self.lost_in_a_row} {self.unit} in a row were lost ({self.last_loss})"
                out += self.not_asked(chunk, why)
                continue
            answers, loss = self._ask(chunk)
            out += answers
            self.lost_in_a_row, self.last_loss = (self.lost_in_a_row + 1, loss) if loss else (0, "")
        return out

    def _ask(self, chunk: Sequence[Any]) -> tuple[list[Any], str]:
        """(answers, "") or (errors, why the chunk and its process were lost)."""
        try:
            if self.proc is None:
                self._start()
            assert self.proc is not None
            deadline = time.monotonic() + self.timeout
            reply = self.proc.channel.ask(self.request(chunk), deadline, what=self.what)
        except (UserCodeFailed, UsageError) as exc:
            return self.errors(chunk, str(exc)), str(exc)
        except MessageError as exc:
            proc, self.proc = self.proc, None
            if proc is None:  # closed under it (the run was interrupted)
                why = f"not asked: {self.what} was stopped ({exc})"
            else:
                late = self.late.format(what=self.what, timeout=self.timeout)
                why = lost(proc, exc, deadline, late=late, doing=self.doing)
            return self.errors(chunk, why), why
        if isinstance(reply, dict) and isinstance(reply.get("error"), str):
            return self.errors(chunk, bounded_text(reply["error"])), ""
        return self.decode(reply, chunk), ""

    def close(self) -> None:
        """Stop the process (if any) and end the harness guard it was started under."""
        self._end()

    def _end(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.stop(0.5)
        guard, self._guard = self._guard, None
        if guard is not None:
            guard.close()


class JudgeProcess(HostClient):
    """A custom judge in its own process, seen from the harness as a ``JudgeClient``. ``keep_open``: set
    while a run streams its outputs to it (``qaeval.scoring.stream``), so the process lasts from one
    ``judge`` call to the next; otherwise each call ends with the process stopped."""

    keep_open = False

    def take_ready(self, ready: dict[str, Any]) -> None:
        self.config = config_from_plain(ready.get("config"))

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        """Every request's response, in order; the process is stopped at the end (unless ``keep_open``)."""
        try:
            return self.ask_all(requests)
        finally:
            if not self.keep_open:
                self.close()

    def request(self, chunk: Sequence[JudgeRequest]) -> dict[str, Any]:
        return {"judge": [request_to_plain(r) for r in chunk]}

    def errors(self, chunk: Sequence[JudgeRequest], why: str) -> list[JudgeResponse]:
        return [JudgeResponse(r.case_id, error=why) for r in chunk]

    def decode(self, reply: Any, chunk: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        responses = reply.get("responses") if isinstance(reply, dict) else None
        if not isinstance(responses, list):
            return self.errors(chunk, "the judge's process sent something other than responses")
        if len(responses) != len(chunk):
            return self.errors(chunk, f"the judge returned {len(responses)} responses for {len(chunk)} requests")
        return [response_from_plain(p, r) for p, r in zip(responses, chunk)]


class GeneratorProcess(HostClient):
    """A custom case generator (``qaeval propose --generator``) in its own process; ``generate`` as the
    built-in one has it. Its process lives until ``close``."""

    role = "generator"
    what = "the generator"
    doing = "while generating"

    def take_ready(self, ready: dict[str, Any]) -> None:
        from qaeval.judges.generator import GeneratorConfig

        self.config = GeneratorConfig.from_plain(ready.get("config"))

    def generate(self, requests: Sequence[Any]) -> list[Any]:
        return self.ask_all(requests)

    def request(self, chunk: Sequence[Any]) -> dict[str, Any]:
        return {"generate": [r.to_plain() for r in chunk]}

    def errors(self, chunk: Sequence[Any], why: str, given_up: bool = False) -> list[Any]:
        from qaeval.judges.generator import GenerationReply

        return [GenerationReply(r.request_id, error=why, given_up=given_up) for r in chunk]

    def not_asked(self, chunk: Sequence[Any], why: str) -> list[Any]:
        return self.errors(chunk, why, given_up=True)

    def decode(self, reply: Any, chunk: Sequence[Any]) -> list[Any]:
        from qaeval.judges.generator import GenerationReply

        replies = reply.get("replies") if isinstance(reply, dict) else None
        if not isinstance(replies, list) or len(replies) != len(chunk):
            return self.errors(chunk, "the generator's process did not send one reply per request")
        return [GenerationReply.from_plain(p, r) for p, r in zip(replies, chunk)]


def make_judge(
    judge: Any,
    *,
    settings: JudgeSettings,
    isolation: str,
    timeout: float,
    startup: float,
    data_dir: str | os.PathLike[str] | None,
) -> Any:
    """The judge for a command: a built-in one (or any judge with ``isolation="none"``) in this process,
    any other in its own (``JudgeProcess``)."""
    if _builtin_judge(judge) or isolation == "none":
        built = build(judge, what="judge", settings=settings)
        judge_config_of(built)
        return built
    return JudgeProcess(
        spec_of(judge, what="judge"), settings=settings, timeout=timeout, startup=startup, data_dir=data_dir
    )


def close_judge(judge: Any) -> None:
    if isinstance(judge, JudgeProcess):
        judge.close()
