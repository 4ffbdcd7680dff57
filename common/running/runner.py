"""Runs cells: each cell and repeat in fresh process(es), under a timeout, one result row each.

The runner never imports a framework. It launches the backend's command, waits, and turns what
came back (a result, an error file, a timeout, an exit code) into a row that it appends to the
results file before the next cell starts. Whatever one cell does (crash, hang, run out of memory,
fail to import), the grid goes on; Ctrl-C, SIGTERM or even SIGKILL of the runner loses at most the
running cell, and no process of it is left behind.
"""
import contextlib
import json
import os
import signal
import tempfile
import time
import traceback
import uuid
from pathlib import Path

from xbench.common.backends.start import Start
from xbench.common.children import signals_held
from xbench.common.errors import UserError
from xbench.common.grids.cell import Cell, threads_per_device
from xbench.common.measuring.attribution import split_text
from xbench.common.measuring.contention import taken_share
from xbench.common.results import store as results
from xbench.common.results.schema import Measurement, make_row, now
from xbench.common.running import env
from xbench.common.running.busy_machine import omp_environment, omp_wait
from xbench.common.running.claims import Claims
from xbench.common.running.launch import Launcher, refused
from xbench.common.running.local import LocalLauncher
from xbench.common.running.processes import remove_dead_scratch, scratch_folder
from xbench.common.running.progress import GridProgress
from xbench.common.workload.resolve import resolve_model

LOG_TAIL_LINES = 15
# A process killed by one of these crashed (heap corruption, a bad instruction): a framework's
# fault, which a second run of the same cell need not meet (the `retries` setting).
FATAL_SIGNALS = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}
ERROR_PRIORITY = ("oom", "unsupported", "failed")  # which rank's error names the cell's status
DEVICES_PER_CORE = 4  # more CPU devices (processes or logical devices) measure only contention
MEMORY_SHARE = 0.9  # of the memory available when a cell starts, shared out over its processes


def run_grid(cells, results_path, resume=True, echo=print, launcher=None, live=None,
             quiet=False, load=None, forecasts=None):
    """Run every cell not already done, with `launcher` (common.running.launch; default: this
    machine); return the rows written by this run. Progress is shown live on a terminal (`live`:
    default when standard output is one), as plain lines otherwise, not at all when `quiet`.
    `load`: what else ran on the machine when the grid started (common.running.busy_machine), which
    `omp_wait auto` follows. `forecasts`: each cell's seconds as the dry run forecasts them,
    where the grid's ETA starts (common.running.progress.GridProgress)."""
    launcher = launcher or LocalLauncher()
    results_path = results.check_results_path(results_path)
    check_cells(cells, launcher)
    for folder in remove_dead_scratch():
        echo(f"removed {folder}: the scratch folder of a cell whose grid was killed")
    echo(f"{len(cells)} cells -> {results_path}")
    earlier = earlier_rows(results_path, echo)
    too_large = first_too_large(cells, earlier)
    done_before = {(r["cell_key"], r["repeat"]) for r in earlier if r["status"] == "ok"}
    claims = Claims(results_path)

    def done():
        """Cells with an ok row in the results file now (another grid may have added some)."""
        if not resume or not results_path.exists():
            return set()
        return {(r["cell_key"], r["repeat"]) for r in results.read_rows(results_path)[0]
                if r["status"] == "ok"}

    run_id = results.new_run_id()
    log_dir = Path(f"{results_path}.logs") / run_id
    progress = GridProgress(len(cells), echo, live, quiet, forecasts)
    rows = []
    with stop_on_signals():
        for number, cell in enumerate(cells, 1):
            prefix = f"[{number}/{len(cells)}] {cell.label}"
            why = not_run(cell, too_large, resume and (cell.key, cell.repeat) in done_before,
                          claims, done, results_path)
            if why:
                progress.cell_skipped(number)
                echo(f"{prefix}: {why}")
                continue
            row = None
            try:
                progress.cell_started(number, cell.label)
                row = run_cell(cell, run_id, log_dir / f"{number:03d}.log", launcher,
                               progress.watch, load)
                if cell.sweep and row["status"] == "oom":
                    row["error"] = (f"the first batch of sweep {cell.sweep} that did not fit "
                                    f"(larger ones are not run): {row['error']}")
                    too_large[cell.sweep_line] = cell.batch
                results.append_row(results_path, row)
            finally:
                progress.cell_ended(row["cell_seconds"] if row and row["status"] == "ok"
                                    else None)
                with signals_held():
                    claims.release(cell.key, cell.repeat)
            rows.append(row)
            echo(f"{prefix}: {progress_line(row)}")
    return rows


