"""The runner contains every adapter fault: raise, timeout, malformed output. Names resolve or exit 64."""

from __future__ import annotations

import pytest
from conftest import make_case, write_cases

import plugins
from qaeval import UsageError, load_suite, run_suite
from qaeval.cli import main
from qaeval.plugins import build, resolve


@pytest.fixture
def two_cases(tmp_path):
    return load_suite(write_cases(tmp_path, [make_case(id="a"), make_case(id="b")]))


def test_raising_adapter_yields_failed_rows_and_the_run_goes_on(two_cases):
    frame = run_suite(two_cases, plugins.Raising())
    assert list(frame["case_id"]) == ["a", "b"]
    assert all("adapter raised RuntimeError: backend down" == e for e in frame["error"])


def test_hanging_adapter_times_out_per_case(two_cases):
    hanging = plugins.Hanging()
    try:
        frame = run_suite(two_cases, hanging, timeout=0.05)
    finally:
        hanging.release.set()
    assert list(frame["error"]) == ["timed out after 0.05 s"] * 2


@pytest.mark.parametrize("kind, reason", [
    ("dict", "returned dict, not SUTOutput"),
    ("citation", "citations[0] is tuple, not Citation"),
    ("retrieved", "retrieved_ids is str, not a list"),
    ("answer", "answer is NoneType, not str"),
])
def test_malformed_output_is_a_failed_row(two_cases, kind, reason):
    frame = run_suite(two_cases, plugins.Malformed(kind))
    assert all(e.startswith("malformed output") and reason in e for e in frame["error"])
    assert all(c == [] for c in frame["citations"])


def test_failed_rows_fail_every_deterministic_check(two_cases):
    from qaeval.checks import CHECKS, check_outputs

    frame = run_suite(two_cases, plugins.Raising())
    checks = check_outputs(two_cases.to_frame(), frame, two_cases.sources_frame())
    assert len(checks) == 2 * len(CHECKS) and not checks["passed"].any()
    assert all(r.startswith("adapter error") for r in checks["reason"])


@pytest.mark.parametrize("name, fragment", [
    ("no_colon", "module:callable"),
    ("qaeval.nope:make", "cannot import module"),
    ("plugins:missing", "has no attribute"),
    ("plugins:not_callable", "not callable"),
])
def test_bad_plugin_names_are_usage_errors(name, fragment):
    with pytest.raises(UsageError, match=fragment):
        resolve(name, what="adapter")


def test_factory_that_raises_is_a_usage_error():
    with pytest.raises(UsageError, match="no credentials"):
        build("plugins:make_crashing_factory", what="adapter")


def test_cli_exits_64_on_unresolvable_adapter(suite_dir, capsys):
    assert main(["run", "--data", str(suite_dir), "--adapter", "qaeval.nope:make"]) == 64
    err = capsys.readouterr().err
    assert "cannot import module" in err and "Traceback" not in err


def test_cli_exits_64_on_bad_flag(suite_dir, capsys):
    assert main(["run", "--data", str(suite_dir), "--k", "many"]) == 64
    assert main(["gate", "--data", str(suite_dir)]) == 64  # --baseline missing
    assert "Traceback" not in capsys.readouterr().err


def test_crashing_adapter_run_prints_scoreboard(suite_dir, capsys):
    assert main(["run", "--data", str(suite_dir), "--adapter", "plugins:make_raising"]) == 0
    out = capsys.readouterr().out
    assert "adapter errors: 1" in out and "deterministic_pass_rate" in out


def test_timeout_also_works_off_the_main_thread(two_cases):
    """Notebook kernels and servers may call the runner from a worker thread: no SIGALRM there."""
    import threading

    hanging, box = plugins.Hanging(), {}
    thread = threading.Thread(target=lambda: box.update(frame=run_suite(two_cases, hanging, timeout=0.05)))
    thread.start()
    thread.join(10)
    hanging.release.set()
    assert list(box["frame"]["error"]) == ["timed out after 0.05 s"] * 2


def test_adapter_that_swallows_exceptions_still_times_out(two_cases):
    class Swallowing:
        def answer(self, case):
            import time
            try:
                time.sleep(5)
            except Exception:  # a sloppy adapter must not be able to swallow the timeout
                pass
            return None

    frame = run_suite(two_cases, Swallowing(), timeout=0.05)
    assert list(frame["error"]) == ["timed out after 0.05 s"] * 2
