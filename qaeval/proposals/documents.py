"""Candidates from documents: generated from a corpus's passages, verified before anyone sees them.

``propose_from_corpus(corpus, n, generator)``:

1. Draws passages at random (seeded) from ``corpus.jsonl``, skipping those with fewer than
   ``MIN_TERMS`` content terms (a short chunk gives a shallow question), and asks for three kinds of
   candidate (``qaeval.judges.generator``): ``single`` over one passage, ``multi`` over a passage and
   the passage the corpus retriever ranks nearest to it, ``abstain`` over a passage and its neighbours.
   By default 60% single, 20% multi, 20% must-abstain.
2. Keeps ``concurrency`` requests in flight (the built-in generator is called from that many threads;
   a custom one, in its own process, is sent chunks), and verifies each reply as it arrives, so the
   wall time is the generator's: about calls x latency / concurrency. A kind stops being asked for once
   its verified candidates and its requests in flight make its share.
3. Every reply goes through ``qaeval.proposals.verify``'s rules; the first that fails drops it, counted
   by reason. A reply that failed, timed out, was malformed or named another request is dropped the
   same way: it costs that candidate, never the run.
4. Stops when ``n`` are verified, or after ``max_calls`` calls (default ``3 n + 10``), saying so.
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


def _source(p: Passage) -> Source:
    return Source(p.id, p.text, p.title)


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
    target = shares(n, mix)
    draw, prompt = _Draw(corpus, seed), load_prompt()
    seen = verify.Seen(existing)
    dropped: dict[str, int] = {}
    taken: dict[str, list[Candidate]] = {k: [] for k in target}
    flying: dict[str, int] = {k: 0 for k in target}
    calls = 0
    threaded = bool(getattr(generator, "thread_safe", False))
    pending: dict[Future[list[GenerationReply]], list[GenerationRequest]] = {}
    exhausted = given_up = answered = False
    failing = ""  # why nothing more is asked of a generator that never answered
    surplus = 0
    started = time.perf_counter()

    def drop(why: str) -> None:
        dropped[why] = dropped.get(why, 0) + 1

    replied = {"all": 0, "kept": 0}

    def expected(kind: str) -> float:
        """Candidates of ``kind`` taken and, at the share of replies kept so far, to come from those in
        flight: a kind is asked for again before its last replies are in, so a dropped reply at the end
        does not cost a round trip of its own."""
        rate = (replied["kept"] + 1) / (replied["all"] + 1)
        return len(taken[kind]) + flying[kind] * rate

    def next_request() -> GenerationRequest | None:
        nonlocal exhausted
        open_kinds = [k for k in target if expected(k) < target[k] - 0.5]
        while open_kinds and not exhausted:
            kind = min(open_kinds, key=lambda k: expected(k) / target[k])
            first = draw.next()
            if first is None:
                exhausted = True
                return None
            passages = _passages_for(kind, first, retriever, corpus)
            if passages is None:
                drop("no second passage near the first")
                continue
            return request_for(kind, [_source(p) for p in passages], str(seed), prompt)
        return None

    def submit(pool: ThreadPoolExecutor) -> bool:
        nonlocal calls
        batch: list[GenerationRequest] = []
        while calls < max_calls and not given_up and not failing and len(batch) < (1 if threaded else CHUNK):
            request = next_request()
            if request is None:
                break
            batch.append(request)
            calls += 1
            flying[request.kind] += 1
        if batch:
            pending[pool.submit(_generate, generator, batch)] = batch
        return bool(batch)

    with ThreadPoolExecutor(max_workers=concurrency if threaded else 1, thread_name_prefix="qaeval-generate") as pool:
        while True:
            while len(pending) < (concurrency if threaded else 1) and submit(pool):
                pass
            if not pending:
                break
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for future in done:
                batch = pending.pop(future)
                replies = future.result()
                for request, reply in zip(batch, replies):
                    flying[request.kind] -= 1
                    if reply.given_up:
                        given_up = True
                        drop(GIVEN_UP_WHY)
                        continue
                    candidate, why = _verified(request, reply, retriever, seen, ledger)
                    replied["all"] += 1
                    if reply.error is None:
                        answered = True
                    elif not answered and replied["all"] >= EARLY_FAILURES and not failing:
                        failing = f"the first {EARLY_FAILURES} generator calls all failed, so no more were made"
                    if candidate is None:
                        drop(why)
                    elif len(taken[request.kind]) < target[request.kind]:
                        replied["kept"] += 1
                        seen.add(candidate.question)
                        taken[request.kind].append(candidate)
                    else:
                        replied["kept"] += 1
                        surplus += 1
                    if on_reply is not None:
                        on_reply()
    seconds = time.perf_counter() - started
    picked = [c for k in target for c in taken[k]]
    notes = [
        f"{len(picked)} of {n} candidate(s) verified from {calls} generator call(s): "
        + ", ".join(f"{len(taken[k])} of {target[k]} {k}" for k in target)
    ]
    if surplus:
        notes.append(
            f"{surplus} verified candidate(s) beyond the number asked for were not used (asked for ahead of drops)"
        )
    if draw.short:
        notes.append(f"{draw.short} passage(s) drawn had fewer than {MIN_TERMS} content terms and were not used")
    if len(picked) < n:
        notes.append(
            "the generator's process was given up on: it lost two chunks in a row"
            if given_up
            else failing
            if failing
            else "the corpus ran out of passages to draw"
            if exhausted
            else f"stopped at {max_calls} generator call(s) (max_calls) with {n - len(picked)} still wanted"
        )
    return CorpusProposal(picked, dropped, calls, notes, seconds)


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
