"""MLflow tracking: a gate logged to a real ``mlflow server`` (SQLite backend) is read back through MLflow's
client (metrics with their intervals, the verdict tag, the report and record artifacts); the same gates
with the server stopped keep their own exit codes, save their records and say why nothing was logged;
the local SQLite store and the API's ``mlflow=`` work; a refused write and a missing extra are clear."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from conftest import GOLDEN, ROOT

import qaeval.api as qa
from qaeval.cli import main
from qaeval.commands.tracking import HTTP_LIMITS, TrackingWarning, track

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed (the dev set-up installs it)")
from mlflow import MlflowClient  # noqa: E402  (after the importorskip for the mlflow extra)
from mlflow.entities import ViewType  # noqa: E402  (after the importorskip for the mlflow extra)

BASELINE = str(GOLDEN / "ci-baseline.json")
SABOTEUR = "qaeval.system.saboteur:make_adapter"
LABELLED = str(ROOT / "examples" / "labelled-set.jsonl")


def test_mlflow_sends_no_telemetry_from_the_tests():
    """Tests reach no network but 127.0.0.1: MLflow 3's telemetry thread is off (tests/conftest.py)."""
    client = pytest.importorskip("mlflow.telemetry.client", reason="this MLflow has no telemetry (MLflow 2)")
    from mlflow.telemetry.utils import is_telemetry_disabled

    assert is_telemetry_disabled() and client.get_telemetry_client() is None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``mlflow server`` on 127.0.0.1 with a SQLite backend in a temporary folder, stopped on request."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port, self.process = folder, free_port(), None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, deadline_s: float = 180.0) -> None:
        if self.process is not None:
            return
        log = open(self.folder / "server.log", "ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--backend-store-uri",
                f"sqlite:///{self.folder / 'mlflow.db'}",
                "--artifacts-destination",
                str(self.folder / "artifacts"),
                "--workers",
                "1",
            ],
            cwd=self.folder,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_until_ready(deadline_s)

    def _wait_until_ready(self, deadline_s: float) -> None:
        import time

        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise AssertionError("mlflow server exited: " + (self.folder / "server.log").read_text()[-2000:])
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)  # then ask again
        raise AssertionError(f"mlflow server not ready within {deadline_s} s")

    def stop(self) -> None:
        if self.process is None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("mlflow-server"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def running(server):
    server.start()  # again, if a test stopped it
    return server


def only_run(client: MlflowClient, experiment: str):
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"experiment {experiment!r} was not created"
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1, f"one MLflow run per command, found {len(runs)}"
    return runs[0]


def test_a_gate_logged_to_a_tracking_server_reads_back_through_mlflows_client(running, tmp_path, capsys):
    report, record = tmp_path / "gate.html", tmp_path / "gate.json"
    code = main(
        [
            "gate",
            "--data",
            str(GOLDEN),
            "--baseline",
            BASELINE,
            "--quiet",
            "--html",
            str(report),
            "--save",
            str(record),
            "--mlflow",
            running.url,
            "--mlflow-experiment",
            "gates",
        ]
    )
    assert code == 0
    assert "MLflow: logged run" in capsys.readouterr().err
    client = MlflowClient(running.url)
    logged = only_run(client, "gates")
    assert logged.info.status == "FINISHED"
    assert (logged.data.tags["kind"], logged.data.tags["verdict"]) == ("gate", "PASS")
    board = qa.load_run(record).run.scoreboard.set_index("metric")
    for metric in ("faithfulness_rate", "retrieval_recall_at_k", "multi_step_task_success"):
        for suffix, column in (("", "value"), ("_ci_low", "ci_low"), ("_ci_high", "ci_high"), ("_n", "n")):
            assert logged.data.metrics[metric + suffix] == pytest.approx(float(board.at[metric, column])), (
                metric + suffix
            )
    params = logged.data.params
    assert (params["adapter"], params["judge_name"], params["k"]) == (
        "qaeval.system.reference:make_adapter",
        "offline",
        "5",
    )
    assert params["data_fingerprint"] == qa.load_run(record).run.suite.fingerprint
    names = {a.path for a in client.list_artifacts(logged.info.run_id)}
    assert names == {"record.json", "report.html", "per_case.csv"}
    folder = Path(client.download_artifacts(logged.info.run_id, "", str(tmp_path / "back")))
    assert (folder / "record.json").read_bytes() == record.read_bytes(), "the record logged is the one saved"
    assert (folder / "report.html").read_bytes() == report.read_bytes()
    assert ">PASS<" in (folder / "report.html").read_text()
    assert len((folder / "per_case.csv").read_text().strip().splitlines()) == 1 + 15
    table = (folder / "per_case.csv").read_text()
    assert "trajectory failed (" in table and "FailReason(" not in table, "fail reasons as their messages"


@pytest.mark.parametrize(
    "adapter, data, expected", [(None, GOLDEN, 0), (SABOTEUR, GOLDEN, 1)], ids=["golden passes", "saboteur blocked"]
)
def test_with_the_server_stopped_a_gate_keeps_its_own_exit_code_and_record(
    server, tmp_path, capsys, adapter, data, expected
):
    server.stop()
    record = tmp_path / "gate.json"
    secret_url = server.url.replace("http://", "http://alice:hunter2@")
    argv = [
        "gate",
        "--data",
        str(data),
        "--baseline",
        BASELINE,
        "--quiet",
        "--save",
        str(record),
        "--mlflow",
        secret_url,
    ] + (["--adapter", adapter] if adapter else [])
    assert main(argv) == expected
    err = capsys.readouterr().err
    assert "qaeval: warning: could not log to MLflow" in err and "verdict, the exit code and any saved record" in err
    assert "hunter2" not in err, "a password in the tracking URI is never printed"
    assert qa.load_run(record).verdict == ("PASS" if expected == 0 else "BLOCK"), "the record is still saved"
    assert "hunter2" not in record.read_text()


def test_the_api_logs_to_a_local_sqlite_store_and_its_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MLflow keeps a local store's artifacts under the working directory
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = qa.calibrate(labelled=LABELLED, min_labels=5, mlflow=uri, mlflow_experiment="judges")
    logged = only_run(MlflowClient(uri), "judges")
    assert (logged.data.tags["kind"], logged.data.tags["verdict"]) == ("calibrate", result.verdict)
    faith = result.agreement.set_index("axis").loc["faithfulness"]
    assert logged.data.metrics["agreement_faithfulness"] == pytest.approx(faith["exact"])
    assert logged.data.metrics["agreement_faithfulness_n"] == faith["n"]
    board = result.run.scoreboard.set_index("metric")
    empty = [m for m in board.index if board.at[m, "n"] == 0]
    assert empty, "the labelled set leaves some metric with nothing to average"
    assert all(logged.data.metrics[f"{m}_n"] == 0 for m in empty)
    assert all(logged.data.metrics[m] != logged.data.metrics[m] for m in empty), "nothing to average is NaN, not 0"

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # mlflow=True: MLflow's own default, here from the environment
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "from-env")
    tracked = track(qa.load_run(BASELINE), True)
    assert tracked.ok, tracked.message
    assert only_run(MlflowClient(uri), "from-env").info.run_id == tracked.run_id
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME")
    tracked = track(qa.load_run(BASELINE), True)
    assert only_run(MlflowClient(uri), "Default").info.run_id == tracked.run_id, tracked.message


