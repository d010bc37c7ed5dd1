"""Labelled sets as people publish them: ARES's own annotation file, partly labelled sets (a verdict on
the axes they label), and the record of a labelled calibration read back as what it is."""

from __future__ import annotations

import json

from qaeval import api

ARES_HUMAN_HEADER = ["Reaction", "Sources", "Question", "Document", "Answer", "Context_Relevance_Label",
                     "Answer_Faithfulness_Label", "Answer_Relevance_Label"]


def test_ares_human_annotation_file_with_question_and_extra_columns_imports(tmp_path):
    """The shape of ARES's LLM_Judge_Test_Set_Human_Annotations.tsv: ``Question`` (not ``Query``) and the
    columns ARES adds (Reaction, Sources, the other labels)."""
    rows = [["no_reaction", "https://docs.example.com/a", "How do I load files?",
             "LOAD DATA loads files into a table from a directory.", "LOAD DATA loads files into a table.", "1", "1", "1"],
            ["no_reaction", "https://docs.example.com/b", "Who owns the account?",
             "Only the account owner can log in to the account console.", "Anyone can log in.", "1", "0", "0"]]
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
    source.write_text("Question\tDocument\tAnswer\tAnswer_Faithfulness_Label\n\tA document.\tAn answer.\t1\n"
                      "A question?\tA document.\tAn answer.\t1\n")
    report = api.import_cases("ares", source, tmp_path / "out", labelled=True)
    assert report.imported == 1 and report.refused == {"Query (or Question) missing or empty": 1}
