"""``qaeval compare`` against a record of several trials: a case's citations are shown for every trial,
grouped, not the first trial's alone; and the report's baseline answer says which trial it is and lists
the baseline's citations by trial."""

from __future__ import annotations

from functools import partial

import pytest
from conftest import GOLDEN, ROOT
from helpers import without_explorer
from test_resume import qaeval

import qaeval as qa

TESTS = str(ROOT / "tests")
DVD = "single-0001"  # the DVD question: plugins.MiscitesEveryOther cites "nowhere" in its 2nd, 4th, ... asking
CITES = "digital-lending (trials 1, 3, 5), nowhere (trials 2, 4)"


cli = partial(qaeval, cwd=ROOT, env={})  # the real command line in a fresh process, as a user runs it


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """A baseline of five trials whose DVD case cites a passage that does not exist in trials 2 and 4, and a
    run of one trial of the reference system, which cites the right one."""
    folder = tmp_path_factory.mktemp("compare-trials")
    five, one = folder / "five.json", folder / "one.json"
    flags = ["--isolation", "none", "--concurrency", "1"]
    done = cli("baseline", "--data", str(GOLDEN), "--adapter", "plugins:make_miscites_every_other", "--trials", "5",
               "--out", str(five), "--allow-failing", *flags)  # fmt: skip
    assert five.exists(), done.stderr
    assert cli("run", "--data", str(GOLDEN), "--save", str(one), *flags).returncode == 0
    return five, one


def test_compare_shows_each_trials_citation_not_the_first_alone(records, tmp_path):
    five, one = records
    done = cli("compare", str(five), str(one), "--html", str(tmp_path / "c.html"))
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.strip().startswith(DVD))
    # trial 1 cited digital-lending, as the run does: the first trial alone said nothing had changed
    assert f"cites {CITES} → digital-lending" in line and "trials passed 3/5 -> 1/1" in line
    comparison = qa.compare(str(five), str(one))
    row = comparison.cases.set_index("case_id").loc[DVD]
    assert row["citations_changed"] and row["citations_by_trial"] == f"{CITES} → digital-lending"
    # the other way round: the run's trials beside the one baseline trial
    back = qa.compare(str(one), str(five)).cases.set_index("case_id").loc[DVD, "citations_by_trial"]
    assert back == f"digital-lending → {CITES}"
    # a case every trial of both cited alike says nothing about trials
    assert comparison.cases.set_index("case_id").loc["single-0002", "citations_by_trial"] is None


def test_the_report_says_which_baseline_trial_it_shows_and_what_the_others_cited(records, tmp_path):
    five, one = records
    page = tmp_path / "compare.html"
    assert cli("compare", str(five), str(one), "--html", str(page)).returncode == 0
    text = without_explorer(page.read_text(encoding="utf-8"))
    case = text[text.index(f'id="case-{DVD}"') :]
    case = case[: case.index("</details>")]
    assert "trial 1 of 5 shown" in case
    assert f"Baseline citations by trial: {CITES}" in case
