"""Live progress of a running cell, from its reporting rank to the grid's terminal.

The training loop only assigns an integer per step (`ProgressReport.done`); a daemon thread of the
reporting rank, at the lowest priority, writes it once a second to `progress.json` in the cell's
folder.
Nothing in the timed path waits for a file or a lock. The runner reads that file while it waits
for the cell and shows it: a live display on a terminal (rich), plain lines otherwise.
"""
import json
import os
import sys
import threading
import time
from pathlib import Path

PERIOD_SECONDS = 1.0
PLAIN_EVERY_SECONDS = 30  # a plain line within a long epoch at most this often
FILE = "progress.json"


class ProgressReport:
    """Written by the reporting rank (start() with a folder); a no-op elsewhere."""

    def __init__(self, folder: Path | None = None):
        self.folder = folder
        self.epoch = self.done = 0
        self.epoch_seconds: list[float] = []

    def start(self, epochs: int, steps: int, samples_per_step: int) -> None:
        if self.folder is None:
            return
        self.shape = {"epochs": epochs, "steps": steps, "samples_per_step": samples_per_step}
        self.epoch_started = time.time()
        self.stopped = threading.Event()
        threading.Thread(target=self._write_until_stopped, daemon=True).start()

    def stop(self) -> None:
        if self.folder is not None and hasattr(self, "stopped"):
            self.stopped.set()

    def begin_epoch(self, epoch: int) -> None:
        self.epoch, self.done, self.epoch_started = epoch, 0, time.time()

    def end_epoch(self, seconds: float) -> None:
        self.epoch_seconds.append(seconds)

    def _write_until_stopped(self) -> None:
        """At the lowest priority, so that it never takes a core from the compute threads."""
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        path, tmp = self.folder / FILE, self.folder / f"{FILE}.tmp"
        while True:
            tmp.write_text(json.dumps({**self.shape, "epoch": self.epoch, "done": self.done,
                                       "epoch_started": self.epoch_started, "now": time.time(),
                                       "epoch_seconds": list(self.epoch_seconds)}))
            os.replace(tmp, path)
            if self.stopped.wait(PERIOD_SECONDS):
                return


def read(folder: Path) -> dict | None:
    """The cell's latest progress with its rates and ETA, or None before training has begun."""
    try:
        p = json.loads((Path(folder) / FILE).read_text())
    except (OSError, ValueError):
        return None
    if not p.get("epoch"):
        return None
    elapsed = max(p["now"] - p["epoch_started"], 1e-9)
    step_rate = p["done"] / elapsed if p["done"] else None
    if p["epoch_seconds"]:  # a finished epoch is the better guide (epoch 1 includes tracing)
        step_rate = p["steps"] / p["epoch_seconds"][-1]
    left = (p["steps"] - p["done"]) + (p["epochs"] - p["epoch"]) * p["steps"]
    p.update(rate=p["done"] * p["samples_per_step"] / elapsed if p["done"] else None,
             eta=left / step_rate if step_rate else None)
    return p


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


