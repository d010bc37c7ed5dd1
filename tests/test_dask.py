"""Scale-out: the same adapter calls on a Dask cluster give the same scoreboard as the local workers."""

from __future__ import annotations

import os

import pandas as pd
import pytest
from conftest import GOLDEN

from qaeval import UsageError, api, load_suite
from qaeval.cli import main
from qaeval.core.settings import RunSettings
from qaeval.data.cases import Suite
from qaeval.lowlevel import run_suite

distributed = pytest.importorskip("distributed", reason="the dask extra is not installed (pip install -e '.[dask]')")


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None, silence_logs=50
    ) as c:
        yield c


def test_dask_executor_gives_the_same_scoreboard(cluster, golden_run):
    with distributed.Client(cluster) as client:
        run = api.run(str(GOLDEN), executor=client.get_executor())
    columns = ["metric", "value", "ci_low", "ci_high", "n"]
    pd.testing.assert_frame_equal(run.scoreboard[columns], golden_run.scoreboard[columns])
    assert run.meta.executor == "ClientExecutor" and run.outputs["error"].isna().all()


def test_trials_on_dask_are_independent_calls_in_suite_order(cluster, golden_run):
    """--trials on an executor: every case asked three times, each trial's outputs in suite order, and a
    deterministic system's figures as with one trial."""
    with distributed.Client(cluster) as client:
        run = api.run(str(GOLDEN), executor=client.get_executor(), trials=3)
    assert run.trials == 3 and all(
        r.outputs["case_id"].tolist() == golden_run.outputs["case_id"].tolist() for r in run.trial_runs
    )
    assert (run.per_case["passes"] == 3 * golden_run.per_case["case_passed"].astype(int)).all()
    board = run.scoreboard.set_index("metric")["value"].drop(["pass_hat_k", "pass_at_k"])
    pd.testing.assert_series_equal(board, golden_run.scoreboard.set_index("metric")["value"])


def test_dask_url_on_the_command_line(cluster, capsys, tmp_path):
    url = cluster.scheduler_address.replace("tcp://", "dask://")
    record = tmp_path / "r.json"
    assert main(["run", "--data", str(GOLDEN), "--executor", url, "--save", str(record)]) == 0
    out = capsys.readouterr().out
    assert "faithfulness_rate               1.000" in out
    assert api.load_run(record).meta.executor == url


def test_a_failing_adapter_on_dask_fails_its_cases_not_the_run(cluster):
    with distributed.Client(cluster) as client:
        run = api.run(str(GOLDEN), adapter="qaeval.system.saboteur:make_adapter", executor=client.get_executor())
    assert run.outputs["error"].isna().all() and not run.ok


def test_an_unreachable_scheduler_is_a_usage_error(capsys):
    assert main(["run", "--data", str(GOLDEN), "--executor", "dask://127.0.0.1:9"]) == 64
    assert "cannot reach the Dask scheduler" in capsys.readouterr().err


def test_nothing_an_adapter_returns_is_unpickled_by_the_harness(cluster, tmp_path, monkeypatch):
    marker = tmp_path / "unpickled-in-the-harness"
    monkeypatch.setenv("QAEVAL_TEST_MARKER", str(marker))
    with distributed.Client(cluster) as client:
        worker_pids = set(client.run(os.getpid).values())
        suite = load_suite(GOLDEN).select(split="living")
        frame = run_suite(suite, "hostile_adapters:make_pickler", RunSettings(executor=client.get_executor()))
    assert frame["error"].isna().all(), frame["error"].tolist()
    adapter_pids = {int(a) for a in frame["answer"]}
    assert not adapter_pids & worker_pids, "the adapter ran inside a Dask worker's own process"
    assert not marker.exists()


def test_a_hang_on_dask_is_stopped_by_the_executor_side(cluster):
    with distributed.Client(cluster) as client:
        suite = load_suite(GOLDEN).select(split="living")
        frame = run_suite(suite, "plugins:make_hanging", RunSettings(executor=client.get_executor(), timeout=1.0))
    assert frame["error"].str.startswith("timed out after 1 s (its worker was stopped)").all(), frame["error"].tolist()


