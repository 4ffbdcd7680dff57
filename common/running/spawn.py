"""`python -m xbench.common.running.spawn N -- COMMAND...`: N copies of a command on this machine,
as Slurm's srun --ntasks-per-node=N starts them on a node: copy i gets XBENCH_TASK=i. When one copy
fails the others are ended (as torchrun does: SIGTERM, then SIGKILL after a grace period, since
TensorFlow's preemption notifier catches SIGTERM and carries on), and a crashed copy's exit code (a
signal) is this one's, else the lowest failure's; a SIGTERM to this process ends every copy, and its
death kills them. Used by the local launcher for backends with a worker per device
(tf-multiworker)."""
import os
import signal
import subprocess
import sys
import time

from xbench.common.backends.launch_scopes import TASK_ENV
from xbench.common.children import end_with
from xbench.common.running.processes import KILL_GRACE_SECONDS


def main(argv: list[str]) -> int:
    count, command = int(argv[0]), argv[argv.index("--") + 1:]
    copies = [subprocess.Popen(command, env={**os.environ, TASK_ENV: str(i)},
                               preexec_fn=end_with(os.getpid(), signal.SIGKILL))
              for i in range(count)]

    def end_all(*_):
        for copy in copies:
            if copy.poll() is None:
                copy.terminate()
        deadline = time.monotonic() + KILL_GRACE_SECONDS
        while time.monotonic() < deadline and any(copy.poll() is None for copy in copies):
            time.sleep(0.1)
        for copy in copies:
            if copy.poll() is None:
                copy.kill()
    signal.signal(signal.SIGTERM, lambda *_: (end_all(), sys.exit(143)))
    while True:
        codes = [copy.poll() for copy in copies]
        failures = [code for code in codes if code not in (None, 0)]
        # a crash (a signal) before what it made the others do, when both are seen at once
        failed = min(failures) if failures else None
        if failed is not None:
            end_all()
            for copy in copies:
                copy.wait()
            return failed if failed > 0 else 128 - failed
        if all(code == 0 for code in codes):
            return 0
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
