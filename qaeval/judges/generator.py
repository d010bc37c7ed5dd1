"""The built-in case generator ``qaeval propose --from-corpus`` asks for candidate cases: one
chat-completions call per request on the ``openai`` SDK, set up, retried, deadlined and cached (in the
judge's signed cache, under keys of its own) as the HTTP judge is; ``QAEVAL_GENERATOR_MODEL`` names its
model when it differs from the judge's. Any other generator is user code, run in its own process
(``qaeval.host.clients.GeneratorProcess``).

The prompt lives in ``qaeval/rubric/generate-v1/``; its version is part of every cache key. A request asks
for a ``single``-passage question, a ``multi``-passage one, or an ``abstain`` one (no passage answers it).
The reply is one JSON object ``{"request", "question", "answer", "source_ids"}``, read strictly by
``parse_reply``: a reply that is not that object, or names another request, costs its candidate only."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from qaeval.core.errors import UsageError
from qaeval.core.jsonfile import loads_strict
from qaeval.core.text import one_line
from qaeval.data.schema import Source
from qaeval.judges.cache import VerdictCache
from qaeval.judges.openai import ChatClient, chat_key
from qaeval.scoring.judge import JudgeConfig, JudgeSettings
from qaeval.scoring.rubric import Rubric

PROMPT_VERSION = "generate-v1"
KINDS = ("single", "multi", "abstain")
TASKS = {
    "single": "Write one question that the first passage answers by itself, and its answer: a short span (a name, "
    "a number, a date, a few words) copied word for word from that passage. Ask in your own words: do "
    "not copy a phrase of eight or more words from the passage into the question.",
    "multi": "Write one question that needs both passages to answer: it must use a fact from each. The answer is "
    "a short span copied word for word from one of them; source_ids lists both passages.",
    "abstain": "Write one question on the topic of these passages that none of them answers: a plausible detail "
    "that no passage states. The answer is null and source_ids is empty.",
}
MAX_REPLY = 20_000  # characters of a reply that are read; a longer one is malformed
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["request", "question", "answer", "source_ids"],
    "properties": {
        "request": {"type": "string"},
        "question": {"type": "string"},
        "answer": {"type": ["string", "null"]},
        "source_ids": {"type": "array", "items": {"type": "string"}},
    },
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "qaeval_candidate", "strict": True, "schema": SCHEMA}}


@dataclass(frozen=True)
class GeneratorConfig(JudgeConfig):
    """What identifies a generator's candidates (a judge's config, with the generation prompt's version);
    shown in the proposal's notes."""

    prompt_version: str = PROMPT_VERSION

    def label(self) -> str:
        return f"{self.name}:{self.model} t={self.temperature:g} prompt={self.prompt_version}"

    @classmethod
    def from_plain(cls, data: Any) -> GeneratorConfig:
        """A config as a generator's process sent it, checked as a custom judge's is, or a UsageError."""
        from qaeval.host.wire import config_from_plain

        plain = {"prompt_version": PROMPT_VERSION, **data} if isinstance(data, Mapping) else data
        return cls(**asdict(config_from_plain(plain, what="generator")))


@dataclass(frozen=True)
class GenerationRequest:
    """One call's worth of generation: the kind asked for and the passages, with the prompt built."""

    request_id: str
    kind: str
    passages: tuple[Source, ...]
    messages: tuple[dict[str, str], ...]

    def to_plain(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "kind": self.kind,
            "messages": [dict(m) for m in self.messages],
            "passages": [{"id": p.id, "text": p.text, "title": p.title} for p in self.passages],
        }


@dataclass(frozen=True)
class GenerationReply:
    request_id: str
    text: str | None = None
    error: str | None = None
    # set by qaeval's proxy when it stopped asking a generator's process; never read from the process
    given_up: bool = False

    @classmethod
    def from_plain(cls, plain: Any, request: GenerationRequest) -> GenerationReply:
        """A reply as a generator's process sent it; anything malformed is an error for its request."""
        if not isinstance(plain, Mapping):
            return cls(request.request_id, error="the generator sent something other than a reply")
        rid, text, error = plain.get("request_id"), plain.get("text"), plain.get("error")
        if error is not None:
            return cls(request.request_id, error=str(error)[:500])
        if not isinstance(rid, str) or not isinstance(text, str):
            return cls(request.request_id, error="a reply needs request_id and text (strings)")
        return cls(rid, text[: MAX_REPLY + 1])

    def to_plain(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "text": self.text, "error": self.error}


def load_prompt(version: str = PROMPT_VERSION) -> Rubric:
    """The generation prompt, read as the judge's rubric is (``qaeval/rubric/<version>/``)."""
    return Rubric.load(version)


