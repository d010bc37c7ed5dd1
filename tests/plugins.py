"""Adapters, judges and hooks the tests name as module:factory."""

from __future__ import annotations

import threading

from qaeval.boundary import Citation, SUTOutput

RECEIVED: list = []
ALARMS: list = []


class Raising:
    def answer(self, case):
        raise RuntimeError("backend down")


class Hanging:
    def __init__(self) -> None:
        self.release = threading.Event()

    def answer(self, case):
        self.release.wait(30)
        return SUTOutput(abstained=True)


class Malformed:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def answer(self, case):
        if self.kind == "dict":
            return {"answer": "x"}
        if self.kind == "citation":
            return SUTOutput(answer="x", citations=[("s1", "x")], retrieved_ids=["s1"], model_was_called=True,
                             prompt_to_model=case.question)
        if self.kind == "retrieved":
            return SUTOutput(answer="x", retrieved_ids="s1", model_was_called=True, prompt_to_model=case.question)
        return SUTOutput(answer=None)


class Recording:
    """Keeps every CaseView it is handed, and answers like a careful system."""

    def answer(self, case):
        RECEIVED.append(case)
        best = case.sources[0]
        return SUTOutput(answer=best.text, citations=[Citation(best.id, best.text)], retrieved_ids=[best.id],
                         model_was_called=True, prompt_to_model=f"{case.question}\n{best.text}")


def make_raising():
    return Raising()


def make_crashing_factory():
    raise RuntimeError("no credentials")


def notify(alarms):
    ALARMS.extend(alarms)


not_callable = 42


class AbstainOn:
    """The reference hub, except that it abstains on questions containing a word (a wrong refusal)."""

    def __init__(self, word: str) -> None:
        from qaeval.adapter import ReferenceHub

        self.hub, self.word = ReferenceHub(), word

    def answer(self, case):
        if self.word in case.question:
            return SUTOutput(abstained=True)
        return self.hub.answer(case)


def make_abstain_on_dvd():
    return AbstainOn("DVD")


MARKUP = ("<script>document.body.setAttribute('data-pwned','script')</script>"
          "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\"> costs $5 and $6")


class Hostile:
    """Answers with markup and cites a snippet it never retrieved, so the gate blocks on it."""

    def answer(self, case):
        first, last = case.sources[0], case.sources[-1]
        return SUTOutput(answer=MARKUP, citations=[Citation(last.id, MARKUP)], retrieved_ids=[first.id],
                         model_was_called=True, prompt_to_model=f"{case.question}\n{first.text}")


def make_hostile():
    return Hostile()
