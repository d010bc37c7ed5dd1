"""Rendered reports opened in a real browser: the verdict shows, each blocking case has its drill-down with
the judge's quote marked inside its passage, injected markup never runs, and no traceback is shown."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from conftest import GOLDEN

from qaeval.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium(path, tmp_path, *extra) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *extra, path.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def dump_dom(path, tmp_path) -> str:
    return chromium(path, tmp_path, "--virtual-time-budget=3000", "--dump-dom").stdout


@pytest.fixture(scope="module")
def saboteur_gate(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    report = tmp / "gate.html"
    code = main(
        [
            "gate",
            "--data",
            str(GOLDEN),
            "--adapter",
            "qaeval.system.saboteur:make_adapter",
            "--baseline",
            str(GOLDEN / "ci-baseline.json"),
            "--html",
            str(report),
            "--quiet",
        ]
    )
    assert code == 1
    return report


def test_gate_report_on_the_saboteur_leads_with_block_and_draws_each_blocking_case(saboteur_gate, tmp_path):
    dom = dump_dom(saboteur_gate, tmp_path)
    banner = dom.index('class="qaeval-banner qaeval-block"')
    assert ">BLOCK<" in dom[banner : banner + 600], "the verdict banner is the first thing on the page"
    assert dom.index("qaeval-banner") < dom.index("<h2"), "the banner comes before every section"
    for case_id in ("single-0002", "abstain-0001", "agg-0002", "multi-0003"):
        assert dom.count(f'id="case-{case_id}"') == 1, f"{case_id}: one drill-down"
    leak = dom[dom.index('id="case-agg-0002"') :]
    leak = leak[: leak.index("</details>")]
    passage = re.search(r'<div class="passage cited">(?:(?!</div>).)*visits-fy2024(?:(?!</div>).)*</div>', leak, re.S)
    assert passage and "<mark>" in passage.group(0), "the judge's quote is marked inside the passage it came from"
    assert "Traceback" not in dom and "GateBlocked" not in dom and "An Exception was encountered" not in dom


def test_reports_show_injected_markup_and_run_none_of_it(hostile_reports, tmp_path):
    gate_html, run_html = hostile_reports
    dom = dump_dom(gate_html, tmp_path)
    assert ">BLOCK<" in dom
    assert 'data-pwned="' not in dom, "an injected script or handler ran"
    assert "&lt;script&gt;" in dom, "the markup is displayed as text"
    assert 'data-pwned="' not in dump_dom(run_html, tmp_path)


def test_a_report_without_escaping_would_have_been_caught(tmp_path):
    """The check above can fail: a page that does run the injected script is detected."""
    page = tmp_path / "bad.html"
    page.write_text("<html><body><p>x</p><script>document.body.setAttribute('data-pwned','yes')</script></body></html>")
    assert 'data-pwned="yes"' in dump_dom(page, tmp_path)
