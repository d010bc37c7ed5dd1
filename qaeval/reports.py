"""Reports for people: escaped tables, charts and banners for the notebooks, and rendering a notebook
to one self-contained HTML file.

Everything that came from a case or a system's answer is escaped before it reaches HTML (tables are
pandas Stylers with ``escape="html"``; banners go through ``html.escape``) and has its ``$`` escaped
before it reaches a matplotlib label, so mathtext never interprets it. Charts are PNG images, embedded in
the report. The HTML template loads no script and its Content-Security-Policy forbids running any.
"""

from __future__ import annotations

import html
import io
import json
import math
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from qaeval.errors import QaevalError, ReportError
from qaeval.metrics import format_interval, format_value
from qaeval.plugins import scoped_environ

PASS_COLOR, FAIL_COLOR, NEUTRAL = "#1b7f3b", "#b3261e", "#4a6fa5"
NOTEBOOKS = ("run", "gate", "calibrate", "drift")


# --------------------------------------------------------------------------- escaping


def esc(value: Any) -> str:
    """HTML-escape anything for inclusion in report markup."""
    return html.escape("" if value is None else str(value), quote=True)


def plain(value: Any, limit: int = 60) -> str:
    """Text safe for a matplotlib label: ``$`` escaped (no mathtext), long text shortened."""
    text = "" if value is None else str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("\\", "\\\\").replace("$", r"\$")


# --------------------------------------------------------------------------- building blocks


class Chart:
    """A matplotlib figure that shows itself as an embedded PNG in notebooks and reports."""

    def __init__(self, figure: Any, alt: str = "chart") -> None:
        self.figure = figure
        self.alt = alt

    def png(self) -> bytes:
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=110, bbox_inches="tight")
        return buf.getvalue()

    def _repr_png_(self) -> tuple[bytes, dict[str, str]]:
        return self.png(), {"alt": self.alt}


class Html:
    """A fragment of already-escaped HTML that shows itself in a notebook."""

    def __init__(self, markup: str) -> None:
        self.markup = markup

    def _repr_html_(self) -> str:
        return self.markup

    def __str__(self) -> str:
        return self.markup


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def banner_html(verdict: str, detail: str) -> str:
    kind = {"PASS": "pass", "TRUST": "pass", "OK": "pass", "BLOCK": "block", "RETUNE JUDGE": "block",
            "ALARM": "block"}.get(verdict, "warn")
    return (f'<div class="qaeval-banner qaeval-{kind}" style="background:{PASS_COLOR if kind == "pass" else FAIL_COLOR};'
            f'color:#fff;padding:14px 20px;border-radius:8px">'
            f'<div class="verdict" style="font-size:28px;font-weight:700">{esc(verdict)}</div>'
            f'<div class="detail">{esc(detail)}</div></div>')


def facts_html(facts: dict[str, Any]) -> str:
    return '<div class="qaeval-facts">' + "".join(
        f"<span><b>{esc(k)}</b> {esc(v)}</span>" for k, v in facts.items()) + "</div>"


def empty_note(text: str) -> Html:
    return Html(f'<p class="qaeval-empty">{esc(text)}</p>')


def table(frame: pd.DataFrame, *, precision: int = 3, highlight: str | None = None, caption: str | None = None) -> Any:
    """An escaped, styled table. ``highlight`` names a bool column whose False rows are tinted red."""
    frame = frame.copy()
    for col in frame.columns:  # lists and dicts display as readable text, not reprs
        if frame[col].map(lambda v: isinstance(v, (list, tuple, dict))).any():
            frame[col] = frame[col].map(_readable)
    styler = frame.style.format(precision=precision, na_rep="NaN", escape="html")
    styler = styler.format_index(escape="html", axis=1).hide(axis="index")
    if caption:
        styler = styler.set_caption(esc(caption))
    if highlight and highlight in frame.columns:
        bad = ~frame[highlight].fillna(False).astype(bool)
        styler = styler.apply(lambda row: ["background-color: #fbe9e7" if bad[row.name] else "" for _ in row], axis=1)
    styler = styler.set_table_styles([
        {"selector": "th", "props": "background-color: #f0f2f5; font-weight: 600;"},
        {"selector": "td, th", "props": "padding: 4px 10px; border-bottom: 1px solid #e3e6ea; text-align: left;"
                                        " vertical-align: top;"},
        {"selector": "td:first-child", "props": "white-space: nowrap;"},
    ])
    return styler


