"""`python -m xbench.common.running.slurm_task OUT_DIR -- COMMAND...`: one srun task of a cell's
Slurm job (common.running.slurm_job). It runs the command and, when that ends by itself, leaves
how in OUT_DIR/task-<rank>.json on the shared filesystem: the exit code (negative: the signal),
the node, the moment.

srun's own exit code is one task's, and after a task crashed it is usually a peer's: srun then
kills the other tasks (--kill-on-bad-exit), and answers with their SIGTERM or SIGKILL (143, 137)
rather than the crash's SIGABRT. Slurm's accounting (sacct) would not tell either: it keeps one
exit code a step, and needs a database the cluster may not run. So each task says for itself,
and the job's script names the one that ended badly first, the cause of the others' ends. A
task srun killed writes nothing: its end was not its own."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from xbench.common.children import end_with

RECORD = "task-{rank}.json"


def main(argv: list[str]) -> int:
    out_dir, command = Path(argv[0]), argv[argv.index("--") + 1:]
    # It dies with this process (srun's SIGTERM or SIGKILL of the step reaches this one too).
    task = subprocess.Popen(command, preexec_fn=end_with(os.getpid(), signal.SIGKILL))
    code = task.wait()
    rank = os.environ.get("SLURM_PROCID", "0")
    record = {"rank": int(rank), "node": os.environ.get("SLURMD_NODENAME", socket.gethostname()),
              "returncode": code, "ended": time.time()}
    partial = out_dir / f".{RECORD.format(rank=rank)}.{os.getpid()}"
    partial.write_text(json.dumps(record))
    partial.replace(out_dir / RECORD.format(rank=rank))
    return code if code >= 0 else 128 - code  # a signal as a shell says it: 128 + its number


def first_failed(out_dir: Path) -> dict | None:
    """The record of the task that ended badly first by its own doing (one killed by a signal
    before one that exited with an error, which may be what the other's end made it do, as
    common.running.spawn judges), or None where every task that recorded its end ended well."""
    failed = []
    for path in out_dir.glob(RECORD.format(rank="*")):
        try:
            record = json.loads(path.read_text())
            if record["returncode"] != 0:
                failed.append(record)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return min(failed, key=lambda r: (r["returncode"] > 0, r["ended"]), default=None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
