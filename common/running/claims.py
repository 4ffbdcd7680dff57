"""Which cells of a results file a live grid is running: `<results>.claims`, beside it.

Two grids on one results file share its cells instead of both running them: before a cell runs,
its grid takes the claims file's lock, reads the results file afresh, and claims the cell only if
it has no ok row there and no live claim (a claim names its process by host, PID and start time,
so a claimant that crashed, or whose PID was reused, no longer holds it). The claim is dropped
when the cell's row is written.
"""
import contextlib
import fcntl
import json
import os
from pathlib import Path

from xbench.common.running.processes import alive, this_process


class Claims:
    def __init__(self, results_path):
        self.path = Path(f"{results_path}.claims")
        self.me = this_process()

    @contextlib.contextmanager
    def _held(self):
        """The live claims, under the file's exclusive lock; what the block leaves in the list is
        written back."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with os.fdopen(os.dup(fd), "r+") as f:
                claims = []
                for line in f:
                    with contextlib.suppress(ValueError):
                        claims.append(json.loads(line))
                claims = [c for c in claims if isinstance(c, dict) and alive(c)]
                yield claims
                f.seek(0)
                f.truncate()
                f.writelines(json.dumps(c) + "\n" for c in claims)
        finally:
            os.close(fd)

    def claim(self, key: str, repeat: int, done) -> str | None:
        """Claim the cell (key, repeat) for this grid: None if it is now ours, else why not
        ("done": `done()`, the results file read afresh, has it; or who is running it)."""
        with self._held() as claims:
            if (key, repeat) in done():
                return "done"
            holder = next((c for c in claims if (c.get("key"), c.get("repeat")) == (key, repeat)),
                          None)
            if holder:
                return f"being run by another grid (PID {holder['pid']} on {holder['host']})"
            claims.append({"key": key, "repeat": repeat, **self.me})
        return None

    def release(self, key: str, repeat: int) -> None:
        with self._held() as claims:
            claims[:] = [c for c in claims if (c.get("key"), c.get("repeat")) != (key, repeat)
                         or c.get("pid") != self.me["pid"]]
