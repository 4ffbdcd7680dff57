"""What every backend's row of the traits table is (`Traits`), and the explanations rows of more
than one framework's backends share: the defaults of a backend of one device, and TensorFlow's
step of one call that hvd-tf shares with TensorFlow's strategies."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from xbench.common.backends.frameworks import Framework
from xbench.common.backends.launch_scopes import ONE_PROCESS, LaunchScope
from xbench.common.backends.protocol import NONE, Protocol, everywhere

ONE_REPLICA = "one replica: its running statistics are its own"
NO_COLLECTIVE = "none: no collective between processes"
# --accumulate's sync modes (common.grids.settings): how each backend crosses once a step or after
# every micro-batch.
ONE_DEVICE_SYNC = "one device: nothing crosses"
ALONE = {"last": ONE_DEVICE_SYNC, "each": ONE_DEVICE_SYNC}
# TensorFlow's and JAX's steps are one call: the K micro-batches' gradients are summed inside it.
SUMMED_IN_STEP = "the micro-batches' gradients summed inside the step's one call, then reduced once"


@dataclass(frozen=True)
class Traits:
    """One backend, as every reader outside its processes needs it."""
    name: str
    framework: Framework
    rank: str                     # "module:Class" that each of its processes runs
    # What spreads the training over devices (the figures give each one marker; several
    # frameworks' backends may share one, Horovod's do).
    wrapper: str = "none: one device"
    # How its processes start (common.backends.launch_scopes: ONE_PROCESS, TORCHRUN, ...).
    start: LaunchScope = ONE_PROCESS
    spans_devices: bool = True    # False: a single-device reference, 1 device only
    # Each rank draws its shard with a DistributedSampler, set_epoch each epoch (the lab's
    # question 5); a PyTorch backend of one process shuffles with a plain loader, as its users'
    # code does.
    distributed_sampler: bool = False
    # How its gradients cross between devices of each device type (common.backends.protocol;
    # its N-device rows record the reduction), by default nothing crosses.
    protocol: Mapping[str, Protocol] = field(default_factory=lambda: everywhere(NONE))
    library: str | None = None    # the collective library between its processes (the probe's)
    compressions: tuple[str, ...] = ("none",)  # the gradient compressions it does
    no_compression: str = "one device: no gradients cross between devices"
    gpu_only: Mapping[str, str] = field(default_factory=dict)  # compression -> why GPUs only
    # Why it has no bucket knob (its protocol's bucket_knob says how bucket_mb reaches the ones
    # that have), in words for a refusal.
    no_buckets: str = "one device, no gradients cross between devices"
    several_devices_need_gpus: str = ""  # why N > 1 devices run only on GPUs, if they do
    shards_parameters: bool = False  # each rank keeps a shard (the `reshard` setting is its)
    # How the library that moves the gradients tells of its collectives (None: there is none,
    # or none it tells of), and where an untold collective's time goes.
    collectives_counted: str | None = None
    collectives_not_counted: str = NO_COLLECTIVE
    # What it does with BatchNorm's running statistics across replicas (its documentation;
    # tests/test_cifar.py checks it); the test accuracy is evaluated with rank 0's.
    batchnorm_statistics: str = ONE_REPLICA
    extension: str | None = None  # a compiled extension it needs besides its framework
    # How it accumulates K micro-batches with each --accumulate-sync mode ({mode: how}), and
    # why it has no other mode.
    sync_modes: Mapping[str, str] = field(default_factory=lambda: ALONE)
    no_sync_mode: str = ""
    no_compile: str = ""          # why --compile on cannot run it, where its framework can
    # Why it trains only xbench's own models where it does (a model file's cells unsupported);
    # "": it trains its framework's function of a model file.
    own_models_only: str = ""
    install_hint: str = ""        # default: its framework's

    @property
    def requires(self) -> tuple[str, ...]:
        """Importable modules it needs."""
        return (self.framework.module, *([self.extension] if self.extension else []))

    @property
    def spans_nodes(self) -> bool:
        """Whether its ranks can run on several machines (as its processes start)."""
        return self.start.spans_nodes

    @property
    def compiler(self) -> str | None:
        """What --compile on does to its step (None: its framework always compiles, or it
        cannot be compiled)."""
        return None if self.no_compile else self.framework.compiler

    @property
    def bucket_knob(self) -> str | None:
        """How the bucket_mb setting reaches its library (the same on every device type), None
        where it has no such knob."""
        return next(iter(self.protocol.values())).bucket_knob

    def protocol_on(self, device_type: str) -> Protocol:
        """How its gradients cross between devices of `device_type` ("cpu", "cuda"), known
        before any ran (xbench predict's what-if)."""
        return self.protocol[device_type]
