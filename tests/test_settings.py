"""A command's settings are one typed object (issue 48, item 2): built once at the edge from the parameter
table, every rule that spans fields checked in one place whichever edge (CLI, API, notebook) they came
from, frozen, handed down under the table's names, and each guard entered once per run."""

from __future__ import annotations

import ast
import concurrent.futures as cf
import contextlib
import dataclasses
import sys
from pathlib import Path

import pytest
from conftest import GOLDEN, LABELS, ROOT

from qaeval import api
from qaeval.cli import main
from qaeval.core import params as P
from qaeval.core.errors import UsageError
from qaeval.core.settings import JudgeSetup, ResumeSettings, RunSettings, Settings

PACKAGE = ROOT / "qaeval"


@pytest.fixture()
def pool():
    with cf.ThreadPoolExecutor(1) as executor:
        yield executor


# (why, the command line's arguments, the API call, the settings object that breaks the rule, what is said)
RULES = [
    (
        "adaptive needs trials",
        ["run", "--data", str(GOLDEN), "--adaptive"],
        lambda tmp, ex: api.run(str(GOLDEN), adaptive=True),
        lambda tmp, ex: RunSettings(adaptive=True),
        "--adaptive spreads --trials K over the cases that need them: give --trials 2 or more",
    ),
    (
        "adaptive needs the boundary given up",
        ["run", "--data", str(GOLDEN), "--trials", "3", "--adaptive"],
        lambda tmp, ex: api.run(str(GOLDEN), trials=3, adaptive=True),
        lambda tmp, ex: RunSettings(trials=3, adaptive=True),
        "--adaptive is refused while the boundary is enforced (--isolation process, the default)",
    ),
    (
        "pass_k at most trials",
        ["run", "--data", str(GOLDEN), "--trials", "2", "--pass-k", "3"],
        lambda tmp, ex: api.run(str(GOLDEN), trials=2, pass_k=3),
        lambda tmp, ex: RunSettings(trials=2, pass_k=3),
        "needs at least that many --trials",
    ),
    (
        "an executor needs isolation process",
        ["run", "--data", str(GOLDEN), "--executor", "dask://127.0.0.1:9", "--isolation", "none"],
        lambda tmp, ex: api.run(str(GOLDEN), executor=ex, isolation="none"),
        lambda tmp, ex: RunSettings(executor=ex, isolation="none"),
        "an executor runs calls out of process; it cannot be combined with isolation none",
    ),
    (
        "resume needs the record's path",
        ["run", "--data", str(GOLDEN), "--resume"],
        lambda tmp, ex: api.run(str(GOLDEN), resume=True),
        lambda tmp, ex: ResumeSettings(resume=True),
        "--resume reads the journal kept beside the run's record",
    ),
    (
        "keep_errors needs resume",
        ["run", "--data", str(GOLDEN), "--keep-errors"],
        lambda tmp, ex: api.run(str(GOLDEN), keep_errors=True),
        lambda tmp, ex: ResumeSettings(journal="r.json", keep_errors=True),
        "--keep-errors says what --resume keeps: give --resume too",
    ),
    (
        "a labelled set has nothing to resume",
        ["calibrate", "--labelled", "set.jsonl", "--save", "c.json", "--resume"],
        lambda tmp, ex: api.calibrate(labelled=str(tmp / "set.jsonl"), save=str(tmp / "c.json"), resume=True),
        lambda tmp, ex: Settings(
            command="calibrate", labelled="set.jsonl", resume=ResumeSettings(journal="c.json", resume=True)
        ),
        "a labelled set carries its own outputs and no system is asked, so there is nothing to resume",
    ),
    (
        "calibrate needs labels",
        ["calibrate", "--data", str(GOLDEN)],
        lambda tmp, ex: api.calibrate(str(GOLDEN)),
        lambda tmp, ex: Settings(command="calibrate", data=str(GOLDEN)),
        "calibrate needs labels (keyed hand labels for a run) or labelled (a labelled set)",
    ),
    (
        "an experiment needs mlflow",
        ["run", "--data", str(GOLDEN), "--mlflow-experiment", "E"],
        lambda tmp, ex: api.run(str(GOLDEN), mlflow_experiment="E"),
        lambda tmp, ex: Settings(mlflow_experiment="E"),
        "mlflow_experiment names the MLflow experiment to log to; it needs mlflow as well",
    ),
]


