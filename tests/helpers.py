"""What the tests share besides fixtures (those are conftest.py's): where the real data is, the
`xbench` command line in a process of its own or in this one, small grid files, a pseudo-terminal.
Every test imports them as `from tests.helpers import ...`."""
import contextlib
import json
import os
import pty
import select
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SLOW = 600  # generous limits: the machine is small and shared
MNIST_DIR = Path(os.environ.get("XBENCH_TEST_DATA", REPO.parent / "shared" / "data" / "mnist"))
TEXT_DIR = MNIST_DIR.parent / "tinyshakespeare"  # beside MNIST, as a grid's --data-dir finds it
XBENCH = [sys.executable, "-m", "xbench.cli.main"]
# The one sample slice of the session's shared grid (conftest.py's `smoke`): 16 steps an epoch at
# the smoke preset's batch of 128.
SMOKE_SLICE = 2048
# ... and the tenth of the test set it evaluates on (1,000 of 10,000 images: 2-3 s less a
# PyTorch cell here, little in the others): its tests hold the cells to one trajectory and one
# test accuracy, not to a particular one (every cell evaluated 0.8858 on 10,000, 0.87 on 1,000).
SMOKE_TEST_SLICE = 1000
SMOKE_COLUMNS = 200  # the terminal's width the shared grid prints at: its table a line a row
KNOBS_SLICE = 1024  # 8 steps an epoch at the knobs preset's batch of 128


def strict_json(text: str):
    """`text` read as JSON by a strict parser: Python writes NaN and Infinity, JSON has neither."""
    def refuse(token):
        raise ValueError(f"{token} is not JSON")
    return json.loads(text, parse_constant=refuse)


def xbench(*args, cwd=REPO, timeout=SLOW, env=None) -> subprocess.CompletedProcess:
    """The real `xbench` command line in a process of its own: for what runs cells, or what only
    a process shows (its exit under a signal or a limit, what its frameworks print)."""
    return subprocess.run([*XBENCH, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=env)


def xbench_here(*args, cwd=REPO, env=None) -> subprocess.CompletedProcess:
    """`xbench ARGS` run in this process through the command's own entry point
    (xbench.cli.main.run: the same parsing, messages and exit codes), for what checks a refusal,
    a message, a dry run or a report of rows: no interpreter and no frameworks to start for each.
    `env` adds to (or, with None values, removes from) the environment while it runs."""
    from click.testing import CliRunner

    from xbench.cli.main import run
    argv = ["xbench", *map(str, args)]
    with CliRunner().isolation(env=env) as (stdout, stderr, _), \
            contextlib.chdir(cwd), _arguments(argv):
        try:
            run()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return subprocess.CompletedProcess(argv, code, stdout.getvalue().decode(),
                                           stderr.getvalue().decode())


@contextlib.contextmanager
def _arguments(argv):
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


def write_grid(folder, name="faults", **settings) -> Path:
    """A small grid file: the small model on a slice of MNIST (JSON values are valid TOML)."""
    spec = {"name": name, "backends": ["pt-dp"], "models": ["small"], "multiples": [1],
            "batches": [128], "devices": [1], "epochs": 2, "max_train_samples": 512,
            "timeout": SLOW, **settings}
    path = Path(folder) / f"{name}-{uuid.uuid4().hex[:6]}.toml"
    path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in spec.items()))
    return path


def run_in_terminal(command, env=None) -> tuple[int, str]:
    """Run `command` with a pseudo-terminal as its stdout and stderr; (exit code, all it
    printed)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(command, stdout=follower, stderr=follower, cwd=REPO,
                               env=env or os.environ)
    os.close(follower)
    output, deadline = b"", time.monotonic() + SLOW
    while time.monotonic() < deadline:
        ready = select.select([leader], [], [], 1)[0]
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process ended
                break
            if not chunk:
                break
            output += chunk
        elif process.poll() is not None:
            break
    process.wait(timeout=SLOW)
    os.close(leader)
    return process.returncode, output.decode(errors="replace")


def refused(done: subprocess.CompletedProcess, message: str, code: int = 2) -> None:
    """What bad input gets: the exit code (2), one error line naming the problem, no
    traceback."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and message in done.stderr, done.stderr
    assert len([line for line in done.stderr.splitlines() if line.startswith("error:")]) == 1
