"""Calibration: the judge must agree with people on every axis before its numbers count."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import GOLDEN, LABELS

from qaeval import DatasetError, JudgeNotTrusted
from qaeval.calibration import calibrate, load_labels, quadratic_kappa
from qaeval.cli import main


def labels(rows) -> pd.DataFrame:
    return pd.DataFrame([dict(case_id=c, axis=a, human=s, reason="", output_fingerprint=fp, line=i)
                         for i, (c, a, s, fp) in enumerate(rows, 1)])


def test_demo_labels_refuse_the_offline_judge_on_answer_correctness(capsys):
    assert main(["calibrate", "--data", str(GOLDEN), "--labels", str(LABELS)]) == 2
    out = capsys.readouterr().out
    assert "RETUNE JUDGE" in out and "answer_correctness" in out and "<- WEAK" in out
    assert "faithfulness" in out and "(stale)" in out


def test_demo_labels_are_enough_and_cover_every_axis():
    frame = load_labels(LABELS)
    assert len(frame) >= 16 and set(frame["axis"]) == {"faithfulness", "answer_correctness", "citation_correctness"}
    assert frame["reason"].str.len().gt(10).all()


def test_good_overall_average_does_not_save_a_weak_axis(golden_run):
    rows = [(c, "faithfulness", 2, None) for c in ("single-0002", "single-0003", "single-0004", "single-0005",
                                                   "single-0006", "single-0007", "multi-0001", "multi-0003")]
    rows += [(c, "citation_correctness", 2, None) for c in ("single-0002", "single-0003", "single-0004")]
    rows += [(c, "answer_correctness", 2, None) for c in ("single-0002", "single-0003")]
    result = calibrate(golden_run, labels(rows))
    overall = result.agreement.set_index("axis").loc["overall"]
    assert overall["exact"] >= 0.7
    assert result.weak_axes == ["answer_correctness"] and result.verdict == "RETUNE JUDGE"
    with pytest.raises(JudgeNotTrusted) as info:
        result.raise_for_status()
    assert info.value.result is result


def test_judge_is_trusted_when_every_axis_agrees(golden_run):
    rows = [("single-0002", "faithfulness", 2, None), ("single-0001", "answer_correctness", 0, None),
            ("single-0002", "answer_correctness", 1, None), ("single-0003", "citation_correctness", 2, None)]
    result = calibrate(golden_run, labels(rows))
    assert result.trusted and result.verdict == "TRUST"
    result.raise_for_status()


def test_axis_without_usable_labels_is_not_trusted(golden_run):
    result = calibrate(golden_run, labels([("single-0002", "faithfulness", 2, None)]))
    assert set(result.weak_axes) == {"answer_correctness", "citation_correctness"}
    assert any("no usable label" in n for n in result.notes)


def test_stale_label_is_reported_and_left_out(golden_run):
    fp = golden_run.per_case.set_index("case_id").at["single-0002", "output_fingerprint"]
    result = calibrate(golden_run, labels([("single-0002", "faithfulness", 2, fp),
                                           ("single-0003", "faithfulness", 0, "deadbeefdeadbeef")]))
    status = result.pairs.set_index("case_id")["status"]
    assert status["single-0002"] == "compared" and status["single-0003"] == "stale"
    assert result.agreement.set_index("axis").at["faithfulness", "n"] == 1


def test_label_on_an_abstained_case_is_not_judged(golden_run):
    result = calibrate(golden_run, labels([("abstain-0001", "faithfulness", 0, None)]))
    assert result.pairs["status"].item() == "not judged"


def test_agreement_figures_and_confusion_matrix(golden_run):
    result = calibrate(golden_run, load_labels(LABELS))
    row = result.agreement.set_index("axis").loc["answer_correctness"]
    assert row["n"] == 9 and row["exact"] == pytest.approx(2 / 9) and row["within_one"] == 1.0
    matrix = result.confusion["answer_correctness"]
    assert matrix.shape == (3, 3) and matrix.values.sum() == 9
    assert matrix.loc[2, 1] == 5, "five answers a person calls right, the F1 judge calls partial"


def test_quadratic_kappa_known_values():
    assert quadratic_kappa(np.array([0, 1, 2]), np.array([0, 1, 2])) == 1.0
    assert quadratic_kappa(np.array([0, 2]), np.array([2, 0])) < 0
    assert math.isnan(quadratic_kappa(np.array([2, 2]), np.array([2, 2])))


@pytest.mark.parametrize("line, message", [
    ({"case_id": "nope", "axis": "faithfulness", "score": 2}, "not in the data"),
    ({"case_id": "single-0001", "axis": "tone", "score": 2}, "'axis' is 'tone'"),
    ({"case_id": "single-0001", "axis": "faithfulness", "score": 3}, "expected 0, 1 or 2"),
    ({"case_id": "single-0001", "axis": "faithfulness", "score": 2, "by": "me"}, "unknown field 'by'"),
])
def test_bad_labels_exit_65_with_file_and_line(tmp_path, capsys, line, message):
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps({"case_id": "single-0002", "axis": "faithfulness", "score": 2}) + "\n" + json.dumps(line) + "\n")
    assert main(["calibrate", "--data", str(GOLDEN), "--labels", str(path)]) == 65
    err = capsys.readouterr().err
    assert f"labels.jsonl:2: {message}" in err or ("labels.jsonl:2" in err and message in err)


def test_duplicate_label_is_rejected(tmp_path):
    row = json.dumps({"case_id": "single-0002", "axis": "faithfulness", "score": 2})
    (tmp_path / "l.jsonl").write_text(row + "\n" + row + "\n")
    with pytest.raises(DatasetError, match="first on line 1"):
        load_labels(tmp_path / "l.jsonl")
