"""The SUT boundary's contract: nothing label-bearing reaches the system under test by any route, and what
comes back is checked before anything scores it."""

from __future__ import annotations

import copy
import pickle

import pytest
from conftest import GOLDEN

from qaeval import CaseView, Citation, SUTOutput, SystemAdapter, load_suite
from qaeval.system.contract import make_view
from qaeval.system.validate import output_problems


@pytest.fixture(scope="module")
def suite():
    return load_suite(GOLDEN)


def label_strings(case) -> list[str]:
    # Gold source ids are ordinary source ids on the view; what must not cross is which ones are gold.
    labels = [case.id, case.expected_behavior, case.difficulty, case.split, "is_gold", "gold"]
    if (
        case.gold_answer
        and not any(case.gold_answer in s.text for s in case.sources)
        and case.gold_answer not in case.question
    ):
        labels.append(case.gold_answer)
    if case.adversarial:
        labels.append(case.adversarial)
    return labels


def test_public_names_are_exported():
    import qaeval

    for name in ("SystemAdapter", "SUTOutput", "Citation", "CaseView", "load_run", "RunResult"):
        assert name in qaeval.__all__
        assert getattr(qaeval, name) is not None


def test_view_exposes_only_id_question_sources(suite):
    case = suite.cases[0]
    view = make_view(case)
    public = {name for name in dir(view) if not name.startswith("__")}
    assert public == {"id", "question", "sources", "_id", "_question", "_sources"}
    assert not hasattr(view, "__dict__")
    assert view.question == case.question
    assert [s.id for s in view.sources] == [s.id for s in case.sources]


def test_gold_labels_are_not_attributes_or_keys(suite):
    view = make_view(suite.cases[0])
    for name in (
        "gold_answer",
        "gold_source_ids",
        "expected_behavior",
        "difficulty",
        "split",
        "adversarial",
        "checkpoints",
        "must_abstain",
    ):
        assert not hasattr(view, name)
        with pytest.raises(TypeError):
            view[name]


def test_sources_carry_only_id_text_title(suite):
    view = make_view(suite.cases[0])
    for src in view.sources:
        assert set(type(src).__slots__) == {"id", "text", "title"} and not hasattr(src, "__dict__")


def test_view_is_read_only(suite):
    view = make_view(suite.cases[0])
    with pytest.raises(AttributeError):
        view.gold_answer = "x"
    with pytest.raises(AttributeError):
        view._id = "x"


@pytest.mark.parametrize("route", ["repr", "str", "pickle", "deepcopy", "vars_of_sources"])
def test_no_label_leaks_through(suite, route):
    for case in suite:
        view = make_view(case)
        if route == "repr":
            text = repr(view)
        elif route == "str":
            text = str(view)
        elif route == "pickle":
            text = pickle.dumps(view).decode("latin-1")
        elif route == "deepcopy":
            text = repr(copy.deepcopy(view)) + repr(copy.deepcopy(view).sources)
        else:
            text = repr([vars(s) if hasattr(s, "__dict__") else s for s in view.sources])
        for label in label_strings(case):
            assert label not in text, f"{label!r} leaked through {route} for {case.id}"


def test_opaque_id_is_not_the_readable_id_and_is_fresh_per_view(suite):
    case = suite.cases[0]
    a, b = make_view(case), make_view(case)
    assert a.id != case.id and case.id not in a.id
    assert a.id != b.id, "a per-run random token cannot be mapped back by hashing known ids"


def test_pickled_view_round_trips_without_labels(suite):
    view = make_view(suite.cases[0])
    again = pickle.loads(pickle.dumps(view))
    assert again == view and isinstance(again, CaseView)


def test_system_adapter_is_a_protocol_and_citation_keeps_its_old_name():
    class Careful:
        def answer(self, case):
            return SUTOutput(abstained=True)

    assert isinstance(Careful(), SystemAdapter)
    assert Citation("s1", "claim").source_id == "s1"
    assert SUTOutput().abstained is False


