"""Monitoring logged traffic: the log formats, strict loading with file and line, the gold-free checks on every
row, slices and windows, the judged sample and its weighting."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from monitor_logs import ANSWER, FACT, ParityJudge, log_row, traffic, write_jsonl

from qaeval import api
from qaeval.commands.monitoring import check_log
from qaeval.core.errors import DatasetError, UsageError
from qaeval.scoring.monitor_metrics import BY_NAME, estimate


def _csv(path, rows):
    columns = sorted({k for r in rows for k in r})
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow(
                {k: json.dumps(v) if isinstance(v, (list, bool)) else ("" if v is None else v) for k, v in r.items()}
            )
    return path


def test_jsonl_csv_parquet_and_a_dataframe_are_read_alike(tmp_path):
    pytest.importorskip("pyarrow", reason="the parquet extra")
    rows = traffic(days=1, per_day=12)
    jsonl = write_jsonl(tmp_path / "logs.jsonl", rows)
    frame = pd.DataFrame(rows)
    frame.to_parquet(tmp_path / "logs.parquet")
    results = [
        check_log(source)[0] for source in (jsonl, _csv(tmp_path / "logs.csv", rows), tmp_path / "logs.parquet", frame)
    ]
    columns = ["row_id", "passed", "citation_resolvability", "sentences", "covered", "timestamp", "system"]
    for other in results[1:]:
        pd.testing.assert_frame_equal(other[columns].astype(str), results[0][columns].astype(str))
    assert results[0]["passed"].sum() == 10, "the two rows citing a missing passage fail, the others pass"


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    (tmp_path / "logs.parquet").write_bytes(b"PAR1")
    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(UsageError, match=r"pip install -e '\.\[parquet\]'"):
        check_log(tmp_path / "logs.parquet")


def test_ragas_column_names_are_read_and_the_mapping_is_said(tmp_path):
    rows = [
        {
            "user_input": "When does the library open?",
            "retrieved_contexts": [FACT, "Printing costs ten cents."],
            "response": ANSWER,
            "reference": "nine",
            "tenant": "acme",
        }
    ]
    table, scan = check_log(write_jsonl(tmp_path / "ragas.jsonl", rows))
    assert any("RAGAS (user_input, retrieved_contexts, response)" in n for n in scan.notes())
    assert any("no row logged citations" in n for n in scan.notes())
    assert table.loc[0, "tenant"] == "acme" and "reference" not in table.columns, "reference is gold: read, not a slice"
    assert not table.loc[0, "citation_coverage"], "RAGAS rows carry no citations, so their answers are uncited"


def test_both_namings_in_one_row_is_a_problem(tmp_path):
    path = write_jsonl(tmp_path / "mixed.jsonl", [{**log_row(0), "user_input": "x"}])
    with pytest.raises(DatasetError, match="both user_input and question given"):
        check_log(path)


def test_every_malformed_row_kind_is_named_with_its_line_and_nothing_is_scored(tmp_path):
    rows = [
        log_row(0),
        log_row(1, passages=[{"id": "hours", "text": ""}]),
        log_row(2, timestamp="last tuesday"),
        log_row(0),
        log_row(4, passages=[{"id": "hours"}]),
        log_row(5, citations=[{"source_id": "hours"}]),
    ]
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DatasetError) as info:
        api.monitor(str(path))
    found = [str(p) for p in info.value.problems]
    assert found == [
        f"{path}:2: passage 1 ('hours') has no text",
        f"{path}:3: timestamp 'last tuesday' is not an ISO 8601 date and time",
        f"{path}:4: duplicate id 'r00000' (first on line 1)",
        f"{path}:5: passage 1 ('hours') has no text",
        f'{path}:6: citation 1 must be {{source_id, claim}}, both text, got {{"source_id": "hours"}}',
    ]


def test_a_list_column_that_does_not_parse_is_named_with_its_csv_line(tmp_path):
    path = _csv(tmp_path / "logs.csv", traffic(days=1, per_day=3))
    lines = path.read_text().splitlines()
    lines[2] = lines[2].replace('"[{""id""', '"[{id', 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError) as info:
        check_log(path)
    assert [p.line for p in info.value.problems] == [3]
    assert "column 'passages' does not parse as a JSON list" in str(info.value)


def test_a_citation_to_a_passage_the_row_lacks_is_a_failing_row_not_bad_input(tmp_path):
    table, _ = check_log(write_jsonl(tmp_path / "logs.jsonl", [log_row(0, bad_citation=True), log_row(1)]))
    assert table["citation_resolvability"].tolist() == [False, True]
    assert "unresolvable citation: missing" in table.loc[0, "fail_reasons"]


def test_rows_without_an_id_get_one_from_their_hash_and_the_notes_say_so(tmp_path):
    row = {k: v for k, v in log_row(0).items() if k != "id"}
    table, scan = check_log(write_jsonl(tmp_path / "logs.jsonl", [row, row]))
    first, second = table["row_id"].tolist()
    assert first.startswith("row-") and second == f"{first}-2", "identical rows: the second id says it is a repeat"
    assert scan.generated_ids == 2 and any("generated from a hash of the row" in n for n in scan.notes())


def test_no_prompt_logged_means_the_prompt_check_is_not_assessed(tmp_path):
    rows = [
        log_row(0, prompt=None, model_was_called=None),
        log_row(1, passages=[], citations=[], answer=None, model_was_called=True, prompt=None),
    ]
    table, scan = check_log(write_jsonl(tmp_path / "logs.jsonl", rows))
    assert pd.isna(table.loc[0, "prompt_grounding"]) and pd.isna(table.loc[0, "model_called"])
    assert not table.loc[1, "fail_closed"], "called the model with nothing retrieved"
    assert any("whether the prompt carries the passages is not assessed" in n for n in scan.notes())


def test_slices_and_windows(tmp_path):
    path = write_jsonl(tmp_path / "logs.jsonl", traffic(days=3, per_day=40, bad_day=3))
    result = api.monitor(str(path), by=["system"], time_window="1D", isolation="none")
    slices = result.slices.set_index(["group", "metric"])
    assert slices.loc[("a", "citation_resolvability"), "n"] == 60 and set(result.slices["group"]) == {"a", "b"}
    day = result.windows[(result.windows["slice"] == "(all)") & (result.windows["metric"] == "citation_resolvability")]
    assert day["window"].tolist() == [f"2026-02-0{d}T00:00:00+00:00" for d in (1, 2, 3)]
    assert day["value"].tolist() == [pytest.approx(0.9), pytest.approx(0.9), 0.0] and day["rows"].tolist() == [40] * 3
    per_system = result.windows[
        (result.windows["slice"] == "system") & (result.windows["metric"] == "faithfulness_rate")
    ]
    assert len(per_system) == 6 and (per_system["n"] == 20).all()


def test_by_a_column_the_log_lacks_is_a_usage_error_naming_its_columns(tmp_path):
    path = write_jsonl(tmp_path / "logs.jsonl", traffic(days=1, per_day=4))
    with pytest.raises(UsageError, match="by model: not a slice column of the log; its slice columns are: system"):
        api.monitor(str(path), by=["model"])


def test_the_sample_is_uniform_stratified_reproducible_and_checks_still_cover_every_row(tmp_path):
    rows = traffic(days=1, per_day=90) + [log_row(1000 + k, system="c") for k in range(30)]
    path = write_jsonl(tmp_path / "logs.jsonl", rows)
    one = api.monitor(str(path), judge=ParityJudge(), by=["system"], sample=24, seed=5, isolation="none")
    again = api.monitor(str(path), judge=ParityJudge(), by=["system"], sample=24, seed=5, isolation="none")
    other = api.monitor(str(path), judge=ParityJudge(), by=["system"], sample=24, seed=6, isolation="none")
    judged = one.rows[one.rows["sampled"]]
    assert judged.groupby("system", observed=True).size().to_dict() == {"a": 9, "b": 9, "c": 6}, (
        "proportional: 45/45/30"
    )
    assert judged["row_id"].tolist() == again.rows.loc[again.rows["sampled"], "row_id"].tolist()
    assert judged["row_id"].tolist() != other.rows.loc[other.rows["sampled"], "row_id"].tolist()
    board = one.scoreboard.set_index("metric")
    assert board.loc["deterministic_pass_rate", "n"] == 120 and board.loc["faithfulness_rate", "n"] == 24
    assert len(one.run.suite) == 24, "the judge saw only the sample"


def test_a_judge_metric_weights_each_stratum_by_its_share_of_the_rows():
    rows = pd.DataFrame(
        {
            "row_id": [f"r{i}" for i in range(100)],
            "answered": True,
            "sampled": False,
            "stratum": ["A"] * 50 + ["B"] * 50,
            "faithfulness": pd.array([pd.NA] * 100, dtype="Int64"),
        }
    )
    rows.loc[[0, 1], "sampled"] = True  # stratum A: 2 of 50 judged, both faithful
    rows.loc[list(range(50, 58)), "sampled"] = True  # stratum B: 8 of 50 judged, none faithful
    rows["faithfulness"] = pd.array([2 if i < 2 else (0 if 50 <= i < 58 else pd.NA) for i in range(100)], dtype="Int64")
    value, low, high, n = estimate(rows, BY_NAME["faithfulness_rate"])
    assert (value, n) == (0.5, 10), "unweighted it would be 0.2; each judged row stands for its stratum's rows"
    assert low <= value <= high


def test_a_metric_with_nothing_to_average_is_nan_with_n_zero(tmp_path):
    path = write_jsonl(tmp_path / "logs.jsonl", [log_row(0, prompt=None, model_was_called=None)])
    board = api.monitor(str(path)).scoreboard.set_index("metric")
    assert board.loc["prompt_grounding", "n"] == 0 and np.isnan(board.loc["prompt_grounding", "value"])


def test_a_dataframe_read_the_obvious_way_scores_as_its_file_does():
    """A new user's report: `pd.read_json(..., lines=True)` gives Timestamps, and a flag column with gaps
    as 1.0 / 0.0 / NaN; each row was refused. They are the file's values, as pandas holds them."""
    path = Path(__file__).resolve().parents[1] / "examples" / "traffic.jsonl"
    df = pd.read_json(path, lines=True)
    assert str(df["timestamp"].dtype).startswith("datetime64") and df["abstained"].dtype == float
    from_frame = api.monitor(df, by=["tenant"], time_window="1D", sample=20, seed=4, isolation="none")
    from_file = api.monitor(str(path), by=["tenant"], time_window="1D", sample=20, seed=4, isolation="none")
    assert from_frame.rows["timestamp"].tolist() == from_file.rows["timestamp"].tolist()
    assert from_frame.rows["abstained"].tolist() == from_file.rows["abstained"].tolist()
    pd.testing.assert_frame_equal(from_frame.scoreboard, from_file.scoreboard)


