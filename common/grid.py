"""Grid files (TOML) -> validated cells. A cell is one configuration to train and time."""
import dataclasses
import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path

import psutil
import tomllib

from common.backend import backend_class, check_backend_name, cpu_cores
from common.data import DATA_KINDS, TEST_SAMPLES, TRAIN_SAMPLES, check_fits, train_samples
from common.errors import UserError, did_you_mean
from common.models import MODELS

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
BATCH_MODES = ("global", "per_device")
DEVICE_KINDS = ("auto", "cpu", "cuda")

# Axes take lists (every combination is a cell); settings take one value.
AXES = {"backends": str, "models": str, "multiples": int, "batches": int, "nodes": int,
        "devices": int, "lr_scaling": str, "warmup_epochs": int, "host_memory": str,
        "loader_workers": int}
AXIS_OPTIONS = {"backends": "--backend", "models": "--model", "multiples": "--multiple",
                "batches": "--batch", "nodes": "--nodes", "devices": "--devices",
                "host_memory": "--host-memory", "loader_workers": "--loader-workers"}
OPTIMIZERS = {"adam": 1e-3, "sgd": 0.01}  # name -> its learning rate when none is given
LR_SCALINGS = ("none", "linear", "sqrt")
# How a PyTorch backend's batches reach the device (seeds/001): pageable memory and a blocking
# copy, page-locked (pinned) memory, or pinned memory and a copy that overlaps the step.
HOST_MEMORY = ("pageable", "pinned", "pinned-non-blocking")
SWEEP = re.compile(r"^(\d+)\s*x\s*(\d+)$")
LAUNCHERS = ("local", "slurm")
SETTINGS = {
    "name": str, "description": str, "epochs": int, "repeats": int, "batch_mode": str,
    "seed": int, "timeout": int, "max_train_samples": int, "max_test_samples": int, "data": str, "device": str,
    "memory_limit_mb": int, "contention_limit": float, "compute_references": bool,
    "launcher": str, "slurm_partition": str, "slurm_account": str, "slurm_time": int,
    "slurm_gpus_per_node": int, "slurm_args": str,
    "optimizer": str, "lr": float, "momentum": float, "weight_decay": float,
    "reference_batch": int, "set_epoch": bool,
}
DEFAULTS = {
    "description": "", "epochs": 2, "repeats": 1, "batch_mode": "global", "seed": 0,
    "timeout": 3600, "max_train_samples": 0, "max_test_samples": 0, "data": "mnist", "device": "auto",
    "memory_limit_mb": 0,  # 0: no limit; else the memory each worker may allocate for training
    # An epoch in which other processes and steal used more than this share of the machine's
    # cores makes its row `contended`.
    "contention_limit": 0.25,
    # Add, for every N-device cell, the 1-device run at its per-device batch and its threads per
    # device: the compute reference that compute vs communication is measured against.
    "compute_references": True,
    "nodes": [1],  # devices is per node: a cell has nodes x devices workers
    "launcher": "local",
    # Slurm (launcher = "slurm"): the partition and account to submit to ("": the cluster's
    # default), the time limit in minutes (0: the cell's timeout, rounded up), GPUs per node
    # (0: the cell's devices with --device cuda, else none), extra sbatch arguments.
    "slurm_partition": "", "slurm_account": "", "slurm_time": 0, "slurm_gpus_per_node": 0,
    "slurm_args": "",
    # Training, the same in every backend: Adam or SGD (momentum, L2 weight decay as PyTorch
    # adds it to the gradient); lr 0: the optimizer's own default (OPTIMIZERS). lr_scaling
    # multiplies lr by the global batch / reference_batch (linear) or its square root;
    # warmup_epochs ramps it linearly from lr to the scaled lr (Goyal et al. 2017).
    "optimizer": "adam", "lr": 0.0, "momentum": 0.0, "weight_decay": 0.0,
    "lr_scaling": ["none"], "reference_batch": 128, "warmup_epochs": [0],
    # PyTorch's DistributedSampler.set_epoch each epoch (false: every epoch epoch 0's order)
    "set_epoch": True,
    # PyTorch backends: where the DataLoader puts batches (HOST_MEMORY) and its worker processes
    # (0: batches are formed in the training process).
    "host_memory": ["pageable"], "loader_workers": [0],
}
# The numbers a real-valued setting can take: (lowest, lowest allowed?, highest, what it is).
RANGES = {"contention_limit": (0, True, 1, "a share of the cores"),
          "lr": (0, True, 100, "a learning rate; 0 is the optimizer's default"),
          "momentum": (0, True, 0.999, "a momentum factor, below 1"),
          "weight_decay": (0, True, 1, "an L2 factor")}