@pytest.mark.skipif(not hasattr(os, "setsid"), reason="forks and setsid are POSIX's")
def test_an_exit_on_dask_while_a_descendant_holds_the_socket_fails_the_case_at_once(cluster):
    """No end-of-file comes (a process the adapter started holds the worker's socket): the executor side
    notices the exit itself and fails the case with its exit code, not a timeout after 60 s."""
    with distributed.Client(cluster) as client:
        suite = load_suite(GOLDEN).select(split="living")
        frame = run_suite(
            Suite(suite.cases[:1], suite.root),
            "hostile_adapters:make_exits_leaving_socket_open",
            RunSettings(executor=client.get_executor(), timeout=60),
        )
    assert frame["error"].tolist() == ["adapter process exited with code 5"]
    assert frame["latency_s"][0] < 30


def test_the_workers_an_executor_started_leave_no_scratch_folder(tmp_path, monkeypatch):
    """Each Dask worker keeps its adapter's worker processes for the cases to come; when it ends, they are
    stopped and their scratch folders removed (before, every one was left in the temporary folder)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the Dask workers' processes start with it
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=2, processes=True, dashboard_address=":0", silence_logs=50
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        frame = run_suite(
            load_suite(GOLDEN),
            "qaeval.system.reference:make_adapter",
            RunSettings(executor=client.get_executor(), concurrency=2),
        )
        assert frame["error"].isna().all()
        assert list(tmp_path.glob("qaeval-scratch-*")), "the adapter ran in worker processes started there"
    assert not list(tmp_path.glob("qaeval-scratch-*"))


def test_an_adapter_that_cannot_start_on_dask_is_a_usage_error_as_it_is_locally(cluster, capsys):
    """A name that does not resolve, or a factory that raises, on the executor's side: exit 64 naming the
    adapter and why, as with local workers (it was every case failed, and exit 0)."""
    url = cluster.scheduler_address.replace("tcp://", "dask://")
    for adapter, why in (
        ("nosuch_module:make_adapter", "nosuch_module"),
        ("plugins:make_crashing_factory", "no credentials"),
    ):
        assert main(["run", "--data", str(GOLDEN), "--adapter", adapter]) == 64, adapter  # locally
        local = capsys.readouterr().err
        assert main(["run", "--data", str(GOLDEN), "--adapter", adapter, "--executor", url]) == 64, adapter
        err = capsys.readouterr().err
        assert adapter.split(":")[0] in err and why in err and why in local, err


def test_an_adapter_that_starts_on_dask_and_then_fails_cases_still_runs(cluster):
    """Only an adapter that never started is refused: one that answered a case and then fails others keeps
    its run (each failure is its case's)."""
    with distributed.Client(cluster) as client:
        frame = run_suite(load_suite(GOLDEN), "plugins:make_raises_on_one", RunSettings(executor=client.get_executor()))
    assert frame["error"].isna().sum() == len(frame) - 1
    assert frame["error"].str.contains("backend down for this one").sum() == 1


def test_a_worker_on_dask_ends_and_hangs_up_in_the_words_it_does_locally(cluster):
    """The executor's side says what happened as local workers do (``process.stopped_because``): a factory
    that ends its process is refused with how the worker ended (it said "the worker closed its end"), and
    a worker that hangs up and keeps running is said to have (it said "killed by SIGKILL")."""
    suite = load_suite(GOLDEN).select(split="living")
    one = Suite(suite.cases[:1], suite.root)
    with distributed.Client(cluster) as client:
        with pytest.raises(UsageError) as refused:
            run_suite(one, "plugins:make_process_ending_factory", RunSettings(executor=client.get_executor()))
        frame = run_suite(
            one, "hostile_adapters:make_hangs_up", RunSettings(executor=client.get_executor(), timeout=60)
        )
    assert "worker exited with code 3 before the adapter was built" in str(refused.value), str(refused.value)
    assert frame["error"].tolist() == ["adapter process closed its connection and kept running (it was stopped)"]


@pytest.mark.skipif(not hasattr(os, "setsid"), reason="forks and setsid are POSIX's")
def test_a_factory_that_ends_while_a_descendant_holds_the_socket_is_refused_at_once_on_dask(cluster):
    """No end-of-file comes while the adapter builds (a process the factory started holds the worker's
    socket): the executor's side notices the exit and says how the worker ended, as local workers do,
    instead of waiting out --startup-timeout and calling it that."""
    suite = load_suite(GOLDEN).select(split="living")
    with distributed.Client(cluster) as client:
        with pytest.raises(UsageError) as refused:
            run_suite(
                Suite(suite.cases[:1], suite.root),
                "plugins:make_factory_ending_behind_a_descendant",
                RunSettings(executor=client.get_executor(), startup_timeout=60),
            )
    assert "worker exited with code 3 before the adapter was built" in str(refused.value), str(refused.value)
