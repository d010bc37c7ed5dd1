"""Calibration: the judge must agree with people on every axis, on enough labels, before its numbers count."""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pytest
from conftest import GOLDEN, LABELS

from qaeval import DatasetError, JudgeNotTrusted, api
from qaeval.cli import main
from qaeval.core.frames import frame
from qaeval.data.labels import LABEL_SCHEMA, load_labels
from qaeval.system.labelled import load_labelled_set
from qaeval.verdicts.agreement import quadratic_kappa, wilson
from qaeval.verdicts.calibration import calibrate

ALL_ANSWERED = [
    "single-0001",
    "single-0002",
    "single-0003",
    "single-0004",
    "multi-0001",
    "multi-0002",
    "agg-0001",
    "agg-0002",
    "single-0005",
    "single-0006",
    "single-0007",
    "multi-0003",
]


def labels(rows):
    return frame(
        [
            dict(case_id=c, axis=a, human=s, reason="", output_fingerprint=fp, line=i)
            for i, (c, a, s, fp) in enumerate(rows, 1)
        ],
        LABEL_SCHEMA,
    )


def agreeing(golden_run, axis: str, cases=ALL_ANSWERED):
    scores = golden_run.per_case.set_index("case_id")[axis]
    return [(c, axis, int(scores[c]), None) for c in cases]


def test_demo_labels_trust_the_offline_judge_that_credits_an_answer_containing_the_gold(capsys):
    """The offline judge gave 1 (which counts as wrong) to eight answers that contain the gold answer and
    that people call right; crediting containment (SQuAD-style, as ALCE's str_em) it agrees with them."""
    assert main(["calibrate", "--data", str(GOLDEN), "--labels", str(LABELS)]) == 0
    out = capsys.readouterr().out
    assert "CALIBRATION: TRUSTED" in out
    assert "answer_correctness       12   0.83 [0.55, 0.95]      1.00   0.17   0.89  ok" in out
    assert "faithfulness" in out and "(stale)" in out


def test_strict_labels_refuse_the_offline_judge_on_answer_correctness(capsys, strict_labels):
    assert main(["calibrate", "--data", str(GOLDEN), "--labels", str(strict_labels)]) == 2
    out = capsys.readouterr().out
    assert "RETUNE JUDGE" in out and "answer_correctness" in out and "<- weak: exact agreement 0.17 < 0.70" in out


def test_strict_labels_show_why_the_rule_is_per_axis(golden_run, strict_labels):
    """The overall figure clears the bar; answer correctness does not; the judge is refused."""
    result = calibrate(golden_run, load_labels(strict_labels))
    rows = result.agreement.set_index("axis")
    assert rows.at["overall", "exact"] >= 0.70 and result.overall_clears_bar
    assert rows.at["answer_correctness", "exact"] == pytest.approx(2 / 12)
    assert result.weak_axes == ["answer_correctness"] and result.exit_code == 2
    assert all(
        rows.at[a, "n"] >= result.min_labels for a in ("faithfulness", "answer_correctness", "citation_correctness")
    )
    assert "only as good as its weakest axis" in result.summary_text()


def test_demo_labels_cover_every_axis_with_reasons():
    frame_ = load_labels(LABELS)
    assert set(frame_["axis"]) == {"faithfulness", "answer_correctness", "citation_correctness"}
    assert frame_["reason"].str.len().gt(10).all()


def test_judge_is_trusted_when_every_axis_agrees_on_enough_labels(golden_run):
    rows = sum((agreeing(golden_run, a) for a in ("faithfulness", "answer_correctness", "citation_correctness")), [])
    result = calibrate(golden_run, labels(rows))
    assert result.ok and result.verdict == "TRUSTED" and result.exit_code == 0
    result.raise_for_status()


def test_too_few_labels_cannot_certify_an_axis(golden_run):
    rows = agreeing(golden_run, "faithfulness") + agreeing(golden_run, "citation_correctness")
    rows += agreeing(golden_run, "answer_correctness", ALL_ANSWERED[:4])
    result = calibrate(golden_run, labels(rows), min_labels=10)
    assert result.weak_axes == ["answer_correctness"], "4 labels agreeing perfectly still certify nothing"
    assert "too few labels to certify (4 < 10)" in result.reason
    assert calibrate(golden_run, labels(rows), min_labels=4).ok


