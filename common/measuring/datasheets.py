"""The GPUs' data-sheet peaks: a second ceiling for MFU beside the probe's measured one.

Dense (not 2:4 sparse) tensor-core TFLOP/s by precision, as NVIDIA publishes them (where a sheet
gives only the sparse figure, halved); fp32 is the non-tensor-core rate. A GPU is found by its
exact model in the name the frameworks report (torch's get_device_name, TensorFlow's device
details: "Tesla V100-PCIE-16GB", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3" for the SXM
part): form factors of one chip differ by up to 25% in clock and power, so a name that does not
say which (a bare "V100", an "L40") gets no data sheet rather than another model's. CPUs have no
entry: their ceiling is the probe's.
"""
import re
from typing import NamedTuple


class DataSheet(NamedTuple):
    pattern: str                 # a regular expression (case-insensitive) of the reported name
    name: str                    # the model, as its data sheet names it
    peaks: dict[str, float]      # precision -> dense TFLOP/s
    source: str


H100_SHEET = "https://www.nvidia.com/en-us/data-center/h100/ (sparse figures halved)"
H200_SHEET = "https://www.nvidia.com/en-us/data-center/h200/ (sparse figures halved)"
A100_SHEET = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
              "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (dense; 40 and 80 GB alike)")
V100_SHEET = ("https://images.nvidia.com/content/technologies/volta/pdf/"
              "volta-v100-datasheet-update-us-1165301-r5.pdf (no TF32 or bf16)")
HOPPER_SXM = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}
HOPPER_NVL = {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}
AMPERE_100 = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}

# The most specific first: "H100 NVL" before "H100".
DATASHEETS = (
    DataSheet(r"\bH200 NVL\b", "NVIDIA H200 NVL", HOPPER_NVL, H200_SHEET),
    DataSheet(r"\bH200\b", "NVIDIA H200 SXM", HOPPER_SXM, H200_SHEET),
    DataSheet(r"\bH100 NVL\b", "NVIDIA H100 NVL", HOPPER_NVL, H100_SHEET),
    DataSheet(r"\bH100 PCIe\b", "NVIDIA H100 PCIe",
              {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0}, H100_SHEET),
    DataSheet(r"\bH100\b.*\b(SXM\d?|HBM3)\b", "NVIDIA H100 SXM", HOPPER_SXM, H100_SHEET),
    DataSheet(r"\bA100\b.*\bPCIe\b", "NVIDIA A100 PCIe", AMPERE_100, A100_SHEET),
    DataSheet(r"\bA100\b.*\bSXM\d?\b", "NVIDIA A100 SXM", AMPERE_100, A100_SHEET),
    DataSheet(r"\bV100\b.*\bPCIe\b", "NVIDIA V100 PCIe", {"fp32": 14.0, "fp16": 112.0}, V100_SHEET),
    DataSheet(r"\bV100\b.*\bSXM2\b", "NVIDIA V100 SXM2", {"fp32": 15.7, "fp16": 125.0},
              V100_SHEET),
    DataSheet(r"\bL40S\b", "NVIDIA L40S", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.0,
                                           "fp16": 362.0},
              "https://www.nvidia.com/en-us/data-center/l40s/ (dense)"),
    DataSheet(r"\bL4\b", "NVIDIA L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0},
              "https://www.nvidia.com/en-us/data-center/l4/ (sparse figures halved)"),
    DataSheet(r"\bT4\b", "NVIDIA T4", {"fp32": 8.1, "fp16": 65.0},
              "https://www.nvidia.com/en-us/data-center/tesla-t4/ (no TF32 or bf16)"),
)


def datasheet_of(device_name: str) -> DataSheet | None:
    """The data sheet of the exact GPU model `device_name` names, or None."""
    return next((sheet for sheet in DATASHEETS
                 if re.search(sheet.pattern, device_name or "", re.IGNORECASE)), None)


def datasheet_peak(device_name: str, precision: str) -> dict:
    """{"flops": FLOP/s per GPU or None, "basis": text} of the GPU named `device_name` at
    `precision` by its data sheet; where there is none (a model not matched exactly, a precision
    it lacks), flops None and the basis says why."""
    sheet = datasheet_of(device_name)
    if sheet is None:
        return {"flops": None,
                "basis": f"none: '{device_name}' is no GPU model with a data sheet here (only "
                         f"exact models: the probe's peak still serves)"}
    if precision not in sheet.peaks:
        return {"flops": None, "basis": f"none: the {sheet.name}'s data sheet has no {precision}"}
    peak = sheet.peaks[precision]
    return {"flops": peak * 1e12,
            "basis": f"{sheet.name} data sheet, {precision} dense: {peak:g} TFLOP/s "
                     f"({sheet.source})"}
