"""A judge behind any OpenAI-compatible chat-completions endpoint (OpenAI, Azure OpenAI, vLLM, Ollama,
llama.cpp's server, a LiteLLM proxy), on the official ``openai`` SDK (the ``openai`` extra). ``make_judge``
takes a ``JudgeSettings`` (its fields name the environment variables; without one it reads them).

One call per answered case grades all three axes. Retries are the SDK's, within the call's whole
deadline (``QAEVAL_JUDGE_TIMEOUT``, ``qaeval.core.deadline``), so a server that drips its reply costs
that case a judge error, not the run. Structured output is asked for; a server that rejects
``response_format`` is asked again without it and its reply parsed tolerantly. A call that never
succeeds or a reply that never parses is a judge error for its case, never cached, never a pass; a
cached reply that no longer parses, or whose signature does not check (``qaeval.judges.cache``), is a miss."""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from qaeval.core.deadline import DeadlineExceeded, within
from qaeval.core.errors import UsageError, install_extra
from qaeval.judges.cache import VerdictCache, cache_key
from qaeval.scoring.judge import JudgeConfig, JudgeRequest, JudgeResponse, JudgeSettings
from qaeval.scoring.rubric import RUBRIC_VERSION, parse_verdict_json, verdict_json_schema
from qaeval.worker.plugins import progress_bar

VERDICT_SCHEMA = verdict_json_schema()
RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "qaeval_verdict", "strict": True, "schema": VERDICT_SCHEMA},
}


