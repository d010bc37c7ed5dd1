"""The case explorer in a real browser (Debian's chromium and chromium-driver, driven by Selenium): each
filter, the search, the groups by first reason, sorting, the gate's tabs with each case's trials beside
its baseline's, the link to a case kept in the URL fragment, the rerun command, injected markup shown as
text and never run, and the static table with JavaScript off. Skipped, saying why, where the browser,
its driver or Selenium is missing (``.ci/run`` installs chromium and chromium-driver)."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from conftest import GOLDEN, make_case, write_cases

from qaeval import api
from qaeval.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    SELENIUM = True
except ImportError:  # pragma: no cover - the dev extra installs it
    SELENIUM = False

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"),
    pytest.mark.skipif(DRIVER is None, reason="Debian's chromium-driver is not installed (.ci/run installs it)"),
    pytest.mark.skipif(not SELENIUM, reason="selenium is not installed (pip install -e '.[dev]')"),
]


def golden_cases() -> list[dict]:
    return [json.loads(line) for f in sorted(GOLDEN.glob("*.jsonl")) for line in f.read_text().splitlines() if line]


def make_driver(tmp_path, javascript: bool = True):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    return webdriver.Chrome(options=options, service=Service(DRIVER))


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = make_driver(tmp_path_factory.mktemp("chrome"))
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def run_report(tmp_path_factory):
    report = tmp_path_factory.mktemp("explorer") / "run.html"
    assert main(["run", "--data", str(GOLDEN), "--html", str(report), "--quiet"]) == 0
    return report


@pytest.fixture(scope="module")
def gate_report(tmp_path_factory):
    report = tmp_path_factory.mktemp("explorer") / "gate.html"
    args = ["--data", str(GOLDEN), "--adapter", "qaeval.system.saboteur:make_adapter"]
    assert main(["gate", *args, "--baseline", str(GOLDEN / "ci-baseline.json"), "--html", str(report), "--quiet"]) == 1
    return report


def open_page(driver, path):
    driver.get(path.as_uri())
    assert driver.find_element(By.CSS_SELECTOR, ".qaeval-explorer").get_attribute("data-drawn-ms"), "not drawn"
    return driver


def shown(driver) -> list[str]:
    return [r.get_attribute("data-case") for r in driver.find_elements(By.CSS_SELECTOR, ".qx-list tbody tr")]


def count(driver) -> str:
    return driver.find_element(By.CSS_SELECTOR, ".qx-count").text


def choose(driver, key: str, value: str) -> None:
    Select(driver.find_element(By.CSS_SELECTOR, f'select[data-filter="{key}"]')).select_by_value(value)


def options(driver, key: str) -> dict[str, str]:
    sel = driver.find_element(By.CSS_SELECTOR, f'select[data-filter="{key}"]')
    return {o.get_attribute("value"): o.text for o in sel.find_elements(By.TAG_NAME, "option")}


def test_each_filter_shows_only_its_cases_and_the_counts_follow(browser, run_report, golden_run):
    cases = golden_cases()
    failing = set(golden_run.per_case.loc[~golden_run.per_case["case_passed"], "case_id"])
    open_page(browser, run_report)
    assert len(shown(browser)) == len(cases) and count(browser) == f"{len(cases)} of {len(cases)} cases shown"
    choose(browser, "r", "fail")
    assert set(shown(browser)) == failing and count(browser) == f"{len(failing)} of {len(cases)} cases shown"
    by_difficulty = {c["difficulty"] for c in cases if c["id"] in failing}
    for difficulty, label in options(browser, "d").items():
        if difficulty:
            n = sum(c["difficulty"] == difficulty and c["id"] in failing for c in cases)
            assert label == f"{difficulty} ({n})", "a filter's counts follow the other filters"
    assert by_difficulty
    choose(browser, "r", "")
    for key, field in (("d", "difficulty"), ("t", "adversarial"), ("s:behavior", "expected_behavior")):
        value = next(c[field] for c in cases if c.get(field))
        choose(browser, key, value)
        assert set(shown(browser)) == {c["id"] for c in cases if c.get(field) == value}, key
        choose(browser, key, "")
    choose(browser, "s:split", "living")
    assert set(shown(browser)) == {c["id"] for c in cases if c["split"] == "living"}
    choose(browser, "s:split", "")
    choose(browser, "f", "trajectory_failed")
    reasons = golden_run.per_case.set_index("case_id")["fail_reasons"]
    assert set(shown(browser)) == {c for c, rs in reasons.items() if any(r.code == "trajectory_failed" for r in rs)}


def test_search_finds_ids_questions_and_answers(browser, run_report, golden_run):
    open_page(browser, run_report)
    box = browser.find_element(By.CSS_SELECTOR, ".qx-search")
    box.send_keys("abstain-000")
    assert set(shown(browser)) == {c["id"] for c in golden_cases() if c["id"].startswith("abstain-000")}
    box.clear()
    box.send_keys("DVD")
    assert shown(browser) == ["single-0001"], "the question of single-0001 asks about DVDs"
    answer = golden_run.outputs.set_index("case_id").loc["single-0002", "answer"]
    box.clear()
    box.send_keys(answer[:30])
    assert "single-0002" in shown(browser), "an answer's text is searched"


def test_failures_group_by_their_first_reason_and_open_to_their_cases(browser, run_report, golden_run):
    open_page(browser, run_report)
    browser.find_element(By.CSS_SELECTOR, ".qx-group-toggle").click()
    groups = browser.find_elements(By.CSS_SELECTOR, ".qx-group")
    failing = golden_run.per_case[~golden_run.per_case["case_passed"]]
    expected: dict[str, set[str]] = {}
    for r in failing.to_dict("records"):
        expected.setdefault(r["fail_reasons"][0].code, set()).add(r["case_id"])
    assert {g.get_attribute("data-group") for g in groups} == set(expected)
    group = groups[0]
    key = group.get_attribute("data-group")
    assert group.find_element(By.TAG_NAME, "summary").text == f"{key} — {len(expected[key])} case(s)"
    group.find_element(By.TAG_NAME, "summary").click()
    assert {r.get_attribute("data-case") for r in group.find_elements(By.CSS_SELECTOR, "tbody tr")} == expected[key]


def test_sorting_by_a_column_and_back(browser, run_report):
    open_page(browser, run_report)
    header = browser.find_element(By.CSS_SELECTOR, '.qx-list th[data-sort="0"]')
    header.click()
    assert shown(browser) == sorted(shown(browser)) and len(shown(browser)) == len(golden_cases())
    browser.find_element(By.CSS_SELECTOR, '.qx-list th[data-sort="4"]').click()  # difficulty
    difficulties = [
        c.find_elements(By.TAG_NAME, "td")[4].text for c in browser.find_elements(By.CSS_SELECTOR, ".qx-list tbody tr")
    ]
    assert difficulties == sorted(difficulties)
    browser.find_element(By.CSS_SELECTOR, '.qx-list th[data-sort="4"]').click()
    difficulties = [
        c.find_elements(By.TAG_NAME, "td")[4].text for c in browser.find_elements(By.CSS_SELECTOR, ".qx-list tbody tr")
    ]
    assert difficulties == sorted(difficulties, reverse=True)


def test_a_case_link_lives_in_the_fragment_and_survives_a_reload(browser, run_report):
    open_page(browser, run_report)
    browser.find_element(By.CSS_SELECTOR, '.qx-list tr[data-case="agg-0002"] a').click()
    assert browser.execute_script("return location.hash") == "#case-agg-0002"
    heading = browser.find_element(By.CSS_SELECTOR, ".qx-detail h3")
    # what the link's fragment fires after the click drew the case: the case is not drawn again under the
    # reader (whose element would go stale, and the tests reading it flaked)
    browser.execute_script('window.dispatchEvent(new HashChangeEvent("hashchange"))')
    assert heading.text.startswith("agg-0002")
    browser.refresh()
    assert browser.find_element(By.CSS_SELECTOR, ".qx-detail h3").text.startswith("agg-0002"), "kept on reload"
    assert browser.find_element(By.ID, "case-agg-0002").get_attribute("open") is not None, "its drill-down opens"


def test_the_rerun_command_names_the_cases_shown(browser, run_report, golden_run):
    open_page(browser, run_report)
    choose(browser, "r", "fail")
    line = browser.find_element(By.CSS_SELECTOR, ".qx-command-line").get_attribute("value")
    assert line.startswith(f"qaeval run --data {GOLDEN}")
    assert sorted(line.split(" --case ")[1:]) == sorted(f"'{c}'" for c in shown(browser))


def test_gate_tabs_show_regressed_cases_with_their_trials_beside_the_baseline(browser, gate_report):
    result = api.gate(
        str(GOLDEN), adapter="qaeval.system.saboteur:make_adapter", baseline=str(GOLDEN / "ci-baseline.json")
    )
    regressed = list(result.regressed["case_id"])
    assert regressed, "the saboteur regresses cases"
    open_page(browser, gate_report)
    tab = browser.find_element(By.CSS_SELECTOR, '.qx-tabs button[data-tab="regressed"]')
    assert tab.text == f"regressed ({len(regressed)})"
    tab.click()
    assert set(shown(browser)) == set(regressed)
    must_abstain = {c["id"] for c in golden_cases() if c["expected_behavior"] == "unanswerable_must_abstain"}
    choose(browser, "s:behavior", "unanswerable_must_abstain")
    assert set(shown(browser)) == set(regressed) & must_abstain, "the must-abstain cases that regressed"
    tab = browser.find_element(By.CSS_SELECTOR, '.qx-tabs button[data-tab="regressed"]')
    assert tab.text == f"regressed ({len(set(regressed) & must_abstain)})", "the tabs count what the filters leave"
    browser.find_element(By.CSS_SELECTOR, ".qx-group-toggle").click()
    group = browser.find_element(By.CSS_SELECTOR, ".qx-group")
    group.find_element(By.TAG_NAME, "summary").click()
    group.find_element(By.CSS_SELECTOR, "tbody tr a").click()
    sides = browser.find_elements(By.CSS_SELECTOR, ".qx-detail .qx-trials > div")
    assert [s.find_element(By.TAG_NAME, "b").text for s in sides] == ["Baseline", "Now"]
    assert "trials passed" in sides[0].text and "trials passed" in sides[1].text
    for key in ("new", "flaky", "fixed", "all"):
        browser.find_element(By.CSS_SELECTOR, f'.qx-tabs button[data-tab="{key}"]').click()


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile-explorer")
    question = (
        "When did Eastside open? <script>document.body.setAttribute('data-pwned','a')</script>"
        "\"</script><script>document.body.setAttribute('data-pwned','b')</script><!-- \u2028"
    )
    data = write_cases(tmp / "data", [make_case(id="xss-0001", question=question)])
    report = tmp / "run.html"
    assert main(["run", "--data", str(data), "--html", str(report), "--quiet"]) in (0, 1)
    return report, question


def test_a_question_holding_script_tags_is_shown_as_text_and_never_run(browser, hostile_report):
    report, question = hostile_report
    page = report.read_text("utf-8")
    data = re.findall(r"<script[^>]*qx-data[^>]*>(.*?)</script>", page, flags=re.S)
    assert len(data) == 1, "the cases are embedded once"
    assert json.loads(data[0])["cases"][0]["q"] == question, "the JSON ends where it should and holds the question"
    assert "\\u003c/script\\u003e" in data[0] and "<" not in data[0] and "\u2028" not in data[0]
    open_page(browser, report)
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-pwned") is None, "an injected script ran"
    browser.find_element(By.CSS_SELECTOR, '.qx-list tr[data-case="xss-0001"] a').click()
    assert browser.find_element(By.CSS_SELECTOR, ".qx-detail dd").text == question.strip(), "shown as text"
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-pwned") is None


def test_with_javascript_off_the_static_table_shows(tmp_path, run_report):
    driver = make_driver(tmp_path, javascript=False)
    try:
        driver.get(run_report.as_uri())
        root = driver.find_element(By.CSS_SELECTOR, ".qaeval-explorer")
        assert root.get_attribute("data-drawn-ms") is None
        assert not driver.find_element(By.CSS_SELECTOR, ".qx-live").is_displayed()
        table = driver.find_element(By.CSS_SELECTOR, ".qx-static table.qaeval")
        assert table.is_displayed() and len(table.find_elements(By.CSS_SELECTOR, "tbody tr")) == len(golden_cases())
    finally:
        driver.quit()


FIELDS = ("answer", "citations", "retrieved_ids", "passages", "abstained", "model_was_called", "prompt_to_model")


@pytest.fixture(scope="module")
def trials_report(tmp_path_factory, golden_run):
    """Three trials of the golden run's own answers, single-0001 refusing in its second: flaky."""
    tmp = tmp_path_factory.mktemp("explorer-trials")
    rows = []
    for trial in range(3):
        for r in golden_run.outputs.to_dict("records"):
            row = {"case_id": r["case_id"], "trial": trial, **{f: r[f] for f in FIELDS}}
            if r["case_id"] == "single-0001" and trial == 1:
                row.update(answer="", citations=[], abstained=True)
            rows.append(row)
    record, report = tmp / "trials.json", tmp / "trials.html"
    api.score(str(GOLDEN), rows, save=str(record))
    assert main(["report", str(record), "--html", str(report)]) == 0
    return report