def request_for(kind: str, passages: Sequence[Source], salt: str, prompt: Rubric | None = None) -> GenerationRequest:
    """The request for ``kind`` over ``passages``; its id is a hash of them and ``salt`` (the same request
    on the same passages has the same id, so a cached reply is found again)."""
    prompt = prompt or load_prompt()
    digest = hashlib.sha256("\x00".join([kind, salt, *(p.id for p in passages)]).encode("utf-8", "surrogatepass"))
    rid = f"gen-{digest.hexdigest()[:16]}"
    shown = "\n\n".join(f"[{p.id}]" + (f" ({p.title})" if p.title else "") + f" {p.text}" for p in passages)
    user = prompt.user.substitute(request=rid, kind=kind, task=TASKS[kind], passages=shown)
    return GenerationRequest(
        rid, kind, tuple(passages), ({"role": "system", "content": prompt.system}, {"role": "user", "content": user})
    )


@dataclass(frozen=True)
class Generated:
    question: str
    answer: str | None
    source_ids: tuple[str, ...]


def parse_reply(reply: GenerationReply, request: GenerationRequest) -> tuple[Generated | None, str]:
    """(what the generator proposed, "") or (None, why the reply cannot be used)."""
    if reply.error is not None:
        return None, f"the generator failed: {one_line(reply.error)[:160]}"
    if reply.request_id != request.request_id:
        return None, "the generator answered another request"
    text = reply.text or ""
    if len(text) > MAX_REPLY:
        return None, "malformed reply"
    start, end = text.find("{"), text.rfind("}")
    try:
        data = loads_strict(text[start : end + 1]) if 0 <= start < end else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return None, "malformed reply"
    if data.get("request") != request.request_id:
        return None, "the generator answered another request"
    question, answer, ids = data.get("question"), data.get("answer"), data.get("source_ids")
    if (
        not isinstance(question, str)
        or not question.strip()
        or (answer is not None and not isinstance(answer, str))
        or not isinstance(ids, list)
        or not all(isinstance(i, str) for i in ids)
    ):
        return None, "malformed reply"
    return Generated(
        " ".join(question.split()),
        answer.strip() if isinstance(answer, str) and answer.strip() else None,
        tuple(dict.fromkeys(ids)),
    ), ""


class OpenAIGenerator(ChatClient):
    """The built-in generator: one chat-completions call per request, a thread-safe client, replies cached."""

    thread_safe = True  # generate() may be called from several threads at once

    def __init__(self, settings: JudgeSettings, model: str) -> None:
        self._need_sdk("generator")
        if not model:
            raise UsageError(
                "no generator model: set QAEVAL_GENERATOR_MODEL (or QAEVAL_JUDGE_MODEL) or pass --generator-model"
            )
        endpoint = self._connect(settings.base_url, settings.api_key, settings.max_retries, settings.timeout)
        self.config = GeneratorConfig(
            name="openai", model=model, temperature=settings.temperature, seed=settings.seed, base_url=endpoint
        )
        self.concurrency = settings.concurrency
        self.cache = VerdictCache.open(settings.cache_dir) if settings.cache else None

    def _key(self, request: GenerationRequest) -> str:
        prompt = self.config.prompt_version
        return chat_key(self.config, request.messages, task="generate", prompt=prompt, schema=SCHEMA)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationReply]:
        return [self._one(r) for r in requests]

    def _one(self, request: GenerationRequest) -> GenerationReply:
        key = self._key(request)
        hit = self.cache.get(key) if self.cache is not None else None
        if hit is not None:
            reply = GenerationReply(request.request_id, hit[0])
            if parse_reply(reply, request)[0] is not None:
                return reply
            assert self.cache is not None
            self.cache.forget(key)
        try:
            completion, failed = self._complete("generator", request.messages, RESPONSE_FORMAT)
            if failed:
                return GenerationReply(request.request_id, error=failed)
            text = completion.choices[0].message.content or ""
        except (IndexError, AttributeError, TypeError):
            return GenerationReply(request.request_id, error="a completion without a message")
        reply = GenerationReply(request.request_id, text)
        if self.cache is not None and parse_reply(reply, request)[0] is not None:
            usage = getattr(completion, "usage", None)
            self.cache.put(
                key,
                text,
                getattr(usage, "prompt_tokens", None),
                getattr(usage, "completion_tokens", None),
                self.config.model,
            )
        return reply


def make_generator(settings: JudgeSettings | None = None) -> OpenAIGenerator:
    """Factory for ``--generator qaeval.judges.generator:make_generator`` (the default)."""
    import os

    settings = settings or JudgeSettings.from_env()
    if settings.api_key is None and settings.base_url is None:
        raise UsageError("set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server) to use the OpenAI generator")
    model = os.environ.get("QAEVAL_GENERATOR_MODEL") or settings.model or ""
    return OpenAIGenerator(settings, model)