def not_run(cell, too_large: dict[str, int], done_before: bool, claims: Claims, done,
            results_path) -> str | None:
    """Why `cell` is not run now (None: it runs, and this grid has claimed it; `done`: the ok
    cells of the results file now): a larger batch of its sweep line did not fit, it has an ok
    row already, or another grid runs it."""
    limit = too_large.get(cell.sweep_line) if cell.sweep else None
    if limit and cell.batch > limit:
        return (f"not run: batch {limit} of this sweep line did not fit in memory, so larger "
                f"ones are not tried")
    taken = "done" if done_before else claims.claim(cell.key, cell.repeat, done)
    if taken == "done":
        return f"done in {results_path} already (use --force to run it again)"
    return f"skipped: {taken}" if taken else None


def first_too_large(cells, earlier) -> dict[str, int]:
    """{sweep line: its first batch that did not fit}, from earlier rows: a batch sweep's line
    stops there."""
    statuses = {r["cell_key"]: r["status"] for r in earlier}
    found = {}
    for cell in cells:
        if cell.sweep and statuses.get(cell.key) == "oom":
            found[cell.sweep_line] = min(cell.batch, found.get(cell.sweep_line, cell.batch))
    return found


def check_cells(cells, launcher) -> None:
    """What a grid refuses before any cell starts (the run's check and the dry run's): cells
    `launcher` cannot place, device counts no CPU run can mean."""
    launcher.check(cells)
    check_devices(cells, launcher.cores)


def check_devices(cells, cores):
    """Refuse a device count no CPU run can mean. A CUDA cell asking for more GPUs than the
    machine has is the backend's to judge: it becomes an `unsupported` row."""
    limit = DEVICES_PER_CORE * cores
    too_many = sorted({c.devices for c in cells if c.device != "cuda" and c.devices > limit})
    if too_many:
        raise UserError(
            f"--devices {', '.join(map(str, too_many))} is more than this machine can run on CPU: "
            f"each CPU device is a process (or a logical device) sharing its {cores} cores, and "
            f"beyond {limit} ({DEVICES_PER_CORE} per core) a run measures only contention. Use at "
            f"most {limit} devices here, or --device cuda on a machine with that many GPUs")


def files_written(results_path) -> list[Path]:
    """The results file and what a grid writes beside it (its claims, a row the file could not
    take): none may be a file the grid reads (cli.grid)."""
    return [Path(results_path), Claims(results_path).path, results.unsaved_path(results_path)]


def earlier_rows(results_path, echo=print):
    """The valid rows already in the results file; damaged lines are reported, then ignored."""
    if not Path(results_path).is_file():
        return []
    rows, problems = results.read_rows(results_path)
    for problem in problems:
        echo(problem)
    return rows


def run_cell(cell, run_id, log_path, launcher, watch=lambda folder: None, load=None):
    """One cell, start to end: its result row, whatever happened (`watch(folder)` is called
    while it runs, with the cell's folder). A run whose processes crashed (`crashed`) is run
    again, up to the cell's `retries` times, each with a log of its own; the row keeps the
    crashes' errors. The cell's model is resolved once, here, and every question of it is asked
    of that object."""
    started_at, started = now(), time.perf_counter()
    framework, log, outcome, batchnorm, crashes = None, None, {}, None, []
    model = resolve_model(cell.model)
    try:
        backend = Start.of(cell.backend)
        framework, batchnorm = backend.framework, backend.batchnorm(model)
        reason = refused(backend, cell, model, launcher)
        needed, node = backend.memory_estimate(cell, model), launcher.node_memory_mb * 2**20
        if reason:
            outcome = {"status": "unsupported", "error": reason}
        elif needed > node:
            outcome = {"status": "oom",
                       "error": f"not started: this cell needs about {needed / 2**30:,.1f} GiB "
                                f"on a node (model, activations of its batch, framework and data, "
                                f"for each of its {backend.processes(cell)} process(es) there), "
                                f"and a node has {node / 2**30:,.1f} GiB; running it would only "
                                f"wake the kernel's out-of-memory killer"}
        else:
            attempt_log = log_path
            outcome = launch(backend, cell, model, attempt_log, launcher, watch, load=load)
            while outcome.get("crashed") and len(crashes) < cell.retries:
                crashes.append(outcome["error"])
                attempt_log = log_path.with_name(f"{log_path.stem}-{len(crashes) + 1}.log")
                outcome = launch(backend, cell, model, attempt_log, launcher, watch, load=load)
            log = str(attempt_log)
    except Exception:  # noqa: BLE001 - e.g. a backend that fails to import fails its cells, not the grid
        outcome = {"status": "failed",
                   "error": f"xbench could not run this cell:\n{traceback.format_exc(limit=-3)}"}
    result = outcome.get("result")
    measurement = Measurement.from_dict(result["measurement"]) if result else None
    return make_row(cell, run_id, started_at, outcome["status"], outcome.get("error"), framework,
                    measurement, outcome.get("env") or env.capture(), log,
                    time.perf_counter() - started, threads_per_device(cell, launcher.cores),
                    batchnorm, crashes, model=model, cluster=outcome.get("cluster"))


