"""Answer correctness at the gate: gated when asked for (a tolerance) or when a calibration in the same gate
trusts the judge on its axis; then a case answered wrongly fails by the same per-case rules as any other
failure, with one trial or with trials. The wrong-answer system answers from its second-best passage,
quoted and cited: faithful to what it cites, and wrong."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import GOLDEN

from qaeval import api
from qaeval.cli import main

WRONG = "plugins:make_second_best"  # every other question (by a hash of it) answered from the second-best passage
WRONG_HALF = "plugins:make_second_best_half_the_time"  # each call of a question, by a hash of it and its count
LABELS = GOLDEN / "calibration" / "human_labels.jsonl"
BRANCHES = [
    "Eastside", "Northgate", "Riverside", "Harbor", "Maple", "Oakwood", "Pinecrest", "Lakeview", "Summit", "Willow",
    "Cedar", "Brookfield", "Fairview", "Hillcrest", "Meadow", "Granite", "Elmhurst", "Bayside", "Ridgeway", "Stonegate",
]  # fmt: skip


@pytest.fixture(scope="module")
def branches(tmp_path_factory):
    """20 answerable cases, each with its gold passage and a second one the reference system ranks next:
    answered from the second, a case is faithful to what it cites and wrong."""
    folder = tmp_path_factory.mktemp("branches")
    rows = []
    for i, name in enumerate(BRANCHES):
        slug = name.lower()
        rows.append(
            dict(
                id=f"branch-{i:02d}",
                question=f"When did the {name} Branch open?",
                sources=[
                    {"id": f"{slug}-opening", "text": f"The {name} Branch opened in {1950 + i}."},
                    {
                        "id": f"{slug}-wing",
                        "text": f"The {name} Branch opened a children's wing in {1990 + i}, beside it.",
                    },
                    {"id": "printing", "text": "Printing costs 10 cents per page."},
                ],
                gold_answer=str(1950 + i),
                gold_source_ids=[f"{slug}-opening"],
                expected_behavior="answer",
                difficulty="single-hop",
                split="frozen",
            )
        )
    data = folder / "data"
    data.mkdir()
    (data / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    baseline = folder / "baseline.json"
    assert main(["baseline", "--data", str(data), "--trials", "5", "--out", str(baseline), "--quiet"]) == 0
    return data, baseline


def gate_out(capsys, *argv: str) -> tuple[int, str]:
    code = main(["gate", *argv])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out + out.err


def _gated_record(tmp_path, capsys) -> tuple[dict, object]:
    record = tmp_path / "gate.json"
    code, _ = gate_out(
        capsys,
        "--data", str(GOLDEN), "--adapter", WRONG, "--baseline", str(GOLDEN / "ci-baseline.json"),
        "--tolerance", "answer_correctness=0.05", "--save", str(record),
    )  # fmt: skip
    assert code == 1
    return json.loads(record.read_text()), record


def test_wrong_answers_pass_a_gate_that_does_not_gate_correctness_and_it_says_how_to_once(capsys):
    code, out = gate_out(
        capsys, "--data", str(GOLDEN), "--adapter", WRONG, "--baseline", str(GOLDEN / "ci-baseline.json")
    )
    assert code == 0 and "GATE: PASS" in out
    assert out.splitlines()[0].endswith(
        "answer correctness is not gated   (baseline " + str(GOLDEN / "ci-baseline.json") + ")"
    )
    how = "gate it with --tolerance answer_correctness=0.05, or with --labels FILE holding answer_correctness labels"
    assert out.count(how) == 1 and out.count("--tolerance answer_correctness") == 1


def test_a_tolerance_gates_correctness_and_a_case_answered_wrongly_regresses(capsys, tmp_path):
    record = tmp_path / "gate.json"
    code, out = gate_out(
        capsys,
        "--data", str(GOLDEN), "--adapter", WRONG, "--baseline", str(GOLDEN / "ci-baseline.json"),
        "--tolerance", "answer_correctness=0.05", "--save", str(record),
    )  # fmt: skip
    assert code == 1 and "GATE: BLOCK   failed tier 2: no passing case regresses (1 case(s))" in out
    assert "9 of 15 cases pass with a right answer" in out
    assert "answer_correctness is gated (tolerance 0.05, as asked): a case answered wrongly fails" in out
    assert "answer correctness is not gated" not in out
    result = api.load_run(record)
    assert result.correctness_gated and result.exit_code == 1
    assert result.regressed.to_dict("records") == [
        dict(
            case_id="single-0004",
            baseline_state="passed",
            current_state="failed",
            why="answer judged wrong (answer_correctness: score 0)",
        )
    ]
    pc = result.run.per_case.set_index("case_id")
    assert pc.at["single-0004", "case_passed"], "its own pass holds: only the gate's correctness fails it"
    assert pc.at["single-0004", "answer_correctness"] == 0


def test_the_same_from_a_tolerances_file_and_the_api(tmp_path):
    tolerances = tmp_path / "t.json"
    tolerances.write_text(json.dumps({"answer_correctness": 0.05}))
    by_file = api.gate(
        str(GOLDEN), baseline=str(GOLDEN / "ci-baseline.json"), adapter=WRONG, tolerances=str(tolerances)
    )
    by_keyword = api.gate(
        str(GOLDEN), baseline=str(GOLDEN / "ci-baseline.json"), adapter=WRONG, tolerance=["answer_correctness=0.05"]
    )
    for result in (by_file, by_keyword):
        assert result.exit_code == 1 and result.regressed["case_id"].tolist() == ["single-0004"]


def test_a_gate_record_that_gated_correctness_is_audited_by_it(tmp_path, capsys):
    """The record keeps each kept baseline case's right-answer count; the audit decides again with it, so
    a record edited to let a wrong answer through disagrees with itself (65)."""
    data, _ = _gated_record(tmp_path, capsys)
    kept = data["gate"]["baseline_cases"]["single-0004"]
    assert kept["right_passes"] == 1 and kept["passes"] == 1
    kept["right_passes"] = 0  # as if the baseline had answered it wrongly too: then it would not regress
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    assert main(["report", str(edited), "--html", str(tmp_path / "r.html")]) == 65
    err = capsys.readouterr().err
    assert "gate.case_trials" in err or "gate.regressed" in err


def test_labels_that_trust_the_judge_on_correctness_gate_it(capsys):
    code, out = gate_out(
        capsys,
        "--data", str(GOLDEN), "--adapter", WRONG, "--baseline", str(GOLDEN / "ci-baseline.json"),
        "--labels", str(LABELS), "--min-labels", "5",
    )  # fmt: skip
    assert "judge calibration: TRUSTED" in out
    assert code == 1 and "[FAIL] tier 2: no passing case regresses" in out and "single-0004" in out
    assert "answer_correctness is gated (tolerance 0.01): the calibration trusts the judge on its axis" in out


def test_a_calibration_that_did_not_assess_correctness_leaves_it_ungated_and_says_why():
    """In Python a calibration may be decided on some axes only; the gate then gates none it did not assess."""
    from qaeval.data.labels import load_labels
    from qaeval.record.read import read_baseline
    from qaeval.verdicts.calibration import calibrate
    from qaeval.verdicts.gate import gate

    run = api.run(str(GOLDEN), adapter=WRONG)
    labels = load_labels(str(LABELS), known_cases=set(run.per_case["case_id"]))
    partial = calibrate(run, labels, min_labels=5, axes=("faithfulness", "citation_correctness"))
    assert partial.ok and partial.not_assessed == ["answer_correctness"]
    result = gate(run, read_baseline(GOLDEN / "ci-baseline.json"), calibration=partial)
    assert result.exit_code == 0 and not result.correctness_gated, "the same wrong answers, correctness not assessed"
    assert any(
        n.startswith("answer_correctness is not gated: the calibration did not assess the judge on its axis")
        for n in result.notes
    )
    trusted = calibrate(run, labels, min_labels=5)
    assert trusted.ok and gate(run, read_baseline(GOLDEN / "ci-baseline.json"), calibration=trusted).exit_code == 1


def test_a_refused_judge_gates_nothing_new_and_blocks_on_the_refusal(capsys):
    code, out = gate_out(
        capsys, "--data", str(GOLDEN), "--adapter", WRONG, "--baseline", str(GOLDEN / "ci-baseline.json"),
        "--labels", str(LABELS),
    )  # fmt: skip
    assert code == 2 and "the judge is not trusted" in out
    assert "answer_correctness is gated" not in out


def test_with_trials_wrong_answers_half_the_time_block_on_correctness_alone(branches, capsys):
    """The issue's case: a 5-trial baseline, a copy that answers from the second-best passage half the
    time. Without correctness gated it passes; with a tolerance it is blocked, by the metric."""
    data, baseline = branches
    argv = ["--data", str(data), "--baseline", str(baseline), "--trials", "5", "--concurrency", "1", "--adapter"]
    code, out = gate_out(capsys, *argv, WRONG_HALF)
    assert code == 0 and "20 of 20 cases pass; answer correctness is not gated" in out
    code, out = gate_out(capsys, *argv, WRONG_HALF, "--tolerance", "answer_correctness=0.05")
    assert code == 1
    assert "[FAIL] tier 2: metrics vs baseline: answer_correctness 1.000 -> 0.540 (-0.460, tolerance 0.05)" in out
    assert "[ok  ] tier 1: deterministic checks" in out, "each wrong answer is faithful to what it cites"


def test_with_trials_a_case_right_in_every_baseline_trial_and_wrong_in_every_trial_now_is_broken(branches, capsys):
    data, baseline = branches
    code, out = gate_out(
        capsys, "--data", str(data), "--baseline", str(baseline), "--trials", "5", "--adapter", WRONG,
        "--tolerance", "answer_correctness=0.05",
    )  # fmt: skip
    assert code == 1 and "[FAIL] tier 2: no passing case regresses" in out
    result = api.gate(str(data), baseline=str(baseline), trials=5, adapter=WRONG, tolerance=["answer_correctness=0.05"])
    broken = result.case_trials[result.case_trials["verdict"] == "broken"]
    assert len(broken) >= 5 and set(broken["passes"]) == {0} and set(broken["baseline_passes"]) == {5}
    assert set(result.regressed["why"]) == {"answer judged wrong (answer_correctness: 5 of 5 trials)"}


def test_a_metric_past_its_tolerance_that_the_trials_test_holds_is_marked_as_what_decided(capsys, tmp_path):
    """Golden's few cases with a second passage: answer correctness moves past its tolerance, and with
    trials the test does not tell that from noise, so it passes; the row says so instead of '✓ within'."""
    baseline, page = tmp_path / "b5.json", tmp_path / "gate.html"
    assert main(["baseline", "--data", str(GOLDEN), "--trials", "5", "--out", str(baseline), "--quiet"]) == 0
    capsys.readouterr()
    code, out = gate_out(
        capsys, "--data", str(GOLDEN), "--baseline", str(baseline), "--trials", "5", "--concurrency", "1",
        "--adapter", WRONG_HALF, "--tolerance", "answer_correctness=0.05", "--html", str(page),
    )  # fmt: skip
    assert code == 0
    assert "6 of 15 cases pass with a right answer (6 fail as they did in the baseline, 3 flaky, not blocking)" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("answer_correctness"))
    assert "-0.067" in row and "0.050" in row and "within noise (p=0.15" in row
    assert row.endswith("(past tolerance, within noise)")
    html = page.read_text()
    cell = html.split(">answer_correctness<", 1)[1].split("</tr>", 1)[0]
    assert "✓ past tolerance, within noise" in cell and "✓ within<" not in cell


def test_the_demo_gate_is_unchanged_without_labels(capsys, tmp_path):
    shutil.copy(GOLDEN / "ci-baseline.json", tmp_path / "b.json")
    code, out = gate_out(capsys, "--data", str(GOLDEN), "--baseline", str(tmp_path / "b.json"))
    assert (
        code == 0 and "10 of 15 cases pass (5 fail as they did in the baseline); answer correctness is not gated" in out
    )


def test_a_record_whose_correctness_row_and_block_were_taken_out_is_refused(tmp_path, capsys):
    """From the review: deleting the answer_correctness row, the regressed case and the failed tier made
    `report` say PASS; the notes still say it was gated, and the audit holds the two together."""
    data, _ = _gated_record(tmp_path, capsys)
    gate = data["gate"]
    gate["metric_deltas"] = [r for r in gate["metric_deltas"] if r["metric"] != "answer_correctness"]
    gate["regressed"], gate["case_trials"] = [], []
    for tier in gate["tiers"]:
        tier["passed"], tier["case_ids"] = True, []
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    assert main(["report", str(edited), "--html", str(tmp_path / "r.html")]) == 65
    err = capsys.readouterr().err
    assert "gate.notes say answer_correctness is gated, and its metric_deltas have no row for it" in err


def test_a_right_answer_count_above_the_passes_is_bad_data_not_an_internal_error(tmp_path, capsys):
    data, _ = _gated_record(tmp_path, capsys)
    data["gate"]["baseline_cases"]["single-0004"]["right_passes"] = 7
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    assert main(["report", str(edited), "--html", str(tmp_path / "r.html")]) == 65
    assert "gate.baseline_cases.single-0004.right_passes is 7, more than its passes" in capsys.readouterr().err


def test_correctness_is_not_gated_with_adaptive_trials(capsys, tmp_path):
    """Adaptive trials choose which cases to ask again by a pass that does not count a right answer: a
    case answered wrongly once would be judged on that one trial. Asked for, it is refused before the run."""
    code, out = gate_out(
        capsys, "--data", str(GOLDEN), "--adapter", WRONG, "--baseline", str(GOLDEN / "ci-baseline.json"),
        "--trials", "3", "--adaptive", "--isolation", "none", "--tolerance", "answer_correctness=0.05",
    )  # fmt: skip
    assert code == 64 and "answer_correctness cannot be gated with --adaptive" in out


def test_compare_refuses_a_loaded_verdict_as_it_refuses_its_record(tmp_path, capsys):
    from qaeval import UsageError

    _, record = _gated_record(tmp_path, capsys)
    with pytest.raises(UsageError, match="a gate result, not a run's: compare takes two runs"):
        api.compare(api.load_run(record), api.load_run(GOLDEN / "ci-baseline.json"))


def test_labels_all_stale_say_so_instead_of_blaming_the_judge(capsys):
    """From the new-user pass: every label was given for outputs this system no longer gives, and the gate
    said only 'no usable label', RETUNE JUDGE, of a judge calibrate had just trusted."""
    code, out = gate_out(
        capsys, "--data", str(GOLDEN), "--adapter", "qaeval.system.saboteur:make_adapter",
        "--baseline", str(GOLDEN / "ci-baseline.json"), "--labels", str(LABELS),
    )  # fmt: skip
    assert code == 2
    assert "faithfulness: no usable label: all 12 are stale (the outputs changed since they were labelled" in out


def test_the_gate_report_says_which_blocking_cases_were_answered_wrongly(tmp_path, capsys):
    """From the new-user pass: a case blocking on its wrong answer showed only its own pass, a green mark."""
    page = tmp_path / "gate.html"
    code, _ = gate_out(
        capsys, "--data", str(GOLDEN), "--adapter", WRONG, "--baseline", str(GOLDEN / "ci-baseline.json"),
        "--tolerance", "answer_correctness=0.05", "--html", str(page),
    )  # fmt: skip
    assert code == 1
    html = page.read_text()
    drawn = html.split('id="case-single-0004"', 1)[1].split("</summary>", 1)[0]
    assert "answer judged wrong in 1 of 1 trial(s)" in drawn
