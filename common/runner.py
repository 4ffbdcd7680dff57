"""Runs cells: each cell and repeat in fresh process(es), under a timeout, one result row each.

The runner never imports a framework. It launches the backend's command, waits, and turns what
came back (a result, an error file, a timeout, an exit code) into a row that it appends to the
results file before the next cell starts, so a crash or Ctrl-C loses at most the running cell.
"""
import json
import os
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from common import env, results
from common.backend import get_backend, threads_per_process

REPO = Path(__file__).resolve().parent.parent
LOG_TAIL_LINES = 15
KILL_GRACE_SECONDS = 5
ERROR_PRIORITY = ("oom", "unsupported", "failed")  # which rank's error names the cell's status


def run_grid(cells, results_path, resume=True, echo=print):
    """Run every cell not already done; return the rows written by this run."""
    results.check_writable(results_path)
    results.repair_tail(results_path)
    done = completed_cells(results_path) if resume else set()
    run_id = results.new_run_id()
    log_dir = Path(f"{results_path}.logs") / run_id
    rows = []
    with _stop_on_signals():
        for number, cell in enumerate(cells, 1):
            prefix = f"[{number}/{len(cells)}] {cell.label}"
            if (cell.key, cell.repeat) in done:
                echo(f"{prefix}: done in {results_path} already (use --force to run it again)")
                continue
            row = run_cell(cell, run_id, log_dir / f"{number:03d}.log")
            results.append_row(results_path, row)
            rows.append(row)
            echo(f"{prefix}: {progress_line(row)}")
    return rows


def completed_cells(results_path):
    if not Path(results_path).is_file():
        return set()
    rows, _ = results.read_rows(results_path)
    return {(r["cell_key"], r.get("repeat", 0)) for r in rows if r.get("status") == "ok"}


def run_cell(cell, run_id, log_path):
    """One cell, start to end: its result row, whatever happened."""
    backend = get_backend(cell.backend)
    row = results.base_row(cell, run_id, backend.framework)
    started = time.perf_counter()
    reason = backend.missing()
    if reason:
        row.update(status="unsupported", error=reason)
    else:
        row.update(launch(backend, cell, log_path))
        row["log"] = str(log_path)
    row["cell_seconds"] = time.perf_counter() - started
    row["finished_at"] = results.now()
    if not row["env"]:
        row["env"] = env.capture()
    return row


def launch(backend, cell, log_path):
    """Start the cell's process group, wait for it (or its timeout), and read what it left."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    threads = threads_per_process(backend.processes(cell))
    token = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="xbench-") as out_dir:
        job_path = Path(out_dir) / "job.json"
        job_path.write_text(json.dumps({"cell": cell.to_dict(), "threads": threads,
                                        "launched_at": time.time()}))
        command = backend.launch_command(cell, [str(job_path), out_dir])
        environment = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1",
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                       "XBENCH_CELL": token}
        with open(log_path, "w") as log:
            log.write(" ".join(command) + "\n")
            log.flush()
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                       cwd=REPO, start_new_session=True)
            try:
                returncode = process.wait(timeout=cell.timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                returncode, timed_out = None, True
            finally:
                kill_cell_processes(process, token)
        return outcome(Path(out_dir), returncode, timed_out, cell, log_path)


def outcome(out_dir, returncode, timed_out, cell, log_path):
    """The row fields for what a finished (or killed) cell left behind."""
    result_file = out_dir / "result.json"
    if result_file.is_file() and returncode == 0:
        return {"status": "ok", **json.loads(result_file.read_text())}
    errors = [json.loads(p.read_text()) for p in sorted(out_dir.glob("error-*.json"))]
    errors.sort(key=lambda e: ERROR_PRIORITY.index(e["status"]))
    tail = log_tail(log_path)
    if timed_out:
        return {"status": "timeout",
                "error": f"no result after the cell's timeout of {cell.timeout} s; every process "
                         f"of the cell was killed. Last lines of {log_path}:\n{tail}"}
    if errors:
        return {"status": errors[0]["status"],
                "error": errors[0]["error"] if errors[0]["status"] == "unsupported"
                else f"{errors[0]['error']}\nLast lines of {log_path}:\n{tail}"}
    return {"status": "failed", "error": f"exit code {returncode}. Last lines of {log_path}:\n{tail}"}


def log_tail(path, lines=LOG_TAIL_LINES):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def cell_processes(token):
    """PIDs of every process that carries this cell's XBENCH_CELL token in its environment:
    the whole tree, including processes a launcher moved to a session of their own."""
    marker = f"XBENCH_CELL={token}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def kill_cell_processes(process, token):
    """End the cell's processes: SIGTERM, a grace period, then SIGKILL for what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        targets = cell_processes(token)
        if process.poll() is None:
            targets.append(process.pid)
        if not targets:
            break
        for pid in targets:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + KILL_GRACE_SECONDS
        while time.monotonic() < deadline and (process.poll() is None or cell_processes(token)):
            time.sleep(0.1)
    process.wait()


def progress_line(row):
    if row["status"] != "ok":
        first = (row.get("error") or "").strip().splitlines()
        return f"{row['status'].upper()}: {first[0] if first else ''}"
    last = row["epochs"][-1]
    return (f"ok  epoch {last['epoch']}: {last['rate']:,.0f} samples/s, {last['seconds']:.2f} s; "
            f"start-up {row['startup_seconds']:.1f} s; test accuracy {row['test_accuracy']:.4f}")


class _stop_on_signals:
    """Turn SIGTERM into KeyboardInterrupt while a grid runs, so both stop the running cell
    (its processes are killed in `launch`) and write nothing half-done."""

    def __enter__(self):
        self.previous = signal.signal(signal.SIGTERM, self._raise)
        return self

    def __exit__(self, *exc):
        signal.signal(signal.SIGTERM, self.previous)

    @staticmethod
    def _raise(signum, frame):
        raise KeyboardInterrupt
