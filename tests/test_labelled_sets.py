"""Labelled sets as people publish them: ARES's own annotation file, partly labelled sets (a verdict on
the axes they label), and the record of a labelled calibration read back as what it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import GOLDEN, LABELS, ROOT, SHARED_DATA

from qaeval import api
from qaeval.cli import main
from qaeval.core.errors import RecordError
from qaeval.data.schema import AXES
from qaeval.verdicts.calibration import CalibrationResult

CONSTANT = "constant_judge:make_judge"  # tests/constant_judge.py: always 2
EXAMPLE = ROOT / "examples" / "labelled-set.jsonl"
EXPERTQA = SHARED_DATA / "expertqa-rand-val.jsonl"

ARES_HUMAN_HEADER = [
    "Reaction",
    "Sources",
    "Question",
    "Document",
    "Answer",
    "Context_Relevance_Label",
    "Answer_Faithfulness_Label",
    "Answer_Relevance_Label",
]


def test_ares_human_annotation_file_with_question_and_extra_columns_imports(tmp_path):
    """The shape of ARES's LLM_Judge_Test_Set_Human_Annotations.tsv: ``Question`` (not ``Query``) and the
    columns ARES adds (Reaction, Sources, the other labels)."""
    rows = [
        [
            "no_reaction",
            "https://docs.example.com/a",
            "How do I load files?",
            "LOAD DATA loads files into a table from a directory.",
            "LOAD DATA loads files into a table.",
            "1",
            "1",
            "1",
        ],
        [
            "no_reaction",
            "https://docs.example.com/b",
            "Who owns the account?",
            "Only the account owner can log in to the account console.",
            "Anyone can log in.",
            "1",
            "0",
            "0",
        ],
    ]
    source = tmp_path / "LLM_Judge_Test_Set_Human_Annotations.tsv"
    source.write_text("\n".join("\t".join(r) for r in [ARES_HUMAN_HEADER, *rows]) + "\n")
    report = api.import_cases("ares", source, tmp_path / "out", labelled=True)
    assert report.imported == 2 and not report.refused, report.refused
    lines = [json.loads(line) for line in (tmp_path / "out" / "ares-labelled.jsonl").read_text().splitlines()]
    assert [r["question"] for r in lines] == ["How do I load files?", "Who owns the account?"]
    assert [r["labels"]["faithfulness"]["score"] for r in lines] == [2, 0]
    assert [r["sources"][0]["text"] for r in lines] == [rows[0][3], rows[1][3]]


def test_ares_row_without_query_or_question_is_refused_naming_both(tmp_path):
    source = tmp_path / "ares.tsv"
    source.write_text(
        "Question\tDocument\tAnswer\tAnswer_Faithfulness_Label\n\tA document.\tAn answer.\t1\n"
        "A question?\tA document.\tAn answer.\t1\n"
    )
    report = api.import_cases("ares", source, tmp_path / "out", labelled=True)
    assert report.imported == 1 and report.refused == {"Query (or Question) missing or empty": 1}


# --------------------------------------------------------------------------- a chance-corrected floor


def claim(i: int, score: int) -> dict:
    """A labelled claim the people scored ``score`` (the answer is the passage itself, so every judge quote
    can be checked)."""
    text = f"The Eastside Branch opened in {1900 + i} on Dunmore Street and hosts the Maker Lab."
    return {
        "id": f"claim-{i:03d}",
        "question": "",
        "sources": [{"id": "p1", "text": text}],
        "output": {"answer": text, "citations": [{"source_id": "p1", "claim": text}], "abstained": False},
        "labels": {"faithfulness": {"score": score, "reason": "read it"}},
    }


def labelled_set(tmp_path: Path, scores: list[int]) -> Path:
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(claim(i, s)) + "\n" for i, s in enumerate(scores)))
    return path


def test_a_constant_judge_is_refused_on_kappa_where_people_disagree(tmp_path):
    """Nine of twelve claims supported: a judge that always answers 2 agrees exactly on 0.75 of them (over
    the 0.70 bar) and cannot tell a supported claim from an unsupported one (kappa 0)."""
    path = labelled_set(tmp_path, [2] * 9 + [0] * 3)
    result = api.calibrate(labelled=str(path), judge=CONSTANT)
    row = result.agreement.set_index("axis").loc["faithfulness"]
    assert row["exact"] == pytest.approx(0.75) and row["kappa"] == pytest.approx(0.0) and row["spread"]
    assert result.verdict == "RETUNE JUDGE" and result.weak_axes == ["faithfulness"]
    assert row["failed"] == "kappa" and row["status"] == "cannot tell answers apart: quadratic kappa 0.00 < 0.40"
    assert result.reason.startswith("faithfulness: cannot tell answers apart: quadratic kappa 0.00 < 0.40")
    assert api.calibrate(labelled=str(path), judge=CONSTANT, min_kappa=0.0).ok, "the floor is --min-kappa"


def test_every_bar_an_axis_misses_is_named(tmp_path):
    path = labelled_set(tmp_path, [2] * 3 + [0] * 3)
    row = api.calibrate(labelled=str(path), judge=CONSTANT).agreement.set_index("axis").loc["faithfulness"]
    assert row["failed"] == "labels,exact,kappa"
    assert row["status"] == (
        "too few labels to certify (6 < 10); weak: exact agreement 0.50 < 0.70; "
        "cannot tell answers apart: quadratic kappa 0.00 < 0.40"
    )


def test_where_people_gave_one_score_only_the_axis_is_judged_on_exact_agreement_alone(tmp_path):
    path = labelled_set(tmp_path, [2] * 10)
    result = api.calibrate(labelled=str(path), judge=CONSTANT)
    row = result.agreement.set_index("axis").loc["faithfulness"]
    assert result.ok and row["passed"] and not row["spread"] and row["failed"] == ""
    assert row["status"] == (
        "ok on exact agreement alone: the people gave one score only, so discrimination could not be measured"
    )
    assert "on faithfulness the people gave one score only, so discrimination could not be measured" in result.reason
    assert "exact alone: on faithfulness the people gave one score only" in result.summary_text()


def test_strict_labels_refuse_the_judge_on_answer_correctness_alone(capsys, strict_labels):
    """Faithfulness and citation correctness labels are all 2 (kappa cannot measure them), answer
    correctness has spread and a kappa of 0.35: with the kappa floor at 0.30 only its exact agreement fails."""
    assert main(["calibrate", "--data", str(GOLDEN), "--labels", str(strict_labels), "--min-kappa", "0.3"]) == 2
    out = capsys.readouterr().out
    result = api.calibrate(str(GOLDEN), labels=str(strict_labels), min_kappa=0.3)
    assert result.reason == "answer_correctness: weak: exact agreement 0.17 < 0.70"
    rows = result.agreement.set_index("axis")
    assert rows.at["answer_correctness", "kappa"] == pytest.approx(0.35, abs=0.005)
    assert result.unmeasured_axes == ["faithfulness", "citation_correctness"]
    assert "faithfulness             11   1.00 [0.74, 1.00]      1.00   0.00    NaN  ok (exact alone)" in out


def test_gate_with_labels_refuses_the_judge_by_the_same_bars(tmp_path, strict_labels):
    result = api.gate(str(GOLDEN), baseline=str(GOLDEN / "ci-baseline.json"), labels=str(strict_labels), min_kappa=0.5)
    assert result.verdict == "BLOCK" and result.calibration.min_kappa == 0.5
    assert result.calibration.agreement.set_index("axis").at["answer_correctness", "failed"] == "exact,kappa"
    assert "quadratic kappa 0.35 < 0.50" in result.reason


@pytest.mark.skipif(not EXPERTQA.is_file(), reason=f"real data absent: {EXPERTQA} is not part of a clone")
def test_a_constant_judge_is_refused_on_expertqa_faithfulness(tmp_path):
    """ExpertQA's experts call 715 of 969 judged claims fully supported: always answering 2 agrees exactly
    on 0.74 of them, with a kappa of 0.00."""
    assert main(["import", "expertqa", str(EXPERTQA), "--out", str(tmp_path), "--labelled"]) == 0
    result = api.calibrate(labelled=str(tmp_path / "expertqa-labelled.jsonl"), judge=CONSTANT)
    row = result.agreement.set_index("axis").loc["faithfulness"]
    assert row["n"] == 969 and row["exact"] == pytest.approx(715 / 969) and row["exact"] >= 0.70
    assert row["kappa"] == pytest.approx(0.0) and row["failed"] == "kappa" and not result.ok


# --------------------------------------------------------------------------- the axes a set labels


def test_the_readme_labelled_set_gets_a_verdict_on_faithfulness(capsys):
    assert main(["calibrate", "--labelled", str(EXAMPLE), "--min-labels", "5"]) == 2
    out = capsys.readouterr().out
    result = api.calibrate(labelled=str(EXAMPLE), min_labels=5)
    assert result.axes == ("faithfulness",) and result.not_assessed == ["answer_correctness", "citation_correctness"]
    assert result.reason == (
        "faithfulness: weak: exact agreement 0.50 < 0.70; not assessed: answer_correctness, citation_correctness"
    )
    assert "not assessed: answer_correctness, citation_correctness (calibrated on faithfulness" in out
    rows = result.agreement.set_index("axis")
    assert not rows.at["answer_correctness", "assessed"] and rows.at["answer_correctness", "status"].startswith(
        "not assessed"
    )


def test_axes_asked_for_are_the_ones_decided_and_an_unknown_one_is_a_usage_error(tmp_path, capsys):
    path = labelled_set(tmp_path, [2] * 10)
    asked = api.calibrate(labelled=str(path), judge=CONSTANT, axes=["faithfulness", "answer_correctness"])
    assert asked.weak_axes == ["answer_correctness"] and "no usable label" in asked.reason
    assert main(["calibrate", "--labelled", str(path), "--axes", "faithfulness", "--axes", "tone"]) == 64
    assert (
        "'tone' is not an axis; the axes are faithfulness, answer_correctness, citation_correctness"
        in capsys.readouterr().err
    )


def test_keyed_labels_are_decided_on_every_axis_by_default(golden_run, strict_labels):
    result = api.calibrate(str(GOLDEN), labels=str(strict_labels), axes=["answer_correctness"])
    assert result.ok is False and result.not_assessed == ["faithfulness", "citation_correctness"]
    assert api.calibrate(str(GOLDEN), labels=str(LABELS)).axes == AXES


# --------------------------------------------------------------------------- the record of a labelled calibration


def test_a_labelled_calibration_renders_its_report(tmp_path):
    page = tmp_path / "calibration.html"
    assert main(["calibrate", "--labelled", str(EXAMPLE), "--min-labels", "5", "--html", str(page)]) == 2
    text = page.read_text()
    assert "RETUNE JUDGE" in text and "Agreement with human labels per axis" in text and "claim-001" in text


def test_a_labelled_calibration_record_loads_as_what_it_is(tmp_path):
    record = tmp_path / "cal.json"
    saved = api.calibrate(labelled=str(EXAMPLE), min_labels=5, save=str(record))
    loaded = api.load_run(record)
    assert isinstance(loaded, CalibrationResult) and loaded.labelled and loaded.reason == saved.reason
    assert [c.question for c in loaded.run.suite] == [""] * 6 and loaded.run.suite.cases[0].gold_answer is None
    assert main(["report", str(record), "--html", str(tmp_path / "again.html")]) == 0, "report draws, it does not judge"
    assert "RETUNE JUDGE" in (tmp_path / "again.html").read_text()


def test_a_labelled_record_with_a_case_that_is_not_a_labelled_case_is_refused(tmp_path):
    record = tmp_path / "cal.json"
    api.calibrate(labelled=str(EXAMPLE), min_labels=5, save=str(record))
    data = json.loads(record.read_text())
    data["cases"][1]["case"]["expected_behavior"] = "unanswerable_must_abstain"
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(data))
    with pytest.raises(
        RecordError,
        match="case 'claim-002': 'expected_behavior' is 'unanswerable_must_abstain', not 'answer' as in a labelled set",
    ):
        api.load_run(forged)


def test_a_calibration_record_with_its_axes_emptied_is_refused(tmp_path):
    record = tmp_path / "cal.json"
    api.calibrate(labelled=str(EXAMPLE), min_labels=5, save=str(record))
    data = json.loads(record.read_text())
    data["calibration"]["axes"] = []
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(data))
    with pytest.raises(RecordError, match=r"calibration\.axes \[\] are not axes"):
        api.load_run(forged)