def test_good_overall_average_does_not_save_a_weak_axis(golden_run):
    rows = agreeing(golden_run, "faithfulness") + agreeing(golden_run, "citation_correctness")
    rows += [(c, "answer_correctness", 1, None) for c in ALL_ANSWERED[:6]]  # the judge gives none of them a 1
    result = calibrate(golden_run, labels(rows), min_labels=6)
    assert result.agreement.set_index("axis").at["overall", "exact"] == pytest.approx(24 / 30)
    assert result.overall_clears_bar and result.weak_axes == ["answer_correctness"]
    with pytest.raises(JudgeNotTrusted) as info:
        result.raise_for_status()
    assert info.value.result is result


def test_axis_without_usable_labels_is_not_trusted(golden_run):
    result = calibrate(golden_run, labels([("single-0002", "faithfulness", 2, None)]), min_labels=1)
    assert set(result.weak_axes) == {"answer_correctness", "citation_correctness"}
    assert any("no usable label" in n for n in result.notes)


def test_stale_label_is_reported_and_left_out(golden_run):
    fp = golden_run.per_case.set_index("case_id").at["single-0002", "output_fingerprint"]
    result = calibrate(
        golden_run,
        labels([("single-0002", "faithfulness", 2, fp), ("single-0003", "faithfulness", 0, "deadbeefdeadbeef")]),
    )
    status = result.pairs.set_index("case_id")["status"]
    assert status["single-0002"] == "compared" and status["single-0003"] == "stale"
    assert result.agreement.set_index("axis").at["faithfulness", "n"] == 1


def test_label_on_an_abstained_case_is_not_judged(golden_run):
    result = calibrate(golden_run, labels([("abstain-0001", "faithfulness", 0, None)]))
    assert result.pairs["status"].item() == "not judged"


def test_agreement_intervals_kappa_and_confusion_matrix(golden_run, strict_labels):
    result = calibrate(golden_run, load_labels(strict_labels))
    row = result.agreement.set_index("axis").loc["answer_correctness"]
    assert row["n"] == 12 and row["within_one"] == 1.0
    assert (row["exact_low"], row["exact_high"]) == pytest.approx(wilson(2, 12))
    assert row["exact_low"] < row["exact"] < row["exact_high"]
    matrix = result.confusion["answer_correctness"]
    assert matrix.shape == (3, 3) and matrix.values.sum() == 12
    assert matrix.loc[1, 2] == 8, "eight answers the strict annotator calls partial, the containment judge right"


def test_disagreements_come_first_with_the_judges_quote_and_rationale(golden_run, strict_labels):
    result = calibrate(golden_run, load_labels(strict_labels))
    d = result.disagreements()
    assert len(d) == 10 and set(d["axis"]) == {"answer_correctness"}
    first = d.iloc[0]
    assert first["judge_rationale"].startswith("token F1") and first["reason"]
    assert first["judge_quote"] in golden_run.per_case.set_index("case_id").at[first["case_id"], "answer"]


def test_wilson_interval_known_values():
    low, high = wilson(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-3) and high == pytest.approx(0.9433, abs=1e-3)
    assert all(math.isnan(v) for v in wilson(0, 0))
    assert wilson(10, 10)[1] == pytest.approx(1.0) and wilson(0, 10)[0] == pytest.approx(0.0)


def test_quadratic_kappa_known_values():
    assert quadratic_kappa(np.array([0, 1, 2]), np.array([0, 1, 2])) == 1.0
    assert quadratic_kappa(np.array([0, 2]), np.array([2, 0])) < 0
    assert math.isnan(quadratic_kappa(np.array([2, 2]), np.array([2, 2])))


@pytest.mark.parametrize(
    "line, message",
    [
        ({"case_id": "nope", "axis": "faithfulness", "score": 2}, "not in the data"),
        ({"case_id": "single-0001", "axis": "tone", "score": 2}, "'axis' is 'tone'"),
        ({"case_id": "single-0001", "axis": "faithfulness", "score": 3}, "expected 0, 1 or 2"),
        ({"case_id": "single-0001", "axis": "faithfulness", "score": 2, "by": "me"}, "unknown field 'by'"),
    ],
)
def test_bad_labels_exit_65_with_file_and_line(tmp_path, capsys, line, message):
    path = tmp_path / "labels.jsonl"
    path.write_text(
        json.dumps({"case_id": "single-0002", "axis": "faithfulness", "score": 2}) + "\n" + json.dumps(line) + "\n"
    )
    assert main(["calibrate", "--data", str(GOLDEN), "--labels", str(path)]) == 65
    err = capsys.readouterr().err
    assert "labels.jsonl:2" in err and message in err


