"""Entry point of every launched process: `python -m xbench.common.running.worker JOB_JSON OUT_DIR`.

Each rank loads the data and calls its backend's `train` (or, for `xbench probe` and `xbench
profile`, its `probe` or `profile`). The reporting rank writes `result.json` (its
common.results.schema.Measurement and the environment) atomically; a rank that fails writes
`error-<pid>.json` saying how (oom, unsupported or failed), then exits non-zero so the launcher
(torchrun, horovodrun) ends the group.
"""
import json
import os
import re
import resource
import sys
import traceback
from pathlib import Path

from xbench.common.backends.frameworks import Framework
from xbench.common.backends.registry import get_backend
from xbench.common.errors import Unsupported, UserError
from xbench.common.grids.cell import Cell
from xbench.common.running import env
from xbench.common.running.framework_import import import_as_installed_alone
from xbench.common.running.job import Job
from xbench.common.running.progress import ProgressReport
from xbench.common.workload import data as data_module
from xbench.common.workload.resolve import resolve_model


def write_json(path, payload):
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(payload, default=str))
    os.replace(tmp, path)


def limit_memory(megabytes: int, framework: Framework, environment: dict) -> None:
    """Import the framework as an environment holding only it would
    (common.running.framework_import; `environment` records what was hidden), then let this
    process allocate only `megabytes` more, its framework imported and its data loaded
    (RLIMIT_DATA), so that a batch that does not fit raises the framework's out-of-memory
    error instead of swapping or waking the kernel's OOM killer. With the cell's memory_limit_mb
    this emulates a smaller device (unless the backend bounds its tensors by its own allocator,
    Backend.bound_tensor_memory); without it, the limit is the process's share of the memory
    the machine had available when the cell started."""
    import_as_installed_alone(framework.module, framework.not_in_its_install)
    environment["imported_without"] = list(framework.not_in_its_install)
    status = Path("/proc/self/status").read_text()
    in_use = int(re.search(r"VmData:\s+(\d+) kB", status).group(1)) * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    wanted = in_use + megabytes * 2**20
    resource.setrlimit(resource.RLIMIT_DATA,
                       (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))


def main(job_path, out_dir):
    spec = json.loads(Path(job_path).read_text())
    out_dir = Path(out_dir)
    cell = Cell.from_dict(spec["cell"])
    backend = get_backend(cell.backend)
    budget = spec["memory_budget_mb"]
    # the machine as this process found it, before a backend narrowed the cores it may use (a
    # pinned rank's, a JAX process's share)
    environment = env.capture()
    framework = backend.traits.framework
    try:
        if "measure" in spec:  # xbench probe or profile: the cell's processes, no training
            method, request = spec["measure"]
            limit_memory(budget, framework, environment)
            result = getattr(backend, method)(cell, spec["threads_per_device"], request)
            if result is not None:
                write_json(out_dir / "result.json", {method: result, "env": environment})
            return 0
        limit = min(cell.memory_limit_mb or budget, budget)
        if cell.memory_limit_mb and backend.bound_tensor_memory(limit):
            limit = budget  # the framework's allocator holds its tensors; this is a backstop
        # what the grid found of the cell's model (a model file's facts), not found again
        model = resolve_model(cell.model, spec.get("model_file"))
        job = Job(cell=cell, model=model,
                  data=data_module.load(cell, model, framework.name),
                  threads_per_device=spec["threads_per_device"], launched_at=spec["launched_at"],
                  omp_wait=spec["omp_wait"],
                  progress=ProgressReport(out_dir))
        limit_memory(limit, framework, environment)
        print(f"xbench worker {os.getpid()}: {len(job.data.train_images)} training samples loaded; "
              f"training {cell.label}", file=sys.stderr, flush=True)
        measurement = backend.train(job)
    except Unsupported as e:
        write_json(out_dir / f"error-{os.getpid()}.json",
                   {"status": "unsupported", "error": str(e)})
        return 3
    except UserError as e:
        write_json(out_dir / f"error-{os.getpid()}.json", {"status": "failed", "error": str(e)})
        return 2
    except BaseException as e:  # noqa: BLE001 - every failure must reach the row, then the exit code
        status = "oom" if backend.is_out_of_memory(e) else "failed"
        text = "".join([*traceback.format_exception_only(e),
                        *traceback.format_tb(e.__traceback__)[-3:]])
        if status == "oom" and not (cell.memory_limit_mb and cell.memory_limit_mb <= budget):
            text = (f"out of this process's share of the machine's available memory "
                    f"({budget:,} MB), not of a device's:\n{text}")
        write_json(out_dir / f"error-{os.getpid()}.json", {"status": status, "error": text})
        traceback.print_exc()
        return 1
    if measurement is not None:
        write_json(out_dir / "result.json", {"measurement": measurement.to_dict(),
                                             "env": environment})
    return 0


if __name__ == "__main__":
    code = main(*sys.argv[1:3])
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything the runner reads is on disk (written atomically); leave without the interpreter's
    # and the libraries' teardown, where a gloo rank aborted now and then after its work was done.
    os._exit(code)
