"""What each launched process is given to train (common.running.worker makes it, a backend's `train`
takes it)."""
import time
from dataclasses import dataclass, field

from xbench.common.grids.cell import Cell
from xbench.common.running.progress import ProgressReport
from xbench.common.workload.model import Model
from xbench.common.workload.samples import Images


@dataclass
class Job:
    """What each launched process is given: the cell, its model (resolved once, from what the job
    carried), its data, the compute threads of each of its devices, the wall-clock time
    (`time.time()`) at which the runner launched it (start-up is counted from it), and how its
    OpenMP threads wait."""
    cell: Cell
    model: Model
    data: Images
    threads_per_device: int
    launched_at: float
    progress: ProgressReport = field(default_factory=ProgressReport)
    # How its OpenMP threads wait, and why (common.running.busy_machine.omp_wait)
    omp_wait: dict = field(default_factory=lambda: {
        "policy": "environment", "by": "this process's own environment (not launched by a grid)"})

    def startup_seconds(self) -> float:
        return time.time() - self.launched_at
