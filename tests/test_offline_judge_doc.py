"""The judge guide's table of the offline judge's cut-offs says what the code does: its numbers are the
code's constants, and an answer at the documented faithfulness cut-off scores 2 while one content word
fewer scores 1 (and its case fails), through ``qaeval.score``."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT, make_case, write_cases

import qaeval
from qaeval.judges import offline

GUIDE = ROOT / "docs" / "guides" / "judge.md"
WORDS = "amber basalt cobalt dolphin ember falcon granite harbor indigo jasper".split()  # no stopword, no stem cut


def row(axis: str) -> list[str]:
    """The cells of the guide's table row for ``axis``."""
    for line in GUIDE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].startswith(axis):
            return cells
    raise AssertionError(f"the judge guide has no table row for {axis}")


def percent(cell: str) -> float:
    return float(re.search(r"at least (\d+)%", cell).group(1)) / 100


def test_the_guides_cut_offs_are_the_codes():
    faithfulness, citation, correctness = row("faithfulness"), row("citation correctness"), row("answer correctness")
    assert (percent(faithfulness[1]), percent(faithfulness[2])) == (offline.FULL, offline.PARTIAL)
    assert (percent(citation[1]), percent(citation[2])) == (offline.FULL, offline.PARTIAL)
    assert float(re.search(r"token F1 is at least ([\d.]+)", correctness[1]).group(1)) == offline.F1_FULL
    text = GUIDE.read_text(encoding="utf-8")
    assert "`FULL`, `PARTIAL` and `F1_FULL` in `qaeval/judges/offline.py`" in text
    assert "**A case passes only with faithfulness 2.** An answer in the system's own words" in text
    assert f"What the {offline.FULL:.0%} means" in text


@pytest.mark.parametrize(("found", "score"), [(None, 2), (-1, 1)])
def test_an_answer_at_the_documented_cut_off_is_faithful_and_one_word_fewer_is_not(tmp_path, found, score):
    """Ten content words in the answer; the cited passage holds the guide's share of them (9), or one fewer."""
    share = percent(row("faithfulness")[1])
    held = round(share * len(WORDS)) + (found or 0)
    passage = " ".join(WORDS[:held]) + "."
    answer = " ".join(WORDS) + "."
    data = write_cases(
        tmp_path / "data",
        [make_case(sources=[{"id": "s1", "text": passage}], gold_answer=WORDS[0], gold_source_ids=["s1"])],
    )
    scored = qaeval.score(
        str(data),
        [
            dict(
                case_id="case-0001",
                answer=answer,
                citations=[qaeval.Citation("s1", answer)],
                retrieved_ids=["s1"],
                model_was_called=True,
                prompt_to_model=f"{passage}\nWhen did the Eastside Branch open?",
            )
        ],
    )
    case = scored.per_case.iloc[0]
    assert case["faithfulness"] == score
    assert bool(case["case_passed"]) is (score == 2)
    if score == 1:
        assert "judged unfaithful (score 1" in " ".join(map(str, case["fail_reasons"]))