def _readable(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "; ".join(_readable(v) if isinstance(v, dict) else str(v) for v in value)
    return "" if value is None else str(value)


def scoreboard_html(board: pd.DataFrame) -> str:
    return table(_scoreboard_display(board)).to_html()


def _scoreboard_display(board: pd.DataFrame) -> pd.DataFrame:
    rows = list(board.itertuples(index=False))
    return pd.DataFrame({
        "metric": board["metric"],
        "value": [format_value(r.value, r.n) for r in rows],
        "95% CI": [format_interval(r.ci_low, r.ci_high, r.n) for r in rows],
        "n": board["n"],
        "better": board["direction"],
        "computed over": board["over"],
    })


# --------------------------------------------------------------------------- run


def run_header(run: Any) -> Html:
    board = run.scoreboard.set_index("metric")
    passed = int(run.per_case["case_passed"].sum())
    usage = run.judge_usage
    facts = {
        "cases": len(run.suite), "passing": f"{passed}/{len(run.per_case)}",
        "adapter errors": int(run.outputs["error"].notna().sum()),
        "deterministic pass rate": f"{board.at['deterministic_pass_rate', 'value']:.3f}",
        "adapter": run.adapter, "judge": run.judge_config.label(),
        "judge calls": f"{usage['calls']} ({usage['cached']} from cache, {usage['errors']} errors)",
        "tokens spent": f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion",
        "data": run.suite.root, "fingerprint": run.dataset_fingerprint[:12],
    }
    return Html(facts_html(facts))


def scoreboard_table(run: Any) -> Any:
    return table(_scoreboard_display(run.scoreboard), caption="Headline metrics with 95% bootstrap intervals over cases")


def scoreboard_chart(run: Any) -> Chart:
    """Bars with interval whiskers, one per metric; n = 0 metrics are labelled, not drawn."""
    board = run.scoreboard.iloc[::-1]
    fig = _figure(8.5, 4.6)
    ax = fig.add_subplot()
    y = range(len(board))
    values = board["value"].fillna(0).to_numpy()
    colors = [NEUTRAL if d == "higher" else "#8a5a9e" for d in board["direction"]]
    ax.barh(y, values, color=colors, height=0.6)
    for i, (_, r) in enumerate(board.iterrows()):
        if r["n"] == 0 or math.isnan(r["value"]):
            ax.text(0.01, i, "NaN (n=0)", va="center", fontsize=9, color="#555")
            continue
        if not math.isnan(r["ci_low"]):
            ax.errorbar(r["value"], i, xerr=[[r["value"] - r["ci_low"]], [r["ci_high"] - r["value"]]],
                        fmt="none", ecolor="#222", capsize=4, lw=1.2)
        ax.text(min(r["ci_high"] if not math.isnan(r["ci_high"]) else r["value"], 1.0) + 0.015, i,
                f"{r['value']:.2f}  (n={int(r['n'])})", va="center", fontsize=9)
    ax.set_yticks(list(y), [f"{m}{' (lower is better)' if d == 'lower' else ''}"
                            for m, d in zip(board["metric"], board["direction"])], fontsize=9)
    ax.set_xlim(0, 1.25)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.set_xlabel("value with 95% bootstrap interval")
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title("Scoreboard", loc="left", fontsize=12, fontweight="bold")
    return Chart(fig, "Scoreboard: each metric's value with its 95% interval")


def slice_heatmap(run: Any, slice_name: str = "difficulty") -> Chart:
    """Metric x group heatmap for one slicing column; cells with n = 0 are grey and say so."""
    import numpy as np

    s = run.slices[run.slices["slice"] == slice_name]
    groups = sorted(s["group"].unique())
    metrics = list(run.scoreboard["metric"])
    import matplotlib

    lower_better = set(run.scoreboard.loc[run.scoreboard["direction"] == "lower", "metric"])
    grid = np.full((len(metrics), len(groups)), np.nan)
    ns = np.zeros_like(grid)
    for r in s.itertuples(index=False):
        i, j = metrics.index(r.metric), groups.index(r.group)
        grid[i, j], ns[i, j] = r.value, r.n
    # Colour says good or bad, so a lower-is-better metric is coloured by 1 - value; the text is the value.
    goodness = np.array([1 - row if m in lower_better else row for m, row in zip(metrics, grid)])
    fig = _figure(2.6 + 1.3 * len(groups), 5.6)
    ax = fig.add_subplot()
    cmap = matplotlib.colormaps["RdYlGn"].copy()
    cmap.set_bad("#e0e0e0")
    ax.imshow(np.ma.masked_invalid(goodness), cmap=cmap, vmin=0, vmax=1, aspect="auto", alpha=0.85)
    for i in range(len(metrics)):
        for j in range(len(groups)):
            label = "n=0" if ns[i, j] == 0 else f"{grid[i, j]:.2f}  (n={int(ns[i, j])})"
            ax.text(j, i, label, ha="center", va="center", fontsize=8.5, color="#111")
    ax.set_xticks(range(len(groups)), [plain(g, 24) for g in groups], rotation=25, ha="right", fontsize=9)
    ax.set_yticks(range(len(metrics)), [f"{m} (lower is better)" if m in lower_better else m for m in metrics],
                  fontsize=9)
    ax.set_title(f"Metrics by {plain(slice_name)}: green is good, grey has nothing to measure", loc="left",
                 fontsize=11)
    return Chart(fig, f"Heatmap of every metric by {slice_name}")


def failing_cases_table(run: Any) -> Any:
    failing = run.failing_cases()
    if failing.empty:
        return empty_note("Every case passed.")
    return table(failing, caption="Failing cases: what fired, the answer beside the gold answer, and what it cited")


def per_case_table(run: Any) -> Any:
    pc = run.per_case
    cols = ["case_id", "split", "difficulty", "adversarial", "case_passed", "deterministic_passed", "abstained",
            "faithfulness", "answer_correctness", "citation_correctness", "recall_at_k", "mrr", "trajectory_success"]
    return table(pc[cols], highlight="case_passed", caption="Every case, every layer (red: not passing)")


# --------------------------------------------------------------------------- gate


def gate_banner(result: Any) -> Html:
    failed = result.failed_tiers
    if failed.empty:
        detail = f"every tier passed against {result.baseline_path}"
    else:
        detail = "failed: " + "; ".join(failed["tier"])
    extra = ""
    if not result.dataset_match:
        new = int((result.new_failing["status"] == "new").sum()) if len(result.new_failing) else 0
        extra = facts_html({"note": f"the data differs from the baseline's: {len(result.changed_cases)} case(s) "
                                    f"changed, {len(result.removed_cases)} no longer present, {new} new and failing"})
    if not result.judge_match:
        extra += facts_html({"note": f"judged by {result.run.judge_config.label()}, unlike the baseline: judge "
                                     "metrics may move for that reason alone"})
    return Html(banner_html(result.verdict, detail) + extra)


def tier_table(result: Any) -> Any:
    tiers = result.tiers.assign(case_ids=result.tiers["case_ids"].map(", ".join))
    return table(tiers, highlight="passed", caption="Tiers (red: failed)")


def delta_chart(result: Any) -> Chart:
    """Each gated metric's movement against the baseline, with its tolerance marked."""
    d = result.metric_deltas.iloc[::-1]
    fig = _figure(8.5, 3.8)
    ax = fig.add_subplot()
    y = list(range(len(d)))
    deltas = d["delta"].fillna(0).to_numpy()
    ax.barh(y, deltas, color=[PASS_COLOR if p else FAIL_COLOR for p in d["passed"]], height=0.55)
    for i, r in enumerate(d.itertuples(index=False)):
        bad_side = -r.tolerance if r.direction == "higher" else r.tolerance
        ax.plot([bad_side, bad_side], [i - 0.38, i + 0.38], color="#222", lw=1.5, ls=":")
        text = "not comparable" if math.isnan(r.delta) else f"{r.baseline:.3f} → {r.current:.3f} ({r.delta:+.3f})"
        ax.text(max(r.delta if not math.isnan(r.delta) else 0, 0, abs(r.tolerance)) + 0.02, i, text,
                va="center", ha="left", fontsize=8.5)
    span = max(0.12, float(abs(deltas).max()) * 1.15)
    ax.set_xlim(-span, span + 0.45)
    ax.axvline(0, color="#888", lw=0.8)
    ax.set_yticks(y, [f"{m}{' (lower is better)' if dr == 'lower' else ''}" for m, dr in zip(d["metric"], d["direction"])],
                  fontsize=9)
    ax.set_xlabel("change against the baseline (dotted: tolerance on the bad side)")
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title("Gated metrics: movement vs baseline", loc="left", fontsize=12, fontweight="bold")
    return Chart(fig, "Movement of each gated metric against the baseline, with tolerances")


def delta_table(result: Any) -> Any:
    cols = ["metric", "baseline", "current", "delta", "tolerance", "direction", "passed", "n_paired", "note"]
    return table(result.metric_deltas[cols], highlight="passed", caption="Tolerances decide; the noise test informs")


def regressions_table(result: Any) -> Any:
    """Regressed and new-failing cases beside their baseline state and the current answer."""
    pc = result.run.per_case.set_index("case_id")
    rows = []
    for r in result.regressed.itertuples(index=False):
        rows.append(dict(case_id=r.case_id, kind="regressed", baseline=r.baseline_state, why_now=r.why))
    for r in result.new_failing.itertuples(index=False):
        rows.append(dict(case_id=r.case_id, kind=r.status, baseline=r.baseline_state, why_now=r.why))
    if not rows:
        return empty_note("No case regressed and every new or changed case passes.")
    frame = pd.DataFrame(rows)
    frame["answer now"] = [("(abstained)" if pc.at[c, "abstained"] else pc.at[c, "answer"]) for c in frame["case_id"]]
    frame["gold answer"] = [pc.at[c, "gold_answer"] or "(must abstain)" for c in frame["case_id"]]
    return table(frame, caption="Cases that block: regressed since the baseline, or new and failing")


# --------------------------------------------------------------------------- calibration


def calibration_banner(result: Any) -> Html:
    detail = (f"every axis reaches {result.min_agreement:.2f} exact agreement" if result.trusted
              else f"weak on {', '.join(result.weak_axes)} (bar: {result.min_agreement:.2f} exact agreement)")
    return Html(banner_html(result.verdict, detail) + facts_html({"judge": result.judge_label}))


def agreement_table(result: Any) -> Any:
    frame = result.agreement.copy()
    gated = frame["axis"] != "overall"
    frame["verdict"] = ["ok" if p else "WEAK" for p in frame["passed"]]
    frame.loc[~gated, "verdict"] = "not gated: every axis must pass on its own"
    frame["passed"] = frame["passed"] | ~gated
    return table(frame.drop(columns=["passed"]).assign(_ok=frame["passed"]), precision=2, highlight="_ok",
                 caption="Agreement with hand labels per axis (red: below the bar; kappa is NaN when there is "
                         "no spread to agree on)").hide(["_ok"], axis="columns")


def confusion_chart(result: Any) -> Chart:
    axes = list(result.confusion)
    fig = _figure(3.4 * len(axes), 3.3)
    for k, axis in enumerate(axes):
        m = result.confusion[axis]
        ax = fig.add_subplot(1, len(axes), k + 1)
        ax.imshow(m.values, cmap="Blues", vmin=0, vmax=max(1, int(m.values.max())))
        for i in range(3):
            for j in range(3):
                v = int(m.values[i, j])
                ax.text(j, i, str(v), ha="center", va="center", fontsize=11,
                        color="#fff" if v > m.values.max() / 2 and v else "#222", fontweight="bold" if i == j else None)
        ax.set_xticks(range(3), ["0", "1", "2"])
        ax.set_yticks(range(3), ["0", "1", "2"])
        ax.set_xlabel("judge")
        ax.set_ylabel("human")
        weak = axis in result.weak_axes
        ax.set_title(f"{axis}{'  (weak)' if weak else ''}", fontsize=10, color=FAIL_COLOR if weak else "#222")
    return Chart(fig, "Confusion matrix per judge axis, human score by judge score")


def label_pairs_table(result: Any) -> Any:
    return table(result.pairs, caption="Every label: the person's score beside the judge's")


# --------------------------------------------------------------------------- drift


def drift_banner(result: Any) -> Html:
    detail = "; ".join(a["message"] for a in result.alarms) or "every metric inside its band"
    notes = "".join(facts_html({"note": n}) for n in result.notes)
    return Html(banner_html(result.verdict, detail) + notes)


def drift_chart(result: Any) -> Chart:
    """One small panel per metric: its series, the band over the trailing window, alarms marked."""
    from matplotlib.ticker import MaxNLocator

    hist = result.history
    bands = result.bands.set_index("metric")
    metrics = list(bands.index)
    cols = 4
    rows = math.ceil(len(metrics) / cols)
    fig = _figure(3.6 * cols, 2.6 * rows)
    for k, metric in enumerate(metrics):
        ax = fig.add_subplot(rows, cols, k + 1)
        series = hist[hist["metric"] == metric]
        ax.plot(series["run"], series["value"], marker="o", ms=3.5, color=NEUTRAL, lw=1.3)
        b = bands.loc[metric]
        last = series["run"].max() if len(series) else 0
        if not math.isnan(b["low"]):
            start = max(0, last - b["window_n"])
            ax.fill_between([start, last], b["low"], b["high"], color="#9fc5e8", alpha=0.45, lw=0)
        if b["alarm"]:
            ax.plot([last], [b["current"]], marker="X", ms=11, color=FAIL_COLOR)
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(metric + ("  ALARM" if b["alarm"] else ""), fontsize=10,
                     color=FAIL_COLOR if b["alarm"] else "#222", fontweight="bold" if b["alarm"] else None)
        ax.tick_params(labelsize=8)
        ax.set_xlabel("run", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle("Each metric over runs; band = trailing mean ± max(3σ, 0.02); ✕ = alarm", fontsize=10)
    return Chart(fig, "Each metric's series over runs with its band and alarms")


def bands_table(result: Any) -> Any:
    frame = result.bands.assign(_ok=~result.bands["alarm"])
    return table(frame, highlight="_ok", caption="Current value against each metric's band (red: alarm)").hide(
        ["_ok"], axis="columns")


# --------------------------------------------------------------------------- rendering


def notebook_path(name: str) -> Path:
    """The notebook shipped in the package (a wheel), or the repository's ``notebooks/`` (a clone)."""
    if name not in NOTEBOOKS:
        raise ReportError(f"no notebook named {name!r}")
    here = Path(__file__).resolve().parent
    for folder in (here / "notebooks", here.parent / "notebooks"):
        if (folder / f"{name}.ipynb").is_file():
            return folder / f"{name}.ipynb"
    raise ReportError(f"notebook {name}.ipynb is not installed (looked in {here / 'notebooks'})")


@contextmanager
def _kernel_environment() -> Iterator[None]:
    """Run notebooks on this very interpreter, whatever kernels the machine has registered, with no
    progress bars in the log."""
    with tempfile.TemporaryDirectory(prefix="qaeval-kernel-") as tmp:
        spec = Path(tmp) / "kernels" / "python3"
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                     "--IPKernelApp.log_level=ERROR"],
            "display_name": "Python 3 (qaeval)", "language": "python"}))
        jupyter_path = os.pathsep.join(p for p in (tmp, os.environ.get("JUPYTER_PATH")) if p)
        with scoped_environ({"JUPYTER_PATH": jupyter_path, "QAEVAL_PROGRESS": "0",
                             "PYDEVD_DISABLE_FILE_VALIDATION": "1"}):
            yield


