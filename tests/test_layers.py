"""The package reads the way data flows: data -> system -> scoring -> verdicts -> proposals -> record ->
reports -> the verbs. A module may import from its own layer or the ones below it, never above (lazy imports inside
functions included), and no import cycle is left anywhere."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "qaeval"
LAYERS = (
    ("base", ("qaeval.errors", "qaeval.files", "qaeval.frames", "qaeval.text", "qaeval.plugins", "qaeval.params",
              "qaeval.audit", "qaeval.results")),
    ("data", ("qaeval.data",)),
    ("system", ("qaeval.system",)),
    ("integrations", ("qaeval.integrations",)),
    ("scoring", ("qaeval.scoring", "qaeval.judges", "qaeval.proposals.generator")),  # a generator is run as a judge is
    ("verdicts", ("qaeval.verdicts",)),
    ("proposals", ("qaeval.proposals",)),
    ("record", ("qaeval.record", "qaeval.record_shape", "qaeval.record_check", "qaeval.runs")),
    ("reports", ("qaeval.reports",)),
    ("verbs", ("qaeval.pipeline", "qaeval.export", "qaeval.api", "qaeval.notebook", "qaeval.cli", "qaeval.pytest_plugin", "qaeval.__main__",
               "qaeval.monitoring", "qaeval.tracking")),
)


def layer_of(module: str) -> int:
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name != "qaeval":  # the package's lazy facade re-exports names from every layer, by design
            found[name] = path
    return found


def imports_of(path: Path) -> list[tuple[str, int]]:
    """(module imported, line) for every qaeval import in the file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.startswith("qaeval")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("qaeval"):
            if node.module == "qaeval":
                names = [a.name for a in node.names]
                out += [(f"qaeval.{n}", node.lineno) for n in names if n != "__version__"]
            else:
                out.append((node.module, node.lineno))
    return out


def test_no_module_imports_from_a_layer_above_it():
    upward = []
    for name, path in sorted(modules().items()):
        for target, line in imports_of(path):
            if layer_of(target) > layer_of(name):
                upward.append(f"{path.relative_to(ROOT)}:{line}: {LAYERS[layer_of(name)][0]} imports "
                              f"{target} ({LAYERS[layer_of(target)][0]})")
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    mods = modules()
    graph = {name: {t for t, _ in imports_of(path) if t in mods and t != name} for name, path in mods.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state and (cycle := visit(name)):
            raise AssertionError("import cycle: " + " -> ".join(cycle))


def test_the_data_and_system_layers_import_neither_pandas_nor_scoring():
    code = ("import sys, qaeval.data, qaeval.system, qaeval.data.cases, qaeval.system.contract, qaeval.system.worker; "
            "print(sorted(m for m in sys.modules if m == 'pandas' or m.startswith(('qaeval.scoring', "
            "'qaeval.verdicts', 'qaeval.record', 'qaeval.reports'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]", done.stdout
