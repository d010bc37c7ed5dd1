"""The Python guide is a notebook session: its Python blocks run in order in one interpreter, in a copy of
the repository, and each prints exactly the text block that follows it on the page."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from conftest import ROOT
from test_docs import blocks

PAGE = ROOT / "docs" / "guides" / "python.md"
SESSION = "one session with the blocks around it"

RUNNER = """
import contextlib, io, json, sys
namespace, printed = {}, []
for code in json.load(sys.stdin):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<python.md>", "exec"), namespace)
    printed.append(out.getvalue())
print(json.dumps(printed))
"""


def session() -> list[tuple[dict, dict]]:
    """(python block, the text block after it) for every block of the session."""
    found = blocks(PAGE)
    pairs = []
    for i, b in enumerate(found):
        if b["lang"] == "python" and SESSION in (b["marker"].get("reason") or ""):
            assert i + 1 < len(found) and found[i + 1]["lang"] == "text", f"python.md:{b['line']}: no output after it"
            pairs.append((b, found[i + 1]))
    return pairs


def test_the_python_guide_prints_what_it_shows(tmp_path):
    pairs = session()
    assert len(pairs) >= 7, "the guide's session was not found"
    for name in ("golden",):
        shutil.copytree(ROOT / name, tmp_path / name)
    (tmp_path / "reports").mkdir()
    env = {**os.environ, "QAEVAL_PROGRESS": "0", "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps([code["code"] for code, _ in pairs]),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout.splitlines()[-1])
    for (code, shown), out in zip(pairs, printed):
        assert out == shown["code"], f"python.md:{code['line']} printed:\n{out}\nthe page shows:\n{shown['code']}"
    assert (tmp_path / "reports" / "scoreboard.png").stat().st_size > 10_000, "the plot was drawn"
