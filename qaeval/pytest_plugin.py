"""Golden cases as pytest tests (the ``pytest11`` entry point ``qaeval``; inert without ``--qaeval-data``).

    pytest --qaeval-data golden                                   one test per golden case
    pytest --qaeval-data golden --qaeval-adapter my_rag:make      ... against your system
    pytest --qaeval-data golden --qaeval-baseline base.json       ... plus one gate test
    pytest --qaeval-data golden -m qaeval -k "single-"            only golden cases, selected by id

Each case is an item named by its id (``golden/frozen.jsonl::single-0001``); it fails with the checks or axes that
fired and the answer beside the gold answer. One run, through the same runner as ``qaeval run``, serves every
selected case, made when the first of them runs; the gate item runs the whole suite against the baseline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

MARKER = "qaeval"
# the run's parameters and the options that give them
OPTIONS = ("adapter", "judge", "concurrency", "isolation", "timeout", "check", "trials", "metric")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qaeval", "golden cases as tests (qaeval)")
    group.addoption("--qaeval-data", metavar="DIR", help="collect one test per golden case in DIR")
    group.addoption(
        "--qaeval-adapter", metavar="MODULE:FACTORY", help="the system under test (default: the reference system)"
    )
    group.addoption("--qaeval-judge", metavar="MODULE:FACTORY", help="the judge (default: the offline judge)")
    group.addoption("--qaeval-baseline", metavar="FILE", help="also collect a gate test against this baseline record")
    group.addoption("--qaeval-concurrency", type=int, metavar="N", help="cases in flight (default 4)")
    group.addoption("--qaeval-isolation", choices=("process", "none"), help="worker processes (default) or in-process")
    group.addoption("--qaeval-timeout", type=float, metavar="SECONDS", help="per-case timeout (default 60)")
    group.addoption(
        "--qaeval-trials",
        type=int,
        metavar="K",
        help="run each case K times; a case's test passes when every trial passes (default 1)",
    )
    group.addoption(
        "--qaeval-check", action="append", metavar="MODULE:FUNCTION", help="a check of your own (repeatable)"
    )
    group.addoption("--qaeval-metric", action="append", metavar="MODULE:NAME", help="a metric of your own (repeatable)")


class CaseFailed(Exception):
    """A golden case's (or the gate's) failure, shown as its text alone (``text``)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class _Runs:
    """One run for all selected cases, made when the first of them needs it."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.selected: list[str] | None = None
        self._run: Any = None
        self._full: Any = None
        self._failed: BaseException | None = None  # the run's failure: reported on every item, never run again

    def _params(self) -> dict[str, Any]:
        given = {name: self.config.getoption(f"qaeval_{name}") for name in OPTIONS}
        return {name: value for name, value in given.items() if value is not None}

    def run(self) -> Any:
        if self._failed is not None:
            raise self._failed
        try:
            return self._run_once()
        except Exception as exc:
            self._failed = exc
            raise

    def _run_once(self) -> Any:
        if self._run is not None:
            return self._run
        from contextlib import ExitStack

        from qaeval.commands.common import check_parameters, judge_and_checks
        from qaeval.commands.pipeline import evaluate
        from qaeval.data.cases import Suite, load_suite

        suite = everyone = load_suite(self.config.getoption("qaeval_data"))
        if self.selected is not None and len(self.selected) < len(suite):
            wanted = set(self.selected)
            suite = Suite(tuple(c for c in suite if c.id in wanted), suite.root, suite.corpus)
        settings = check_parameters("run", data=str(suite.root), **self._params())
        with ExitStack() as stack:  # a judge or check in its own process is stopped when the run ends
            judge, custom = judge_and_checks(settings, stack)
            self._run = evaluate(suite, settings.adapter, judge, settings.run, custom=custom)
        if self.selected is None or len(self._run.suite) == len(everyone):
            self._full = self._run
        return self._run

    def gate(self) -> Any:
        from qaeval import api

        if self._full is not None:
            from qaeval.record.read import read_baseline
            from qaeval.verdicts.gate import gate

            return gate(self._full, read_baseline(self.config.getoption("qaeval_baseline")))
        return api.gate(
            self.config.getoption("qaeval_data"), baseline=self.config.getoption("qaeval_baseline"), **self._params()
        )


class _Item(pytest.Item):
    """An item qaeval collects: marked, and a failure shown as its text."""

    def __init__(self, *, runs: _Runs, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runs = runs
        self.add_marker(MARKER)

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class GoldenCaseItem(_Item):
    def __init__(self, *, case_id: str, runs: _Runs, **kwargs: Any) -> None:
        super().__init__(runs=runs, **kwargs)
        self.case_id = case_id

    def runtest(self) -> None:
        run = self.runs.run()
        row = run.per_case.set_index("case_id").loc[self.case_id]
        if bool(row["case_passed"]):
            return
        answer = "(abstained)" if row["abstained"] else row["answer"]
        if row["error"] is not None:
            answer = f"(no answer: {row['error']})"
        gold = row["gold_answer"] if row["gold_answer"] is not None else "(must abstain)"
        head = f"golden case {self.case_id} failed" + (
            f" ({row['passes']} of {row['trials']} trials passed)" if row["trials"] > 1 else ""
        )
        lines = [f"{head}:"] + [f"  - {r}" for r in row["fail_reasons"]]
        lines += [f"  answer: {answer}", f"  gold:   {gold}"]
        raise CaseFailed("\n".join(lines))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"golden case {self.case_id}"


class GateItem(_Item):
    def runtest(self) -> None:
        result = self.runs.gate()
        if not result.ok:
            raise CaseFailed(result.summary_text())

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, "qaeval gate"


class GoldenFile(pytest.File):
    """One ``*.jsonl`` of the golden folder: one item per case in it (and the gate, on the first file)."""

    def collect(self) -> list[pytest.Item]:
        from qaeval.core.errors import QaevalError
        from qaeval.data.cases import load_suite

        runs = self.config.stash[_RUNS]
        try:
            suite = load_suite(self.config.getoption("qaeval_data"))
        except QaevalError as exc:
            raise pytest.UsageError(f"--qaeval-data: {exc}") from None
        here = str(self.path)
        items: list[pytest.Item] = [
            GoldenCaseItem.from_parent(self, name=c.id, case_id=c.id, runs=runs)
            for c in suite
            if str(Path(c.file).resolve()) == here
        ]
        first = min(str(Path(c.file).resolve()) for c in suite)
        if self.config.getoption("qaeval_baseline") and here == first:
            items.append(GateItem.from_parent(self, name="gate", runs=runs))
        return items


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: a golden case (or the gate) collected by qaeval")
    data = config.getoption("qaeval_data", None)
    if not data:
        return
    root = Path(data).resolve()
    if not root.is_dir():
        raise pytest.UsageError(f"--qaeval-data: no such folder: {data}")
    config.stash[_RUNS] = _Runs(config)
    if getattr(config, "args_source", None) != pytest.Config.ArgsSource.ARGS:
        config.args[:] = [str(root)]  # no paths given: the golden cases only, not the project's own tests
    elif str(root) not in config.args:
        config.args.append(str(root))  # paths given: those, and the golden folder too


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    data = parent.config.getoption("qaeval_data", None)
    if data and file_path.suffix == ".jsonl" and file_path.parent == Path(data).resolve():
        return GoldenFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    runs = session.config.stash.get(_RUNS, None)
    if runs is not None:
        runs.selected = [i.case_id for i in session.items if isinstance(i, GoldenCaseItem)]


_RUNS = pytest.StashKey[_Runs]()
