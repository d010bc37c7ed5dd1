"""A tolerances file (``gate --tolerances FILE``) is input data: whatever is wrong with its content is bad
data (exit 65), naming the file and the metric, every problem at once, as invalid JSON in it is; the same
mistakes typed as ``--tolerance metric=value`` are usage errors (64), naming the flag."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import GOLDEN, ROOT

import qaeval as qa
from qaeval.core.errors import DatasetError

BASELINE = str(GOLDEN / "ci-baseline.json")


def gate(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command line in a fresh process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "qaeval", "gate", "--data", str(GOLDEN), "--baseline", BASELINE, *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "QAEVAL_PROGRESS": "0"},
    )


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ({"faithfulnes": 0.01}, "no gated metric named 'faithfulnes'"),
        ({"rerank_mrr": "0.05"}, "tolerance for rerank_mrr must be a finite number >= 0, got '0.05'"),
        ({"rerank_mrr": -0.1}, "tolerance for rerank_mrr must be a finite number >= 0, got -0.1"),
        ({"rerank_mrr": True}, "tolerance for rerank_mrr must be a finite number >= 0, got True"),
        ({"rerank_mrr": None}, "tolerance for rerank_mrr must be a finite number >= 0, got None"),
        ([0.01], 'a tolerances file holds one JSON object, {"metric": tolerance}, not list'),
    ],
)
def test_a_tolerances_file_with_wrong_content_is_bad_data_naming_the_file_and_the_metric(tmp_path, content, says):
    path = tmp_path / "my-tolerances.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    done = gate("--tolerances", str(path))
    assert done.returncode == 65, done.stderr  # was 64, a usage error, with no file named
    assert f"{path}: " in done.stderr and says in done.stderr
    assert "Traceback" not in done.stderr and "GATE" not in done.stdout  # refused before anything ran


def test_invalid_json_in_it_is_bad_data_too_and_every_problem_is_listed_at_once(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"rerank_mrr": 0.05,}', encoding="utf-8")
    done = gate("--tolerances", str(path))
    assert done.returncode == 65 and f"{path}: tolerances file is not valid JSON" in done.stderr
    path.write_text(json.dumps({"faithfulnes": 0.01, "rerank_mrr": -1, "retrieval_recall_at_k": 0.05}))
    with pytest.raises(DatasetError) as caught:
        qa.gate(str(GOLDEN), baseline=BASELINE, tolerances=str(path))
    assert [p.file for p in caught.value.problems] == [str(path)] * 2
    assert "'faithfulnes'" in caught.value.problems[0].message
    assert "tolerance for rerank_mrr" in caught.value.problems[1].message


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("faithfulnes=0.01", "--tolerance faithfulnes=0.01: no gated metric named 'faithfulnes'"),
        ("rerank_mrr=-1", "--tolerance rerank_mrr=-1: tolerance for rerank_mrr must be a finite number >= 0"),
        ("rerank_mrr=x", "--tolerance 'rerank_mrr=x': 'x' is not a number"),
    ],
)
def test_the_same_mistake_in_the_flag_is_a_usage_error_naming_the_flag(flag, says):
    done = gate("--tolerance", flag)
    assert done.returncode == 64 and says in done.stderr, done.stderr