def launch(backend, cell, model, log_path, launcher, watch=lambda folder: None, measure=None,
           load=None):
    """Start the cell's processes with `launcher`, wait for them (or the timeout), and read what
    they left: {status, error} or {status, result, env}. `model`: the cell's (a model file's
    facts travel in the job, for its processes to resolve it from). With `measure` (("probe",
    request) or ("profile", request): the Backend method and its request), the processes measure
    that instead of training. `load`: the grid's look at the machine, for `omp_wait auto`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    threads = threads_per_device(cell, launcher.cores)
    token = uuid.uuid4().hex
    # The job's folder beside the log, so that what a killed runner could not clean up stays
    # there, not in /tmp; and the processes' temporary folder, the cell's own and gone with it:
    # what the frameworks put there (TensorFlow's autograph modules, its traces) is no leftover.
    with tempfile.TemporaryDirectory(prefix=f"{log_path.stem}-", dir=log_path.parent) as out_dir, \
            scratch_folder(token) as scratch:
        job_path = Path(out_dir) / "job.json"
        waiting = omp_wait(cell.omp_wait, load, backend.traits.framework.no_omp_wait)
        # Each process may allocate at most its share of the memory available now: a cell that
        # outgrows it gets its framework's out-of-memory error, never the kernel's OOM killer.
        budget_mb = int(launcher.memory_mb * MEMORY_SHARE / backend.processes(cell))
        job_path.write_text(json.dumps({"cell": cell.to_dict(), "threads_per_device": threads,
                                        "memory_budget_mb": budget_mb,
                                        "launched_at": time.time(), "omp_wait": waiting,
                                        "model_file": model.carried(),
                                        **({"measure": measure} if measure else {})}))
        process_threads = threads * backend.devices_per_process(cell)
        environment = {**omp_environment(os.environ, waiting),
                       "OMP_NUM_THREADS": str(process_threads), "PYTHONUNBUFFERED": "1",
                       "XBENCH_CELL": token, "TMPDIR": scratch,
                       # CUDA's device numbers in NVML's order, so that both name one GPU alike
                       "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        with open(log_path, "w") as log:
            ended = launcher.run(backend, cell, [str(job_path), out_dir], environment, log, token,
                                 lambda: watch(out_dir))
        return {**outcome(Path(out_dir), ended, log_path), "cluster": ended.cluster}


def measure(cell: Cell, method: str, request: dict, log_path: Path,
            launcher: Launcher) -> tuple[dict | None, str | None]:
    """Launch `cell`'s processes to run Backend.`method` ("probe" or "profile") with `request`
    instead of training: (its result, None), or (None, why there is none)."""
    backend = Start.of(cell.backend)
    missing = backend.missing()
    if missing:
        return None, missing
    ended = launch(backend, cell, resolve_model(cell.model), log_path, launcher,
                   measure=(method, request))
    if ended["status"] != "ok":
        return None, f"{ended['status']}: {ended.get('error', '').strip()}"
    return ended["result"][method], None


def outcome(out_dir, ended, log_path):
    """The row fields for what a finished (or killed) cell left behind (`ended`: how its
    processes ended, common.running.processes.Ended)."""
    result_file = out_dir / "result.json"
    if result_file.is_file() and ended.returncode == 0:
        result = json.loads(result_file.read_text())
        return {"status": "ok", "result": result, "env": result["env"]}
    errors = [json.loads(p.read_text()) for p in sorted(out_dir.glob("error-*.json"))]
    errors.sort(key=lambda e: ERROR_PRIORITY.index(e["status"]))
    tail = log_tail(log_path)
    if ended.timed_out:
        return {"status": "timeout", "error": f"{ended.how}. Last lines of {log_path}:\n{tail}"}
    if ended.status == "unsupported":  # the launcher's own word, before any process started
        return {"status": "unsupported", "error": ended.how}
    if ended.status:  # it lost the processes: what they say after is its consequence
        return {"status": ended.status, "error": f"{ended.how}. Last lines of {log_path}:\n{tail}"}
    if crashed(ended.returncode):  # whatever the other ranks said of it afterwards
        return {"status": "failed", "crashed": True,
                "error": f"crashed: {exit_description(ended.returncode)}. Last lines of "
                         f"{log_path}:\n{tail}"}
    if errors:
        return {"status": errors[0]["status"],
                "error": errors[0]["error"] if errors[0]["status"] == "unsupported"
                else f"{errors[0]['error']}\nLast lines of {log_path}:\n{tail}"}
    how = f" ({ended.how})" if ended.how else ""
    return {"status": "failed",
            "error": f"{exit_description(ended.returncode)}{how}. Last lines of "
                     f"{log_path}:\n{tail}"}


def crashed(returncode: int) -> bool:
    """Whether a launcher's exit code says a process died of a fatal signal: negative (the
    signal, from Python's subprocess) or 128 + the signal (from a launcher passing it on)."""
    signals = {abs(returncode), returncode - 128}
    return (returncode < 0 or returncode > 128) and bool(signals & FATAL_SIGNALS)