def test_a_refused_write_is_a_warning_and_the_result_stands(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    client.delete_experiment(client.create_experiment("closed"))  # MLflow refuses runs in a deleted experiment
    with pytest.warns(TrackingWarning, match="could not log to MLflow") as caught:
        result = qa.calibrate(labelled=LABELLED, min_labels=5, mlflow=uri, mlflow_experiment="closed")
    message = tracking_warning(caught)  # not MLflow's own deprecation warnings, which come first in a fresh worker
    assert "deleted" in message or "active" in message, message
    assert result.verdict == "RETUNE JUDGE" and result.exit_code == 2
    assert client.search_runs([client.get_experiment_by_name("closed").experiment_id], run_view_type=ViewType.ALL) == []


def test_a_tracker_that_is_down_warns_through_the_api(tmp_path):
    with pytest.warns(TrackingWarning, match=r"http://\*\*\*@127\.0\.0\.1"):
        result = qa.calibrate(
            labelled=LABELLED, min_labels=5, mlflow=f"http://u:p@127.0.0.1:{free_port()}", save=str(tmp_path / "c.json")
        )
    assert result.exit_code == 2 and qa.load_run(tmp_path / "c.json").verdict == "RETUNE JUDGE"


def test_without_the_extra_asking_for_mlflow_is_a_usage_error_before_anything_runs(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if it were not installed
    save = tmp_path / "run.json"
    assert main(["run", "--data", str(GOLDEN), "--mlflow", "--save", str(save)]) == 64
    assert "pip install -e '.[mlflow]'" in capsys.readouterr().err
    assert not save.exists(), "nothing ran"
    with pytest.raises(Exception, match=r"pip install -e '\.\[mlflow\]'"):
        qa.run(str(GOLDEN), mlflow=True)


def test_an_experiment_without_mlflow_and_mlflow_with_a_record_are_usage_errors(capsys):
    assert main(["run", "--data", str(GOLDEN), "--mlflow-experiment", "x"]) == 64
    assert "needs mlflow" in capsys.readouterr().err
    with pytest.raises(Exception, match="fresh run"):
        qa.run(record=BASELINE, mlflow=True)
    with pytest.raises(Exception, match="tracking URI"):
        qa.run(str(GOLDEN), mlflow=3)


@pytest.mark.parametrize("uri", ["localhost:5000", "127.0.0.1:5000", "mlflow.internal:443/"])
def test_a_server_address_without_its_scheme_is_a_usage_error_naming_the_fix(uri, capsys, tmp_path):
    """MLflow would take host:port for a folder and write a file store there; refuse before anything runs."""
    assert main(["run", "--data", str(GOLDEN), "--mlflow", uri, "--save", str(tmp_path / "r.json")]) == 64
    err = capsys.readouterr().err
    assert f"give http://{uri}" in err and "no scheme" in err
    assert not (tmp_path / "r.json").exists() and not Path(uri.split(":")[0]).exists()


def test_http_retries_and_timeouts_are_bounded_unless_the_environment_says_otherwise(monkeypatch):
    """MLflow reads its HTTP limits from the environment only. They are given to MLflow's own process, in
    its environment; the caller's is never written (it was, for the length of the logging), and against a
    port nothing listens on that process says why and the result stands."""
    import qaeval.commands.tracking as tracking

    seen = {}
    popen = subprocess.Popen

    def recording(argv, **kwargs):  # MLflow's process, started for real: what it is given
        seen.update(argv=argv, env={k: kwargs["env"].get(k) for k in HTTP_LIMITS})
        return popen(argv, **kwargs)

    monkeypatch.setattr(tracking.subprocess, "Popen", recording)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    before = dict(os.environ)
    tracked = track(qa.load_run(BASELINE), f"http://127.0.0.1:{free_port()}")
    assert not tracked.ok and "127.0.0.1" in tracked.error, tracked.message
    assert seen["argv"][1:] == ["-m", "qaeval.commands.mlflow_log"]
    assert seen["env"] == {**HTTP_LIMITS, "MLFLOW_HTTP_REQUEST_TIMEOUT": "3"}, (
        "bounded, and the user's own setting wins"
    )
    assert dict(os.environ) == before, "never in this process's environment"


def test_a_monitor_logs_its_own_scoreboard_over_every_row_and_its_rows(tmp_path, monkeypatch):
    """A monitor's headline is its scoreboard over every logged row (the judged sample's run board has no
    citation_resolvability and holds a meaningless answer correctness), and its table is per row."""
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = qa.monitor(
        str(ROOT / "examples" / "traffic.jsonl"),
        by=["model_version"],
        sample=20,
        seed=1,
        mlflow=uri,
        mlflow_experiment="traffic",
    )
    client = MlflowClient(uri)
    logged = only_run(client, "traffic")
    assert (logged.data.tags["kind"], logged.data.tags["verdict"]) == ("monitor", result.verdict)
    board = result.scoreboard.set_index("metric")
    assert logged.data.metrics["citation_resolvability"] == pytest.approx(board.at["citation_resolvability", "value"])
    assert (
        logged.data.metrics["deterministic_pass_rate_n"] == board.at["deterministic_pass_rate", "n"] == len(result.rows)
    )
    assert "answer_correctness" not in logged.data.metrics
    names = {a.path for a in client.list_artifacts(logged.info.run_id)}
    assert {"record.json", "per_row.csv"} <= names and "per_case.csv" not in names


def test_a_tracker_message_that_breaks_into_lines_is_warned_whole(tmp_path, monkeypatch):
    """A new user's report: MLflow's "use either of the following methods:" was cut at the colon."""
    import qaeval.commands.tracking as tracking

    def refuse(*args, **kwargs):
        raise RuntimeError("the tracking URI must be http:\n - set MLFLOW_TRACKING_URI\n - call set_tracking_uri")

    monkeypatch.setattr(tracking, "_log", refuse)
    with pytest.warns(TrackingWarning) as caught:
        qa.calibrate(labelled=LABELLED, min_labels=5, mlflow=f"sqlite:///{tmp_path / 'm.db'}")
    assert "must be http: - set MLFLOW_TRACKING_URI - call set_tracking_uri" in tracking_warning(caught)


def tracking_warning(caught) -> str:
    """The one TrackingWarning among what ``pytest.warns`` recorded. SQLAlchemy's deprecation warning,
    raised once per process by MLflow's store, came first in one CI run and failed the test."""
    found = [str(w.message) for w in caught if issubclass(w.category, TrackingWarning)]
    assert len(found) == 1, found
    return found[0]


def test_a_password_holding_an_at_sign_is_redacted_whole():
    """Issue 40: redaction stopped at the first "@", printing the rest of the password."""
    from qaeval.commands.tracking import redact

    assert redact("http://alice:Tr0ub@dor-x9@host:5000/x") == "http://***@host:5000/x"
    assert redact("see http://u:p@a and https://v:q@b/c") == "see http://***@a and https://***@b/c"


class Dripping:
    """A server on 127.0.0.1 that answers every request one byte each half second: at most ``limit``
    bytes a connection, and none once it is stopped. A per-read timeout never fires on it."""

    def __init__(self, limit: int = 400) -> None:
        import threading

        self.limit, self.stop, self.connections = limit, threading.Event(), 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:  # the accept timeout: look at the stop flag again
                continue
            self.connections += 1
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        reply = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 300\r\n\r\n{"experiment": '
        with conn:
            for byte in reply[: self.limit]:
                conn.sendall(bytes([byte]))
                if self.stop.wait(0.5):  # the pace of the drip; a stopped server ends it
                    return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def test_a_tracker_that_drips_its_replies_ends_at_the_deadline_and_the_run_stands(tmp_path):
    """Issue 49, item 15: MLflow's timeout is per read, so a tracking server sending a byte every half second
    held the command for ever. The whole logging now has a deadline (QAEVAL_MLFLOW_DEADLINE); past it the
    command warns, and its verdict, exit code and record stand."""
    server = Dripping()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "qaeval", "run", "--data", str(GOLDEN), "--quiet", "--save", "run.json"]
            + ["--mlflow", server.url],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "QAEVAL_MLFLOW_DEADLINE": "3", "QAEVAL_PROGRESS": "0"},
            timeout=100,  # generous: the run takes some seconds; before the fix it never ended
        )
    finally:
        server.close()
    assert server.connections >= 1
    assert done.returncode == 0, done.stderr
    assert "could not log to MLflow" in done.stderr and "did not finish within 3 s (QAEVAL_MLFLOW_DEADLINE)" in (
        done.stderr
    ), done.stderr
    assert qa.load_run(tmp_path / "run.json").verdict == "GREEN"


def test_a_tracking_deadline_that_is_not_a_number_is_a_usage_error_before_anything_runs(monkeypatch, capsys):
    monkeypatch.setenv("QAEVAL_MLFLOW_DEADLINE", "soon")
    assert main(["run", "--data", str(GOLDEN), "--mlflow", "http://127.0.0.1:9"]) == 64
    assert "QAEVAL_MLFLOW_DEADLINE='soon' is not a number of seconds" in capsys.readouterr().err
