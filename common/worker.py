"""Entry point of every launched process: `python -m common.worker JOB_JSON OUT_DIR`.

Each rank loads the data and calls its backend's `train`. The reporting rank writes `result.json`
atomically; a rank that fails writes `error-<pid>.json` saying how (oom, unsupported or failed),
then exits non-zero so the launcher (torchrun, horovodrun) ends the group.
"""
import json
import os
import sys
import traceback
from pathlib import Path

from common import data as data_module
from common import env
from common.backend import Job, get_backend
from common.errors import Unsupported, UserError
from common.grid import Cell


def write_json(path, payload):
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(payload, default=str))
    os.replace(tmp, path)


def main(job_path, out_dir):
    spec = json.loads(Path(job_path).read_text())
    out_dir = Path(out_dir)
    cell = Cell.from_dict(spec["cell"])
    backend = get_backend(cell.backend)
    try:
        job = Job(cell=cell, data=data_module.load(cell), threads=spec["threads"],
                  launched_at=spec["launched_at"])
        result = backend.train(job)
    except Unsupported as e:
        write_json(out_dir / f"error-{os.getpid()}.json", {"status": "unsupported", "error": str(e)})
        return 3
    except UserError as e:
        write_json(out_dir / f"error-{os.getpid()}.json", {"status": "failed", "error": str(e)})
        return 2
    except BaseException as e:  # noqa: BLE001 - every failure must reach the row, then the exit code
        status = "oom" if backend.is_out_of_memory(e) else "failed"
        text = "".join(traceback.format_exception(e)[-6:])
        write_json(out_dir / f"error-{os.getpid()}.json", {"status": status, "error": text})
        traceback.print_exc()
        return 1
    if result is not None:
        result["env"] = env.capture(job.threads)
        write_json(out_dir / "result.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
