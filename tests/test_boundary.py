"""The SUT boundary: nothing label-bearing reaches the system under test by any route."""

from __future__ import annotations

import copy
import pickle

import pytest
from conftest import GOLDEN

import plugins
from qaeval import CaseView, Citation, SUTOutput, SystemAdapter, load_suite, run_suite
from qaeval.boundary import make_view


@pytest.fixture(scope="module")
def suite():
    return load_suite(GOLDEN)


def label_strings(case) -> list[str]:
    # Gold source ids are ordinary snippet ids on the view; what must not cross is which ones are gold.
    labels = [case.id, case.expected_behavior, case.difficulty, case.split, "is_gold", "gold"]
    if case.gold_answer and not any(case.gold_answer in s.text for s in case.sources) \
            and case.gold_answer not in case.question:
        labels.append(case.gold_answer)
    if case.adversarial:
        labels.append(case.adversarial)
    return labels


def test_public_names_are_exported():
    import qaeval

    for name in ("SystemAdapter", "SUTOutput", "Citation", "CaseView"):
        assert name in qaeval.__all__


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
    for name in ("gold_answer", "gold_source_ids", "expected_behavior", "difficulty", "split",
                 "adversarial", "checkpoints", "must_abstain"):
        assert not hasattr(view, name)
        with pytest.raises(TypeError):
            view[name]  # noqa: B018


def test_sources_carry_only_id_text_title(suite):
    view = make_view(suite.cases[0])
    for src in view.sources:
        assert set(vars(src)) == {"id", "text", "title"}


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


def test_runner_hands_adapters_only_views(suite):
    plugins.RECEIVED.clear()
    frame = run_suite(suite, plugins.Recording(), timeout=None)
    assert len(plugins.RECEIVED) == len(suite)
    assert all(type(v) is CaseView for v in plugins.RECEIVED)
    ids = {v.id for v in plugins.RECEIVED}
    assert not ids & {c.id for c in suite}
    assert list(frame["case_id"]) == [c.id for c in suite]


def test_system_adapter_is_a_protocol():
    assert isinstance(plugins.Recording(), SystemAdapter)
    assert Citation("s1", "claim").snippet_id == "s1"
    assert SUTOutput().abstained is False
