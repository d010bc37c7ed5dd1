"""The verbs shared by the command line and the notebooks: each validates its parameters through the
library, runs, and returns a result object. Notebooks call these one per cell; the CLI calls
``execute``."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qaeval.baseline import read_baseline, write_baseline
from qaeval.calibration import DEFAULT_MIN_AGREEMENT, CalibrationResult, calibrate, load_labels
from qaeval.cases import Suite, load_suite
from qaeval.drift import DEFAULT_WINDOW, DriftResult, drift
from qaeval.errors import UsageError
from qaeval.evaluation import RunResult, evaluate
from qaeval.gate import GateResult, gate, load_tolerances
from qaeval.plugins import build, resolve

DEFAULT_ADAPTER = "qaeval.adapter:make_adapter"
DEFAULT_JUDGE = "qaeval.judging:make_judge"
COMMANDS = ("run", "baseline", "gate", "calibrate", "drift")
NOTEBOOK_FOR = {"run": "run", "baseline": "run", "gate": "gate", "calibrate": "calibrate", "drift": "drift"}


def version() -> str:
    from qaeval import __version__

    return __version__


def validate(data: str) -> str:
    """Load a suite strictly and describe it (raises DatasetError listing every problem)."""
    suite = load_suite(data)
    lines = [f"{len(suite)} valid case(s) in {data} (fingerprint {suite.fingerprint[:12]})"]
    for name, counts in suite.summary().items():
        lines.append(f"  by {name.replace('_', ' ')}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return "\n".join(lines)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{name} must be a whole number >= 1, got {value!r}")
    return value


def check_parameters(command: str, **params: Any) -> dict[str, Any]:
    """Validate a command's parameters (as given to the CLI or a notebook's parameters cell).

    Returns them normalised; raises UsageError for a bad value and DatasetError for bad data.
    """
    if command not in COMMANDS:
        raise UsageError(f"unknown command {command!r}")
    out = dict(params)
    if not isinstance(out.get("data"), str) or not out["data"]:
        raise UsageError("data must name a folder of *.jsonl cases")
    out.setdefault("adapter", DEFAULT_ADAPTER)
    out.setdefault("judge", DEFAULT_JUDGE)
    resolve(out["adapter"], what="adapter")
    resolve(out["judge"], what="judge")
    out["k"] = _positive_int("k", out.get("k", 5))
    timeout = out.get("timeout", 60.0)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0):
        raise UsageError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if command == "gate" and not out.get("baseline"):
        raise UsageError("gate needs a baseline file")
    if command == "calibrate":
        if not out.get("labels"):
            raise UsageError("calibrate needs a labels file")
        bar = out.get("min_agreement", DEFAULT_MIN_AGREEMENT)
        if isinstance(bar, bool) or not isinstance(bar, (int, float)) or not 0 <= bar <= 1:
            raise UsageError(f"min_agreement must be between 0 and 1, got {bar!r}")
    if command == "drift":
        if not out.get("timeseries"):
            raise UsageError("drift needs a timeseries file")
        out["window"] = _positive_int("window", out.get("window", DEFAULT_WINDOW))
        if out.get("notify"):
            resolve(out["notify"], what="notify hook")
    return out


def run(data: str, adapter: str = DEFAULT_ADAPTER, judge: str = DEFAULT_JUDGE, k: int = 5,
        timeout: float | None = 60.0, suite: Suite | None = None, **_: Any) -> RunResult:
    """Load the cases, build adapter and judge from their factories, evaluate."""
    suite = suite or load_suite(data)
    system = build(adapter, what="adapter")
    judge_client = build(judge, what="judge")
    return evaluate(suite, system, judge_client, k=k, adapter_name=adapter, timeout=timeout)


def gate_run(data: str, baseline: str, tolerances: str | None = None, tolerance: list[str] | None = None,
             **params: Any) -> GateResult:
    base = read_baseline(baseline)
    limits = load_tolerances(tolerances, tolerance)
    return gate(run(data, **params), base, limits)


def calibrate_run(data: str, labels: str, min_agreement: float = DEFAULT_MIN_AGREEMENT,
                  **params: Any) -> CalibrationResult:
    suite = load_suite(data)
    label_frame = load_labels(labels, known_cases={c.id for c in suite})
    return calibrate(run(data, suite=suite, **params), label_frame, min_agreement=min_agreement)


def drift_run(data: str, timeseries: str, window: int = DEFAULT_WINDOW, notify: str | None = None,
              **params: Any) -> DriftResult:
    frozen = load_suite(data).select(split="frozen")
    hook = resolve(notify, what="notify hook") if notify else None
    return drift(run(data, suite=frozen, **params), timeseries, window=window, notify=hook)


def exit_code(result: Any) -> int:
    if isinstance(result, GateResult):
        return 0 if result.passed else 1
    if isinstance(result, CalibrationResult):
        return 0 if result.trusted else 2
    if isinstance(result, DriftResult):
        return 3 if result.alarmed else 0
    return 0


def save_summary(result: Any, path: str | None) -> None:
    """Write what the CLI prints and exits with, for a notebook run under ``--html``. No-op without a path."""
    if not path:
        return
    Path(path).write_text(json.dumps({"text": result.summary_text(), "exit_code": exit_code(result)}), "utf-8")


@dataclass
class Outcome:
    text: str
    exit_code: int
    notes: list[str] = field(default_factory=list)


def compute(command: str, checked: dict[str, Any]) -> Any:
    """Run a scoring command on parameters that ``check_parameters`` already validated."""
    if command == "gate":
        return gate_run(**checked)
    if command == "calibrate":
        return calibrate_run(**checked)
    if command == "drift":
        return drift_run(**checked)
    return run(**checked)


def execute(command: str, params: dict[str, Any], *, html: str | None = None, show_code: bool = False) -> Outcome:
    """What the CLI does for a scoring command. With ``html``, the matching notebook does the work
    under papermill (so side effects such as drift's append happen once) and its summary is returned."""
    from qaeval.reports import render_report

    params = dict(params)
    out_path = params.pop("out", None)
    checked = check_parameters(command, **params)
    if html is None or command == "baseline":
        result = compute(command, checked)
        text = result.summary_text()
        if command == "baseline":
            written = write_baseline(result, out_path)
            text += f"\n\nbaseline written to {written}"
        notes = []
        if html is not None:
            render_report(NOTEBOOK_FOR[command], checked, html, show_code=show_code)
            notes.append(f"report: {html}")
        return Outcome(text, exit_code(result), notes)
    # Bad data, labels or baseline end here with exit 65, before any kernel starts.
    suite = load_suite(checked["data"])
    if command == "gate":
        read_baseline(checked["baseline"])
    if command == "calibrate":
        load_labels(checked["labels"], known_cases={c.id for c in suite})
    with tempfile.TemporaryDirectory(prefix="qaeval-") as tmp:
        summary_path = str(Path(tmp) / "summary.json")
        render_report(NOTEBOOK_FOR[command], checked, html, show_code=show_code, summary_path=summary_path)
        summary = json.loads(Path(summary_path).read_text("utf-8"))
    return Outcome(summary["text"], int(summary["exit_code"]), [f"report: {html}"])
