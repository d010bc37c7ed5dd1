"""MLflow's own process: ``python -m qaeval.commands.mlflow_log`` says ``ready`` once MLflow is imported,
reads one run to log as JSON on stdin (``uri``, ``experiment``, ``tags``, ``metrics``, ``params``, artifact
``files``), logs it, and writes one JSON line on stdout: ``{"run_id": ...}`` or ``{"error": "Type: message"}``.
Whatever MLflow does to the process it runs in (logging handlers, its telemetry thread, exit hooks) stays
here, never in the caller's (``qaeval.commands.tracking``). Nothing of qaeval is imported here.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from typing import Any


def log(job: dict[str, Any]) -> str:
    """Log ``job`` as one MLflow run, finished (or marked failed when a step fails); its run id."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    client = MlflowClient(tracking_uri=job["uri"])
    found = client.get_experiment_by_name(job["experiment"])
    experiment_id = found.experiment_id if found is not None else client.create_experiment(job["experiment"])
    run_id: str = client.create_run(experiment_id, tags=job["tags"]).info.run_id
    try:
        stamp = int(time.time() * 1000)
        client.log_batch(
            run_id,
            metrics=[Metric(k, v, stamp, 0) for k, v in job["metrics"].items()],
            params=[Param(k, v) for k, v in job["params"].items()],
        )
        for path in job["files"]:
            client.log_artifact(run_id, path)
    except BaseException:
        with contextlib.suppress(Exception):  # the error worth reporting is the one that stopped the logging
            client.set_terminated(run_id, "FAILED")
        raise
    client.set_terminated(run_id, "FINISHED")
    return run_id


def main() -> None:
    import mlflow  # noqa: F401  (imported before the job is read: the deadline is the logging's, not the import's)

    print("ready", flush=True)
    job = json.loads(sys.stdin.read())
    try:
        reply = {"run_id": log(job)}
    except Exception as exc:  # noqa: BLE001  (whatever the tracker does is reported, never raised)
        reply = {"error": f"{type(exc).__name__}: {exc}"}
    print("\n" + json.dumps(reply), flush=True)  # the last line: MLflow may have printed before it


if __name__ == "__main__":
    main()
