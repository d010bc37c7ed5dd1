"""Layer 1: the deterministic trust checks on hand-built outputs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from conftest import make_case
from helpers import S1, S2, frames, output

from qaeval.core.text import split_sentences
from qaeval.scoring.checks import check_outputs
from qaeval.scoring.coverage import claim_covers


def run_checks(tmp_path, case=None, **fields):
    suite, cases, outs, sources = frames(tmp_path, [case or make_case()], [output(**fields)])
    result = check_outputs(cases, outs, sources)
    return {r.check: (r.passed, r.reason) for r in result.itertuples()}


def test_clean_cited_answer_passes_every_check(tmp_path):
    assert all(ok for ok, _ in run_checks(tmp_path).values())


def test_gold_answer_leaked_outside_retrieved_snippets_fails_grounding(tmp_path):
    case = make_case(gold_answer="sixty years", question="How long ago did it open?")
    res = run_checks(tmp_path, case, prompt_to_model=f"How long ago did it open?\n{S1}\nHint: sixty years")
    assert res["grounding_isolation"][0] is False
    assert "outside the retrieved sources" in res["grounding_isolation"][1]


def test_gold_answer_inside_a_retrieved_snippet_is_not_a_leak(tmp_path):
    res = run_checks(tmp_path)  # "1964" is in the retrieved s1 body that the prompt carries
    assert res["grounding_isolation"][0] is True


def test_gold_answer_from_an_unretrieved_snippet_is_a_leak(tmp_path):
    case = make_case(gold_answer="1978", gold_source_ids=["s2"])
    res = run_checks(
        tmp_path, case, retrieved_ids=["s1"], prompt_to_model=f"When did the Eastside Branch open?\n{S1}\n{S2}"
    )
    assert res["grounding_isolation"][0] is False


def test_model_call_without_recorded_prompt_fails_grounding(tmp_path):
    assert run_checks(tmp_path, prompt_to_model=None)["grounding_isolation"][0] is False


def test_prompt_without_the_question_fails_grounding(tmp_path):
    res = run_checks(tmp_path, prompt_to_model=S1)
    assert res["grounding_isolation"] == (False, "the prompt does not carry the question")


def test_a_prompt_of_ids_only_fails_grounding(tmp_path):
    """Citing a passage the model never saw cannot be grounded in it."""
    res = run_checks(tmp_path, prompt_to_model="When did the Eastside Branch open?\nContext ids: s1, s2")
    assert res["grounding_isolation"][0] is False
    assert "carries none of the retrieved sources' text" in res["grounding_isolation"][1]


def test_every_cited_passage_must_be_in_the_prompt(tmp_path):
    res = run_checks(
        tmp_path,
        citations=[{"source_id": "s1", "claim": S1}, {"source_id": "s2", "claim": S2}],
        answer=f"{S1} {S2}",
        prompt_to_model=f"When did the Eastside Branch open?\n{S1}",
    )
    assert res["grounding_isolation"] == (False, "cited source(s) s2 not in the prompt: the model never saw them")


def test_passages_match_whatever_the_whitespace_and_case(tmp_path):
    prompt = "WHEN DID THE EASTSIDE BRANCH OPEN?\n\n" + S1.upper().replace(" ", "\n   ") + "\n" + S2
    assert run_checks(tmp_path, prompt_to_model=prompt)["grounding_isolation"][0] is True


@pytest.mark.parametrize("hidden", ["\u200b", "\u00ad", "\u200d", "\u200c", "\u2060", "\ufeff"])
def test_a_gold_answer_hidden_behind_invisible_characters_is_still_a_leak(tmp_path, hidden):
    case = make_case(gold_answer="sixty years", question="How long ago did it open?")
    leak = f"si{hidden}xty ye{hidden}ars"
    res = run_checks(tmp_path, case, prompt_to_model=f"How long ago did it open?\n{S1}\nHint: {leak}")
    assert res["grounding_isolation"][0] is False, f"U+{ord(hidden):04X} hid the leak"


def test_full_width_digits_fold_to_plain_ones(tmp_path):
    case = make_case(gold_answer="1978", gold_source_ids=["s1"])
    res = run_checks(tmp_path, case, prompt_to_model=f"When did the Eastside Branch open?\n{S1}\nMaybe １９７８")
    assert res["grounding_isolation"][0] is False


def test_template_text_shared_by_most_prompts_is_not_a_leak(tmp_path):
    template = "Answer in at most 2 sentences and cite the passage you rely on."
    cases = [make_case(id=f"c{i}", gold_answer="2" if i == 0 else "1964") for i in range(4)]
    outs = [
        output(f"c{i}", prompt_to_model=f"{template}\nWhen did the Eastside Branch open?\n{S1}\n{S2}") for i in range(4)
    ]
    suite, frame_cases, frame_outs, sources = frames(tmp_path, cases, outs)
    result = check_outputs(frame_cases, frame_outs, sources)
    grounding = result[result["check"] == "grounding_isolation"].set_index("case_id")
    assert grounding.at["c0", "passed"], "the 2 in the shared instruction is template, not the gold answer"
    leaked = [output("c0", prompt_to_model=f"{template}\nWhen did the Eastside Branch open?\n{S1}\nThe answer is 2.")]
    leaked += outs[1:]
    _, frame_cases, frame_outs, sources = frames(tmp_path / "b", cases, leaked)
    result = check_outputs(frame_cases, frame_outs, sources)
    assert not result[(result["check"] == "grounding_isolation") & (result["case_id"] == "c0")]["passed"].item()


def test_the_template_is_stripped_the_same_through_the_memo_and_without_it():
    """Most prompts leave the same remainder (the template, once question and passages are cut), so a short
    one is stripped once and remembered; what comes back is what stripping it afresh gives, for short and
    long remainders, with and without a leak in them."""
    import random

    from qaeval.core.text import search_pieces
    from qaeval.scoring import checks

    rng = random.Random(7)
    words = "answer the question using only passages below cite by its id | 2 1964 branch".split()
    lead = "answer the question using only the passages below"
    texts = [f" {lead} " + " ".join(rng.choice(words) for _ in range(rng.randint(0, 400))) + " " for _ in range(150)]
    remainders = [search_pieces(t, [])[0] for t in texts] + [" answer the question using only | 2 | "]
    template = checks.learn_template(remainders)
    assert template  # the lead's 4-grams: something is stripped
    checks._stripped_short.cache_clear()
    for text in remainders + remainders:
        assert checks._strip_template(text, template) == checks._stripped(text, template)
    long = [t for t in remainders if len(t) > checks._SHORT_REMAINDER]
    info = checks._stripped_short.cache_info()
    assert long and info.currsize == len(set(remainders) - set(long))  # the long ones are never kept
    assert info.hits >= len(remainders) - len(long)  # the second pass came from the memo


def test_a_retrieved_passage_id_or_title_naming_the_answer_is_not_a_leak(tmp_path):
    """HotpotQA passages are titled by the entity that is often the answer: '[the-exies] The Exies were ...'."""
    case = make_case(
        gold_answer="Dunmore Street",
        question="Which street is Eastside on?",
        sources=[{"id": "dunmore-street", "title": "Dunmore Street", "text": S1}, {"id": "s2", "text": S2}],
        gold_source_ids=["dunmore-street"],
    )
    prompt = f"Which street is Eastside on?\n[dunmore-street] (Dunmore Street) {S1}"
    res = run_checks(
        tmp_path,
        case,
        prompt_to_model=prompt,
        retrieved_ids=["dunmore-street"],
        citations=[{"source_id": "dunmore-street", "claim": S1}],
    )
    assert res["grounding_isolation"][0] is True, res["grounding_isolation"]
    unretrieved = run_checks(
        tmp_path / "b",
        case,
        prompt_to_model=prompt + "\n[s2] Dunmore Street",
        retrieved_ids=["s2"],
        citations=[{"source_id": "s2", "claim": S2}],
        answer=S2,
    )
    assert unretrieved["grounding_isolation"][0] is False, "a passage that was not retrieved still leaks"


def test_a_lone_prompt_learns_no_template(tmp_path):
    case = make_case(gold_answer="2")
    res = run_checks(
        tmp_path, case, prompt_to_model=f"Answer in at most 2 sentences.\nWhen did the Eastside Branch open?\n{S1}"
    )
    assert res["grounding_isolation"][0] is False, "with one prompt there is nothing to call template"


def test_citation_to_unretrieved_snippet_fails_resolvability(tmp_path):
    res = run_checks(tmp_path, citations=[{"source_id": "s3", "claim": S1}])
    assert res["citation_resolvability"][0] is False and "never retrieved" in res["citation_resolvability"][1]


def test_citation_to_unknown_snippet_fails_resolvability(tmp_path):
    res = run_checks(tmp_path, citations=[{"source_id": "s9", "claim": S1}], retrieved_ids=["s9"])
    assert "no passage has this id" in res["citation_resolvability"][1]


def test_uncited_sentence_fails_coverage(tmp_path):
    res = run_checks(tmp_path, answer=f"{S1} It also lends telescopes to every patron.")
    assert res["citation_coverage"][0] is False and "1 of 2" in res["citation_coverage"][1]


def test_answer_without_citation_fails_coverage(tmp_path):
    assert run_checks(tmp_path, citations=[])["citation_coverage"][0] is False


def test_an_answer_too_large_to_weigh_against_its_claims_fails_coverage_without_comparing(tmp_path, monkeypatch):
    """5,000 sentences against 1,000 claims were 5 million comparisons: six minutes for one case, from one
    reply. Past the bound the check fails at once and says why; no sentence is compared."""
    from qaeval.scoring import coverage

    def never(*args):
        raise AssertionError("compared a sentence with a claim")

    monkeypatch.setattr(coverage, "claim_covers", never)
    answer = " ".join(f"Zq{i} wx{i} patrons." for i in range(5000))
    claims = [{"source_id": "s1", "claim": f"{S1} k{i}"} for i in range(1000)]
    res = run_checks(tmp_path, answer=answer, citations=claims)
    passed, reason = res["citation_coverage"]
    assert passed is False and reason.startswith(
        "too much to check: 5000 load-bearing sentence(s) against 1000 claim(s)"
    )
    monkeypatch.undo()
    small = run_checks(tmp_path, answer=f"{S1} It also lends telescopes to every patron.")  # far within the bound
    assert small["citation_coverage"][1].startswith("1 of 2 sentence(s) uncited")


def test_citation_that_does_not_resolve_does_not_cover(tmp_path):
    res = run_checks(tmp_path, citations=[{"source_id": "s3", "claim": S1}])
    assert res["citation_coverage"][0] is False


def test_must_abstain_case_answered_fails_closed(tmp_path):
    case = make_case(expected_behavior="unanswerable_must_abstain", gold_answer=None, gold_source_ids=[])
    res = run_checks(tmp_path, case)
    assert res["fail_closed_abstention"] == (False, "must abstain but answered")


def test_model_called_on_empty_retrieval_fails_closed(tmp_path):
    res = run_checks(tmp_path, retrieved_ids=[], citations=[], abstained=True, answer="")
    assert res["fail_closed_abstention"][0] is False
    assert "called the model with nothing retrieved" in res["fail_closed_abstention"][1]


def test_clean_abstention_passes_everything(tmp_path):
    case = make_case(expected_behavior="unanswerable_must_abstain", gold_answer=None, gold_source_ids=[])
    res = run_checks(
        tmp_path,
        case,
        answer="",
        citations=[],
        retrieved_ids=[],
        abstained=True,
        model_was_called=False,
        prompt_to_model=None,
    )
    assert all(ok for ok, _ in res.values())


def test_sentence_splitting_keeps_numbers_and_abbreviations_together():
    text = "Fees rose 2.5 percent, e.g. for DVDs. Dr. Okafor approved it! Was it 2021? Yes."
    assert split_sentences(text) == [
        "Fees rose 2.5 percent, e.g. for DVDs.",
        "Dr. Okafor approved it!",
        "Was it 2021?",
        "Yes.",
    ]


def test_claim_covers_by_containment_or_overlap():
    assert claim_covers(S1, "The Eastside Branch opened in 1964.") is True
    assert claim_covers("Eastside opened in 1964 on Dunmore Street", "Eastside Branch opened 1964 Dunmore") is True
    assert claim_covers(S2, S1) is False


def test_text_memos_are_bounded_and_agree_with_computing_afresh(monkeypatch):
    """The normal-form memo that the reference system, the checks and the judge share holds at most
    its character budget (plus one text), and what it returns is what computing afresh gives."""
    from qaeval.core import text

    monkeypatch.setattr(text._NORMAL, "limit", 200)
    text._NORMAL.clear()
    text._NORMAL.chars = 0
    samples = [f"Passage {i}: The Éxies' 1,000 fans — opened {i}.5 branches" for i in range(60)]
    for sample in samples * 2:
        assert text.normalize(sample) == text._normalized(sample)
        assert text._NORMAL.chars <= 200 + max(map(len, samples))
    assert text.normalize_once("A prompt read once") == "a prompt read once"
    assert "A prompt read once" not in text._NORMAL
    assert text.term_set("Branches opened; branches OPEN") == {"branch", "open"}


def test_normalize_of_nothing_is_empty_every_time():
    """An adversarial review: normalize(None) raised on its first call and returned "" on the next."""
    from qaeval.core.text import normalize, tokens

    assert normalize(None) == normalize(None) == "" and tokens(None) == [] and normalize("") == ""


def test_the_fast_ascii_tokenizer_finds_exactly_the_regex_tokens():
    """ASCII text is tokenised by translate and split, not the regex; on any text (decimals, sentence
    ends, abbreviations, runs of periods, commas in numbers, capitals, control characters) it must give
    the regex's normal form and terms, or hand the text to the regex."""
    import random

    from qaeval.core import text

    def regex_normal(s: str) -> str:
        return " ".join(text._WORD.findall(s.lower().replace(",", "")))

    def regex_terms(s: str) -> list[str]:
        return [t for t in map(text._term_of, regex_normal(s).split()) if t]

    fixed = [
        "Fees rose 2.5 percent, e.g. for DVDs.",
        "U.S. law... see p. 3.",
        "1,000.50 items.",
        "end.",
        "...",
        ".5 and 5. and a.b",
        "Tab\tNL\nCR\r\x00\x1b[2J",
        "v1.2.3 is OUT. Next",
        "",
    ]
    rng = random.Random(7)
    alphabet = "aAzZ09 5.,.,. \t\n-'\"!?;:()3"
    fuzz = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(20_000)]
    fast = 0
    for sample in fixed + fuzz:
        assert text._normalized(sample) == regex_normal(sample), sample
        assert text.content_terms(sample) == regex_terms(sample), sample
        assert set(text._distinct_terms(sample)) == set(regex_terms(sample)), sample
        assert len(text._distinct_terms(sample)) == len(set(regex_terms(sample))), sample  # each term once
        for k in (1, 2, 3):  # counted from the memoised normal form, repeats included
            assert text.has_content_terms(sample, k) == (len(regex_terms(sample)) >= k), (sample, k)
        fast += text._ascii_words(sample) is not None
    assert fast > len(fuzz) // 4  # the fast path is taken, not always refused
    assert text._ascii_words("Fees rose. Then fell.") == [b"fees", b"rose", b"then", b"fell"]
    assert text._ascii_words("It rose 2.5 percent.") is None  # a decimal: the regex places it


