from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "golden"
# The public datasets (never part of a clone): ../shared/data beside the project, or the folder
# QAEVAL_SHARED_DATA names. Tests that need one skip without it, saying which.
SHARED_DATA = Path(os.environ.get("QAEVAL_SHARED_DATA") or ROOT.parent / "shared" / "data")
LABELS = GOLDEN / "calibration" / "human_labels.jsonl"
sys.path.insert(0, str(Path(__file__).parent))  # tests/plugins.py: adapters and hooks for tests
# MLflow 3 sends usage telemetry over the internet from a thread of its own unless told not to. Tests reach
# no network but 127.0.0.1; and where mlflow is imported outside a test (collection, a subprocess) its
# thread, failing, removes a variable from os.environ while a run copies the environment (a KeyError).
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture(autouse=True, scope="session")
def _cache_key_in_a_temporary_folder(tmp_path_factory):
    """The judge cache's signing key goes to a temporary folder, never the user's ~/.local/state."""
    if "QAEVAL_CACHE_KEY" not in os.environ:
        os.environ["QAEVAL_CACHE_KEY"] = str(tmp_path_factory.mktemp("cache-key") / "cache-key")


def write_strict_labels(path: Path) -> Path:
    """The demo labels as a strict annotator gives them: an answer that quotes a whole passage around the
    fact asked for is partly right (1), not right (2). The offline judge credits an answer that contains
    the gold answer, so it disagrees on those eight and is refused on answer correctness (exact 2/12),
    while the overall agreement (25/35) clears the bar: a judge these labels do not trust."""
    rows = [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows:
        if row["axis"] == "answer_correctness" and row["score"] == 2:
            row["score"] = 1
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def strict_labels(tmp_path_factory) -> Path:
    return write_strict_labels(tmp_path_factory.mktemp("strict-labels") / "strict_labels.jsonl")


BASE_CASE: dict[str, Any] = {
    "id": "case-0001",
    "question": "When did the Eastside Branch open?",
    "sources": [
        {"id": "s1", "title": "Eastside", "text": "The Eastside Branch opened in 1964 on Dunmore Street."},
        {"id": "s2", "text": "The Northgate Branch opened in 1978 and is the smallest location."},
        {"id": "s3", "text": "Printing costs 10 cents per page."},
    ],
    "gold_answer": "1964",
    "gold_source_ids": ["s1"],
    "expected_behavior": "answer",
    "difficulty": "single-hop",
    "split": "frozen",
}


def make_case(**changes: Any) -> dict[str, Any]:
    case = copy.deepcopy(BASE_CASE)
    for key, value in changes.items():
        if value is ...:
            case.pop(key, None)
        else:
            case[key] = value
    return case


def write_cases(folder: Path, cases: list[dict[str, Any]], name: str = "cases.jsonl") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return folder


@pytest.fixture
def suite_dir(tmp_path: Path) -> Path:
    return write_cases(tmp_path / "data", [make_case()])


@pytest.fixture(scope="session")
def golden_run():
    from qaeval import api

    return api.run(str(GOLDEN))


@pytest.fixture(scope="session")
def hostile_reports(tmp_path_factory):
    """A suite whose cases and answers carry markup, gated and run into HTML reports."""
    import os

    from qaeval.cli import main

    tmp = tmp_path_factory.mktemp("hostile")
    markup = "<b>bold</b><script>document.body.setAttribute('data-pwned','case')</script> $x^2$"
    data = write_cases(
        tmp / "data",
        [make_case(id="xss-<i>0001</i>", question=f"When did Eastside open? {markup}", adversarial=f"tag {markup}")],
    )
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "tests"), old]))
    try:
        baseline = tmp / "b.json"
        assert main(["baseline", "--data", str(data), "--out", str(baseline)]) == 0
        gate_html, run_html = tmp / "gate.html", tmp / "run.html"
        assert (
            main(
                [
                    "gate",
                    "--data",
                    str(data),
                    "--adapter",
                    "plugins:make_hostile",
                    "--baseline",
                    str(baseline),
                    "--html",
                    str(gate_html),
                ]
            )
            == 1
        )
        assert main(["run", "--data", str(data), "--adapter", "plugins:make_hostile", "--html", str(run_html)]) == 0
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    return gate_html, run_html
