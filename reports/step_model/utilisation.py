"""What each measured cell reached against this machine's limits: its model FLOP utilisation
against the probe's matmul peak (and a GPU's data sheet), and an all-reducing cell's bus
bandwidth against the probe's all-reduce of its library at its gradients' size. Above either
limit a number is SUSPECT, never a result."""
import math

import pandas as pd

from xbench.common.measuring.datasheets import datasheet_peak
from xbench.common.measuring.peaks import flop_utilisation, peak_flops, probe_all_reduce
from xbench.common.workload.resolve import own_model
from xbench.reports.numbers.analysis import CONFIG, measured, protocol, wire_size


def against_limits(cells, attributed, probes):
    """Per measured cell: model FLOP utilisation (with the interval of the cell's rate) against
    the probe's matmul peak at the precision the cell's framework ran its dominant layers in
    (its row's `math`: bf16 or fp16 in mixed precision, else fp32, or TF32 on a GPU that allowed
    it), and on a GPU also against the data sheet's peak at that precision
    (common.measuring.datasheets); either above 100% is SUSPECT; and for an all-reducing cell on
    N > 1 devices its achieved bus bandwidth (of its collectives' counted bytes over their time
    alone, `attributed`: reports.numbers.communication) against the probe's, at the gradients'
    size,
    with the same library and placement; an achieved bandwidth above the probe's is marked
    suspect.
    `probes`: reports.numbers.rows.load_probes' {env label: probe}."""
    records = []
    for _, cell in measured(cells).iterrows():
        probe = probes.get(cell["env"], {"matmul": [], "all_reduce": []})
        records.append({**{column: cell[column] for column in CONFIG},
                        "cell_key": cell["cell_key"], "training": cell["training"],
                        "epoch2_rate": cell["epoch2_rate"], **flop_use(cell, probe["matmul"]),
                        **bus_use(cell, attributed, probe["all_reduce"])})
    out = pd.DataFrame(records, columns=LIMIT_COLUMNS)
    out["bandwidth_share"] = out["achieved_busbw"] / out["probe_busbw"]
    out["bandwidth_suspect"] = out["bandwidth_share"] > 1
    # above the peak: the peak is the wrong one (another precision, another device) or the rate
    # is disturbed; never a result
    out["mfu_suspect"] = (out["mfu"] > 1) | (out["sheet_mfu"] > 1)
    return out


LIMIT_COLUMNS = [*CONFIG, "cell_key", "training", "epoch2_rate", "peak_flops", "peak_basis",
                 "precision", "mfu", "mfu_low", "mfu_high", "sheet_basis", "sheet_mfu",
                 "sheet_mfu_low", "sheet_mfu_high", "library", "achieved_busbw", "probe_busbw",
                 "probe_busbw_low", "probe_busbw_high"]


def training_flops(cell) -> float:
    """FLOPs of one sample's training step: the spec's for xbench's models; a model file's
    3 x the forward FLOPs its row records (the report reads rows, not the file)."""
    spec = own_model(cell["model"])
    return spec.training_flops_per_sample() if spec else 3 * cell["flops_per_sample"]


def flop_use(cell, matmuls) -> dict:
    """A cell's peak FLOP/s by the probe's matmuls and, on a GPU, by its data sheet, at the
    precision of its dominant layers, and its MFU (with the interval of its rate) of each."""
    math_used = cell["math"] or {}
    # mixed precision: its lower type; else what the framework allowed the dominant layers (a
    # model file's taken as matmuls: the report reads rows, not the file)
    spec = own_model(cell["model"])
    dominant = spec.dominant_math() if spec else "matmul"
    precision = (cell["precision"] if math_used.get("lower")
                 else math_used.get(dominant, "fp32"))
    peak = peak_flops(matmuls, cell["framework"], cell["device_type"],
                      int(cell["nodes"]), int(cell["devices_per_node"]),
                      int(cell["threads_per_device"]), int(cell["cores"] or 1), precision)
    sheet = (datasheet_peak(cell["device_name"], precision)
             if cell["device_type"] == "cuda" else None)
    found = {"peak_flops": peak and peak["flops"], "peak_basis": peak["basis"] if peak else None,
             "precision": precision, "sheet_basis": sheet["basis"] if sheet else None,
             **dict.fromkeys([f"{name}{suffix}" for name in ("mfu", "sheet_mfu")
                              for suffix in ("", "_low", "_high")], math.nan)}
    for name, ceiling in (("mfu", peak), ("sheet_mfu", sheet)):
        if ceiling and ceiling["flops"]:
            flops = training_flops(cell)
            devices = int(cell["devices"]) if name == "sheet_mfu" else 1
            found.update({f"{name}{suffix}": flop_utilisation(
                flops, cell[f"epoch2_rate{suffix}"], ceiling["flops"] * devices)
                for suffix in ("", "_low", "_high")})
    return found


def bus_use(cell, attributed, all_reduces) -> dict:
    """An all-reducing N-device cell's achieved bus bandwidth (`attributed`) beside the probe's
    of its library on as many processes at its gradients' size; NaN for any other cell."""
    achieved, reference = math.nan, None
    if (cell["devices"] > 1 and protocol(cell).is_all_reduce
            and own_model(cell["model"]) is not None):
        mine = (attributed[(attributed["env"] == cell["env"])
                           & (attributed["cell_key"] == cell["cell_key"])]
                if len(attributed) else attributed)
        if len(mine) and not math.isnan(mine["busbw"].iloc[0]):
            achieved = mine["busbw"].iloc[0]
        reference = probe_all_reduce(all_reduces, cell["collective_library"],
                                     cell["device_type"], int(cell["nodes"]),
                                     int(cell["devices"]), wire_size(cell))
    return {"library": cell["collective_library"], "achieved_busbw": achieved,
            **{f"probe_busbw{suffix}": reference[f"busbw{suffix}"] if reference else math.nan
               for suffix in ("", "_low", "_high")}}
