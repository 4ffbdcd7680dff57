"""Whose compute a what-if predicts with (reports.step_model.what_if): never this machine's under
another device's name. A prediction for a named device (`xbench predict --device NAME`) takes
each device's compute from, in this order:

- measured: the results' 1-device cells measured on that device (their device name is the same
  model by its data sheet, common.measuring.datasheets);
- given: `--device-rate R`, the samples a second one device computes at the measured cell's
  per-device batch;
- assumed: the model's training FLOPs (reports.step_model.utilisation) at `--utilisation U` of
  the device's data-sheet peak at the cell's precision.

Without --device the compute is the measured device's own, and every row says which device
that was. The measured cell's parts keep their shares (input, forward, backward, optimizer,
host); only their sum is the target's.
"""
from __future__ import annotations

from dataclasses import dataclass

from xbench.common.errors import UserError
from xbench.common.measuring.datasheets import datasheet_of, datasheet_peak
from xbench.reports.step_model.utilisation import training_flops

SHEET_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


@dataclass(frozen=True)
class Target:
    """The device a what-if predicts for: None for the measured one; its rate given, or the
    share of its data-sheet peak assumed (precision: the data sheet's column, None for the
    cell's own)."""
    device: str | None = None
    rate: float | None = None
    utilisation: float | None = None
    precision: str | None = None

    def checked(self) -> Target:
        """Itself, or a UserError naming the option that cannot act."""
        if self.device is None and (self.rate or self.utilisation or self.precision):
            raise UserError("--device-rate, --utilisation and --device-precision describe the "
                            "device of --device: name it (e.g. --device 'H100 SXM')")
        if self.rate is not None and self.utilisation is not None:
            raise UserError("give --device-rate (a rate you measured) or --utilisation (a share "
                            "of the data sheet's peak, assumed), not both")
        if self.utilisation is not None and not 0 < self.utilisation <= 1:
            raise UserError(f"--utilisation {self.utilisation!r}: a share of the peak, above 0 "
                            f"and at most 1 (0.4 for 40%)")
        if self.rate is not None and not self.rate > 0:
            raise UserError(f"--device-rate {self.rate!r}: samples a second, above 0")
        if self.utilisation is not None and datasheet_of(self.device) is None:
            raise UserError(f"--device {self.device!r}: no data sheet of that model here "
                            f"(common/measuring/datasheets.py), so no peak to take a share of: "
                            f"give --device-rate instead")
        return self

    def measured_on(self, device_name: str) -> bool:
        """Whether a cell measured on `device_name` is this target's device (the same data
        sheet, or the same name where neither has one)."""
        if self.device is None:
            return True
        mine, theirs = datasheet_of(self.device), datasheet_of(device_name)
        return mine == theirs if mine else self.device == device_name


def sheet_precision(one: dict, target: Target) -> str:
    """The data-sheet column a cell's training runs in: the target's, else the cell's own
    precision (its framework's default is fp32)."""
    if target.precision:
        return target.precision
    own = one.get("precision")
    return own if own in SHEET_PRECISIONS else "fp32"


def target_compute(one: dict, target: Target, compute: float, batch: float,
                   measured_here: bool) -> tuple[float | None, str]:
    """(the factor the measured compute per step at `batch` samples a device is multiplied by,
    the words that say where the target's compute comes from); factor None where nothing
    gives the target's compute (and the words say why)."""
    if target.device is None or measured_here:
        return 1.0, f"measured on {one['device_name'] or one['device_type']}"
    if target.rate is not None:
        return (batch / target.rate) / compute, (f"given: {target.rate:,.0f} samples/s a "
                                                 f"device (--device-rate)")
    if target.utilisation is not None:
        precision = sheet_precision(one, target)
        peak = datasheet_peak(target.device, precision)
        if peak["flops"] is None:
            return None, f"not predicted: {peak['basis']}"
        seconds = training_flops(one) * batch / (target.utilisation * peak["flops"])
        return seconds / compute, (f"assumed: {target.utilisation:.0%} of the {peak['basis']}, "
                                   f"the model's training FLOPs")
    return None, (f"not predicted: no 1-device cell measured on {target.device}; give "
                  f"--device-rate or --utilisation")


def foreign_link(links: list, target: Target, device_name: str) -> str | None:
    """Why a setup measured on `device_name` is not predicted over `links` (None where it is):
    a link that joins only another device model, and no --device saying whose compute."""
    for link in links:
        if (link is not None and link.device is not None and target.device is None
                and not Target(device=link.device).measured_on(device_name)):
            return (f"not predicted: {link.name} joins {link.device} GPUs, not the "
                    f"{device_name or 'device'} measured (xbench predict --device "
                    f"'{link.device}' with --device-rate or --utilisation)")
    return None


def check_links(links: list, target: Target, measured_names: list[str]) -> None:
    """A UserError where a link joins only one device model (NVLink's `device`) and the
    prediction's compute would be another's: the measured device's, where --device names none,
    or the --device named."""
    for link in links:
        if link is None or link.device is None:
            continue
        joined = Target(device=link.device)
        if target.device is not None and not joined.measured_on(target.device):
            raise UserError(f"{link.name} joins {link.device} GPUs, not the --device "
                            f"{target.device!r} given")
        if target.device is None and not any(joined.measured_on(n) for n in measured_names):
            raise UserError(
                f"{link.name} joins {link.device} GPUs, and these results were measured on "
                f"{', '.join(sorted(set(measured_names))) or 'no device'}: say whose compute to "
                f"predict with, --device '{link.device}' with --device-rate (samples a second "
                f"you measured) or --utilisation (a share of its data-sheet peak, assumed)")
