"""The package reads the way data flows: data -> system -> scoring -> verdicts -> proposals -> record ->
reports -> the verbs. Each package sits in one layer, whole. A module may import from its own layer or the ones
below it, never above (lazy imports inside functions included; the results' save and _repr_html_ are the one
documented exception, CALLED_UP), and no import cycle is left anywhere."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "qaeval"
# Each package (and each entry point at the top) sits in exactly one layer, whole: where a module belongs
# is where its folder is.
LAYERS = (
    ("base", ("core",)),
    ("data", ("data",)),
    # the system is called through the adapter's worker process, built from the plumbing all user code runs behind
    ("system", ("system", "worker")),
    ("integrations", ("integrations",)),
    # the judges (and the generator, run as a judge is) and the host custom judges, checks and hooks run in
    ("scoring", ("scoring", "judges", "host")),
    ("verdicts", ("verdicts",)),
    ("proposals", ("proposals",)),
    ("record", ("record",)),
    ("reports", ("reports",)),
    ("verbs", ("commands", "api", "lowlevel", "notebook", "cli", "pytest_plugin", "__main__")),
)
# The two calls a result makes upwards, when called and never at import: ``save`` writes the record
# (``qaeval.record.write``) and ``_repr_html_`` draws the report view (``qaeval.reports.views``). A result
# is made in the layer below either; importing them at the call is the whole wiring, no registry.
CALLED_UP = {("qaeval.core.results", "qaeval.record.write"), ("qaeval.core.results", "qaeval.reports.views")}
# What may sit at the top of the package: the public entry points. Everything else is in a package.
TOP_LEVEL = {"__init__", "__main__", "api", "cli", "lowlevel", "notebook", "pytest_plugin"}
RANK = {package: rank for rank, (_, packages) in enumerate(LAYERS) for package in packages}


def package_of(module: str) -> str:
    """The package (or top-level entry point) a module is in: ``qaeval.worker.serve`` is in ``worker``."""
    return module.split(".")[1]


def layer_of(module: str) -> int:
    """The layer of the module's package."""
    package = package_of(module)
    if package not in RANK:
        raise AssertionError(f"qaeval.{package} is in no layer: add it to LAYERS")
    return RANK[package]


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
                # ``from qaeval.judges import generator`` imports the module qaeval.judges.generator
                folder = ROOT.joinpath(*node.module.split("."))
                out += [
                    (f"{node.module}.{a.name}", node.lineno)
                    for a in node.names
                    if (folder / f"{a.name}.py").exists() or (folder / a.name / "__init__.py").exists()
                ]
    return out


def test_each_package_is_in_exactly_one_layer_and_every_one_is_listed():
    """A newcomer learns where a file belongs from its folder: LAYERS names packages, each once, and
    every package and entry point of qaeval is one of them."""
    listed = [package for _, packages in LAYERS for package in packages]
    assert len(listed) == len(set(listed)), "a package listed in two layers"
    present = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    present |= {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert present == set(listed), ("in no layer:", present - set(listed), "listed but absent:", set(listed) - present)


def test_no_module_imports_from_a_layer_above_it():
    upward = []
    for name, path in sorted(modules().items()):
        for target, line in imports_of(path):
            if layer_of(target) > layer_of(name) and (name, target) not in CALLED_UP:
                upward.append(
                    f"{path.relative_to(ROOT)}:{line}: {LAYERS[layer_of(name)][0]} imports "
                    f"{target} ({LAYERS[layer_of(target)][0]})"
                )
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    mods = modules()
    graph = {
        name: {t for t, _ in imports_of(path) if t in mods and t != name and (name, t) not in CALLED_UP}
        for name, path in mods.items()
    }
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state and (cycle := visit(name)):
            raise AssertionError("import cycle: " + " -> ".join(cycle))


def test_the_data_and_system_layers_import_neither_pandas_nor_scoring():
    code = (
        "import sys, qaeval.data, qaeval.system, qaeval.data.cases, qaeval.system.contract, qaeval.worker.serve; "
        "print(sorted(m for m in sys.modules if m == 'pandas' or m.startswith(('qaeval.scoring', "
        "'qaeval.verdicts', 'qaeval.record', 'qaeval.reports'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_the_top_level_holds_only_the_entry_points_and_packages():
    loose = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in TOP_LEVEL)
    assert not loose, f"modules outside a package: {loose}"
    assert all((PACKAGE / d / "__init__.py").exists() for d in ("core", "worker", "host", "record", "commands"))


def test_a_module_is_at_most_600_lines():
    """Modules are split by topic; one that outgrows 600 lines (docstrings included) holds two."""
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long


def test_a_function_is_at_most_80_lines():
    """A function reads as a short sequence of named steps; one over 80 lines (its docstring included) does
    several things and is split by topic into helpers."""
    long = sorted(
        f"{p.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)"
        for p in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (n := node.end_lineno - node.lineno + 1) > 80
    )
    assert not long, "functions over 80 lines:\n" + "\n".join(long)


def test_each_verbs_typed_keywords_are_its_parameters_in_the_table():
    """qaeval.gate(data, **options) types its keywords (GateOptions) for an editor; the parameter table is
    where each is defined, so the two name the same ones (less the positional data, or monitor's logs)."""
    from typing import get_type_hints

    from qaeval.core import params as P
    from qaeval.core.options import OPTIONS

    for command, options in OPTIONS.items():
        typed = set(get_type_hints(options))
        table = set(P.names_for(command)) - {"data", "logs"}
        assert typed == table, (command, "typed only:", typed - table, "in the table only:", table - typed)


def test_the_verbs_are_at_the_top_level_under_their_commands_names():
    import qaeval
    from qaeval import api

    for name in ("run", "baseline", "gate", "calibrate", "drift", "monitor", "score", "compare"):
        assert getattr(qaeval, name) is getattr(api, name), name
    for old in ("gate_run", "calibrate_run", "drift_run", "score_logs"):
        assert not hasattr(api, old), f"{old} is gone (the CHANGELOG says what it became)"


def test_the_lower_level_pieces_live_in_qaeval_lowlevel_and_only_there():
    """The top level is the verbs, the data they take and the results and errors they give; what the verbs
    are built from (asking without scoring, scoring the pool's frame, the typed settings) is one import
    away, under a name that says what it is."""
    import qaeval
    import qaeval.lowlevel as low

    pieces = {"evaluate", "score_outputs", "run_suite", "RunSettings", "Settings", "JudgeSetup"}
    pieces |= {"ResumeSettings", "JudgeClient", "JudgeSettings", "OfflineJudge"}
    assert set(low.__all__) == pieces
    assert not pieces & set(qaeval.__all__), pieces & set(qaeval.__all__)
    for name in pieces:
        assert not hasattr(qaeval, name), name
        assert getattr(low, name).__module__.startswith("qaeval."), name
