"""The GPUs' data-sheet peaks: a second ceiling for MFU beside the probe's measured one.

Dense (not 2:4 sparse) tensor-core TFLOP/s by precision, as NVIDIA publishes them; fp32 is the
non-tensor-core rate. A GPU is found by its name as the frameworks report it (torch's
get_device_name, TensorFlow's device details). CPUs have no entry: their ceiling is the probe's. A
name matches on whole words ("L4" is not "L40S").
"""
import re

# (what the device name contains, the data sheet's name, {precision: dense TFLOP/s}, source)
DATASHEETS = (
    ("H200", "NVIDIA H200 SXM", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
     "https://www.nvidia.com/en-us/data-center/h200/ (sparse figures halved)"),
    ("H100 PCIe", "NVIDIA H100 PCIe", {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0},
     "https://www.nvidia.com/en-us/data-center/h100/ (sparse figures halved)"),
    ("H100", "NVIDIA H100 SXM", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
     "https://www.nvidia.com/en-us/data-center/h100/ (sparse figures halved)"),
    ("A100", "NVIDIA A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
     "https://www.nvidia.com/en-us/data-center/a100/ (dense)"),
    ("L4", "NVIDIA L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0},
     "https://www.nvidia.com/en-us/data-center/l4/ (sparse figures halved)"),
    ("T4", "NVIDIA T4", {"fp32": 8.1, "fp16": 65.0},
     "https://www.nvidia.com/en-us/data-center/tesla-t4/ (no TF32 or bf16)"),
    ("V100", "NVIDIA V100", {"fp32": 15.7, "fp16": 125.0},
     "https://images.nvidia.com/content/technologies/volta/pdf/"
     "volta-v100-datasheet-update-us-1165301-r5.pdf"
     " (SXM2; no TF32 or bf16)"),
)


def datasheet_peak(device_name: str, precision: str) -> dict | None:
    """{"flops": FLOP/s per GPU, "basis": text} of the GPU named `device_name` at `precision`
    by its data sheet, or None (a CPU, an unknown GPU, a precision it lacks)."""
    for part, name, peaks, source in DATASHEETS:
        if re.search(rf"\b{re.escape(part)}\b", device_name or "") and precision in peaks:
            return {"flops": peaks[precision] * 1e12,
                    "basis": f"{name} data sheet, {precision} dense: {peaks[precision]:g} TFLOP/s "
                             f"({source})"}
    return None
