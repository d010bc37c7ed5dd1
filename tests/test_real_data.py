"""Real public data from ../shared/data (when present; a clone does not have it): every importer's output
loads strictly, every record is accounted for, the reference system's honest weakness on SQuAD 2.0 shows,
and the offline judge is calibrated against real human labels."""

from __future__ import annotations

import json

import pytest
from conftest import SHARED_DATA

from qaeval import DatasetError, api

DATA = SHARED_DATA
ABSENT = f"real data absent: {DATA} is not part of a clone (set QAEVAL_SHARED_DATA to its folder)"


def present(name: str):
    return pytest.mark.skipif(not (DATA / name).is_file(), reason=f"{ABSENT} ({name})")


@present("squad2-small.json")
def test_squad2_imports_whole_and_shows_the_lexical_hub_cannot_spot_adversarial_unanswerables(tmp_path):
    report = api.import_cases("squad2", DATA / "squad2-small.json", tmp_path)
    assert report.read == report.imported == 626 and not report.refused
    source = json.loads((DATA / "squad2-small.json").read_text())
    questions = sum(len(p["qas"]) for a in source["data"] for p in a["paragraphs"])
    assert questions == 626, "every question of the source is accounted for"
    run = api.run(str(tmp_path))
    board = run.scoreboard.set_index("metric")
    assert board.at["abstention_recall", "n"] == 333
    assert board.at["abstention_recall", "value"] < 0.5
    checks = run.checks.pivot(index="case_id", columns="check", values="passed")
    assert checks["grounding_isolation"].all() and checks["citation_resolvability"].all()


@present("hotpotqa-distractor-100.json")
def test_hotpotqa_imports_every_question_as_a_multi_hop_case(tmp_path):
    report = api.import_cases("hotpotqa", DATA / "hotpotqa-distractor-100.json", tmp_path, split="living")
    assert report.read == report.imported == 100
    from qaeval import load_suite

    suite = load_suite(tmp_path)
    assert {c.difficulty for c in suite} == {"multi-hop"} and {c.split for c in suite} == {"living"}
    assert {c.adversarial for c in suite} == {"bridge", "comparison"}
    assert all(len(c.gold_source_ids) >= 2 and len(c.checkpoints) == len(c.gold_source_ids) for c in suite)
    run = api.run(str(tmp_path))
    assert len(run.per_case) == 100 and run.metric("multi_step_task_success") < 0.2


@present("musique-sample-20.json")
def test_musique_imports_hops_and_supporting_paragraphs(tmp_path):
    report = api.import_cases("musique", DATA / "musique-sample-20.json", tmp_path)
    assert report.read == report.imported == 20
    from qaeval import load_suite

    suite = load_suite(tmp_path)
    assert all(c.difficulty == "multi-hop" and c.adversarial.startswith("musique-") for c in suite)


def calibrate_on(tmp_path, fmt: str, name: str):
    report = api.import_cases(fmt, DATA / name, tmp_path, labelled=True)
    path = next(tmp_path.glob("*-labelled.jsonl"))
    return report, api.calibrate(labelled=str(path), min_labels=5)


@present("wice-claim-dev.jsonl")
def test_offline_judge_against_wice_human_labels(tmp_path):
    report, result = calibrate_on(tmp_path, "wice", "wice-claim-dev.jsonl")
    assert report.imported == 349 and not report.refused
    row = result.agreement.set_index("axis").loc["faithfulness"]
    assert row["n"] == 349 and row["exact_low"] < row["exact"] < row["exact_high"]
    assert not result.ok, "a token-overlap judge is not a human reader"


@present("expertqa-rand-val.jsonl")
def test_offline_judge_against_expertqa_expert_labels(tmp_path):
    report, result = calibrate_on(tmp_path, "expertqa", "expertqa-rand-val.jsonl")
    assert report.read == report.imported + sum(report.refused.values())
    assert report.refused["no evidence to judge the claim against"] == 216
    row = result.agreement.set_index("axis").loc["faithfulness"]
    assert row["n"] == report.imported and row["exact"] < 0.5


@present("ares-human-examples.tsv")
def test_ares_human_annotations_import_and_calibrate(tmp_path):
    report, result = calibrate_on(tmp_path, "ares", "ares-human-examples.tsv")
    assert report.imported == 8
    assert result.agreement.set_index("axis").at["faithfulness", "n"] == 8


def test_a_missing_dataset_file_says_so(tmp_path):
    with pytest.raises(DatasetError, match="not shipped with qaeval"):
        api.import_cases("squad2", tmp_path / "nope.json", tmp_path)
