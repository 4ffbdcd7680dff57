"""Grid files (TOML) -> validated cells. A cell is one configuration to train and time."""
import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path

import tomllib

from common.backend import check_backend_name
from common.errors import UserError, did_you_mean
from common.models import MODELS

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
BATCH_MODES = ("global", "per_device")
DATA_KINDS = ("mnist", "synthetic")
DEVICE_KINDS = ("auto", "cpu", "cuda")

# Axes take lists (every combination is a cell); settings take one value.
AXES = {"backends": str, "models": str, "multiples": int, "batches": int, "devices": int}
AXIS_OPTIONS = {"backends": "--backend", "models": "--model", "multiples": "--multiple",
                "batches": "--batch", "devices": "--devices"}
SETTINGS = {
    "name": str, "description": str, "epochs": int, "repeats": int, "batch_mode": str,
    "seed": int, "timeout": int, "max_train_samples": int, "data": str, "device": str,
    "memory_limit_mb": int,
}
DEFAULTS = {
    "description": "", "epochs": 2, "repeats": 1, "batch_mode": "global", "seed": 0,
    "timeout": 3600, "max_train_samples": 0, "data": "mnist", "device": "auto",
    "memory_limit_mb": 0,  # 0: no limit; else the memory each worker may allocate for training
}


@dataclass(frozen=True)
class Cell:
    """One configuration of the grid; `repeat` says which repetition of it this run is."""
    grid: str
    backend: str
    model: str
    multiple: int
    batch: int
    devices: int
    epochs: int
    batch_mode: str
    seed: int
    max_train_samples: int
    data: str
    device: str
    timeout: int
    memory_limit_mb: int = 0
    data_dir: str | None = None
    repeat: int = 0

    @property
    def global_batch(self) -> int:
        return self.batch if self.batch_mode == "global" else self.batch * self.devices

    @property
    def per_device_batch(self) -> int:
        return self.batch // self.devices if self.batch_mode == "global" else self.batch

    @property
    def key(self) -> str:
        """Identifies the configuration (not the repeat): resume and reports group by it."""
        cap = f"|cap{self.max_train_samples}" if self.max_train_samples else ""
        return (f"{self.backend}|{self.model}|x{self.multiple}|{self.batch_mode}-b{self.batch}"
                f"|d{self.devices}|e{self.epochs}|seed{self.seed}|{self.data}{cap}|{self.device}")

    @property
    def label(self) -> str:
        return (f"{self.backend} {self.model} x{self.multiple} b{self.global_batch} "
                f"d{self.devices} r{self.repeat}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "Cell":
        return cls(**values)


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


def expand(spec: dict, overrides: dict | None = None, data_dir=None) -> list[Cell]:
    """Validate the spec (with command-line overrides applied) and return its cells in run order."""
    spec = {**DEFAULTS, **spec, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    for key in AXES:
        if key not in spec:
            raise UserError(f"grid '{spec.get('name')}' has no '{key}' axis; give it in the grid "
                            f"file or with {AXIS_OPTIONS[key]}")
    values = {key: _check_axis(key, spec[key], kind) for key, kind in AXES.items()}
    settings = {key: _check_value(key, spec[key], kind) for key, kind in SETTINGS.items()
                if key in spec}
    _check_choices(values, settings)

    cells = []
    for backend, model, multiple, batch, devices in itertools.product(
            values["backends"], values["models"], values["multiples"], values["batches"],
            values["devices"]):
        for repeat in range(settings["repeats"]):
            cells.append(Cell(
                grid=settings["name"], backend=backend, model=model, multiple=multiple,
                batch=batch, devices=devices, epochs=settings["epochs"],
                batch_mode=settings["batch_mode"], seed=settings["seed"],
                max_train_samples=settings["max_train_samples"], data=settings["data"],
                device=settings["device"], timeout=settings["timeout"],
                memory_limit_mb=settings["memory_limit_mb"],
                data_dir=str(data_dir) if data_dir else None, repeat=repeat))
    return cells


def _check_axis(key, value, kind):
    items = value if isinstance(value, list) else [value]
    if not items:
        raise UserError(f"'{key}' is empty; give at least one value")
    return [_check_value(key, item, kind) for item in items]


def _check_value(key, value, kind):
    if kind is int:
        option = AXIS_OPTIONS.get(key, "--repeat" if key == "repeats" else "--" + key.replace("_", "-"))
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"'{key}' must be a whole number, got {value!r}; fix it in the grid "
                            f"file or with {option}")
        if value < 0 or (value == 0 and key not in ("max_train_samples", "seed", "memory_limit_mb")):
            raise UserError(f"'{key}' must be positive, got {value}; fix it in the grid file or "
                            f"with {option}")
    elif not isinstance(value, str):
        raise UserError(f"'{key}' must be text, got {value!r}")
    return value


def _check_choices(values, settings):
    for name in values["backends"]:
        check_backend_name(name)
    for name in values["models"]:
        if name not in MODELS:
            raise UserError(f"unknown model '{name}'{did_you_mean(name, MODELS)}; "
                            f"choose from {', '.join(MODELS)}")
    for key, allowed in (("batch_mode", BATCH_MODES), ("data", DATA_KINDS), ("device", DEVICE_KINDS)):
        if settings[key] not in allowed:
            raise UserError(f"'{key}' must be one of {', '.join(allowed)}, got "
                            f"'{settings[key]}'{did_you_mean(settings[key], allowed)}")
    if settings["batch_mode"] == "global":
        bad = [(b, d) for b in values["batches"] for d in values["devices"] if b % d]
        if bad:
            pairs = ", ".join(f"batch {b} on {d} devices" for b, d in bad)
            raise UserError(f"in batch_mode 'global' the batch is split over the devices, so it must "
                            f"divide evenly: {pairs} does not; change --batch or --devices, or use "
                            f"--batch-mode per_device")
