"""A LangChain RAG system as a qaeval adapter, with a stand-in chat model so it runs without a service.

    .venv/bin/qaeval run --data golden --adapter examples.langchain_adapter:make_adapter --concurrency 4

Needs the ``langchain`` extra (``pip install -e '.[langchain]'``; ``dev`` includes it). For your system,
replace ``QuotingChatModel()`` with your chat model (``ChatOpenAI(model=..., temperature=0)``, ...) and
keep the rest: ``adapter_factory`` retrieves over each case's own sources (or, for a corpus folder, over
the corpus, indexed once per worker), calls the model only when something was retrieved, and reads the
``[source_id]`` citations the default prompt asks for. Pass ``retriever=`` to use your own index instead.

``QuotingChatModel`` is a langchain-core chat model that follows that prompt mechanically: it reads the
question and the passages out of the messages it is sent and answers with the one sentence of those
passages that shares the most words with the question, cited by its passage's id, or with "I cannot
answer." when no sentence shares any. Like the reference system, it is honest about what quoting can do.
"""

from __future__ import annotations

import re
from typing import Any

# qaeval's integration first: without langchain-core, its import error names the extra to install
from qaeval.integrations.langchain import adapter_factory  # isort: skip
from langchain_core.language_models.chat_models import SimpleChatModel
from langchain_core.messages import BaseMessage

from qaeval.core.text import content_terms, split_sentences

PASSAGE = re.compile(r"^\[(?P<id>[^\]\s]+)\][^\n]*\n(?P<text>.+?)(?=\n\n\[|\Z)", re.M | re.S)


def quote(question: str, prompt: str) -> str:
    """The answer the stand-in model gives: of every sentence of every passage in the prompt, the one that
    shares the most words with the question (the earlier one on a tie), cited by its id."""
    asked = set(content_terms(question))
    candidates = [
        (len(asked & set(content_terms(sentence))), -rank, -i, sentence, found["id"])
        for rank, found in enumerate(PASSAGE.finditer(prompt.split("Passages:", 1)[-1].strip()))
        for i, sentence in enumerate(split_sentences(found["text"]))
    ]
    shared, _, _, sentence, source_id = max(candidates, default=(0, 0, 0, "", ""))
    if not shared:
        return "I cannot answer."
    return f"{sentence.rstrip('.')} [{source_id}]."


class QuotingChatModel(SimpleChatModel):
    """A stand-in chat model (see the module's docstring); no network, deterministic."""

    @property
    def _llm_type(self) -> str:
        return "qaeval-quoting-example"

    def _call(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        prompt = str(messages[-1].content)
        question = re.search(r"Question: (.*)", prompt)
        return quote(question[1] if question else "", prompt)


make_adapter = adapter_factory(model=QuotingChatModel())
