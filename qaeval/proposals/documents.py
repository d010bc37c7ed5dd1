"""Candidates from documents: generated from a corpus's passages, verified before anyone sees them.

``propose_from_corpus(corpus, n, generator)`` draws passages at random (seeded, skipping those with
fewer than ``MIN_TERMS`` content terms) and asks for ``single``, ``multi`` and ``abstain`` candidates
(``MIX``), keeping ``concurrency`` requests in flight and verifying each reply as it arrives
(``qaeval.proposals.verify``). A reply that fails a rule, fails, times out or is malformed is dropped,
counted by reason: it costs that candidate, never the run. It stops at ``n`` verified candidates or
``max_calls`` calls (default ``3 n + 10``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from qaeval.core.errors import UsageError
from qaeval.core.text import content_terms
from qaeval.data.corpus import Corpus, Passage
from qaeval.data.schema import Source
from qaeval.judges.generator import GenerationReply, GenerationRequest, load_prompt, parse_reply, request_for
from qaeval.proposals import verify
from qaeval.proposals.candidates import ABSTAIN, ANSWER, Candidate
from qaeval.proposals.ledger import Ledger, question_key
from qaeval.system.retriever import CorpusRetriever
from qaeval.worker.plugins import contained

MIX = {"single": 0.6, "multi": 0.2, "abstain": 0.2}
MIN_TERMS = 12
FLOOR = 0.5  # the relevance floor of the reference system's corpus retriever
NEIGHBOURS = 3
EARLY_FAILURES = 8  # the first this many replies all failed, none used: nothing more is asked
GIVEN_UP_WHY = "not asked: the generator's process lost two chunks in a row"
CHUNK = 16  # requests sent at once to a generator that is not thread-safe (one in its own process)
DIFFICULTY = {"single": "single-hop", "multi": "multi-hop", "abstain": "single-hop"}
WHY = {
    "single": "generated: a question one passage answers",
    "multi": "generated: a question that needs both passages",
    "abstain": "generated: a question on the corpus's topic that no passage answers",
}


def shares(n: int, mix: dict[str, float] = MIX) -> dict[str, int]:
    """``n`` split by ``mix`` (largest remainder)."""
    exact = {k: n * f for k, f in mix.items()}
    out = {k: int(x) for k, x in exact.items()}
    for k in sorted(exact, key=lambda k: exact[k] - out[k], reverse=True)[: n - sum(out.values())]:
        out[k] += 1
    return out


@dataclass
class CorpusProposal:
    candidates: list[Candidate]
    dropped: dict[str, int]
    calls: int
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0  # from the first request to the last reply


class _Draw:
    """Passages in a seeded random order, each at most once, skipping short ones."""

    def __init__(self, corpus: Corpus, seed: int) -> None:
        self.corpus, self.rng = corpus, random.Random(seed)
        self.order = list(range(len(corpus)))
        self.rng.shuffle(self.order)
        self.at = 0
        self.short = 0

    def next(self) -> Passage | None:
        while self.at < len(self.order):
            p = self.corpus.at(self.order[self.at])
            self.at += 1
            if len(content_terms(p.text)) >= MIN_TERMS:
                return p
            self.short += 1
        return None


def _passages_for(kind: str, first: Passage, retriever: CorpusRetriever, corpus: Corpus) -> list[Passage] | None:
    if kind == "single":
        return [first]
    near = [corpus[pid] for pid, _ in retriever.search(first.text, NEIGHBOURS + 1) if pid != first.id]
    near = [p for p in near if not verify.same_text(p.text, first.text)]  # a duplicate chunk is no second fact
    if kind == "multi":
        return [first, near[0]] if near else None
    return [first, *near[: NEIGHBOURS - 1]]


def propose_from_corpus(
    corpus: Corpus,
    n: int,
    generator: Any,
    *,
    retriever: CorpusRetriever,
    seed: int = 0,
    existing: Sequence[str] = (),
    ledger: Ledger | None = None,
    concurrency: int = 8,
    max_calls: int | None = None,
    mix: dict[str, float] = MIX,
    on_reply: Callable[[], None] | None = None,
) -> CorpusProposal:
    """Up to ``n`` verified candidates (see the module's steps). ``existing``: the questions of the cases
    already in the golden set, which a candidate may not nearly repeat."""
    if n < 1:
        raise UsageError("n must be at least 1")
    if concurrency < 1:
        raise UsageError("concurrency must be at least 1")
    max_calls = 3 * n + 10 if max_calls is None else max_calls
    run = _Proposing(corpus, n, generator, retriever, seed, existing, ledger, max_calls, mix, on_reply)
    started = time.perf_counter()
    run.ask_and_verify(concurrency)
    seconds = time.perf_counter() - started
    picked = [c for k in run.target for c in run.taken[k]]
    return CorpusProposal(picked, run.dropped, run.calls, run.notes(picked), seconds)


class _Proposing:
    """One corpus proposal under way: the share each kind is to make, the candidates taken and the requests
    in flight per kind, the replies dropped by reason, and why asking stopped, if it did."""

    def __init__(
        self,
        corpus: Corpus,
        n: int,
        generator: Any,
        retriever: CorpusRetriever,
        seed: int,
        existing: Sequence[str],
        ledger: Ledger | None,
        max_calls: int,
        mix: dict[str, float],
        on_reply: Callable[[], None] | None,
    ) -> None:
        self.corpus, self.n, self.generator, self.retriever, self.seed = corpus, n, generator, retriever, seed
        self.ledger, self.max_calls, self.on_reply = ledger, max_calls, on_reply
        self.target = shares(n, mix)
        self.draw, self.prompt = _Draw(corpus, seed), load_prompt()
        self.seen = verify.Seen(existing)
        self.dropped: dict[str, int] = {}
        self.taken: dict[str, list[Candidate]] = {k: [] for k in self.target}
        self.flying: dict[str, int] = {k: 0 for k in self.target}
        self.calls = 0
        self.threaded = bool(getattr(generator, "thread_safe", False))
        self.pending: dict[Future[list[GenerationReply]], list[GenerationRequest]] = {}
        self.exhausted = self.given_up = self.answered = False
        self.failing = ""  # why nothing more is asked of a generator that never answered
        self.surplus = 0
        self.replied = {"all": 0, "kept": 0}

    def drop(self, why: str) -> None:
        self.dropped[why] = self.dropped.get(why, 0) + 1

    def expected(self, kind: str) -> float:
        """Candidates of ``kind`` taken and, at the share of replies kept so far, to come from those in
        flight: a kind is asked for again before its last replies are in, so a dropped reply at the end
        does not cost a round trip of its own."""
        rate = (self.replied["kept"] + 1) / (self.replied["all"] + 1)
        return len(self.taken[kind]) + self.flying[kind] * rate

    def next_request(self) -> GenerationRequest | None:
        """A request for the kind furthest from its share, over passages drawn for it; None when no kind is
        open or the corpus ran out."""
        open_kinds = [k for k in self.target if self.expected(k) < self.target[k] - 0.5]
        while open_kinds and not self.exhausted:
            kind = min(open_kinds, key=lambda k: self.expected(k) / self.target[k])
            first = self.draw.next()
            if first is None:
                self.exhausted = True
                return None
            passages = _passages_for(kind, first, self.retriever, self.corpus)
            if passages is None:
                self.drop("no second passage near the first")
                continue
            return request_for(kind, [Source(p.id, p.text, p.title) for p in passages], str(self.seed), self.prompt)
        return None

    def submit(self, pool: ThreadPoolExecutor) -> bool:
        """Send the generator one more request (a chunk, to one that is not thread-safe); whether any was sent."""
        batch: list[GenerationRequest] = []
        while (
            self.calls < self.max_calls
            and not self.given_up
            and not self.failing
            and len(batch) < (1 if self.threaded else CHUNK)
        ):
            request = self.next_request()
            if request is None:
                break
            batch.append(request)
            self.calls += 1
            self.flying[request.kind] += 1
        if batch:
            self.pending[pool.submit(_generate, self.generator, batch)] = batch
        return bool(batch)

    def ask_and_verify(self, concurrency: int) -> None:
        """Keep ``concurrency`` requests in flight, verifying each reply as it arrives, until none is asked."""
        in_flight = concurrency if self.threaded else 1
        with ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="qaeval-generate") as pool:
            while True:
                while len(self.pending) < in_flight and self.submit(pool):
                    pass
                if not self.pending:
                    break
                done, _ = wait(list(self.pending), return_when=FIRST_COMPLETED)
                for future in done:
                    batch = self.pending.pop(future)
                    for request, reply in zip(batch, future.result()):
                        self.receive(request, reply)

    def receive(self, request: GenerationRequest, reply: GenerationReply) -> None:
        """One reply: verified and taken (or counted beyond the share), or dropped by reason."""
        self.flying[request.kind] -= 1
        if reply.given_up:
            self.given_up = True
            self.drop(GIVEN_UP_WHY)
            return
        candidate, why = _verified(request, reply, self.retriever, self.seen, self.ledger)
        self.replied["all"] += 1
        if reply.error is None:
            self.answered = True
        elif not self.answered and self.replied["all"] >= EARLY_FAILURES and not self.failing:
            self.failing = f"the first {EARLY_FAILURES} generator calls all failed, so no more were made"
        if candidate is None:
            self.drop(why)
        elif len(self.taken[request.kind]) < self.target[request.kind]:
            self.replied["kept"] += 1
            self.seen.add(candidate.question)
            self.taken[request.kind].append(candidate)
        else:
            self.replied["kept"] += 1
            self.surplus += 1
        if self.on_reply is not None:
            self.on_reply()

    def notes(self, picked: list[Candidate]) -> list[str]:
        """What the run says: how many were verified per kind, what was not used, and why it stopped short."""
        n, target, taken = self.n, self.target, self.taken
        notes = [
            f"{len(picked)} of {n} candidate(s) verified from {self.calls} generator call(s): "
            + ", ".join(f"{len(taken[k])} of {target[k]} {k}" for k in target)
        ]
        if self.surplus:
            notes.append(
                f"{self.surplus} verified candidate(s) beyond the number asked for were not used "
                "(asked for ahead of drops)"
            )
        if self.draw.short:
            notes.append(
                f"{self.draw.short} passage(s) drawn had fewer than {MIN_TERMS} content terms and were not used"
            )
        if len(picked) < n:
            notes.append(
                "the generator's process was given up on: it lost two chunks in a row"
                if self.given_up
                else self.failing
                if self.failing
                else "the corpus ran out of passages to draw"
                if self.exhausted
                else f"stopped at {self.max_calls} generator call(s) (max_calls) with {n - len(picked)} still wanted"
            )
        return notes


def _generate(generator: Any, batch: list[GenerationRequest]) -> list[GenerationReply]:
    """The generator's replies to ``batch``, one per request, in order, whatever it does."""
    ok, replies = contained(lambda: list(generator.generate(batch)), what="the generator")
    if not ok:  # raised or exited: the generator's failure costs its candidates, not the run
        return [GenerationReply(r.request_id, error=replies) for r in batch]
    if len(replies) != len(batch) or not all(isinstance(r, GenerationReply) for r in replies):
        return [
            GenerationReply(r.request_id, error="the generator did not return one reply per request") for r in batch
        ]
    return replies


def _verified(
    request: GenerationRequest,
    reply: GenerationReply,
    retriever: CorpusRetriever,
    seen: verify.Seen,
    ledger: Ledger | None,
) -> tuple[Candidate | None, str]:
    got, why = parse_reply(reply, request)
    if got is None:
        return None, why
    kind = request.kind
    failed = verify.check_shape(kind, got.answer)
    gold, failed_sources = verify.check_sources(kind, got.source_ids, request.passages)
    failed = failed or failed_sources
    gold_passages = [p for p in request.passages if gold and p.id in gold]
    if not failed and got.answer is not None:
        failed = verify.answer_in_passages(got.answer, gold_passages) or verify.gives_away(got.question, got.answer)
    failed = failed or verify.copies_passage(got.question, request.passages) or seen.near(got.question)
    if not failed and ledger is not None and ledger.decided(question_key(got.question)):
        failed = "decided before (in the ledger)"
    if not failed and kind == "abstain" and retriever.search(got.question, 1, floor=FLOOR):
        failed = verify.RETRIEVABLE
    if failed:
        return None, failed
    checks = [
        "the answer occurs in its gold passage(s)"
        if got.answer is not None
        else f"the retriever finds no passage above the floor ({FLOOR})",
        f"the question copies no run of {verify.COPY_WORDS} words",
        "no near-duplicate",
    ]
    source = " + ".join(p.id for p in request.passages)
    return Candidate(
        origin="corpus",
        kind=kind,
        source=source,
        why=WHY[kind],
        question=got.question,
        passages=request.passages,
        answer=got.answer,
        expected_behavior=ABSTAIN if kind == "abstain" else ANSWER,
        gold_answer=got.answer,
        gold_source_ids=gold or (),
        difficulty=DIFFICULTY[kind],
        checks=tuple(checks),
    ), ""