# The largest value each whole-number setting can mean, and why.
LIMITS = {
    "devices": (4096, "no machine or cluster cell here has more devices"),
    "nodes": (4096, "no cluster cell here has more nodes"),
    "slurm_time": (30 * 24 * 60, "30 days is the longest timeout a cell may have"),
    "slurm_gpus_per_node": (64, "no node has more GPUs"),
    "multiples": (100, "the blog's largest dataset is 8x; at 100x one epoch is 6 million samples, "
                       "whose sample order alone takes hundreds of MB per process"),
    "epochs": (1000, "a benchmark needs 2 (epoch 1 warms up) and the lab 5"),
    "warmup_epochs": (999, "warm-up must end before the run does"),
    "reference_batch": (2**20, "no batch here is larger"),
    "repeats": (1000, "a few repeats give the intervals; thousands only take time"),
    "seed": (2**32 - 1, "seeds are 32-bit in every framework"),
    "timeout": (30 * 24 * 3600, "30 days is the longest timeout a cell may have"),
    "max_train_samples": (max(TRAIN_SAMPLES.values()), "no training set here is larger"),
    "max_test_samples": (TEST_SAMPLES, "no test set here is larger"),
    "loader_workers": (64, "more worker processes than any machine here has cores for"),
    "memory_limit_mb": (lambda: machine_memory_mb(), "that is this machine's memory"),
}
MAX_CELLS = 100_000
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def machine_memory_mb() -> int:
    return psutil.virtual_memory().total // 2**20