def public_url(url: str | None) -> str | None:
    """The URL without user:password, so it can be recorded in verdicts and baselines."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class ChatClient:
    """What the HTTP judge and the built-in generator share: the SDK's client, the whole-call deadline
    (``timeout``), the calls made and whether the server takes structured output."""

    def _need_sdk(self, what: str) -> None:
        """The SDK, or a usage error that says how to install it: the first thing the constructors check."""
        try:
            import openai
        except ImportError:
            raise UsageError(f"the OpenAI {what} needs the openai package: {install_extra('openai')}") from None
        self._openai: Any = openai

    def _connect(self, base_url: str | None, api_key: str | None, max_retries: int, timeout: float) -> str | None:
        """Make the client, once the arguments are checked; its endpoint without credentials."""
        self._client = self._openai.OpenAI(
            base_url=base_url, api_key=api_key or "unused-by-local-servers", max_retries=max_retries, timeout=timeout
        )
        self.timeout = timeout  # the whole call's deadline, retries included
        self._structured = True
        self._lock = threading.Lock()
        self.calls_made = 0
        return public_url(str(self._client.base_url))

    def _complete(self, what: str, messages: Sequence[Any], response_format: dict[str, Any]) -> tuple[Any, str]:
        """(the completion, "") or (None, why the call failed), within the whole-call deadline."""
        openai = self._openai
        try:
            call = functools.partial(create_completion, self, messages, response_format)
            return within(self.timeout, call, name=f"qaeval-{what}-call"), ""
        except openai.APIStatusError as exc:
            return None, f"HTTP {exc.status_code} from the {what} after retries"
        except (openai.APITimeoutError, DeadlineExceeded):
            return None, deadline_message(what, self.timeout)
        except openai.APIConnectionError as exc:
            if what == "judge":  # the generator says so as it says any other failure
                return None, f"cannot reach the judge: {type(exc).__name__}"
            return None, f"{what} call failed: {type(exc).__name__}"
        except openai.OpenAIError as exc:
            return None, f"{what} call failed: {type(exc).__name__}"


def chat_key(config: JudgeConfig, messages: Sequence[Any], **extra: Any) -> str:
    """The cache key of one call: endpoint, model, temperature, seed, the prompt, and ``extra``."""
    said = dict(base_url=config.base_url, model=config.model, temperature=config.temperature, seed=config.seed)
    return cache_key(dict(said, messages=list(messages), **extra))


class OpenAIJudge(ChatClient):
    """A ``JudgeClient`` over chat completions with bounded concurrency, retries and a verdict cache."""

    thread_safe = True  # judge() may be called from several threads at once (qaeval.scoring.stream)

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float = 0.0,
        seed: int | None = 0,
        concurrency: int = 8,
        max_retries: int = 4,
        timeout: float = 60.0,
        cache: VerdictCache | None = None,
        rubric_version: str = RUBRIC_VERSION,
        show_progress: bool | None = None,
    ) -> None:
        self._need_sdk("judge")
        if not model:
            raise UsageError("no judge model: set QAEVAL_JUDGE_MODEL or pass --judge-model")
        if concurrency < 1:
            raise UsageError("judge concurrency must be at least 1")
        endpoint = self._connect(base_url, api_key, max_retries, timeout)
        self.config = JudgeConfig(
            name="openai",
            model=model,
            temperature=temperature,
            seed=seed,
            prompt_version=rubric_version,
            base_url=endpoint,
        )
        self.concurrency, self.cache, self.show_progress = concurrency, cache, show_progress
        self.defer_warnings = False  # a run judging as outputs arrive reports rejected cache rows once, at its end
        self._rejected_reported = cache.rejected if cache is not None else 0

    def _key(self, req: JudgeRequest) -> str:
        return chat_key(self.config, req.messages, rubric=self.config.prompt_version, schema=VERDICT_SCHEMA)

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        results: list[JudgeResponse | None] = [None] * len(requests)
        todo = []
        rejected = self.cache.rejected if self.cache is not None else 0
        for i, req in enumerate(requests):
            hit = self.cache.get(self._key(req)) if self.cache is not None else None
            if hit is not None:
                reply, pt, ct = hit
                try:
                    results[i] = JudgeResponse(
                        req.case_id, parse_verdict_json(reply), prompt_tokens=pt, completion_tokens=ct, cached=True
                    )
                    continue
                except ValueError:
                    self.cache.forget(self._key(req))  # type: ignore[union-attr]  # a hit came from the cache
            todo.append(i)
        if self.cache is not None and self.cache.rejected > rejected and not self.defer_warnings:
            self.report_rejected()
        if todo:
            with (
                progress_bar(len(todo), desc="judge calls", enabled=self.show_progress) as bar,
                ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="qaeval-judge") as pool,
            ):
                futures = {pool.submit(self._call, requests[i]): i for i in todo}
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    bar.update()
        return [r for r in results if r is not None]

    def report_rejected(self) -> None:
        """Warn once about the cached verdicts that failed authentication since the last warning."""
        if self.cache is None:
            return
        with self._lock:
            count, self._rejected_reported = self.cache.rejected - self._rejected_reported, self.cache.rejected
        if count:
            warnings.warn(
                f"{count} cached judge verdict(s) in {self.cache.path} failed authentication (edited, or "
                "written by an older qaeval) and are asked again",
                stacklevel=2,
            )

    def _call(self, req: JudgeRequest) -> JudgeResponse:
        completion, failed = self._complete("judge", req.messages, RESPONSE_FORMAT)
        if failed:
            return JudgeResponse(req.case_id, error=failed)
        usage = getattr(completion, "usage", None)
        pt = getattr(usage, "prompt_tokens", None)
        ct = getattr(usage, "completion_tokens", None)
        try:
            reply = completion.choices[0].message.content or ""
            verdicts = parse_verdict_json(reply)
        except (ValueError, IndexError, AttributeError, TypeError, KeyError) as exc:
            return JudgeResponse(
                req.case_id, error=f"unparseable judge reply: {exc}", prompt_tokens=pt, completion_tokens=ct
            )
        if self.cache is not None:
            self.cache.put(self._key(req), reply, pt, ct, self.config.model)
        return JudgeResponse(req.case_id, verdicts, prompt_tokens=pt, completion_tokens=ct)


def deadline_message(what: str, seconds: float) -> str:
    """What a call that ran past its whole-call deadline (or whose SDK timed out, which takes as long) is."""
    return f"the {what} did not answer within its deadline of {seconds:g} s (QAEVAL_JUDGE_TIMEOUT, retries included)"


def create_completion(owner: Any, messages: Sequence[Any], response_format: dict[str, Any]) -> Any:
    """One chat completion for ``owner`` (the judge or the generator: its ``_client``, ``_openai``,
    ``config``, ``_lock``, ``calls_made`` and ``_structured``), asking for structured output until the server
    says it cannot do it, then without."""
    body: dict[str, Any] = dict(model=owner.config.model, messages=list(messages), temperature=owner.config.temperature)
    if owner.config.seed is not None:
        body["seed"] = owner.config.seed
    create: Any = owner._client.chat.completions.create  # its overloads want literal keywords, not **body
    if owner._structured:
        try:
            with owner._lock:
                owner.calls_made += 1
            return create(**body, response_format=response_format)
        except owner._openai.BadRequestError as exc:
            if "response_format" not in str(exc) and "json_schema" not in str(exc):
                raise
            owner._structured = False  # this server cannot do structured output: parse tolerantly
    with owner._lock:
        owner.calls_made += 1
    return create(**body)


def make_judge(settings: JudgeSettings | None = None) -> OpenAIJudge:
    """Factory for ``--judge qaeval.judges.openai:make_judge``. Without settings it reads the
    environment (``JudgeSettings.from_env``)."""
    settings = settings or JudgeSettings.from_env()
    if settings.api_key is None and settings.base_url is None:
        raise UsageError("set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server) to use the OpenAI judge")
    cache = VerdictCache.open(settings.cache_dir) if settings.cache else None
    return OpenAIJudge(
        model=settings.model or "",
        base_url=settings.base_url,
        api_key=settings.api_key,
        temperature=settings.temperature,
        seed=settings.seed,
        concurrency=settings.concurrency,
        max_retries=settings.max_retries,
        timeout=settings.timeout,
        cache=cache,
        show_progress=settings.show_progress,
    )