@pytest.mark.parametrize("why, argv, call, made, says", RULES, ids=[r[0] for r in RULES])
def test_each_rule_across_settings_is_refused_alike_from_the_cli_the_api_and_the_object(
    why, argv, call, made, says, tmp_path, monkeypatch, capsys, pool
):
    """A rule that spans two settings said one thing from the command line and another (or nothing) from
    the API, because it was checked where each happened to look; it is checked once, where the settings
    are made, so every edge refuses it with the same message and exit code 64 before anything runs."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "set.jsonl").write_text("")
    assert main(argv) == 64, why
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err
    with pytest.raises(UsageError) as raised:
        call(tmp_path, pool)
    assert says in str(raised.value) and raised.value.exit_code == 64
    with pytest.raises(UsageError) as raised:
        made(tmp_path, pool)  # no settings object that breaks the rule can be made, by any caller
    assert says in str(raised.value)
    assert list(tmp_path.iterdir()) == [tmp_path / "set.jsonl"], "refused before anything was written"


@pytest.mark.parametrize("says", [r[4] for r in RULES])
def test_each_rule_is_written_in_one_place(says):
    """The same guard used to be written twice (the executor check in the verbs and in run_suite): a rule's
    message appears in one module of the package, the settings'."""
    holders = sorted(str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py") if says in p.read_text())
    assert holders == ["qaeval/core/settings.py"], holders


def test_settings_are_frozen(tmp_path):
    """Handed down through every layer, settings cannot be changed on the way: a change is a new object,
    checked again (dataclasses.replace)."""
    from qaeval.commands.common import check_parameters

    settings = check_parameters("run", data=str(GOLDEN), trials=2)
    for obj, name in ((settings, "adapter"), (settings.run, "timeout"), (settings.judging, "judge_model")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.resume.resume = True
    with pytest.raises(TypeError):
        settings.params["trials"] = 5  # the checked parameters are read-only too
    with pytest.raises(UsageError, match="needs at least that many --trials"):
        dataclasses.replace(settings.run, pass_k=3)
    assert settings.run.trials == 2 and settings.params["trials"] == 2


def test_every_setting_keeps_the_table_s_name_down_to_the_worker():
    """max_reply_mb was max_reply_bytes on run_suite and Limits.message in the pool: a setting now has one
    name, the table's, from the flag to the worker's limits (``RunSettings`` is what the pool holds)."""
    table = set(P.BY_NAME)
    own = {"executor_label", "bootstrap_seed", "show_progress"}  # a library caller's; no flag sets them
    assert {f.name for f in dataclasses.fields(RunSettings)} - own <= table
    assert {f.name for f in dataclasses.fields(JudgeSetup)} <= table
    assert {f.name for f in dataclasses.fields(ResumeSettings)} - {"journal"} <= table  # journal: --save or --out
    bundles = {"command", "params", "given", "run", "judging", "resume"}
    assert {f.name for f in dataclasses.fields(Settings)} - bundles <= table
    run = RunSettings.from_params(P.check("run", {"data": "golden", "max_reply_mb": 0.5, "timeout": 7}))
    assert (run.max_reply_mb, run.max_reply_bytes, run.timeout) == (0.5, 512 * 1024, 7.0)
    from qaeval.system import calls, pool, remote

    for module in (calls, pool, remote):
        assert not hasattr(module, "Limits"), f"{module.__name__} renames the settings again"


def _signature(path: Path, name: str) -> ast.FunctionDef:
    tree = ast.parse(path.read_text())
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def test_evaluate_and_run_suite_take_the_settings_object_not_loose_options():
    """evaluate took 21 keywords and ``**limits``, run_suite nine more: both take a ``RunSettings``."""
    for path, name in (
        (PACKAGE / "commands" / "pipeline.py", "evaluate"),
        (PACKAGE / "system" / "pool.py", "run_suite"),
    ):
        fn = _signature(path, name)
        assert fn.args.kwarg is None, f"{name} takes **{fn.args.kwarg.arg}"
        params = fn.args.args + fn.args.kwonlyargs
        annotated = {a.arg: ast.unparse(a.annotation) for a in params if a.annotation is not None}
        assert annotated.get("settings") == "RunSettings | None", (name, annotated)
        assert len(fn.args.kwonlyargs) <= 3, (name, [a.arg for a in fn.args.kwonlyargs])


VERBS = ("qaeval.commands", "qaeval.api", "qaeval.notebook", "qaeval.cli", "qaeval.pytest_plugin", "qaeval.__main__")
EDGE = {"qaeval.core.params", "qaeval.core.settings"}  # the table's own check, and the settings' constructors
DICT_NAMES = {"p", "params", "checked", "options", "run_options", "limits", "kwargs", "given"}


def test_below_the_verbs_no_code_looks_a_setting_up_in_a_dict():
    """The checked parameters travelled as a dict (``p["timeout"]``) through six layers; below the verbs
    every setting is an attribute of a settings object. A ``p["name"]`` or ``p.get("name")`` for a name of
    the parameter table, on a dict of parameters, is found by reading every module's code."""
    names = set(P.BY_NAME)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if module.startswith(VERBS) or module in EDGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Subscript):
                base, key = node.value, node.slice
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
                base, key = node.func.value, (node.args[0] if node.args else None)
            else:
                continue
            if isinstance(base, ast.Name) and base.id in DICT_NAMES:
                if isinstance(key, ast.Constant) and key.value in names:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)