class GridProgress:
    """What the runner shows while a grid runs: the running cell's epoch, samples, rate and ETA,
    and the grid's cells done and ETA.

    The grid's ETA starts from the forecasts made before the first cell (`forecasts`, one per
    cell: seconds, 0 for a cell that will not train, None where there is none; made as the dry
    run makes them, measuring nothing: common.running.estimate). Until a cell has ended ok it is
    their sum where every cell left has one, else unknown (a sum that leaves cells out is no
    ETA). Then it corrects them: every forecast still ahead is scaled by the finished cells'
    real seconds over their forecasts (a machine busier or quieter than when it was measured
    slows or speeds them all alike), a cell without a forecast counts as the mean of the
    finished cells, and the running cell counts its own live ETA once it has one, else its
    scaled forecast less the time it has run."""

    def __init__(self, total: int, echo, live: bool | None = None, quiet: bool = False,
                 forecasts: list[float | None] | None = None):
        self.total, self.echo, self.quiet = total, echo, quiet
        self.live = sys.stdout.isatty() if live is None else live
        self.forecasts = list(forecasts) if forecasts else [None] * total
        self.finished: list[tuple[float | None, float]] = []  # (forecast, seconds) per cell
        self.number, self.started, self.display = 0, time.monotonic(), None

    def grid_eta(self, cell_eta: float | None = None) -> str:
        """The ETA of the rest of the grid from the running cell on (the class's docstring);
        `cell_eta`: the running cell's own, where it has one."""
        timed = [(forecast, seconds) for forecast, seconds in self.finished if forecast]
        ratio = (sum(s for _, s in timed) / sum(f for f, _ in timed)) if timed else 1.0
        seconds = [s for f, s in self.finished if f != 0]  # not a cell that did not train
        mean = sum(seconds) / len(seconds) if seconds else None
        running = self.forecasts[self.number - 1] if self.number else None
        if cell_eta is not None:
            running = cell_eta
        elif running is not None or mean is not None:
            expected = running * ratio if running is not None else mean
            running = max(0.0, expected - (time.monotonic() - self.started))
        later = [f * ratio if f is not None else mean for f in self.forecasts[self.number:]]
        missing = [s for s in [running, *later] if s is None]
        if missing:
            return (f"grid ETA unknown until the first cell ends ok ({len(missing)} of "
                    f"{len(later) + 1} cell(s) left have no forecast)")
        how = (f"forecast x{ratio:.2f}, from {len(timed)} cell(s) done" if timed
               else "forecast" if not seconds else f"the mean of {len(seconds)} cell(s) done")
        return f"grid ETA ~{duration(running + sum(later))} ({how})"

    def cell_skipped(self, number: int) -> None:
        """Cell `number` will not run here (done already, or not tried): no time is left in it."""
        self.forecasts[number - 1] = 0.0

    def cell_started(self, number: int, label: str) -> None:
        self.number, self.label, self.last_plain, self.last_epoch = number, label, 0.0, 0
        self.started = time.monotonic()
        if self.live and not self.quiet:
            from rich.console import Console
            from rich.live import Live
            self.display = Live(console=Console(), refresh_per_second=4, transient=True)
            self.display.start()
            self.display.update(self._renderable(None))

    def watch(self, folder: Path) -> None:
        """Called while the cell runs: show where it is."""
        if self.quiet:
            return
        p = read(folder)
        if self.display is not None:
            self.display.update(self._renderable(p))
        elif p is not None:
            finished = len(p["epoch_seconds"])
            if (finished > self.last_epoch
                    or time.monotonic() - self.last_plain > PLAIN_EVERY_SECONDS):
                self.last_epoch, self.last_plain = finished, time.monotonic()
                self.echo(f"[{self.number}/{self.total}] {self.label}: {self._status(p)}")

    def cell_ended(self, seconds: float | None) -> None:
        """The cell ended ok after `seconds` (None: it was interrupted, or ended otherwise: a
        cell that fails in 2 s says nothing of how long the others take)."""
        if seconds is not None:
            self.finished.append((self.forecasts[self.number - 1], seconds))
        self.forecasts[self.number - 1] = 0.0
        if self.display is not None:
            self.display.stop()
            self.display = None

    def _status(self, p: dict) -> str:
        if len(p["epoch_seconds"]) == p["epochs"]:
            return (f"{p['epochs']} epochs done; measuring test accuracy and gathering the "
                    f"evidence; {self.grid_eta(0.0)}")
        samples = p["done"] * p["samples_per_step"]
        rate = f"{p['rate']:,.0f} samples/s" if p["rate"] else "starting"
        return (f"epoch {p['epoch']}/{p['epochs']}, {samples:,}/"
                f"{p['steps'] * p['samples_per_step']:,} samples, {rate}, cell ETA "
                f"{duration(p['eta'])}; {self.grid_eta(p['eta'])}")

    def _renderable(self, p: dict | None):
        from rich.text import Text
        return Text(self._text(p))  # literal text: no rich markup in labels or brackets

    def _text(self, p: dict | None) -> str:
        head = f"[{self.number}/{self.total}] {self.label}: "
        if p is None:
            return (head + f"starting (launch, imports, data, model); "
                           f"{self.grid_eta()}")
        bar = int(20 * p["done"] / max(p["steps"], 1))
        return head + f"[{'#' * bar}{'.' * (20 - bar)}] " + self._status(p)
