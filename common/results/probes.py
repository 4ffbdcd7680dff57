"""The probe file: what `xbench probe` measured (common.measuring.peaks), one record per line
in `probe.jsonl` beside the results files, and the check of each record the report reads."""
import json
from pathlib import Path
from typing import Any

from xbench.common.results.schema import NESTED, POSITIVE, TEXT, WHOLE, Maybe, shape_problem
from xbench.common.results.store import read_json_lines

PROBE_FILE = "probe.jsonl"  # beside the results files; one line per `xbench probe` run
# 2: an all-reduce timed from the last rank's launch, Horovod's in place and polled
# (common.measuring.limits.last_launch_seconds); a version 1 record's are slower on another
# basis, and the report skips it with a note: run `xbench probe` again.
PROBE_VERSION = 2


def probe_path(results_path: Path) -> Path:
    """The probe file of a results file: in the same folder."""
    return Path(results_path).parent / PROBE_FILE


def append_probe(path: Path, record: dict) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def read_probes(path: Path) -> tuple[list[dict], list[str]]:
    """The probe records of a probe file (none if there is none), and a line on each line it
    cannot use."""
    if not Path(path).is_file():
        return [], []
    return read_json_lines(path, probe_problem, "a probe record")


# What the report takes from a probe record (common.results.schema.shape_problem's shapes).
PROBE_RECORD = {
    "env": NESTED["env"], "measured_at?": TEXT,
    "matmul": [{"framework": TEXT, "device_type": TEXT, "precision": TEXT,
                "threads": Maybe(WHOLE), "size": WHOLE, "gflops": POSITIVE,
                "gflops_low": POSITIVE, "gflops_high": POSITIVE}],
    "all_reduce": [{"library": TEXT, "device_type": TEXT, "nodes": WHOLE, "world_size": WHOLE,
                    "bytes": WHOLE, "seconds": POSITIVE, "busbw": POSITIVE,
                    "busbw_low": POSITIVE, "busbw_high": POSITIVE}],
    "not_measured?": [{"what": TEXT, "why": TEXT}]}


def probe_problem(record: Any) -> str | None:
    """Why `record` is not a probe record the report can use (None if it is one)."""
    if not isinstance(record, dict) or record.get("probe_version") != PROBE_VERSION \
            or type(record["probe_version"]) is not int:
        return f"not an object with probe_version {PROBE_VERSION}"
    return shape_problem(record, PROBE_RECORD, "probe")