def test_trials_filter_and_a_flaky_case_with_each_trial_answer(browser, trials_report):
    open_page(browser, trials_report)
    choose(browser, "r", "flaky")
    assert shown(browser) == ["single-0001"]
    choose(browser, "r", "")
    choose(browser, "o", "some failed")
    assert shown(browser) == ["single-0001"]
    browser.find_element(By.CSS_SELECTOR, '.qx-list tr[data-case="single-0001"] a').click()
    now = browser.find_elements(By.CSS_SELECTOR, ".qx-detail .qx-trials > div")[-1]
    assert "2 of 3 trials passed" in now.text and now.find_element(By.CSS_SELECTOR, ".qx-marks").text == "✓✗✓"
    answers = [p.text for p in now.find_elements(By.CSS_SELECTOR, ".qx-answer")]
    assert answers[1] == "trial 2: (abstained)" and answers[0].startswith("trial 1: ") and len(answers) == 3
    assert not browser.find_elements(By.CSS_SELECTOR, ".qx-copy"), (
        "answers given to qaeval.score: no command reruns them"
    )


def test_the_copy_button_selects_the_command(browser, run_report):
    open_page(browser, run_report)
    choose(browser, "d", "aggregation")
    browser.find_element(By.CSS_SELECTOR, ".qx-copy").click()
    line = browser.find_element(By.CSS_SELECTOR, ".qx-command-line")
    assert browser.switch_to.active_element == line, "the command is selected, ready to copy"
    assert line.get_attribute("value").endswith(" --case 'agg-0001' --case 'agg-0002'")


def test_a_long_list_is_drawn_a_page_at_a_time(browser, tmp_path):
    from qaeval.reports import case_explorer
    from qaeval.reports.render import page

    data = write_cases(tmp_path / "data", [make_case(id=f"case-{i:04d}") for i in range(450)])
    run = api.run(str(data), isolation="none")
    report = tmp_path / "long.html"
    report.write_text(page("qaeval run report", case_explorer(run).markup), "utf-8")
    open_page(browser, report)
    assert len(shown(browser)) == 200 and count(browser) == "450 of 450 cases shown"
    more = browser.find_element(By.CSS_SELECTOR, ".qx-more")
    assert more.text == "show 250 more"
    more.click()
    assert len(shown(browser)) == 450 and not browser.find_elements(By.CSS_SELECTOR, ".qx-more")