def test_a_csv_header_naming_a_column_twice_is_bad_data_with_its_line(tmp_path, capsys):
    """Issue 40: csv.DictReader kept the last of two 'abstained' cells silently, so an answered row was
    scored as an abstention."""
    from qaeval.cli import main

    path = tmp_path / "logs.csv"
    path.write_text("id,question,answer,abstained,abstained\nr1,When?,At nine.,false,true\n")
    assert main(["monitor", "--logs", str(path)]) == 65
    assert "logs.csv:1: the header names column(s) 'abstained' more than once" in capsys.readouterr().err


def test_a_csv_row_with_fewer_cells_than_the_header_is_bad_data_with_its_line(tmp_path, capsys):
    """Issue 40: a torn write (a row cut short) was accepted, its missing cells read as absent."""
    from qaeval.cli import main

    rows = [log_row(i) for i in range(3)]
    path = _csv(tmp_path / "logs.csv", rows)
    lines = path.read_text().splitlines()
    assert lines[0].endswith(",timestamp")  # the last column, which a row may leave empty
    path.write_text("\n".join(lines[:-1] + [lines[-1].rsplit(",", 1)[0]]) + "\n")
    assert main(["monitor", "--logs", str(path)]) == 65
    assert f"logs.csv:{len(lines)}: 8 cells, fewer than the header's 9 columns" in capsys.readouterr().err


def test_a_log_row_is_held_to_a_systems_output_limits(tmp_path, capsys):
    """Issue 40: log rows had no cap; one 3 MB row with 12,000 passages held the run 25 s."""
    from qaeval.cli import main

    many = log_row(0, passages=[{"id": f"p{i}", "text": "Word."} for i in range(1001)])
    path = write_jsonl(tmp_path / "logs.jsonl", [many, log_row(1)])
    assert main(["monitor", "--logs", str(path)]) == 65
    assert "logs.jsonl:1: passages holds 1001 passages (limit 1000" in capsys.readouterr().err
