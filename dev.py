#!/usr/bin/env python3
"""Set up and run qaeval with nothing but python3.

    python3 dev.py demo    create .venv, install qaeval, run the whole demo pipeline into reports/
    python3 dev.py test    create .venv, install qaeval with its test tools, run the test suite

Extra arguments after `test` go to pytest. Set QAEVAL_VENV to use another environment folder.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("QAEVAL_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")


def sh(*args: str, ok: tuple[int, ...] = (0,), **kw) -> int:
    print("+", " ".join(args), flush=True)
    code = subprocess.call(list(args), cwd=ROOT, **kw)
    if code not in ok:
        sys.exit(f"dev.py: `{' '.join(args)}` exited {code}, expected {' or '.join(map(str, ok))}")
    return code


def setup() -> None:
    if not PY.exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    stamp = VENV / ".qaeval-installed"
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == want:
        return
    sh(str(PY), "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    sh(str(PY), "-m", "pip", "install", "--quiet", "-e", ".[dev]")
    stamp.write_text(want)


def qaeval(*args: str, expect: int) -> None:
    sh(str(BIN / "qaeval"), *args, ok=(expect,))


def demo() -> None:
    reports = ROOT / "reports"
    reports.mkdir(exist_ok=True)
    baseline, history = str(reports / "baseline.json"), reports / "drift-history.jsonl"
    buggy = "qaeval.buggy_hub:make_adapter"
    os.environ["QAEVAL_PROGRESS"] = "0"
    qaeval("validate", "--data", "golden", expect=0)
    qaeval("validate", "--data", "golden/buggy", expect=0)
    qaeval("baseline", "--data", "golden", "--out", baseline, "--html", str(reports / "run.html"), expect=0)
    qaeval("gate", "--data", "golden", "--baseline", baseline, "--html", str(reports / "gate-golden.html"), expect=0)
    qaeval("gate", "--data", "golden/buggy", "--adapter", buggy, "--baseline", baseline,
           "--html", str(reports / "gate.html"), expect=1)
    qaeval("calibrate", "--data", "golden", "--labels", "golden/calibration/human_labels.jsonl",
           "--html", str(reports / "calibrate.html"), expect=2)
    history.unlink(missing_ok=True)
    for _ in range(4):
        qaeval("drift", "--data", "golden", "--timeseries", str(history), "--quiet", expect=0)
    qaeval("drift", "--data", "golden", "--timeseries", str(history), "--adapter", buggy,
           "--html", str(reports / "drift.html"), expect=3)
    print("\ndemo done: the gate passed golden, blocked the saboteur, calibration refused the offline judge,")
    print(f"drift alarmed on the saboteur. Reports: {', '.join(sorted(p.name for p in reports.glob('*.html')))} in {reports}")


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("demo", "test", "setup"):
        sys.exit(__doc__)
    setup()
    if argv[0] == "demo":
        demo()
    elif argv[0] == "test":
        sys.exit(subprocess.call([str(PY), "-m", "pytest", *argv[1:]], cwd=ROOT))


if __name__ == "__main__":
    main(sys.argv[1:])
