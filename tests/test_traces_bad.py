"""Traces read as a monitor log, from hand-made OTLP/JSON: bad traces are bad data with their file and line and
nothing is scored from a half-read file; content hidden as no real instrumentation here hides it (passages,
a redacted answer) is not assessed; the annotations' guards. Traces of real instrumentations, read back and
compared with what the system did, are in tests/test_traces.py."""

from __future__ import annotations

import json
import math

import pytest
from otlp_files import QUESTION, rag_trace, request, span, write

from qaeval import api
from qaeval.cli import main
from qaeval.core.errors import DatasetError, UsageError


def _bad(tmp_path, capsys, lines, fragment, line=1):
    path = write(tmp_path / "traces.jsonl", lines)
    assert main(["monitor", "--logs", str(path)]) == 65
    err = capsys.readouterr().err
    assert f"traces.jsonl:{line}: " in err and fragment in err, err
    assert "Traceback" not in err


def _with(spans, index, **changes):
    spans = [dict(s) for s in spans]
    spans[index].update(changes)
    return spans


def test_base64_ids_are_bad_data(tmp_path, capsys):
    spans = _with(rag_trace(0), 0, spanId="I+16KA57GNk=")
    _bad(
        tmp_path,
        capsys,
        [request(spans)],
        "spanId 'I+16KA57GNk=' is not 16 hex digits, as OTLP/JSON writes ids (it looks like base64",
    )


def test_an_integer_that_is_not_a_decimal_string_is_bad_data(tmp_path, capsys):
    spans = _with(rag_trace(0), 1, startTimeUnixNano="1.7e18")
    _bad(tmp_path, capsys, [request(spans)], "startTimeUnixNano '1.7e18' is not a decimal integer")


def test_a_missing_parent_is_bad_data(tmp_path, capsys):
    spans = _with(rag_trace(0), 1, parentSpanId="00000000000000ff")
    _bad(tmp_path, capsys, [request(spans)], "parent 00000000000000ff is not in trace")


def test_a_parent_cycle_is_bad_data(tmp_path, capsys):
    spans = rag_trace(0)
    spans = _with(spans, 0, parentSpanId=spans[1]["spanId"])
    spans = _with(spans, 1, parentSpanId=spans[0]["spanId"])
    _bad(tmp_path, capsys, [request(spans)], "2 span(s) are in a parent cycle")


def test_a_trace_with_no_answering_span_is_bad_data(tmp_path, capsys):
    root = span("0" * 31 + "1", "0" * 15 + "1", "", 10, {"http.method": "GET"})
    _bad(tmp_path, capsys, [request([root])], "has no answering span")


def test_an_attribute_value_of_the_wrong_type_is_bad_data(tmp_path, capsys):
    spans = rag_trace(0)
    spans[1]["attributes"].append({"key": "llm.token_count.total", "value": {"intValue": True}})
    _bad(tmp_path, capsys, [request(spans)], "attribute 'llm.token_count.total''s intValue must be an integer")
    spans = rag_trace(0)
    spans[1]["attributes"].append({"key": "x", "value": {"stringValue": "a", "intValue": "1"}})
    _bad(tmp_path, capsys, [request(spans)], "holds intValue, stringValue: one of")


def test_an_attribute_that_is_not_a_key_and_a_value_is_bad_data(tmp_path, capsys):
    """As protobuf's parser refuses a field KeyValue does not have (checked here by count, not by set)."""
    for item in ({"key": "x", "value": {"stringValue": "a"}, "typo": 1}, {"key": "x", "valeu": {}}, {"value": {}}):
        spans = rag_trace(0)
        spans[1]["attributes"].append(item)
        _bad(tmp_path, capsys, [request(spans)], "an attribute must be {key: text, value: AnyValue}")
    spans = rag_trace(0)
    spans[1]["attributes"].append({"key": "x"})  # a value left out is an empty AnyValue
    path = write(tmp_path / "traces.jsonl", [request(spans)])
    assert main(["monitor", "--logs", str(path)]) == 0


def test_an_all_zero_id_is_bad_data(tmp_path, capsys):
    _bad(tmp_path, capsys, [request(_with(rag_trace(0), 0, spanId="0" * 16))], "spanId is all zeros")


