"""The strict loader: every rule of the golden case format, all problems at once, with file and line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import GOLDEN, make_case, write_cases

from qaeval import DatasetError, FileAccessError, load_suite
from qaeval.cli import main


def problems_of(folder: Path) -> list[str]:
    with pytest.raises(DatasetError) as info:
        load_suite(folder)
    return [str(p) for p in info.value.problems]


def test_golden_splits_load_and_count():
    suite = load_suite(GOLDEN)
    assert len(suite) >= 12
    frame = suite.to_frame()
    assert set(frame["split"]) == {"frozen", "living"}
    assert set(frame["difficulty"]) == {"single-hop", "multi-hop", "aggregation"}
    assert frame["must_abstain"].sum() >= 3
    multi = frame[frame["difficulty"] != "single-hop"]
    assert all(len(cps) > 0 for cps in multi["checkpoints"]), "every multi-step case has checkpoints"
    assert all(5 <= n <= 10 for n in frame["n_sources"])


def test_golden_has_a_gold_answer_found_verbatim_in_no_snippet():
    suite = load_suite(GOLDEN)
    assert any(c.gold_answer and not any(c.gold_answer in s.text for s in c.sources) for c in suite)


def test_buggy_split_loads_with_a_failure_tag_per_case():
    suite = load_suite(GOLDEN / "buggy")
    assert len(suite) >= 4
    assert all(c.adversarial for c in suite)
    assert "time-sensitive" in {c.adversarial for c in suite}


def test_bom_crlf_and_blank_lines_are_accepted(tmp_path):
    text = "\r\n".join(["", json.dumps(make_case(id="a")), "   ", json.dumps(make_case(id="b")), ""])
    (tmp_path / "x.jsonl").write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert [c.id for c in load_suite(tmp_path)] == ["a", "b"]


def test_subfolders_and_other_extensions_are_not_loaded(tmp_path):
    write_cases(tmp_path, [make_case(id="top")])
    write_cases(tmp_path / "sub", [make_case(id="nested")])
    (tmp_path / "notes.json").write_text("{}")
    assert [c.id for c in load_suite(tmp_path)] == ["top"]


@pytest.mark.parametrize(
    "case, message",
    [
        (make_case(extra=1), "unknown field 'extra'"),
        (make_case(question=""), "'question' must be a non-empty string"),
        (make_case(question=...), "missing required field 'question'"),
        (make_case(sources="s1"), "'sources' must be a list"),
        (make_case(sources=[{"id": "s1"}]), "sources[0].text must be a non-empty string"),
        (
            make_case(sources=[{"id": "s1", "text": "a"}, {"id": "s1", "text": "b"}], gold_source_ids=["s1"]),
            "not unique within the case",
        ),
        (make_case(sources=[{"id": "s1", "text": "a", "url": "x"}], gold_source_ids=["s1"]), "unknown field 'url'"),
        # each defect the one-pass check of well-formed sources must hand to the detailed one
        (make_case(sources=[{"id": "s1", "text": "a"}, "s2"], gold_source_ids=["s1"]), "sources[1] must be an object"),
        (make_case(sources=[{"id": " ", "text": "a"}], gold_source_ids=[]), "sources[0].id must be a non-empty string"),
        (make_case(sources=[{"id": 1, "text": "a"}], gold_source_ids=[]), "sources[0].id must be a non-empty string"),
        (
            make_case(sources=[{"id": "s1", "text": "\n\t"}], gold_source_ids=["s1"]),
            "sources[0].text must be a non-empty string",
        ),
        (
            make_case(sources=[{"id": "s1", "text": ["a"]}], gold_source_ids=["s1"]),
            "sources[0].text must be a non-empty string",
        ),
        (
            make_case(sources=[{"id": "s1", "text": "a", "title": 3}], gold_source_ids=["s1"]),
            "sources[0].title must be a string",
        ),
        (make_case(gold_source_ids=["s9"]), "gold source id 's9' is not in the case's sources"),
        (make_case(gold_answer=None), "an answerable case needs a non-empty 'gold_answer'"),
        (make_case(gold_answer=...), "an answerable case needs a non-empty 'gold_answer'"),
        (make_case(gold_answer=7), "'gold_answer' must be a non-empty string or null"),
        (make_case(expected_behavior="refuse"), "'expected_behavior' is 'refuse'"),
        (make_case(difficulty="hard"), "'difficulty' is 'hard'"),
        (make_case(split="test"), "'split' is 'test'"),
        (make_case(id=5), "'id' must be a non-empty string"),
        (make_case(adversarial=3), "'adversarial' must be a non-empty string"),
        (make_case(checkpoints={"kind": "cited"}), "'checkpoints' must be a list"),
        (make_case(checkpoints=[{"kind": "guessed"}]), "checkpoint kind 'guessed'"),
        (make_case(checkpoints=[{"kind": "cited", "source_id": "s9"}]), "not in the case's sources"),
        (make_case(checkpoints=[{"kind": "aggregate_equals", "value": "two"}]), "field 'value' must be int"),
    ],
)
def test_each_malformed_case_is_a_problem_with_file_and_line(tmp_path, case, message):
    write_cases(tmp_path, [make_case(id="fine"), case])
    found = problems_of(tmp_path)
    assert len(found) == 1, found
    assert "cases.jsonl:2: " in found[0]
    assert message in found[0]


def test_must_abstain_case_needs_no_gold_answer(tmp_path):
    write_cases(
        tmp_path, [make_case(expected_behavior="unanswerable_must_abstain", gold_answer=None, gold_source_ids=[])]
    )
    assert load_suite(tmp_path).cases[0].must_abstain


def test_duplicate_id_across_files_names_the_first(tmp_path):
    write_cases(tmp_path, [make_case(id="dup")], name="a.jsonl")
    write_cases(tmp_path, [make_case(id="dup")], name="b.jsonl")
    [problem] = problems_of(tmp_path)
    assert "b.jsonl:1" in problem and "duplicate id 'dup'" in problem and "a.jsonl:1" in problem


def test_top_level_array_is_rejected(tmp_path):
    (tmp_path / "cases.jsonl").write_text(json.dumps([make_case()]))
    [problem] = problems_of(tmp_path)
    assert "cases.jsonl:1" in problem and "array" in problem


def test_pretty_printed_array_is_rejected_with_a_hint(tmp_path):
    (tmp_path / "cases.jsonl").write_text(json.dumps([make_case()], indent=2))
    found = problems_of(tmp_path)
    assert "JSONL" in found[0]


def test_non_utf8_bytes_are_rejected_with_their_line(tmp_path):
    good = json.dumps(make_case(id="a")).encode()
    bad = json.dumps(make_case(id="b")).encode().replace(b"Eastside", b"East\xe9side")
    (tmp_path / "cases.jsonl").write_bytes(good + b"\n" + bad + b"\n")
    [problem] = problems_of(tmp_path)
    assert "cases.jsonl:2" in problem and "not valid UTF-8" in problem


def test_invalid_json_line_and_non_object_line(tmp_path):
    (tmp_path / "cases.jsonl").write_text('{"id": \n42\n')
    found = problems_of(tmp_path)
    assert "cases.jsonl:1" in found[0] and "not valid JSON" in found[0]
    assert "cases.jsonl:2" in found[1] and "JSON object" in found[1]


def test_empty_suite_and_missing_folder(tmp_path):
    (tmp_path / "cases.jsonl").write_text("\n\n")
    assert "empty" in problems_of(tmp_path)[0]
    (tmp_path / "nothing").mkdir()
    assert "no *.jsonl" in problems_of(tmp_path / "nothing")[0]
    assert "no such folder" in problems_of(tmp_path / "missing")[0]


def test_every_problem_in_a_load_is_reported_together(tmp_path):
    write_cases(tmp_path, [make_case(id="a", split="x"), make_case(id="b", difficulty="y", extra=1)])
    found = problems_of(tmp_path)
    assert len(found) == 3
    assert sum(":1:" in p for p in found) == 1 and sum(":2:" in p for p in found) == 2


def test_validate_command_counts_and_exits_zero(capsys):
    assert main(["validate", "--data", str(GOLDEN)]) == 0
    out = capsys.readouterr().out
    assert "by split: frozen" in out and "by difficulty" in out and "by adversarial" in out
    assert main(["validate", "--data", str(GOLDEN / "buggy")]) == 0


def test_validate_bad_data_exits_65_with_every_problem_and_no_traceback(tmp_path, capsys):
    write_cases(tmp_path, [make_case(id="a", split="x"), make_case(id="a")])
    assert main(["validate", "--data", str(tmp_path)]) == 65
    err = capsys.readouterr().err
    assert "cases.jsonl:1" in err and "cases.jsonl:2" in err and "duplicate id" in err
    assert "Traceback" not in err


def test_suite_frame_keeps_missing_gold_answer_as_none():
    frame = load_suite(GOLDEN).to_frame()
    abstain = frame[frame["must_abstain"]]
    assert all(g is None for g in abstain["gold_answer"])


def test_changing_a_case_changes_its_fingerprint(tmp_path):
    write_cases(tmp_path, [make_case()])
    before = load_suite(tmp_path)
    write_cases(tmp_path, [make_case(question="When did the Eastside Branch first open?")])
    after = load_suite(tmp_path)
    assert before.cases[0].fingerprint != after.cases[0].fingerprint
    assert before.fingerprint != after.fingerprint


def test_a_key_given_twice_is_an_error_not_a_silent_overwrite(tmp_path):
    line = json.dumps(make_case()).replace('"gold_answer": "1964"', '"gold_answer": "1964", "gold_answer": "1978"')
    (tmp_path / "cases.jsonl").write_text(line + "\n")
    [problem] = problems_of(tmp_path)
    assert "cases.jsonl:1" in problem and "'gold_answer' appears twice" in problem


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_literals_are_rejected(tmp_path, literal):
    line = json.dumps(make_case(checkpoints=[{"kind": "aggregate_equals", "value": 1}]))
    (tmp_path / "cases.jsonl").write_text(line.replace('"value": 1', f'"value": {literal}') + "\n")
    [problem] = problems_of(tmp_path)
    assert "cases.jsonl:1" in problem and f"{literal.lstrip('-')} is not valid JSON" in problem


def test_deeply_nested_json_is_a_problem_not_a_crash(tmp_path):
    (tmp_path / "cases.jsonl").write_text("[" * 100_000 + "\n")
    [problem] = problems_of(tmp_path)
    assert "cases.jsonl:1" in problem and "nested too deeply" in problem


def test_a_fifo_named_jsonl_is_a_problem_and_never_blocks(tmp_path):
    write_cases(tmp_path, [make_case()])
    os.mkfifo(tmp_path / "pipe.jsonl")
    [problem] = problems_of(tmp_path)
    assert "pipe.jsonl" in problem and "a FIFO" in problem


def test_a_looping_symlink_and_a_folder_named_jsonl_are_problems(tmp_path):
    write_cases(tmp_path, [make_case()])
    (tmp_path / "loop.jsonl").symlink_to(tmp_path / "loop.jsonl")
    (tmp_path / "folder.jsonl").mkdir()
    found = problems_of(tmp_path)
    assert any("loop.jsonl" in p and "loops" in p for p in found)
    assert any("folder.jsonl" in p and "a folder" in p for p in found)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_an_unreadable_file_exits_74(tmp_path, capsys):
    write_cases(tmp_path, [make_case()])
    (tmp_path / "cases.jsonl").chmod(0)
    assert main(["validate", "--data", str(tmp_path)]) == 74
    assert "cannot read" in capsys.readouterr().err


def test_an_unreadable_file_is_a_file_access_error(tmp_path, monkeypatch):
    """Simulated, so it runs as root too: the permission error becomes exit 74 naming the file."""
    write_cases(tmp_path, [make_case()])
    real_open = open

    def denied(path, *args, **kwargs):
        if str(path).endswith("cases.jsonl"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", denied)
    with pytest.raises(FileAccessError, match="cannot read \\(Permission denied\\)"):
        load_suite(tmp_path)


def test_control_characters_in_ids_are_shown_not_obeyed(tmp_path, capsys):
    write_cases(tmp_path, [make_case(id="evil\x1b[2J\x1b]0;pwned\x07", adversarial="tag\x1b[31m")])
    assert main(["validate", "--data", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[31m" in out
    write_cases(tmp_path, [make_case(id="evil\x1b[2J", split="x")])
    assert main(["validate", "--data", str(tmp_path)]) == 65
    err = capsys.readouterr().err
    assert "\x1b" not in err and "evil\\x1b[2J" in err


def test_a_file_wrong_on_every_line_lists_the_first_problems_and_counts_the_rest(tmp_path, capsys):
    """A file wrong on each of its lines printed one line of message per line of the file."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "cases.jsonl").write_text("".join('{"id": 1}\n' for _ in range(500)))
    with pytest.raises(DatasetError) as caught:
        load_suite(folder)
    assert len(caught.value.problems) > 500  # every problem is still there for code to read
    message = str(caught.value)
    assert message.count("\n") == DatasetError.SHOWN + 1 and message.startswith(
        f"{len(caught.value.problems)} problems"
    )
    assert message.endswith(
        f"... and {len(caught.value.problems) - DatasetError.SHOWN} more (fix these and load again)"
    )
    assert main(["validate", "--data", str(folder)]) == 65
    assert len(capsys.readouterr().err.splitlines()) == DatasetError.SHOWN + 2


def test_a_bad_byte_after_a_byte_order_mark_is_named_where_it_is(tmp_path):
    """utf-8-sig counts from past the BOM: the byte named was three to the left of the bad one."""
    from qaeval.core.errors import DatasetError
    from qaeval.data.cases import load_suite

    data = b'\xef\xbb\xbf{"id": "b1", "question": "caf\xe9?"}\n'
    (tmp_path / "cases.jsonl").write_bytes(data)
    bad = data.index(bytes([0xE9]))
    with pytest.raises(DatasetError, match=rf"byte 0xe9 at offset {bad}\)"):
        load_suite(tmp_path)