def _one_scan_per_piece(text: str, pieces: list[str]) -> str:
    """The removal as it was (one scan of the prompt per piece, longest first): the oracle where no two
    occurrences overlap."""
    out = f" {text} "
    for piece in sorted({p for p in pieces if p}, key=len, reverse=True):
        needle = f" {piece} "
        while needle in out:
            out = out.replace(needle, " | ")
    return out


def _occurrences(text: str, pieces: list[str]) -> list[tuple[int, int]]:
    words = text.split()
    return [
        (i, i + len(p.split()))
        for p in set(pieces)
        if p
        for i in range(len(words))
        if words[i : i + len(p.split())] == p.split()
    ]


def _overlap(spans: list[tuple[int, int]]) -> bool:
    """Whether two occurrences share a word without one holding the other."""
    return any(a < c < b < d for a, b in spans for c, d in spans)


def _random_prompts(seed: int, count: int, vocab: list[str]) -> list[tuple[str, list[str], list[str]]]:
    import random

    rng = random.Random(seed)

    def some(most: int) -> list[str]:
        return [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(0, most))]

    return [(" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 30))), some(5), some(3)) for _ in range(count)]


@pytest.fixture(params=["direct", "index"])
def search(request, monkeypatch):
    """``search_pieces`` by the direct scans or by the index, whatever the input's size."""
    from qaeval.core import text

    monkeypatch.setattr(text, "DIRECT_SCANS", 10**9 if request.param == "direct" else -1)
    return text.search_pieces


def test_where_no_occurrences_overlap_the_prompt_is_cut_as_one_scan_per_piece_cut_it(search):
    compared = 0
    for text, cut, find in _random_prompts(7, 3000, ["x", "y", "z", "lend", "items"]):
        if _overlap(_occurrences(text, cut)):
            continue
        rest, found = search(text, cut, find)
        assert rest == _one_scan_per_piece(text, cut), (text, cut)
        for piece in cut + find:
            assert (piece in found) == (bool(piece) and f" {piece} " in f" {text} "), (text, piece)
        compared += 1
    assert compared > 1000  # repeats and adjacent copies are common with five words; partial overlaps less so


def test_the_direct_scans_and_the_index_cut_and_find_the_same_words():
    """The index takes over from the direct scans past a size; what they give must not depend on which."""
    from qaeval.core import text as qtext

    for text, cut, find in _random_prompts(11, 3000, ["x", "y", "z"]):  # three words: overlaps everywhere
        padded = f" {text} "
        direct = qtext._cut_spans(padded, qtext._direct_spans(padded, [p for p in set(cut) if p], limit=10**9))
        rest, found = qtext._indexed_search(
            text.split(), [p for p in dict.fromkeys(cut) if p], [p for p in dict.fromkeys(find) if p]
        )
        assert rest == direct, (text, cut)
        for piece in cut + find:
            assert (piece in found) == (bool(piece) and f" {piece} " in padded), (text, piece)


def test_overlapping_occurrences_are_cut_whole(search):
    """Longest first, one cut at a time, left the part of an occurrence that overlapped an earlier cut."""
    assert search("a b c d", ["a b c", "c d"])[0] == " | "
    assert search("x y x y", ["x y"])[0] == " | | "  # adjacent copies: a separator each, as before
    assert search("q a b c d r", ["a b c", "c d"])[0] == " q | r "


def test_a_gold_answer_where_two_retrieved_passages_overlap_in_the_prompt_is_not_a_leak(search):
    """A system that merges overlapping chunks into one block sends their shared words once; the answer
    lies inside both passages, not outside them."""
    from qaeval.scoring.checks import check_grounding_isolation

    case = SimpleNamespace(question="What is Dunmore Street called now?", gold_answer="King Road")
    bodies = {
        "c1": "The Eastside Branch opened in 1964 on Dunmore Street.",
        "c2": "Dunmore Street was renamed King Road in 1990.",
    }
    out = dict(
        model_was_called=True,
        retrieved_ids=["c1", "c2"],
        citations=[{"source_id": "c2", "claim": "x"}],
        prompt_to_model="What is Dunmore Street called now?\nThe Eastside Branch opened in 1964 on "
        "Dunmore Street was renamed King Road in 1990.",
    )
    assert check_grounding_isolation(case, out, bodies) == (
        True,
        "prompt carries the question and its sources; no gold answer outside them",
    )
    out["prompt_to_model"] += " Hint: King Road."
    ok, why = check_grounding_isolation(case, out, bodies)
    assert not ok and why == "gold answer 'King Road' appears in the prompt outside the retrieved sources"


def test_a_prompt_of_thousands_of_passages_is_checked_whole():
    """Issue 40: one 3 MB row of 12,000 passages held a run 25 s, one scan of the prompt per piece. Past
    ``DIRECT_SCANS`` the pieces are found through one index; the check must still see a leak and a cited
    passage the prompt lacks among thousands (benchmarks/bench_grounding.py times it)."""
    from qaeval.core import text
    from qaeval.scoring.checks import check_grounding_isolation

    bodies = {f"p{i}": f"Branch {i} lends {i % 13 + 2} items and renews them twice." for i in range(3000)}
    case = SimpleNamespace(question="How many items does branch 7 lend?", gold_answer="9 items")
    out = dict(
        model_was_called=True,
        retrieved_ids=list(bodies),
        citations=[{"source_id": "p2999", "claim": "x"}],
        prompt_to_model="How many items does branch 7 lend?\n" + "\n".join(f"[{k}] {v}" for k, v in bodies.items()),
    )
    assert 2 * 3000 * 3 > text.DIRECT_SCANS  # through the index
    assert check_grounding_isolation(case, out, bodies)[0]  # "9 items" is in passages only (p7, p20, ...)
    out["prompt_to_model"] = (
        out["prompt_to_model"].replace("[p1500]", "(9 items) [p1500]").replace(f"[p2998] {bodies['p2998']}", "[p2998]")
    )
    out["citations"].append({"source_id": "p2998", "claim": "x"})
    ok, why = check_grounding_isolation(case, out, bodies)
    assert not ok and why == (
        "gold answer '9 items' appears in the prompt outside the retrieved sources; "
        "cited source(s) p2998 not in the prompt: the model never saw them"
    )


def test_a_repetitive_prompt_goes_to_the_index_once_the_direct_scans_meet_more_occurrences_than_words(monkeypatch):
    """A prompt of one word repeated makes every piece of that word occur everywhere: the direct scans
    stop counting at the prompt's words and the index, which reads the prompt once, cuts it."""
    from qaeval.core import text

    indexed = []
    real = text._indexed_search
    monkeypatch.setattr(text, "_indexed_search", lambda *a: indexed.append(1) or real(*a))
    prompt = " ".join(["a"] * 1000)
    assert text.search_pieces(prompt, ["a a a", "a a"])[0] == " | "  # 998 + 999 occurrences, in 1,000 words
    assert indexed == [1]
    assert text.search_pieces(prompt + " b", ["a a a a a a a a a a"])[0] == " | b "  # 991: the direct scans do it
    assert indexed == [1]
