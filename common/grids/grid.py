"""Grid files (TOML) -> validated cells. What each key may hold is common.grids.settings' table; the
checks that tie several settings together are here."""
import dataclasses
import itertools
import math
import re
import tomllib
from pathlib import Path

from xbench import experiments
from xbench.common.backends.model_files import check_fits
from xbench.common.backends.traits import TRAITS, spanning_nodes
from xbench.common.errors import UserError, did_you_mean
from xbench.common.grids.cell import Cell
from xbench.common.grids.settings import AXES, IN_CELL, OPTIMIZERS, SETTINGS, check_axis, defaults
from xbench.common.workload.data import test_samples, train_samples
from xbench.common.workload.resolve import resolve_model

EXPERIMENTS = Path(experiments.__file__).resolve().parent
SWEEP = re.compile(r"^(\d+)\s*x\s*(\d+)$")
MAX_CELLS = 100_000
# Seeds of a configuration with a target accuracy unless the grid says: MLPerf Training's count
# for its image classification result, of which it averages all but the fastest and slowest.
TARGET_SEEDS = 5
# Keys older grid files may hold, and why they went.
REMOVED = {"compute_references": "compute and communication are now counted inside every "
                                 "N-device cell (its step attribution), so no 1-device reference "
                                 "runs are added; remove the key"}
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# A grid file's [[parts]]: each a table of axes that replace the file's for its cells (a preset of
# two halves that share the rest: accumulation on a capped link, compiling on an uncapped one);
# the grid is every part's cells, a configuration two parts share once.
PARTS = "parts"


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
    for part in _parts_of(spec, path):
        for key in part:
            if key not in SETTINGS or not SETTINGS[key].axis:
                axes = ", ".join(a.key for a in AXES)
                raise UserError(f"{path}: a part may set axes only ({axes}); '{key}' is not "
                                f"one{did_you_mean(key, [a.key for a in AXES])}")
    for key in (k for k in spec if k != PARTS):
        if key in REMOVED:
            raise UserError(f"{path}: '{key}' is no longer a setting: {REMOVED[key]}")
        if key not in SETTINGS:
            raise UserError(f"{path}: unknown key '{key}'{did_you_mean(key, SETTINGS)}; "
                            f"known keys: {', '.join(SETTINGS)}")
    spec.setdefault("name", path.stem)
    return spec


def _parts_of(spec: dict, path) -> list[dict]:
    """The grid file's parts ([[parts]] tables), each checked to be a table."""
    parts = spec.get(PARTS, [])
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise UserError(f"{path}: '{PARTS}' must be a list of tables ([[parts]]), each setting "
                        f"some axes")
    return parts


def preset_path(name):
    path = EXPERIMENTS / f"{name}.toml"
    if not path.is_file():
        names = sorted(p.stem for p in EXPERIMENTS.glob("*.toml"))
        raise UserError(f"no preset '{name}'{did_you_mean(name, names)}; presets: "
                        f"{', '.join(names)}")
    return path