def test_duplicate_label_and_duplicate_key_are_rejected(tmp_path):
    row = json.dumps({"case_id": "single-0002", "axis": "faithfulness", "score": 2})
    (tmp_path / "l.jsonl").write_text(row + "\n" + row + "\n")
    with pytest.raises(DatasetError, match="first on line 1"):
        load_labels(tmp_path / "l.jsonl")
    (tmp_path / "k.jsonl").write_text('{"case_id": "single-0002", "axis": "faithfulness", "score": 2, "score": 0}\n')
    with pytest.raises(DatasetError, match="'score' appears twice"):
        load_labels(tmp_path / "k.jsonl")


# --------------------------------------------------------------------------- labelled sets


def labelled_row(i: int, score: int, **changes):
    text = f"The Eastside Branch opened in 19{60 + i} on Dunmore Street and hosts the Maker Lab."
    row = {
        "id": f"claim-{i:03d}",
        "question": "",
        "sources": [
            {"id": "p1", "text": text, "title": "Eastside"},
            {"id": "p2", "text": "Printing costs 10 cents per page."},
        ],
        "output": {
            "answer": text if score == 2 else "The Northgate Branch has a rooftop garden and a ferry.",
            "citations": [{"source_id": "p1", "claim": text}],
            "abstained": False,
        },
        "labels": {"faithfulness": {"score": score, "reason": "supported" if score == 2 else "not supported"}},
    }
    row.update(changes)
    return row


def test_a_labelled_set_calibrates_with_no_adapter(tmp_path, capsys):
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(labelled_row(i, 2 if i % 2 else 0)) + "\n" for i in range(12)))
    code = main(["calibrate", "--labelled", str(path), "--adapter", "plugins:make_raising"])
    out = capsys.readouterr().out
    assert code == 0, "the set labels faithfulness only, and the verdict is on the axes it labels"
    assert "faithfulness" in out and "1.00" in out and "not assessed: answer_correctness, citation_correctness" in out
    code = main(["calibrate", "--labelled", str(path), "--axes", "faithfulness,answer_correctness"])
    out = capsys.readouterr().out
    assert code == 2 and "no usable label on answer_correctness" in out, "an axis asked for needs labels"
    result = api.calibrate(labelled=str(path), min_labels=10)
    row = result.agreement.set_index("axis").loc["faithfulness"]
    assert row["n"] == 12 and row["exact"] == 1.0, "the offline judge sees the unsupported claims"
    assert result.run.outputs["error"].isna().all(), "no adapter was called (the raising one would have failed)"


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(labels={"tone": {"score": 2}}), "unknown axis 'tone'"),
        (dict(labels={"faithfulness": {"score": 5}}), "labels.faithfulness must be"),
        (
            dict(output={"answer": "x", "citations": [{"source_id": "p9", "claim": "x"}]}),
            "cites 'p9', which is not in sources",
        ),
        (dict(output={"answer": 3}), "answer is int, not str"),
        (dict(question=None), "'question' must be a string"),
        (dict(extra=1), "unknown field 'extra'"),
    ],
)
def test_a_malformed_labelled_set_names_file_and_line(tmp_path, change, message):
    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps(labelled_row(0, 2)) + "\n" + json.dumps(labelled_row(1, 2, **change)) + "\n")
    with pytest.raises(DatasetError) as info:
        load_labelled_set(path)
    assert any(p.line == 2 and message in p.message for p in info.value.problems), info.value.problems


def test_labelled_set_outputs_are_fingerprinted_like_run_outputs(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps(labelled_row(0, 2)) + "\n")
    suite, outputs, label_frame = load_labelled_set(path)
    assert list(label_frame["output_fingerprint"]) == list(outputs["output_fingerprint"])
    assert suite.cases[0].question == "" and outputs["retrieved_ids"][0] == ["p1"]


# --------------------------------------------------------------------------- the spreadsheet round trip


