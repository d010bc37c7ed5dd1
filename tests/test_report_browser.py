"""A rendered gate report opened in a real browser: the verdict shows, injected markup never runs."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")


def dump_dom(path, tmp_path) -> str:
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000", "--dump-dom", path.as_uri()],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_gate_report_shows_block_and_runs_no_injected_script(hostile_reports, tmp_path):
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
    dom = dump_dom(page, tmp_path)
    assert 'data-pwned="yes"' in dom
