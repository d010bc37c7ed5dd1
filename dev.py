#!/usr/bin/env python3
"""Set up and run qaeval with nothing but python3.

    python3 dev.py demo            create .venv, install qaeval, run the whole demo pipeline into reports/
    python3 dev.py test            create .venv, install qaeval with its test tools, run the test suite
    python3 dev.py test --oldest   the same in .venv-oldest, with the oldest versions qaeval claims to support

Extra arguments after `test` go to pytest; the whole suite runs in parallel (pytest-xdist, at least three
workers), a chosen test file or -k runs in one process. Set QAEVAL_VENV to use another environment folder.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
OLDEST = ROOT / ".ci" / "oldest.txt"


def paths(oldest: bool) -> tuple[Path, Path, Path]:
    default = ROOT / (".venv-oldest" if oldest else ".venv")
    folder = Path(os.environ.get("QAEVAL_VENV" if not oldest else "QAEVAL_VENV_OLDEST", default))
    bin_dir = folder / ("Scripts" if os.name == "nt" else "bin")
    return folder, bin_dir, bin_dir / ("python.exe" if os.name == "nt" else "python")


def sh(*args: str, ok: tuple[int, ...] = (0,), **kw) -> int:
    print("+", " ".join(args), flush=True)
    code = subprocess.call(list(args), cwd=ROOT, **kw)
    if code not in ok:
        sys.exit(f"dev.py: `{' '.join(args)}` exited {code}, expected {' or '.join(map(str, ok))}")
    return code


def setup(oldest: bool = False) -> Path:
    folder, bin_dir, python = paths(oldest)
    if not python.exists():
        print(f"creating {folder}", flush=True)
        venv.EnvBuilder(with_pip=True).create(folder)
    stamp = folder / ".qaeval-installed"
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + (OLDEST.read_bytes() if oldest else b"")).hexdigest()
    if not (stamp.exists() and stamp.read_text() == want):
        sh(str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip")
        constraints = ["-c", str(OLDEST)] if oldest else []
        sh(str(python), "-m", "pip", "install", "--quiet", *constraints, "-e", ".[dev]")
        stamp.write_text(want)
    # An editable install is not compiled the way a wheel's is, and where PYTHONDONTWRITEBYTECODE is set
    # every process (each test's `qaeval`, each worker) would compile qaeval again: a fifth of a second each.
    # Only changed files are compiled; a stale .pyc is never used (Python checks it against its source).
    sh(str(python), "-m", "compileall", "-q", "qaeval", ok=(0, 1))
    return bin_dir


def demo(bin_dir: Path) -> None:
    reports = ROOT / "reports"
    reports.mkdir(exist_ok=True)
    baseline = "golden/ci-baseline.json"  # the committed baseline of the reference system
    history = reports / "drift-history.jsonl"
    buggy = "qaeval.system.saboteur:make_adapter"
    os.environ["QAEVAL_PROGRESS"] = "0"

    def qaeval(*args: str, expect: int) -> None:
        sh(str(bin_dir / "qaeval"), *args, ok=(expect,))

    qaeval("validate", "--data", "golden", expect=0)
    qaeval("validate", "--data", "golden/buggy", expect=0)
    qaeval("run", "--data", "golden", "--save", "reports/run.json", "--html", "reports/run.html", expect=0)
    qaeval("gate", "--data", "golden", "--baseline", baseline, "--html", "reports/gate-golden.html", expect=0)
    qaeval(
        "gate",
        "--data",
        "golden",
        "--adapter",
        buggy,
        "--baseline",
        baseline,
        "--save",
        "reports/gate-saboteur.json",
        "--html",
        "reports/gate.html",
        expect=1,
    )
    # The buggy split: each of its cases trips the saboteur's faults one by one. It shares no case with the
    # golden baseline, so gating it against that baseline is refused (65), not blocked as "all new".
    qaeval("run", "--data", "golden/buggy", "--adapter", buggy, "--html", "reports/buggy.html", "--quiet", expect=0)
    qaeval("gate", "--data", "golden/buggy", "--adapter", buggy, "--baseline", baseline, "--quiet", expect=65)
    # The offline judge agrees with the demo labels on every axis (it credits an answer that contains the
    # gold answer); on the hand-written labelled set it is refused on faithfulness.
    qaeval(
        "calibrate",
        "--data",
        "golden",
        "--labels",
        "golden/calibration/human_labels.jsonl",
        "--html",
        "reports/calibrate.html",
        expect=0,
    )
    qaeval(
        "calibrate",
        "--labelled",
        "examples/labelled-set.jsonl",
        "--min-labels",
        "5",
        "--html",
        "reports/calibrate-labelled.html",
        expect=2,
    )
    history.unlink(missing_ok=True)
    for _ in range(4):
        qaeval("drift", "--data", "golden", "--timeseries", str(history), "--quiet", expect=0)
    qaeval(
        "drift",
        "--data",
        "golden",
        "--timeseries",
        str(history),
        "--adapter",
        buggy,
        "--html",
        "reports/drift.html",
        expect=3,
    )
    qaeval("run", "--data", "golden", "--adapter", buggy, "--save", "reports/saboteur-run.json", "--quiet", expect=0)
    qaeval("compare", baseline, "reports/saboteur-run.json", "--html", "reports/compare.html", expect=0)
    qaeval("report", "reports/gate-saboteur.json", "--html", "reports/gate-from-record.html", expect=0)
    print("\ndemo done: the gate passed golden against the committed baseline, blocked the saboteur, calibration")
    print("trusted the offline judge on the demo labels and refused it on the labelled set's faithfulness, drift")
    print(
        f"alarmed on the saboteur, compare named every case it changed. Reports: {', '.join(sorted(p.name for p in reports.glob('*.html')))} in {reports}"
    )


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("demo", "test", "setup"):
        sys.exit(__doc__)
    oldest = argv[0] == "test" and "--oldest" in argv[1:]
    bin_dir = setup(oldest)
    if argv[0] == "demo":
        demo(bin_dir)
    elif argv[0] == "test":
        extra = [a for a in argv[1:] if a != "--oldest"]
        sys.exit(subprocess.call([str(bin_dir / "python"), "-m", "pytest", *parallel(extra), *extra], cwd=ROOT))


def parallel(extra: list[str]) -> list[str]:
    """pytest-xdist's workers for a whole-suite run: at least three, since most tests wait on worker
    processes and kernels rather than compute. A run of chosen tests (a path or -k) or one that sets
    -n itself runs as asked."""
    chosen = any(a.startswith(("-n", "--numprocesses", "-k", "-p", "--pdb")) or not a.startswith("-") for a in extra)
    return [] if chosen else ["-n", str(max(3, os.cpu_count() or 1))]


if __name__ == "__main__":
    main(sys.argv[1:])