@dataclass(frozen=True)
class Cell:
    """One configuration of the grid; `repeat` says which repetition of it this run is."""
    grid: str
    backend: str
    model: str
    multiple: int
    batch: int
    devices: int  # per node
    epochs: int
    batch_mode: str
    seed: int
    max_train_samples: int
    data: str
    device: str
    timeout: int
    memory_limit_mb: int = 0
    contention_limit: float = DEFAULTS["contention_limit"]
    threads: int = 0  # compute threads per device; 0: the cores shared out over the devices
    nodes: int = 1
    launcher: str = "local"
    data_dir: str | None = None
    reference_for: tuple[str, ...] = ()  # a compute reference: the keys of the cells it serves
    optimizer: str = "adam"
    lr: float = OPTIMIZERS["adam"]
    momentum: float = 0.0
    weight_decay: float = 0.0
    lr_scaling: str = "none"
    reference_batch: int = 128
    warmup_epochs: int = 0
    set_epoch: bool = True
    max_test_samples: int = 0
    host_memory: str = "pageable"
    loader_workers: int = 0
    sweep: str = ""  # the batch sweep this cell is on ("32x4"), if any
    repeat: int = 0

    @property
    def world(self) -> int:
        """Devices over all nodes: the data-parallel width of the cell."""
        return self.nodes * self.devices

    @property
    def global_batch(self) -> int:
        return self.batch if self.batch_mode == "global" else self.batch * self.world

    @property
    def per_device_batch(self) -> int:
        return self.batch // self.world if self.batch_mode == "global" else self.batch

    @property
    def key(self) -> str:
        """Identifies the configuration (not the repeat): resume and reports group by it."""
        cap = f"|cap{self.max_train_samples}" if self.max_train_samples else ""
        cap += f"|test{self.max_test_samples}" if self.max_test_samples else ""
        threads = f"|t{self.threads}" if self.threads else ""
        nodes = f"|n{self.nodes}" if self.nodes > 1 else ""
        return (f"{self.backend}|{self.model}|x{self.multiple}|{self.batch_mode}-b{self.batch}"
                f"{nodes}|d{self.devices}|e{self.epochs}|seed{self.seed}|{self.data}{cap}"
                f"|{self.device}{threads}{self.training_key}")

    @property
    def training_key(self) -> str:
        """The training settings in the key, where they are not the default (Adam at 1e-3, no
        scaling, no warm-up, set_epoch), so that the keys of default cells stay as they were."""
        optimizer = (f"|{self.optimizer}-lr{self.lr:g}-m{self.momentum:g}-wd{self.weight_decay:g}"
                     if (self.optimizer, self.lr, self.weight_decay)
                     != ("adam", OPTIMIZERS["adam"], 0.0) else "")
        scaling = (f"|lr-{self.lr_scaling}{self.reference_batch}"
                   if self.lr_scaling != "none" else "")
        warmup = f"|warm{self.warmup_epochs}" if self.warmup_epochs else ""
        host = (f"|{self.host_memory}" if self.host_memory != "pageable" else "") + (
            f"|workers{self.loader_workers}" if self.loader_workers else "")
        return (optimizer + scaling + warmup + ("" if self.set_epoch else "|no-set-epoch")
                + host)

    @property
    def sweep_line(self) -> str:
        """What the cells of one line of a batch sweep share: everything but the batch."""
        return dataclasses.replace(self, batch=0, repeat=0).key

    def learning_rate(self, step: int, steps_per_epoch: int) -> float:
        """The learning rate of optimizer step `step` (0-based over the run): lr scaled by the
        global batch against reference_batch (linear or square root), reached by a linear
        ramp from the unscaled lr over the warm-up epochs (Goyal et al. 2017)."""
        ratio = self.global_batch / self.reference_batch
        target = self.lr * {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[self.lr_scaling]
        ramp = self.warmup_epochs * steps_per_epoch
        if step >= ramp:
            return target
        return self.lr + (target - self.lr) * step / ramp

    @property
    def label(self) -> str:
        threads = f" t{self.threads}" if self.threads else ""
        nodes = f"n{self.nodes}x" if self.nodes > 1 else ""
        return (f"{self.backend} {self.model} x{self.multiple} b{self.global_batch} "
                f"{nodes}d{self.devices}{threads} r{self.repeat}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "Cell":
        return cls(**{**values, "reference_for": tuple(values.get("reference_for", ()))})


def read_grid_file(path):
    """Parse a grid file: a clear error for a missing file, bad TOML or an unknown key."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"grid file {path} not found; the grids in {EXPERIMENTS} are: "
                        f"{', '.join(sorted(p.name for p in EXPERIMENTS.glob('*.toml')))}")
    try:
        spec = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path} is not valid TOML: {e}") from None
    for key in spec:
        if key not in AXES and key not in SETTINGS:
            raise UserError(f"{path}: unknown key '{key}'{did_you_mean(key, [*AXES, *SETTINGS])}; "
                            f"known keys: {', '.join([*AXES, *SETTINGS])}")
    spec.setdefault("name", path.stem)
    return spec


def preset_path(name):
    path = EXPERIMENTS / f"{name}.toml"
    if not path.is_file():
        names = sorted(p.stem for p in EXPERIMENTS.glob("*.toml"))
        raise UserError(f"no preset '{name}'{did_you_mean(name, names)}; presets: {', '.join(names)}")
    return path


def resolve(spec: dict, overrides: dict | None = None) -> tuple[dict, dict]:
    """(axes, settings) of the spec with command-line overrides applied, each value checked."""
    spec = {**DEFAULTS, **spec, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    for key in AXES:
        if key not in spec:
            raise UserError(f"grid '{spec.get('name')}' has no '{key}' axis; give it in the grid "
                            f"file or with {AXIS_OPTIONS[key]}")
    settings = {key: _check_value(key, spec[key], kind) for key, kind in SETTINGS.items()
                if key in spec}
    settings["batch_sweep"] = spec["batches"] if isinstance(spec["batches"], str) else ""
    if settings["batch_sweep"]:
        spec["batches"] = sweep_batches(settings["batch_sweep"], settings,
                                        check_axis("models", spec["models"], str),
                                        check_axis("multiples", spec["multiples"], int),
                                        check_axis("nodes", spec["nodes"], int),
                                        check_axis("devices", spec["devices"], int))
    values = {key: check_axis(key, spec[key], kind) for key, kind in AXES.items()}
    _check_choices(values, settings)
    _check_sizes(values, settings)
    return values, settings


def sweep_batches(text: str, settings: dict, models: list[str], multiples: list[int],
                  nodes: list[int], devices: list[int]) -> list[int]:
    """The batches of a sweep 'STARTxFACTOR' (32x4: 32, 128, 512, ...) up to the largest whose
    global batch fits the smallest training set of the grid; the runner stops each line at its
    first batch that does not fit in memory."""
    found = SWEEP.match(text.strip())
    if not found:
        raise UserError(f"batch sweep {text!r} must be START x FACTOR, e.g. 32x4 (32, 128, 512, "
                        f"... until the first batch that does not fit in memory)")
    start, factor = int(found[1]), int(found[2])
    if start < 1:
        raise UserError(f"a batch sweep starts at a batch of 1 or more, not {start}")
    if factor < 2:
        raise UserError(f"a batch sweep grows the batch by a factor of 2 or more; {factor} "
                        f"would never grow it")
    samples = min(min(train_samples(settings["data"], m) for m in models),
                  settings["max_train_samples"] or math.inf)
    world = max(nodes) * max(devices) if settings["batch_mode"] == "per_device" else 1
    limit = samples * min(multiples) // world
    if start > limit:
        raise UserError(f"batch sweep {text}: its first batch, {start:,}, is larger than the "
                        f"training set allows ({limit:,})")
    batches = [start]
    while batches[-1] * factor <= limit:
        batches.append(batches[-1] * factor)
    return batches


def expand(spec: dict, overrides: dict | None = None, data_dir=None,
           cores: int | None = None) -> list[Cell]:
    """Validate the spec (with command-line overrides applied) and return its cells in run order.
    `cores`: the cores of one node where the cells will run (default: this machine's)."""
    values, settings = resolve(spec, overrides)

    configurations = []
    for (backend, model, multiple, batch, nodes, devices, lr_scaling, warmup, host_memory,
         loader_workers) in itertools.product(*(values[axis] for axis in AXES)):
        if nodes * devices > 1 and not backend_class(backend).spans_devices:
            continue  # a single-device reference has no N-device cells
        if warmup and lr_scaling == "none":
            continue  # a ramp from lr to lr: the same run as without a warm-up
        configurations.append(Cell(
            grid=settings["name"], backend=backend, model=model, multiple=multiple,
            batch=batch, nodes=nodes, devices=devices, launcher=settings["launcher"],
            epochs=settings["epochs"],
            batch_mode=settings["batch_mode"], seed=settings["seed"],
            max_train_samples=settings["max_train_samples"], data=settings["data"],
            device=settings["device"], timeout=settings["timeout"],
            memory_limit_mb=settings["memory_limit_mb"],
            contention_limit=settings["contention_limit"],
            data_dir=str(data_dir) if data_dir else None, optimizer=settings["optimizer"],
            lr=settings["lr"] or OPTIMIZERS[settings["optimizer"]],
            momentum=settings["momentum"], weight_decay=settings["weight_decay"],
            lr_scaling=lr_scaling, reference_batch=settings["reference_batch"],
            warmup_epochs=warmup, set_epoch=settings["set_epoch"],
            max_test_samples=settings["max_test_samples"], host_memory=host_memory,
            loader_workers=loader_workers, sweep=settings["batch_sweep"]))
    if not configurations:
        raise UserError(f"no cells: {', '.join(values['backends'])} run on one device only, and "
                        f"--devices {','.join(map(str, values['devices']))} has no 1")
    if settings["compute_references"]:
        configurations += compute_references(configurations, cores or cpu_cores())
    # Repeat by repeat: every configuration once, then again, so that a drift in what else the
    # machine does spreads over all of them instead of falling on one configuration's repeats.
    return [dataclasses.replace(c, repeat=r) for r in range(settings["repeats"])
            for c in configurations]


def compute_references(cells: list[Cell], cores: int) -> list[Cell]:
    """For every N-device cell: the same backend on 1 device at the N-device cell's per-device
    batch and compute threads per device (on a CPU, N ranks share the cores, so each has fewer
    threads than a 1-device run). Compute vs communication compares the two. A reference already
    in the grid is not added again; each says which cells it serves (`reference_for`), so the
    runner can skip one whose cells cannot run here."""
    have = {c.key for c in cells}
    added = {}
    for cell in cells:
        if cell.world == 1:
            continue
        threads = threads_per_device(cell, cores)
        alone = dataclasses.replace(cell, nodes=1, devices=1, batch=cell.per_device_batch)
        reference = dataclasses.replace(
            alone, threads=0 if threads == threads_per_device(alone, cores) else threads)
        if reference.key in have:
            continue
        served = added.get(reference.key, reference).reference_for
        added[reference.key] = dataclasses.replace(reference, reference_for=(*served, cell.key))
    return list(added.values())


def threads_per_device(cell: Cell, cores: int) -> int:
    """Compute threads each device of `cell` gets: its pinned count, else the `cores` of a node
    shared out over its devices there, at least 1."""
    return cell.threads or max(1, cores // cell.devices)


def check_axis(key, value, kind):
    """The axis' values, each checked, duplicates dropped (first occurrence kept): a value given
    twice is one configuration, not two."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise UserError(f"'{key}' is empty; give at least one value")
    return list(dict.fromkeys(_check_value(key, item, kind) for item in items))


def _option(key):
    return AXIS_OPTIONS.get(key, "--repeat" if key == "repeats" else "--" + key.replace("_", "-"))


def _check_value(key, value, kind):
    if kind is bool:
        if not isinstance(value, bool):
            raise UserError(f"'{key}' must be true or false, got {value!r}")
    elif kind is float:
        low, _, high, what = RANGES[key]
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not low <= value <= high or math.isnan(value)):
            raise UserError(f"'{key}' must be a number from {low:g} to {high:g} ({what}), got "
                            f"{value!r}; fix it in the grid file or with --{key.replace('_', '-')}")
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"'{key}' must be a whole number, got {value!r}; fix it in the grid "
                            f"file or with {_option(key)}")
        if value < 0 or (value == 0 and key not in ("max_train_samples", "max_test_samples",
                                                    "seed", "memory_limit_mb", "slurm_time",
                                                    "slurm_gpus_per_node", "warmup_epochs",
                                                    "loader_workers")):
            raise UserError(f"'{key}' must be positive, got {value}; fix it in the grid file or "
                            f"with {_option(key)}")
        if key == "epochs" and value < 2:
            raise UserError(f"'epochs' must be at least 2, got {value}: epoch 1 warms up (tracing, "
                            f"allocators, autotuning) and every rate, speedup and verdict is read "
                            f"from epoch 2; fix it in the grid file or with --epochs")
        limit, why = LIMITS.get(key, (None, None))
        limit = limit() if callable(limit) else limit
        if limit is not None and value > limit:
            shown = (f"is a {len(str(value))}-digit number," if value >= 10 ** 18
                     else f"{value:,} is")
            raise UserError(f"'{key}' {shown} more than {limit:,}: {why}; fix it in the grid "
                            f"file or with {_option(key)}")
    elif not isinstance(value, str):
        raise UserError(f"'{key}' must be text, got {value!r}")
    elif "\0" in value:
        raise UserError(f"'{key}' must not contain a NUL character")
    return value


def _check_sizes(values, settings):
    """A name that is a file name, a grid that fits in memory, a cap and batches no larger than
    the training set."""
    if not NAME.match(settings["name"]):
        raise UserError(f"grid name {settings['name']!r} must be letters, digits, '.', '_' or '-' "
                        f"(it names the results file results/<name>.jsonl), starting with a "
                        f"letter or digit")
    cells = math.prod(len(v) for v in values.values()) * settings["repeats"]
    if cells > MAX_CELLS:
        raise UserError(f"the grid has {cells:,} cells (axes x repeats); at most {MAX_CELLS:,}: "
                        f"narrow an axis or lower --repeat")
    smallest = min(train_samples(settings["data"], m) for m in values["models"])
    if settings["max_train_samples"] > smallest:
        raise UserError(f"max_train_samples {settings['max_train_samples']:,} is more than the "
                        f"training set ({smallest:,} {settings['data']} images for these models; "
                        f"cell keys would name a cap that is not there): lower it in the grid "
                        f"file or with {_option('max_train_samples')}")
    base = min(smallest, settings["max_train_samples"] or math.inf)
    for batch, nodes, devices, multiple in itertools.product(
            values["batches"], values["nodes"], values["devices"], values["multiples"]):
        devices *= nodes
        global_batch = batch if settings["batch_mode"] == "global" else batch * devices
        if global_batch > base * multiple:
            raise UserError(
                f"a global batch of {global_batch:,} (batch {batch:,} on {devices} devices, "
                f"batch_mode {settings['batch_mode']}) is larger than the training set of "
                f"{base * multiple:,} samples ({base:,} images x {multiple}): no epoch would have "
                f"one step; lower --batch or raise --multiple / --max-train-samples")


def _check_choices(values, settings):
    for name in values["backends"]:
        check_backend_name(name)
    for name in values["models"]:
        if name not in MODELS:
            raise UserError(f"unknown model '{name}'{did_you_mean(name, MODELS)}; "
                            f"choose from {', '.join(MODELS)}")
    chosen = {**settings, **{k: v for k, v in values.items() if k in ("lr_scaling", "host_memory")}}
    for key, allowed in (("batch_mode", BATCH_MODES), ("data", DATA_KINDS), ("device", DEVICE_KINDS),
                         ("optimizer", tuple(OPTIMIZERS)), ("lr_scaling", LR_SCALINGS),
                         ("host_memory", HOST_MEMORY)):
        for value in chosen[key] if isinstance(chosen[key], list) else [chosen[key]]:
            if value not in allowed:
                raise UserError(f"'{key}' must be one of {', '.join(allowed)}, got "
                                f"'{value}'{did_you_mean(value, allowed)}")
    for name in values["models"]:
        check_fits(settings["data"], name)
    if max(values["warmup_epochs"]) >= settings["epochs"]:
        raise UserError(f"warm-up of {max(values['warmup_epochs'])} epoch(s) is not shorter than "
                        f"the run of {settings['epochs']}: lower --warmup-epochs or raise --epochs")
    if max(values["warmup_epochs"]) and values["lr_scaling"] == ["none"]:
        raise UserError("a warm-up ramps the learning rate from lr to the scaled lr (Goyal et al.); "
                        "with lr_scaling none there is nothing to ramp to: give --lr-scaling "
                        "linear or sqrt")
    if settings["optimizer"] == "adam" and settings["momentum"]:
        raise UserError("momentum is SGD's setting (Adam has its betas): give --optimizer sgd, or "
                        "no --momentum")
    if not any(backend_class(b).spans_nodes for b in values["backends"]) and max(values["nodes"]) > 1:
        raise UserError(f"{', '.join(values['backends'])} cannot span nodes (each runs on one "
                        f"machine): --nodes {max(values['nodes'])} needs pt-ddp, tf-multiworker, "
                        f"hvd-torch or hvd-tf")
    if max(values["nodes"]) > 1 and settings["launcher"] == "local":
        raise UserError(f"the local launcher runs on this one machine: --nodes "
                        f"{max(values['nodes'])} needs --launcher slurm")
    if settings["launcher"] not in LAUNCHERS:
        raise UserError(f"'launcher' must be one of {', '.join(LAUNCHERS)}, got "
                        f"'{settings['launcher']}'{did_you_mean(settings['launcher'], LAUNCHERS)}")
    if settings["batch_mode"] == "global":
        bad = [(b, d) for b in values["batches"]
               for d in {n * d for n in values["nodes"] for d in values["devices"]} if b % d]
        if bad:
            pairs = ", ".join(f"batch {b} on {d} devices" for b, d in bad)
            raise UserError(f"in batch_mode 'global' the batch is split over the devices, so it must "
                            f"divide evenly: {pairs} does not; change --batch or --devices, or use "
                            f"--batch-mode per_device")