@contextlib.contextmanager
def counting(monkeypatch, owner, name):
    """Count the entries into ``owner.name`` through every module that imported it by name."""
    original = getattr(owner, name)
    count = {"n": 0}

    def counted(*args, **kwargs):
        count["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    for module in list(sys.modules.values()):
        if module is not None and module.__name__.startswith("qaeval") and getattr(module, name, None) is original:
            monkeypatch.setattr(module, name, counted)
    yield count


def test_each_guard_is_entered_once_per_run(tmp_path, monkeypatch):
    """harness_guard was entered by the verb and again by the pool, fewer_collections by the verb and
    again by evaluate, check_output_paths by the command line and again by the verb, and RunSettings's
    rules (the executor with isolation none among them) by check_parameters and again by run_suite.
    Failed before: 2, 2, 2 and two places."""
    import qaeval.api  # noqa: F401  (every module that imports the guards is loaded)
    from qaeval.commands import common, pipeline
    from qaeval.core import settings
    from qaeval.worker import hardening

    monkeypatch.chdir(tmp_path)
    with (
        counting(monkeypatch, hardening, "harness_guard") as guard,
        counting(monkeypatch, pipeline, "fewer_collections") as collections,
        counting(monkeypatch, common, "check_output_paths") as paths,
        counting(monkeypatch, settings.RunSettings, "__post_init__") as rules,
    ):
        argv = ["run", "--data", str(GOLDEN), "--concurrency", "2", "--save", "r.json", "--html", "r.html", "--quiet"]
        assert main(argv) == 0
        assert (guard["n"], collections["n"], paths["n"], rules["n"]) == (1, 1, 1, 1)
        checked = common.check_parameters("calibrate", data=str(GOLDEN), labels=str(LABELS), save="c.json")
        from qaeval import notebook

        notebook.result("calibrate", checked)  # a notebook's checked settings are not checked again
        assert (guard["n"], collections["n"], paths["n"], rules["n"]) == (2, 2, 2, 2)
