"""`xbench export RESULTS --mlflow [URI]`: every row as an MLflow run, in the tracking tool users
already have. Parameters are the cell's configuration, metrics the per-epoch rate, seconds, loss
and accuracy (step = epoch) and the run's totals, tags the status, contention and environment.
A row already exported (tag `xbench.row`) is not logged twice, also when two exports to one store
run at once on this machine (each holds a lock on the store while it looks and logs). The default
store is a local folder (`./mlruns`); MLflow keeps its file store only when told to, which this
export does. The store is checked before any row is read: a folder it can write, or an http(s)
server that answers within seconds.
"""
import contextlib
import fcntl
import hashlib
import logging
import os
import socket
import tempfile
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from xbench.common.errors import UserError
from xbench.common.grids.settings import IN_ROW
from xbench.common.results.outputs import writable_folder
from xbench.common.results.store import row_identity

# A run's parameters: its identity, every setting its row records, and what its cell derives.
PARAMS = ("grid", "cell_key", "repeat", *(s.row_name for s in IN_ROW), "framework",
          "global_batch", "per_device_batch", "world_size", "threads_per_device")
TOTALS = ("test_accuracy", "test_loss", "startup_seconds", "step_time_p50", "step_time_p90",
          "peak_memory_bytes", "cell_seconds")
EPOCH_METRICS = ("rate", "seconds", "loss", "accuracy")
EXPERIMENT = "xbench"
ANSWER_SECONDS = 5  # a tracking server that does not answer within this is unreachable
# MLflow's own HTTP client retries for minutes by default; an export fails in seconds instead.
HTTP_SETTINGS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def default_uri() -> str:
    return Path("mlruns").resolve().as_uri()


def check_store(uri: str) -> str:
    """The store's URI once it can take runs: a local folder (made if missing) it can write
    in, or an http(s) tracking server that accepts a connection; else a UserError in one line."""
    if "://" not in uri and not uri.startswith("file:"):
        uri = Path(uri).resolve().as_uri()
    scheme = urlsplit(uri).scheme
    if scheme == "file":
        writable_folder(Path(url2pathname(urlsplit(uri).path)), "the MLflow store")
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    elif scheme in ("http", "https"):
        address = urlsplit(uri)
        try:
            port = address.port or (443 if scheme == "https" else 80)
        except ValueError:
            raise UserError(f"--mlflow {uri}: the port is not a number from 0 to 65535") from None
        try:
            socket.create_connection((address.hostname, port), timeout=ANSWER_SECONDS).close()
        except OSError as e:
            raise UserError(f"MLflow at {uri} did not answer within {ANSWER_SECONDS} s "
                            f"({e.strerror or e}): is the tracking server running?") from None
        for name, value in HTTP_SETTINGS.items():
            os.environ.setdefault(name, value)
    else:
        raise UserError(f"--mlflow {uri}: xbench logs to a folder (a local store) or an "
                        f"http(s):// tracking server, not to a '{scheme}' store (a database "
                        f"store such as sqlite needs the full mlflow package and its server: "
                        f"run `mlflow server --backend-store-uri {uri}` and give its http:// "
                        f"address)")
    try:
        import mlflow  # noqa: F401
    except ImportError:
        raise UserError("--mlflow needs MLflow: pip install -e '.[mlflow]' "
                        "(mlflow-skinny)") from None
    return uri


def export(rows: list[dict], uri: str) -> tuple[str, int, int]:
    """(the store's URI, runs logged, rows already there) in the MLflow store at `uri` (checked
    by `check_store`). Under the store's lock, so that two exports at once log a row once."""
    import mlflow
    from mlflow.exceptions import MlflowException
    logging.getLogger("mlflow").setLevel(logging.WARNING)  # its notes stay off the terminal
    logged = 0
    try:
        with store_lock(uri):
            mlflow.set_tracking_uri(uri)
            experiment = mlflow.set_experiment(EXPERIMENT)
            client = mlflow.tracking.MlflowClient(uri)
            there = {run.data.tags.get("xbench.row") for run in
                     client.search_runs([experiment.experiment_id], max_results=50000)}
            for row in rows:
                identity = "/".join(map(str, row_identity(row)))
                if identity not in there:
                    log_row(mlflow, row, identity)
                    there.add(identity)
                    logged += 1
    except (MlflowException, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"MLflow at {uri} failed after {logged} run(s) were logged: {first}; "
                        f"run the export again (rows already logged are not logged "
                        f"twice)") from None
    return uri, logged, len(rows) - logged


@contextlib.contextmanager
def store_lock(uri: str):
    """An exclusive lock on this machine for one MLflow store (a file of this user's in the
    temporary folder, named by the store's URI): this user's exports to it take turns."""
    name = hashlib.sha256(uri.rstrip("/").encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"xbench-mlflow-{os.getuid()}-{name}.lock"
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def log_row(mlflow, row: dict, identity: str) -> None:
    """One row as one MLflow run, tagged `xbench.row` = its identity."""
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
