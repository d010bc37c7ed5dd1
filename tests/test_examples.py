"""The example skeletons work as shipped."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import GOLDEN, ROOT

from qaeval import api, load_suite
from qaeval.lowlevel import run_suite
from qaeval.reports.render import run_papermill


class _Rag(BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Rag.seen.append(body)
        doc = body["documents"][0]
        reply = {
            "answer": doc["text"],
            "citations": [{"document_id": doc["id"], "supports": doc["text"]}],
            "retrieved": [{"id": doc["id"]}],
            "llm_called": True,
            "prompt": body["question"] + "\n" + doc["text"],
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_http_adapter_skeleton_talks_to_a_service(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Rag)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("QAEVAL_SUT_URL", f"http://127.0.0.1:{server.server_address[1]}/answer")
        from examples.http_adapter import make_adapter

        frame = run_suite(load_suite(GOLDEN), make_adapter())
    finally:
        server.shutdown()
    assert frame["error"].isna().all() and len(_Rag.seen) == 15
    assert set(_Rag.seen[0]) == {"request_id", "question", "documents"}, "only the view crosses the boundary"
    readable = {c.id for c in load_suite(GOLDEN)}
    assert not {body["request_id"] for body in _Rag.seen} & readable, "the service sees opaque ids only"


def test_custom_judge_skeleton_runs(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    run = api.run(str(GOLDEN), judge="examples.custom_judge:make_judge")
    assert run.judge_config.name == "keyword" and run.verdicts["valid"].all()


@pytest.mark.parametrize("cwd", ["", "examples"])
def test_grow_the_golden_set_example_notebook_runs_as_written(tmp_path, monkeypatch, cwd):
    """With no parameters at all, from the repository's root (as docs/guides/cases.md runs it) and from examples/ (as
    Jupyter opens it): it imports the SQuAD-format sample shipped beside it."""
    import nbformat

    monkeypatch.setenv("QAEVAL_PROGRESS", "0")
    out = tmp_path / "out.ipynb"
    run_papermill(
        ROOT / "examples" / "grow-the-golden-set.ipynb",
        out,
        kernel_name="python3",
        progress_bar=False,
        cwd=str(ROOT / cwd),
        parameters={"workdir": str(tmp_path / "work")},
    )
    text = str([c.get("outputs") for c in nbformat.read(out, as_version=4).cells])
    assert "imported 27 of 27 squad2 record(s)" in text and "examples/squad-sample.json" in text
    assert "every record accounted for" in text and "added " in text
    grown = load_suite(tmp_path / "work" / "golden")
    assert len(grown) == 16 and sum(c.split == "living" for c in grown) == 6
    assert len(load_suite(GOLDEN)) == 15, "the repository's own golden set is untouched"


def test_readme_commands_never_write_over_the_demo_reports():
    """Following the README and docs/ after `python3 dev.py demo` must not turn the demo's BLOCK page into a
    PASS."""
    import re

    from test_docs import all_blocks

    demo = set(re.findall(r"reports/[\w.-]+", (ROOT / "dev.py").read_text()))
    assert {"reports/gate.html", "reports/compare.html", "reports/run.json"} <= demo
    commands = [line for b in all_blocks() if b["lang"] in ("sh", "bash") for line in b["code"].splitlines()]
    written = set()
    for line in commands:
        written |= set(re.findall(r"(?:--save|--html|--out|-o)\s+(reports/[\w.-]+)", line))
        written |= {
            m.removesuffix(".ipynb") + ".html" for m in re.findall(r"nbconvert .*?(reports/[\w.-]+\.ipynb)", line)
        }
        written |= set(re.findall(r"papermill \S+ (reports/[\w.-]+)", line))
    assert written, "the docs' commands were not found"
    assert not written & demo, f"README commands overwrite the demo's {sorted(written & demo)}"


def test_the_example_workflow_calibrates_its_llm_judge_before_trusting_its_metrics():
    """The workflow gated with an LLM judge and no labels: nothing checked the judge against people."""
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load((ROOT / "examples" / "github-actions.yml").read_text())
    steps = [s for s in workflow["jobs"]["gate"]["steps"] if "papermill" in s.get("run", "")]
    assert len(steps) == 1
    gate = steps[0]["run"]
    assert "-p judge qaeval.judges.openai:make_judge" in gate
    labels = re.search(r"-p labels (\S+)", gate)
    assert labels and labels.group(1).endswith(".jsonl"), (
        "the gate is given hand labels, so a judge they do not trust blocks (exit 2) before its metrics count"
    )