def fill(sheet_text: str, score_for) -> str:
    rows = list(csv.DictReader(io.StringIO(sheet_text)))
    for row in rows:
        row["score"] = score_for(row)
        row["reason"] = "read it"
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def test_label_round_trip_export_fill_import_calibrate(tmp_path, capsys):
    record, sheet, labels_out = tmp_path / "run.json", tmp_path / "sheet.csv", tmp_path / "labels.jsonl"
    assert main(["run", "--data", str(GOLDEN), "--save", str(record), "--quiet"]) == 0
    assert main(["label", "export", str(record), "--out", str(sheet)]) == 0
    text = sheet.read_text()
    header = text.splitlines()[0].split(",")
    assert {"case_id", "axis", "output_fingerprint", "score", "reason"} <= set(header)
    assert "judge" not in " ".join(header), "the judge's own score is withheld from annotators"
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 36 and all(r["score"] == "" for r in rows)
    scores = api.load_run(record).per_case.set_index("case_id")
    sheet.write_text(fill(text, lambda r: str(int(scores.at[r["case_id"], r["axis"]]))))
    assert main(["label", "import", str(sheet), "--record", str(record), "--out", str(labels_out)]) == 0
    assert "wrote 36 label(s)" in capsys.readouterr().out
    assert main(["calibrate", "--data", str(GOLDEN), "--labels", str(labels_out)]) == 0, "it agrees with itself"


def test_export_samples_answered_cases_reproducibly(tmp_path, golden_run):
    a, n = api.label_export(golden_run, tmp_path / "a.csv", sample=4, seed=7)
    b, _ = api.label_export(golden_run, tmp_path / "b.csv", sample=4, seed=7)
    assert n == 4 and a.read_text() == b.read_text()
    assert len({r["case_id"] for r in csv.DictReader(io.StringIO(a.read_text()))}) == 4


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda r: r.update(score="3") if r["case_id"] == "single-0002" else None, "score '3' is not 0, 1 or 2"),
        (lambda r: r.update(output_fingerprint="deadbeef00000000") if r["case_id"] == "single-0003" else None, "stale"),
        (
            lambda r: r.update(case_id="ghost") if r["case_id"] == "single-0004" else None,
            "case 'ghost' is not in the run",
        ),
    ],
)
def test_a_bad_sheet_is_refused_with_its_line(tmp_path, golden_run, edit, message):
    sheet = tmp_path / "s.csv"
    api.label_export(golden_run, sheet)
    rows = list(csv.DictReader(io.StringIO(sheet.read_text())))
    for r in rows:
        r["score"] = "2"
        edit(r)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    sheet.write_text(out.getvalue())
    with pytest.raises(DatasetError) as info:
        api.label_import(sheet, golden_run, tmp_path / "l.jsonl")
    bad = [p for p in info.value.problems if message in p.message]
    assert bad and all(p.line and p.line > 1 for p in bad)
    # A row is named by the line it starts on (cells hold line breaks) and by its row in a spreadsheet.
    first = next(
        i
        for i, r in enumerate(rows)
        if r["score"] == "3" or r["output_fingerprint"] == "deadbeef00000000" or r["case_id"] == "ghost"
    )
    physical = next(
        n
        for n, text in enumerate(out.getvalue().splitlines(), start=1)
        if text.startswith(rows[first]["case_id"] + ",")
    )
    assert bad[0].line == physical and f"(sheet row {first + 2})" in bad[0].message
    assert not (tmp_path / "l.jsonl").exists()


def test_a_bad_row_after_blank_lines_and_multi_line_cells_is_named_by_where_it_starts(tmp_path, golden_run):
    """An adversarial review: blank lines (which the CSV reader skips) shifted the line named."""
    sheet = tmp_path / "s.csv"
    api.label_export(golden_run, sheet)
    rows = list(csv.DictReader(io.StringIO(sheet.read_text())))
    for r in rows:
        r["score"] = "2"
    rows[1]["score"] = "7"
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerow(rows[0])
    out.write("\r\n\r\n")  # two blank rows, as a spreadsheet might leave
    start = out.getvalue().count("\n") + 1
    writer.writerows(rows[1:])
    sheet.write_text(out.getvalue(), newline="")
    assert any("\n" in v for v in rows[0].values()), "the first row has a cell with line breaks"
    with pytest.raises(DatasetError) as info:
        api.label_import(sheet, golden_run, tmp_path / "l.jsonl")
    bad = [p for p in info.value.problems if "score '7'" in p.message]
    breaks = sum(v.count("\n") for v in rows[0].values())
    assert bad[0].line == start and f"(sheet row {start - breaks})" in bad[0].message