@pytest.mark.parametrize(
    "output, fragment",
    [
        ({"answer": "x"}, "adapter returned dict, not SUTOutput"),
        (SUTOutput(answer=None), "answer is NoneType, not str"),
        (SUTOutput(answer="x", citations=[("s1", "x")]), "citations[0] is tuple, not Citation"),
        (SUTOutput(answer="x", citations=(Citation("s1", "x"),)), "citations is tuple, not a list"),
        (SUTOutput(answer="x", retrieved_ids="s1"), "retrieved_ids is str, not a list"),
        (SUTOutput(answer="x", retrieved_ids=["s1", "s2", "s1"]), "retrieved_ids lists 's1' more than once"),
        (
            SUTOutput(answer="x", citations=[Citation("s1", "x"), Citation("s1", "x")], retrieved_ids=["s1"]),
            "repeats citation of 's1'",
        ),
        (SUTOutput(abstained=True, answer="An answer anyway."), "abstained but still returned answer text"),
        (SUTOutput(abstained=True, citations=[Citation("s1", "x")], retrieved_ids=["s1"]), "abstained but still cited"),
        (SUTOutput(abstained=1), "abstained is int, not bool"),
        (SUTOutput(prompt_to_model=b"bytes"), "prompt_to_model is bytes"),
        (SUTOutput(computed_aggregate=10**400), "too large"),
        (SUTOutput(computed_aggregate=10**20), "computed_aggregate is a whole number of 67 bits, out of range"),
        (SUTOutput(computed_aggregate=float("nan")), "non-finite float nan"),
        (SUTOutput(computed_aggregate=[1, 2]), "computed_aggregate is list"),
        (SUTOutput(answer="\ud800"), "not valid Unicode text"),
    ],
)
def test_malformed_output_is_named(output, fragment):
    problems = output_problems(output)
    assert any(fragment in p for p in problems), problems


def test_a_well_formed_output_has_no_problems():
    assert (
        output_problems(
            SUTOutput(
                answer="x",
                citations=[Citation("s1", "x"), Citation("s1", "y")],
                retrieved_ids=["s1", "s2"],
                model_was_called=True,
                prompt_to_model="p",
                computed_aggregate=3.5,
            )
        )
        == []
    )
    assert output_problems(SUTOutput(answer="x", computed_aggregate=-(2**63 - 1))) == [], "64 bits are kept"
    assert output_problems(SUTOutput(abstained=True, model_was_called=True, prompt_to_model="p")) == []


@pytest.mark.parametrize("isolation", ["process", "none"])
def test_an_adapter_exception_keeps_its_file_line_and_traceback(isolation, tmp_path, capsys):
    """`adapter raised KeyError: 3` named no file or line, in the terminal, the record or the report."""
    import inspect
    import json

    import plugins

    from qaeval.cli import main

    line = inspect.getsource(plugins.ShardDown).splitlines().index("        return shards[3]  # KeyError: 3")
    line += inspect.getsourcelines(plugins.ShardDown)[1]
    record, page = tmp_path / "run.json", tmp_path / "run.html"
    assert (
        main(
            [
                "run",
                "--data",
                str(GOLDEN),
                "--adapter",
                "plugins:make_shard_down",
                "--isolation",
                isolation,
                "--quiet",
                "--save",
                str(record),
                "--html",
                str(page),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"single-0001: adapter error: adapter raised KeyError: 3 (at plugins.py:{line} in retrieve)" in out
    logs = json.loads(record.read_text())["cases"][0]["output"]["logs"]
    assert logs.startswith("Traceback (most recent call last):") and logs.rstrip().endswith("KeyError: 3")
    assert f'plugins.py", line {line}, in retrieve' in logs and "in answer_one" not in logs, "the adapter's frames only"
    text = page.read_text()
    assert "the traceback of what it raised" in text and f"line {line}, in retrieve" in text
