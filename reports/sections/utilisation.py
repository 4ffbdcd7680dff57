"""Against the limit: each cell's model FLOP utilisation and achieved bus bandwidth against what
`xbench probe` measured this machine can do."""
from xbench.common.backends.protocol import ALL_REDUCE
from xbench.reports.rendering.tables import limits_table
from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import NO_ROWS, Section, Table

NO_PROBE = ("no probe of this machine beside the results: run `xbench probe` (its record goes to "
            "probe.jsonl in the results' folder) and make the report again")
LIMITS_TEXT = (
    "How far each cell is from what this machine can do, by `xbench probe` (a probe file beside "
    "the results, of the rows' environment). Model FLOP utilisation (MFU) = a training step's "
    "FLOPs per sample (the forward's, and the backward's two products per layer but the first "
    "layer's input gradient, which is never computed) × epoch-2 rate / the peak FLOP/s of the "
    "cell's devices: the framework's own matmul rate at the precision of the model's dominant "
    "layers (the row's math: fp32, or TF32 on a GPU that allowed it), per GPU times the GPUs, "
    "or on a CPU the rate with all the threads the cell's processes have on a node (a CPU "
    "device is its share of the cores); on a GPU also against its data sheet's dense peak at "
    "that precision. Above 100% of either it is SUSPECT and not a result. "
    "The interval is the rate's; the probe's own spread is in the probe file. For an "
    "all-reducing cell on N > 1 devices: its achieved bus bandwidth (nccl-tests' busbw = "
    "bytes reduced / moving time × 2(N−1)/N, from the collectives' counted time: see Where a "
    "step's time goes) against the probe's busbw of the same library at the gradients' size on "
    "as many processes; one above the probe's is marked SUSPECT and is not a result.")


def against_the_probe(data: ReportData):
    """Every measured cell against the probe's peaks; none without a probe."""
    return limits_table(data.limits) if data.probes else data.limits.iloc[0:0]


SECTION = Section(
    name="limits",
    title="Against the limit",
    paragraphs=[LIMITS_TEXT],
    tables=(Table("limits", f"MFU and {ALL_REDUCE} bandwidth against this machine's measured peaks",
                  against_the_probe, lambda data: NO_ROWS if data.probes else NO_PROBE),))
