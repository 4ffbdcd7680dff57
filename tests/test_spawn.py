"""`python -m xbench.common.running.spawn`: N copies of a worker on one machine, ended together."""
import subprocess
import sys
from pathlib import Path

import psutil

# Copy 0 ignores SIGTERM (as TensorFlow's preemption notifier does in tf-multiworker's workers)
# and would sleep for an hour; copy 1 fails. Each writes its pid first.
COPY = """
import os, signal, sys, time
from pathlib import Path
task = int(os.environ["XBENCH_TASK"])
Path(sys.argv[1], str(task)).write_text(str(os.getpid()))
if task == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(3600)
while not Path(sys.argv[1], "0").exists():
    time.sleep(0.05)
sys.exit(7)
"""


def test_a_failed_copy_ends_the_others_even_those_that_ignore_sigterm(tmp_path):
    ended = subprocess.run([sys.executable, "-m", "xbench.common.running.spawn", "2", "--",
                            sys.executable, "-c", COPY, str(tmp_path)], timeout=120)
    assert ended.returncode == 7  # the failed copy's exit code
    survivor = int(Path(tmp_path, "0").read_text())
    assert not psutil.pid_exists(survivor) or psutil.Process(survivor).status() == "zombie"