def test_nesting_deeper_than_the_protocol_allows_is_bad_data(tmp_path, capsys):
    deep: dict = {"stringValue": "leaf"}
    for _ in range(40):
        deep = {"arrayValue": {"values": [deep]}}
    spans = rag_trace(0)
    spans[1]["attributes"].append({"key": "deep", "value": deep})
    _bad(tmp_path, capsys, [request(spans)], "is nested deeper than 32 levels")


def test_caps_as_the_row_loader_has(tmp_path, capsys):
    spans = rag_trace(0)
    spans[1]["attributes"] += [{"key": f"k{i}", "value": {"intValue": "1"}} for i in range(1001)]
    _bad(tmp_path, capsys, [request(spans)], "attributes (limit 1000)")


def test_a_bad_line_stops_the_whole_file_and_every_problem_is_listed(tmp_path, capsys):
    good = [request(rag_trace(n)) for n in range(3)]
    bad = request(_with(rag_trace(5), 1, traceId="xyz"))
    path = write(tmp_path / "traces.jsonl", [good[0], bad, good[1], "{not json", good[2]])
    with pytest.raises(DatasetError) as caught:
        api.monitor(str(path))
    lines = sorted(p.line for p in caught.value.problems)
    assert lines == [2, 4]


def test_a_span_after_its_traces_root_line_is_named(tmp_path, capsys):
    spans = rag_trace(0)
    late = span(spans[0]["traceId"], "00000000000000aa", spans[2]["spanId"], 5, {"x": 1})
    _bad(tmp_path, capsys, [request(spans), request([late])], "comes after the line holding the trace's root", line=2)


def test_a_trace_whose_root_never_comes_is_named(tmp_path, capsys):
    _bad(tmp_path, capsys, [request(rag_trace(0)[:2])], "is not in trace")


def test_hidden_content_is_not_assessed_and_counted(tmp_path):
    lines = [request(rag_trace(0)), request(rag_trace(1, hide=("prompt",))), request(rag_trace(2, hide=("answer",)))]
    result = api.monitor(str(write(tmp_path / "traces.jsonl", lines)))
    rows = result.rows.set_index("trace_id")
    shown, no_prompt, no_answer = rows.index
    assert rows.loc[no_prompt, "hidden"] == "prompt" and rows.loc[no_answer, "hidden"] == "answer"
    assert rows.loc[no_prompt, "prompt_grounding"] is None or rows.loc[no_prompt, "prompt_grounding"] is pd_na()
    assert rows[["citation_resolvability", "citation_coverage", "fail_closed"]].loc[no_answer].isna().all()
    assert not rows.loc[no_answer, "answered"] and not rows.loc[no_answer, "abstained"]
    board = result.scoreboard.set_index("metric")
    assert board.loc["prompt_grounding", "n"] == 2  # the row without a prompt is neither passed nor failed
    assert board.loc["citation_resolvability", "n"] == 2
    assert board.loc["abstention_rate", "n"] == 2
    assert board.loc["deterministic_pass_rate", "value"] == 1.0
    assert any("1 row(s) have their prompt hidden by the instrumentation" in n for n in result.notes)
    assert any("1 row(s) have their answer hidden by the instrumentation" in n for n in result.notes)


def test_every_row_hiding_its_prompt_leaves_the_prompt_check_unassessed(tmp_path):
    lines = [request(rag_trace(n, hide=("prompt", "passages"))) for n in range(2)]
    board = api.monitor(str(write(tmp_path / "traces.jsonl", lines))).scoreboard.set_index("metric")
    assert board.loc["prompt_grounding", "n"] == 0 and math.isnan(board.loc["prompt_grounding", "value"])
    assert board.loc["citation_coverage", "n"] == 0


def test_annotations_need_traces_and_a_known_ending(tmp_path):
    traces = write(tmp_path / "traces.jsonl", [request(rag_trace(0))])
    with pytest.raises(UsageError, match="the name must end in .jsonl, .csv or .parquet"):
        api.monitor(str(traces), annotations=str(tmp_path / "out.txt"))
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "r1", "question": QUESTION, "passages": [], "answer": None}) + "\n")
    with pytest.raises(UsageError, match="give logs read from OpenTelemetry traces"):
        api.monitor(str(rows), annotations=str(tmp_path / "out.csv"))


