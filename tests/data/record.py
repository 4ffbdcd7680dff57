"""Record the real rows that tests of the report, compare and export read (tests/data/*.jsonl):
real grids on real MNIST through the real command line, kept so that each test of what is done
with rows reads the same rows instead of training them again. tests/test_schema.py holds every
recorded row to the schema's checks, so a change to the schema fails there until they are recorded
again:

    .venv/bin/python tests/data/record.py            # every recording
    .venv/bin/python tests/data/record.py repeats    # one of them
"""
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
from tests.helpers import MNIST_DIR, XBENCH  # noqa: E402  (the repository root, put on the path)

# name -> `xbench grid` arguments
RECORDINGS = {
    # pt-single and pt-ddp on one device, 3 repeats each, alternated: verdicts from intervals,
    # comparisons of two runs of a grid, the export of rows
    "repeats": ["--preset", "smoke", "--backend", "pt-single,pt-ddp", "--devices", "1",
                "--repeat", "3", "--max-train-samples", "512"],
    # the time-to-accuracy preset, pt-ddp only, to 85% in at most 4 epochs on 1,024 images:
    # 2 batches x 2 device counts x 5 seeds
    "time-to-accuracy": ["--preset", "time-to-accuracy", "--backend", "pt-ddp", "--batch",
                         "64,256", "--epochs", "4", "--target-accuracy", "0.85",
                         "--max-train-samples", "1024", "--max-test-samples", "1000"],
    # the knobs preset as it ships (accumulation on a capped link, compiled steps; one run a
    # cell): the page's answers and its decision, in a browser
    "knobs": ["--preset", "knobs"],
}


def record(name: str) -> Path:
    """Run the recording's grid afresh and keep its rows as tests/data/<name>.jsonl."""
    with tempfile.TemporaryDirectory(prefix="xbench-record-") as folder:
        results = Path(folder) / f"{name}.jsonl"
        subprocess.run([*XBENCH, "grid", *RECORDINGS[name], "--data-dir", str(MNIST_DIR),
                        "--results", str(results)], check=True)
        kept = HERE / f"{name}.jsonl"
        shutil.copyfile(results, kept)
    return kept


if __name__ == "__main__":
    for name in sys.argv[1:] or RECORDINGS:
        print(f"recorded {record(name)}")
