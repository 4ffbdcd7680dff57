"""What both Horovod backends (hvd-torch, hvd-tf) share: the launch, the build check, the details.

No framework is imported here: the frameworks Horovod was built for are read from which of its
compiled extensions are installed.
"""
import importlib.metadata
import importlib.util
import shutil
import sys
from pathlib import Path

BUILD_HINT = ("build Horovod for this environment with `make setup` "
              "(it runs scripts/build_horovod.sh .venv/bin/python)")
# Both Horovod backends: BatchNorm is left to each rank (hvd.SyncBatchNorm is not used).
BATCHNORM_STATISTICS = ("Horovod broadcasts rank 0's state once, at the start; then each rank "
                        "keeps its own running statistics, from its own samples only, and "
                        "evaluation uses rank 0's")
# The gradient compressions Horovod offers in both frameworks (hvd.Compression), and why no others.
COMPRESSIONS = (("none", "fp16"), "Horovod's compressors are hvd.Compression.none and fp16")
EXTENSIONS = {"PyTorch": "horovod.torch.mpi_lib_v2", "TensorFlow": "horovod.tensorflow.mpi_lib"}


def built_frameworks():
    """Frameworks the installed Horovod has extensions for ([] if Horovod is absent)."""
    found = []
    for framework, module in EXTENSIONS.items():
        try:
            if importlib.util.find_spec(module) is not None:
                found.append(framework)
        except (ImportError, ValueError):
            pass
    return found


def describe():
    try:
        version = importlib.metadata.version("horovod")
    except importlib.metadata.PackageNotFoundError:
        return "horovod not installed"
    return f"horovod {version} built for {', '.join(built_frameworks()) or 'no framework'}"


class HorovodLaunch:
    """Mixed into hvd-torch and hvd-tf: a process per device on every node, all started by one
    horovodrun (over ssh for a node that is not this machine), needing Horovod's build."""
    install_hint = BUILD_HINT
    spans_nodes = True
    launch_scope = "once"
    reduction_across_devices = "all-reduce"
    collective_message_bytes = 64 * 2**20  # its documented fusion buffer (HOROVOD_FUSION_THRESHOLD)

    def processes(self, cell):
        return cell.devices

    def launch_command(self, cell, worker_args, placement):
        """`horovodrun -np WORLD -H host1:N,host2:N --gloo python -m xbench.common.running.worker ...`."""
        horovodrun = Path(sys.executable).with_name("horovodrun")
        launcher = (str(horovodrun) if horovodrun.exists()
                    else shutil.which("horovodrun") or "horovodrun")
        hosts = ",".join(f"{host}:{cell.devices}" for host in placement.hosts)
        return [launcher, "-np", str(cell.world), "-H", hosts, "--gloo",
                sys.executable, "-m", "xbench.common.running.worker", *worker_args]

    def describe(self):
        return describe()


def compressor(hvd, compression: str):
    """Horovod's compressor for the cell's `compression` (one of COMPRESSIONS)."""
    return hvd.Compression.fp16 if compression == "fp16" else hvd.Compression.none


def details(hvd, compression: str):
    """What a row records of Horovod (`hvd`: horovod.torch or horovod.tensorflow, initialised)."""
    controller = "gloo" if hvd.gloo_enabled() else "mpi" if hvd.mpi_enabled() else None
    compressed = "" if compression == "none" else f", gradients compressed: {compression}"
    reduction = (("none", "Horovod skips its all-reduce at size 1") if hvd.size() == 1 else
                 ("all-reduce", f"Horovod's ring all-reduce over {controller}{compressed}"))
    return {"horovod_version": importlib.metadata.version("horovod"), "controller": controller,
            "gpu_operations": "nccl" if hvd.nccl_built() else None, "hvd_size": hvd.size(),
            "launcher": f"horovodrun --gloo, {hvd.cross_size()} host(s)",
            "reduction": reduction[0], "collective_library": "horovod",
            "reduction_detail": reduction[1]}


class HorovodGather:
    """Mixed into both Horovod collectives classes: what horovod.torch and horovod.tensorflow
    (`hvd`, initialised) offer alike. Each backend adds the collectives whose calls differ."""

    def __init__(self, hvd):
        self.hvd = hvd
        self.rank, self.world = hvd.rank(), hvd.size()

    def gather(self, value):
        """Under one name on every rank: Horovod pairs the ranks' collectives by name, and
        allgather_object names its own by the value's type, so a float on rank 0 and None on
        the others (an accuracy only rank 0 measured) waited for each other for ever."""
        return self.hvd.allgather_object(value, name="xbench.gather")