def test_annotations_never_replace_a_file_qaeval_did_not_write(tmp_path):
    traces = write(tmp_path / "traces.jsonl", [request(rag_trace(0))])
    mine = tmp_path / "notes.csv"
    mine.write_text("my,own,data\n")
    with pytest.raises(UsageError, match="refusing to write the span annotations"):
        api.monitor(str(traces), annotations=str(mine))
    assert mine.read_text() == "my,own,data\n"
    with pytest.raises(UsageError, match="refusing to write the span annotations"):
        api.monitor(str(traces), annotations=str(traces))
    out = tmp_path / "scores.csv"
    api.monitor(str(traces), annotations=str(out))
    api.monitor(str(traces), annotations=str(out))  # its own file is replaced


def pd_na():
    import pandas as pd

    return pd.NA


def test_spans_waiting_for_roots_that_never_come_are_capped(tmp_path, capsys, monkeypatch):
    from qaeval.data import otlp

    monkeypatch.setattr(otlp, "MAX_HELD", 5)
    lines = [request(rag_trace(n)[:2]) for n in range(4)]  # no root: each trace waits
    _bad(tmp_path, capsys, lines, "over 5 spans wait for their traces' roots", line=3)


def _citing(value: object) -> list[dict]:
    spans = rag_trace(0)
    spans[2]["attributes"].append({"key": "qaeval.citations", "value": value})
    return spans


def test_recorded_citations_that_are_not_a_list_of_ids_or_citations_are_bad_data(tmp_path, capsys):
    """qaeval.citations is the system's own record: one it cannot be read as is named, never guessed at."""
    _bad(tmp_path, capsys, [request(_citing({"stringValue": "library-hours"}))], "qaeval.citations is not JSON")
    _bad(tmp_path, capsys, [request(_citing({"stringValue": '{"a": 1}'}))], "must be a list of document ids")
    shape = json.dumps([{"source_id": "library-hours", "quote": "x"}])
    _bad(tmp_path, capsys, [request(_citing({"stringValue": shape}))], "citation 1 must be a document id or")
    _bad(tmp_path, capsys, [request(_citing({"arrayValue": {"values": [{"boolValue": True}]}}))], "citation 1 must")


def test_recorded_citations_that_name_no_passage_fail_resolvability_as_a_log_rows_would(tmp_path):
    path = write(tmp_path / "traces.jsonl", [request(_citing({"stringValue": '["handbook-7"]'}))])
    (row,) = api.monitor(str(path)).rows.to_dict("records")
    assert row["citations_from"] == "qaeval.citations" and row["citation_resolvability"] is False
    assert row["cited_hops"] == "handbook-7: retrieved by no hop"


def test_a_monitor_record_written_before_rows_said_where_their_citations_came_from_loads(tmp_path):
    record = tmp_path / "monitor.json"
    api.monitor(str(write(tmp_path / "traces.jsonl", [request(rag_trace(0))])), save=str(record))
    data = json.loads(record.read_text())
    for row in data["monitor"]["rows"]:
        del row["citations_from"]
    record.write_text(json.dumps(data))
    (row,) = api.load_run(record).rows.to_dict("records")
    assert row["citations_from"] is None and row["hops"] == 1


def test_a_history_line_whose_hop_rate_is_not_a_rate_is_named(tmp_path, capsys):
    """A hop's rates in a history line are rates, held to [0, 1] as the metrics are: an edited line is
    named with its file and line, not banded."""
    traces = write(tmp_path / "traces.jsonl", [request(rag_trace(0))])
    history = tmp_path / "history.jsonl"
    api.monitor(str(traces), time_window="1D", timeseries=str(history), min_rows=1)
    line = json.loads(history.read_text())
    line["metrics"]["hop1_retriever_prompted_share"] = 2.0
    line["window"] = line["time"] = "2025-12-31T00:00:00+00:00"
    history.write_text(json.dumps(line) + "\n")
    code = main(["monitor", "--logs", str(traces), "--window", "1D", "--timeseries", str(history)])
    err = capsys.readouterr().err
    assert code == 65 and "history.jsonl:1: " in err
    assert "metric 'hop1_retriever_prompted_share' is 2.0, outside [0, 1]" in err