def exit_description(returncode):
    if returncode < 0:
        return f"killed by signal {-returncode} ({signal.strsignal(-returncode)})"
    if crashed(returncode):
        return (f"exit code {returncode} (a process killed by signal {returncode - 128}, "
                f"{signal.strsignal(returncode - 128)})")
    return f"exit code {returncode}"


def log_tail(path, lines=LOG_TAIL_LINES):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def progress_line(row):
    if row["status"] != "ok":  # why, with the log's last lines where the error has them
        lines = (row.get("error") or "").strip().splitlines() or [""]
        return "\n    ".join([f"{row['status'].upper()}: {lines[0]}", *lines[1:]])
    last = row["epochs"][-1]
    attributed = row["attribution"]["epochs"][-1] if row["attribution"] else None
    return (f"ok  epoch {last['epoch']}: {last['rate']:,.0f} samples/s, {last['seconds']:.2f} s; "
            f"start-up {row['startup_seconds']:.1f} s; test accuracy {row['test_accuracy']:.4f}"
            + (f", test loss {row['test_loss']:.4f}" if row.get("test_loss") is not None else "")
            + (f"  {contention_mark(row)}" if row["contended"] else "")
            + (f"\n    a step: {split_text(attributed['ranks'])}" if attributed else ""))


def contention_mark(row):
    """'CONTENDED: ...' for a row whose timed epochs shared the machine beyond its limit: the
    worst epoch's most contended rank, where it ran and what took its cores."""
    worst = max((e["contention"] for e in row["epochs"]),
                key=lambda c: (c["contended"], taken_share(c)))
    rank = worst.get("most_contended_rank")
    where = ""
    if rank is not None:
        watched = worst["per_rank"][rank]
        where = f" rank {rank} ({watched['node']}, cores {cores_text(watched['cores'])}):"
    throttled = worst.get("throttled_share")
    gpus = worst.get("other_gpu_processes")
    extra = "".join(f", {what} {worst[name]:.0%}" for name, what in (
        ("interrupt_share", "interrupts"), ("sibling_share", "busy hyperthread siblings"))
        if worst.get(name))
    return (f"CONTENDED:{where} other processes used {worst['other_cpu_share'] or 0:.0%}{extra} "
            f"and steal {worst['steal_share'] or 0:.0%} of {'its' if where else 'the'} cores"
            + (f", its cgroup throttled {throttled:.0%} of its quota's time" if throttled else "")
            + f" (limit {row['contention_limit']:.0%})"
            + (f", {gpus} other GPU process(es)" if gpus else ""))


def cores_text(cores: list[int]) -> str:
    """[0, 1, 2, 5] as '0-2,5'."""
    runs = []
    for core in cores:
        if runs and core == runs[-1][1] + 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


@contextlib.contextmanager
def stop_on_signals():
    """Turn SIGTERM into KeyboardInterrupt while a command (cli.main), a grid, a probe or a
    profile runs, so both stop the running cell or child (its processes are killed in `launch`,
    or common.children.ask), clean up its temporary folders and write nothing half-done."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum, frame):
    raise KeyboardInterrupt
