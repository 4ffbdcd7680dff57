"""`xbench export RESULTS --mlflow [URI]`: every row as an MLflow run, in the tracking tool users
already have. Parameters are the cell's configuration, metrics the per-epoch rate, seconds, loss
and accuracy (step = epoch) and the run's totals, tags the status, contention and environment.
A row already exported (tag `xbench.row`) is not logged twice. The default store is a local
folder (`./mlruns`); MLflow keeps its file store only when told to, which this export does.
"""
import logging
import os
from pathlib import Path

from xbench.common.errors import UserError

PARAMS = ("grid", "cell_key", "repeat", "backend", "framework", "model", "dataset",
          "dataset_multiple", "batch_mode", "global_batch", "per_device_batch", "nodes",
          "devices", "world_size", "launcher", "seed", "threads_per_device", "memory_limit_mb")
TOTALS = ("test_accuracy", "startup_seconds", "step_time_p50", "step_time_p90",
          "peak_memory_bytes", "cell_seconds")
EPOCH_METRICS = ("rate", "seconds", "loss", "accuracy")
EXPERIMENT = "xbench"


def default_uri() -> str:
    return Path("mlruns").resolve().as_uri()


def export(rows: list[dict], uri: str) -> tuple[str, int, int]:
    """(the store's URI, runs logged, rows already there) in the MLflow store at `uri`."""
    if "://" not in uri and not uri.startswith("file:"):
        uri = Path(uri).resolve().as_uri()
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    try:
        import mlflow
    except ImportError:
        raise UserError("--mlflow needs MLflow: pip install -e '.[mlflow]' (mlflow-skinny)") from None
    logging.getLogger("mlflow").setLevel(logging.WARNING)  # its notes stay off the terminal
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.set_experiment(EXPERIMENT)
    client = mlflow.tracking.MlflowClient(uri)
    there = {run.data.tags.get("xbench.row") for run in
             client.search_runs([experiment.experiment_id], max_results=50000)}
    logged = 0
    for row in rows:
        identity = f"{row['run_id']}/{row['cell_key']}/{row['repeat']}"
        if identity in there:
            continue
        with mlflow.start_run(run_name=f"{row['cell_key']} r{row['repeat']}"):
            mlflow.log_params({name: row[name] for name in PARAMS})
            for epoch in row["epochs"]:
                mlflow.log_metrics({name: epoch[name] for name in EPOCH_METRICS
                                    if epoch.get(name) is not None}, step=epoch["epoch"])
            mlflow.log_metrics({name: row[name] for name in TOTALS if row.get(name) is not None})
            env = row["env"]
            mlflow.set_tags({
                "xbench.row": identity, "status": row["status"],
                "error": (row["error"] or "")[:4000], "contended": str(row.get("contended")),
                "host": env.get("host"), "python": env.get("python"),
                "git_commit": env.get("git_commit"), "device_name": row.get("device_name"),
                **{f"package.{k}": v for k, v in (env.get("packages") or {}).items()}})
        logged += 1
    return uri, logged, len(rows) - logged