def execute_notebook(name: str, parameters: dict[str, Any], output: str | Path, *, cwd: str | Path | None = None) -> Exception | None:
    """Execute a notebook under papermill; returns the execution error (if a cell raised) instead of
    raising, because a failed notebook is still a report worth rendering."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    source = notebook_path(name)
    known = papermill.inspect_notebook(str(source))
    params = {k: v for k, v in parameters.items() if k in known}
    with _kernel_environment():
        try:
            papermill.execute_notebook(str(source), str(output), parameters=params, kernel_name="python3",
                                       cwd=str(cwd or os.getcwd()), progress_bar=False, log_output=False)
        except PapermillExecutionError as exc:
            return exc
    return None


def export_html(notebook: str | Path, html_path: str | Path, *, show_code: bool = False) -> Path:
    """Render an executed notebook to one self-contained HTML file (figures embedded, no scripts)."""
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="qaeval",
                            extra_template_basedirs=[str(Path(__file__).parent / "report_template")])
    exporter.exclude_input = not show_code
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    exporter.exclude_anchor_links = True
    nb = nbformat.read(str(notebook), as_version=4)
    # papermill adds a "stopped here" banner cell on error; the verdict banner and the raising cell say it better
    nb.cells = [c for c in nb.cells if "papermill-error-cell-tag" not in c.metadata.get("tags", [])]
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": Path(html_path).stem}})
    html_path = Path(html_path)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(body, encoding="utf-8")
    return html_path


def render_report(name: str, parameters: dict[str, Any], html_path: str | Path, *, show_code: bool = False,
                  summary_path: str | None = None) -> Path:
    """Execute notebook ``name`` with ``parameters`` and render it to ``html_path``.

    A cell that raises a qaeval verdict (the gate's last cell on BLOCK) still yields a report. Any other
    failure is re-raised after rendering, as the matching qaeval error when the kernel raised one.
    """
    params = dict(parameters)
    if summary_path is not None:
        params["summary_path"] = summary_path
    with tempfile.TemporaryDirectory(prefix="qaeval-nb-") as tmp:
        executed = Path(tmp) / f"{name}.ipynb"
        error = execute_notebook(name, params, executed)
        if not executed.exists():
            raise ReportError(f"the {name} notebook did not run: {error}")
        path = export_html(executed, html_path, show_code=show_code)
    verdicts = {"GateBlocked", "JudgeNotTrusted", "DriftAlarm"}
    if error is not None and getattr(error, "ename", "") not in verdicts:
        raise _kernel_error(error, path)
    return path


def _kernel_error(error: Any, report: Path) -> QaevalError:
    from qaeval import errors

    cls = getattr(errors, getattr(error, "ename", ""), None)
    message = f"{getattr(error, 'evalue', error)} (report with the failure: {report})"
    if isinstance(cls, type) and issubclass(cls, QaevalError) and cls not in (errors.GateBlocked, errors.JudgeNotTrusted, errors.DriftAlarm):
        if issubclass(cls, errors.DatasetError):
            return errors.DatasetError(message)
        return cls(message)
    return ReportError(f"the notebook raised {getattr(error, 'ename', 'an error')}: {message}")
