"""The offline judge: mechanical, deterministic, free, and documented as a stand-in.

``qaeval.judges.offline:make_judge`` is the default judge. It grades by token overlap against the
cited span, so the pipeline runs anywhere without a model; it does not judge meaning.
"""

from __future__ import annotations

from collections.abc import Sequence

from qaeval.core.text import distinct_terms, split_sentences, term_set, tokens
from qaeval.data.schema import CITATION_CORRECTNESS
from qaeval.scoring.judge import AxisVerdict, JudgeConfig, JudgeRequest, JudgeResponse, plain_config

# the cut-offs, as docs/guides/judge.md's table gives them (tests/test_offline_judge_doc.py holds them to it)
FULL = 0.9  # faithfulness and citation correctness score 2 from this share of content words found
PARTIAL = 0.5  # ... and 1 from this one
F1_FULL = 0.8  # answer correctness scores 2 from this token F1 with the gold answer


def _best_sentence(text: str, target_terms: frozenset[str]) -> str:
    best, best_hits = "", 0
    for sentence in split_sentences(text):
        hits = len(target_terms.intersection(distinct_terms(sentence)))
        if hits > best_hits:
            best, best_hits = sentence, hits
    return best


def _share(part: frozenset[str], whole: tuple[str, ...]) -> float:
    """The share of ``part`` in ``whole`` (``distinct_terms`` of a text)."""
    return len(part.intersection(whole)) / len(part) if part else 0.0


_ARTICLES = frozenset(("a", "an", "the"))


def contains_gold(answer: str, gold: str) -> bool:
    """Whether ``answer`` contains ``gold`` after SQuAD's normalisation (lower-case, accents, punctuation
    and the articles a/an/the removed, spaces collapsed), as ALCE's ``str_em`` tests it, but on whole
    words: "7 days" is in "DVDs are lent for 7 days.", "5" is not in "15"."""
    want = [t for t in tokens(gold) if t not in _ARTICLES]
    if not want:
        return False
    have = " " + " ".join(t for t in tokens(answer) if t not in _ARTICLES) + " "
    return f" {' '.join(want)} " in have


def token_f1(prediction: str, reference: str) -> float:
    pred, ref = tokens(prediction), tokens(reference)
    common = sum(min(pred.count(t), ref.count(t)) for t in set(pred) & set(ref))
    if not pred or not ref or not common:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


class OfflineJudge:
    """A mechanical judge: token overlap against the cited span. Deterministic, offline, free.

    faithfulness: share of the answer's content terms found in the cited sources (2 at ``FULL``, 0.9,
    and over; 1 at ``PARTIAL``, 0.5, and over). answer_correctness: 2 when the answer contains the
    normalised gold answer (``contains_gold``: SQuAD-style containment, as ALCE's str_em) or its token F1
    with the gold answer is ``F1_FULL`` (0.8) or over; 1 when every gold token appears in the answer,
    scattered; else 0. citation_correctness: share of the claim's terms in the cited snippet versus in the
    decoy (2 at ``FULL`` and ahead of the decoy; 1 at ``PARTIAL``). docs/guides/judge.md says what
    this is and is not good for.

    It is a stand-in. It does not read meaning: an answer that contains the gold string next to a wrong
    claim still gets full credit, and a right answer in other words gets none. Calibrate before trusting it.

    Attributes:
        config: ``offline:token-overlap``, temperature 0, seed 0.
    """

    def __init__(self) -> None:
        self.config = JudgeConfig(name="offline", model="token-overlap", temperature=0.0, seed=0)

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        return [self.judge_one(r) for r in requests]

    def judge_one(self, req: JudgeRequest) -> JudgeResponse:
        answer_terms, evidence = term_set(req.answer), req.evidence
        support = _share(answer_terms, distinct_terms(evidence))
        f_score = 2 if support >= FULL else 1 if support >= PARTIAL else 0
        f_quote = _best_sentence(evidence, answer_terms) if f_score else ""
        f_why = f"{support:.0%} of the answer's content words are in the cited sources"
        verdicts = [AxisVerdict("faithfulness", f_score, f_quote, f_why)]
        gold = req.gold_answer or ""
        f1, gold_tokens, contained = token_f1(req.answer, gold), tokens(gold), contains_gold(req.answer, gold)
        all_in = bool(gold_tokens) and set(gold_tokens) <= set(tokens(req.answer))
        a_score = 2 if contained or f1 >= F1_FULL else 1 if all_in else 0
        a_quote = _best_sentence(req.answer, term_set(gold) | set(gold_tokens)) if a_score else ""
        how = "; the answer contains the gold answer" if contained else ""
        how = how or ("; every gold token present, not as one phrase" if all_in else "")
        a_why = f"token F1 {f1:.2f} with the gold answer{how}"
        verdicts.append(AxisVerdict("answer_correctness", a_score, a_quote, a_why))
        for c in req.citations:
            claim = term_set(c.claim)
            cited, decoy = _share(claim, distinct_terms(c.text)), _share(claim, distinct_terms(c.decoy_text))
            score = 2 if cited >= FULL and cited > decoy else 1 if cited >= PARTIAL else 0
            quote = _best_sentence(c.text, claim) if score else ""
            against = (
                f"{decoy:.0%} with decoy {c.decoy_id}"
                if c.decoy_id is not None
                else "no other passage to weigh it against"
            )
            why = f"claim overlap {cited:.0%} with the cited source, {against}"
            verdicts.append(AxisVerdict(CITATION_CORRECTNESS, score, quote, why, target=c.source_id))
        return JudgeResponse(req.case_id, verdicts, prompt_tokens=0, completion_tokens=0)


def made_by_qaeval(judge: object) -> bool:
    """Whether ``judge`` is this judge exactly as qaeval makes it: not a subclass, nothing set on the
    instance but its config, and that config plain (``plain_config``). Any other is its user's code."""
    if type(judge) is not OfflineJudge or type(vars(judge)) is not dict:  # a dict subclass could hide a key
        return False
    return set(vars(judge)) == {"config"} and plain_config(vars(judge)["config"])


def make_judge() -> OfflineJudge:
    """Factory for ``--judge qaeval.judges.offline:make_judge`` (the default)."""
    return OfflineJudge()