def resolve(spec: dict, overrides: dict | None = None) -> tuple[dict, dict]:
    """(axes, settings) of the spec with command-line overrides applied, each value checked."""
    given = {**spec, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    loss = given.get("target_loss")
    if isinstance(loss, (int, float)) and not isinstance(loss, bool) and loss <= 0:
        raise UserError(f"target_loss {loss:g} can never be reached: a cross-entropy is above 0 "
                        f"nats; give a loss above 0 (a uniform guess over Tiny Shakespeare's 65 "
                        f"characters is 4.17), or no --target-loss")
    if (given.get("target_accuracy") or loss) and "seeds" not in given:
        given["seeds"] = TARGET_SEEDS
    spec = {**defaults(), **given}
    for axis in AXES:
        if axis.key not in spec:
            raise UserError(f"grid '{spec.get('name')}' has no '{axis.key}' axis; give it in the "
                            f"grid file or with {axis.flag_name}")
    settings = {s.key: s.check_value(spec[s.key]) for s in SETTINGS.values()
                if not s.axis and s.key in spec}
    settings["batch_sweep"] = spec["batches"] if isinstance(spec["batches"], str) else ""
    if settings["batch_sweep"]:
        models = check_axis("models", spec["models"])
        for name in models:  # the sweep reads the training set's size, which must be there
            check_fits(settings["data"], name)
        spec["batches"] = sweep_batches(settings["batch_sweep"], settings, models,
                                        *(check_axis(key, spec[key]) for key in
                                          ("multiples", "nodes", "devices")))
    values = {axis.key: check_axis(axis.key, spec[axis.key]) for axis in AXES}
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
    samples = min(min(train_samples(settings["data"], resolve_model(m)) for m in models),
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


def expand(spec: dict, overrides: dict | None = None, data_dir=None) -> list[Cell]:
    """Validate the spec (with command-line overrides applied) and return its cells in run
    order: every part's (the command line's axes apply to every part)."""
    whole = {k: v for k, v in spec.items() if k != PARTS}
    parts = [resolve({**whole, **part}, overrides) for part in spec.get(PARTS) or [{}]]
    values, settings = resolve(whole, overrides)
    combinations = sum(math.prod(len(v) for v in axes.values()) for axes, _ in parts)
    _check_count(combinations * settings["repeats"] * settings["seeds"], len(parts))
    found = [_configurations(axes, part_settings, data_dir) for axes, part_settings in parts]
    configurations = list({c.key: c for c in itertools.chain(*found)}.values())
    if not configurations:
        devices = [",".join(map(str, axes["devices"])) for axes, _ in parts]
        where = (f"--devices {devices[0]} has no 1" if len(parts) == 1 else
                 f"no part's devices ({'; '.join(devices)}) has 1")
        raise UserError(f"no cells: {', '.join(values['backends'])} run on one device only, and "
                        f"{where}")
    # Seed by seed and repeat by repeat: every configuration once, then again, so that a drift
    # in what else the machine does spreads over all of them instead of falling on one
    # configuration's seeds or repeats.
    return [dataclasses.replace(c, seed=c.seed + s, repeat=r) for r in range(settings["repeats"])
            for s in range(settings["seeds"]) for c in configurations]


def _configurations(values: dict, settings: dict, data_dir) -> list[Cell]:
    """One part's configurations (every combination of its axes, `values`, that is a run of its
    own)."""
    configurations = []
    for combination in itertools.product(*values.values()):
        axes = dict(zip(values, combination))
        fields = {s.field_name: axes[s.key] if s.axis else settings[s.key] for s in IN_CELL}
        fields["lr"] = fields["lr"] or OPTIMIZERS[fields["optimizer"]]  # 0: the optimizer's own
        cell = Cell(grid=settings["name"], sweep=settings["batch_sweep"],
                    data_dir=str(data_dir) if data_dir else None, **fields)
        if cell.world > 1 and not TRAITS[cell.backend].spans_devices:
            continue  # a single-device reference has no N-device cells
        if cell.warmup_epochs and cell.lr_scaling == "none":
            continue  # a ramp from lr to lr: the same run as without a warm-up
        if cell.accumulate == 1 and cell.accumulate_sync != values["accumulate_sync"][0]:
            continue  # one micro-batch syncs once whatever the mode: the same run
        configurations.append(normalised(cell))
    return configurations  # cells normalised alike share a key: expand keeps one


def _check_count(cells: int, parts: int = 1) -> None:
    """At most MAX_CELLS cells in the whole grid (every part's together), before any is made."""
    if cells > MAX_CELLS:
        together = f", its {parts} parts together" if parts > 1 else ""
        raise UserError(f"the grid has {cells:,} cells (axes x seeds x repeats{together}); at "
                        f"most {MAX_CELLS:,}: narrow an axis or lower --seeds or --repeat")


def normalised(cell: Cell) -> Cell:
    """`cell` as it runs: a setting that cannot act on its backend's framework at its default
    (omp_wait where OpenMP runs none of its threads: Framework.no_omp_wait), so that its values
    make one cell, one key and one row there, and no row records a knob that did nothing."""
    if TRAITS[cell.backend].framework.no_omp_wait:
        return dataclasses.replace(cell, omp_wait=SETTINGS["omp_wait"].cell_default)
    return cell


def _check_sizes(values, settings):
    """A name that is a file name, a grid that fits in memory, a cap and batches no larger than
    the training set."""
    if not NAME.match(settings["name"]):
        raise UserError(f"grid name {settings['name']!r} must be letters, digits, '.', '_' or '-' "
                        f"(it names the results file results/<name>.jsonl), starting with a "
                        f"letter or digit")
    _check_count(math.prod(len(v) for v in values.values()) * settings["repeats"]
                 * settings["seeds"])
    if settings["seed"] + settings["seeds"] - 1 > SETTINGS["seed"].maximum:
        raise UserError(f"seeds {settings['seed']:,} to "
                        f"{settings['seed'] + settings['seeds'] - 1:,}"
                        f" go past {SETTINGS['seed'].maximum:,} (seeds are 32-bit in every "
                        f"framework): lower --seed or --seeds")
    models = [resolve_model(m) for m in values["models"]]
    smallest = min(train_samples(settings["data"], m) for m in models)
    _check_cap("max_train_samples", "training set", smallest, settings)
    _check_cap("max_test_samples", "test set",
               min(test_samples(settings["data"], m) for m in models), settings)
    base = min(smallest, settings["max_train_samples"] or math.inf)
    for batch, nodes, devices, multiple in itertools.product(
            values["batches"], values["nodes"], values["devices"], values["multiples"]):
        devices *= nodes
        global_batch = batch if settings["batch_mode"] == "global" else batch * devices
        if global_batch > base * multiple:
            raise UserError(
                f"a global batch of {global_batch:,} (batch {batch:,} on {devices} devices, "
                f"batch_mode {settings['batch_mode']}) is larger than the training set of "
                f"{base * multiple:,} samples ({base:,} samples x {multiple}): no epoch would have "
                f"one step; lower --batch or raise --multiple / --max-train-samples")


def _check_micro_batches(values, settings):
    """Micro-batches that split every per-device batch evenly (a rank's micro-batches are
    equal, so that their summed gradients are the whole batch's)."""
    for batch, nodes, devices, accumulate in itertools.product(
            values["batches"], values["nodes"], values["devices"], values["accumulate"]):
        per_device = batch // (nodes * devices) if settings["batch_mode"] == "global" else batch
        if per_device % accumulate:
            raise UserError(f"--accumulate {accumulate} splits each device's {per_device} "
                            f"samples (batch {batch} on {nodes * devices} devices, batch_mode "
                            f"{settings['batch_mode']}) into micro-batches, which must be equal: "
                            f"{per_device} does not divide by {accumulate}; change --batch or "
                            f"--accumulate")


def _check_cap(key: str, capped: str, available: int, settings) -> None:
    """A cap (max_train_samples, max_test_samples) no larger than the set it caps (`capped`),
    `available` samples of it for the grid's models: else cell keys would name a cap that is
    not there."""
    if settings[key] > available:
        raise UserError(f"{key} {settings[key]:,} is more than the {capped} ({available:,} "
                        f"{settings['data']} samples for these models; cell keys would name a "
                        f"cap that is not there): lower it in the grid file or with "
                        f"{SETTINGS[key].flag_name}")


def _check_choices(values, settings):
    """What no single setting can check: settings that contradict each other."""
    for name in values["models"]:
        check_fits(settings["data"], name)
    if settings["target_accuracy"] and settings["target_loss"]:
        raise UserError("give a target accuracy or a target loss, not both: a run stops at one "
                        "target")
    if max(values["warmup_epochs"]) >= settings["epochs"]:
        raise UserError(f"warm-up of {max(values['warmup_epochs'])} epoch(s) is not shorter than "
                        f"the run of {settings['epochs']}: lower --warmup-epochs or raise --epochs")
    if max(values["warmup_epochs"]) and values["lr_scaling"] == ["none"]:
        raise UserError("a warm-up ramps the learning rate from lr to the scaled lr "
                        "(Goyal et al.); with lr_scaling none there is nothing to ramp to: give "
                        "--lr-scaling linear or sqrt")
    if settings["optimizer"] == "adam" and settings["momentum"]:
        raise UserError("momentum is SGD's setting (Adam has its betas): give --optimizer sgd, or "
                        "no --momentum")
    if not any(TRAITS[b].spans_nodes for b in values["backends"]) and max(values["nodes"]) > 1:
        raise UserError(f"{', '.join(values['backends'])} cannot span nodes (each runs on one "
                        f"machine): --nodes {max(values['nodes'])} needs one of "
                        f"{', '.join(spanning_nodes())}")
    if max(values["nodes"]) > 1 and settings["launcher"] == "local":
        raise UserError(f"the local launcher runs on this one machine: --nodes "
                        f"{max(values['nodes'])} needs --launcher slurm or ray")
    if settings["batch_mode"] == "global":
        bad = [(b, d) for b in values["batches"]
               for d in {n * d for n in values["nodes"] for d in values["devices"]} if b % d]
        if bad:
            pairs = ", ".join(f"batch {b} on {d} devices" for b, d in bad)
            raise UserError(f"in batch_mode 'global' the batch is split over the devices, so it "
                            f"must divide evenly: {pairs} does not; change --batch or --devices, "
                            f"or use --batch-mode per_device")
    _check_micro_batches(values, settings)
