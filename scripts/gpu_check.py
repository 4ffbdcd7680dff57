"""`make gpu-check`: the GPU path of xbench, proven on whatever CUDA machine this is.

Needs a CUDA build of PyTorch and xbench's pure-Python dependencies in the running python3 (no
venv build, no TensorFlow: it runs this checkout uninstalled, its folders linked as the `xbench`
packages pyproject.toml maps them to). It runs the probe (matmul
per GPU at fp32/tf32/bf16, nccl all-reduce at every GPU count), then pt-single, pt-dp, pt-ddp
(and hvd-torch where Horovod is built) on 1, 2, 4 ... and all the GPUs, 3 repeats each, on real
MNIST where it finds it (XBENCH_DATA_DIR, shared/data/mnist, ../shared/data/mnist; else synthetic
data, and the rows say so), makes the report, and prints rates, MFU, memory per GPU and the parts
of a step (JAX's from its profiler's trace of the GPU's kernels); then
profiles ResNet-18's layers on one GPU (`xbench profile`, batch 128); then the gpt-gpu preset
(gpt-small and gpt-medium at bf16 on real Tiny Shakespeare, beside MNIST's folder, else synthetic
tokens) on the same GPU counts, and its report; then, where JAX (with CUDA) is importable, JAX's
matmul probe, jax-single and jax-dp (keras-jax where Keras is) on the smoke grid and gpt-small at
bf16, on the same GPU counts, and their report.

    usage: python3 scripts/gpu_check.py [--out DIR] [--only PART]   (default results/gpu-check;
           PART: mnist, gpt or jax, default all three)
Exit 2 where torch sees no GPU or a dependency is missing, else the grid's exit code.
"""
import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NEEDED = ("numpy", "pandas", "click", "scipy", "psutil", "rich", "matplotlib")
DATA = ("shared/data/mnist", "../shared/data/mnist")
PRINTED = ("### MFU and all-reduce bandwidth", "### Every cell: rates", "### Peak memory",
           "### The parts of a step")


def device_counts(gpus: int) -> list[int]:
    """1, 2, 4, ... below `gpus`, and `gpus`."""
    counts, count = [], 1
    while count < gpus:
        counts.append(count)
        count *= 2
    return [*counts, gpus]


def refusal() -> str | None:
    """Why this machine cannot run the check, or None."""
    absent = [m for m in ("torch", *NEEDED) if importlib.util.find_spec(m) is None]
    if absent:
        return (f"{', '.join(absent)} not importable by {sys.executable}; install them "
                f"(pip install {' '.join(absent)}) or run `make setup` and use .venv/bin/python")
    import torch
    if not torch.cuda.is_available():
        return (f"torch {torch.__version__} sees no CUDA device (CUDA build: "
                f"{torch.version.cuda or 'no, a CPU build'}); run this on a machine with NVIDIA "
                f"GPUs and a CUDA build of PyTorch")
    return None


def link_packages(folder: Path) -> Path:
    """`folder`, holding `xbench/<package>` links to this checkout's folders as pyproject.toml's
    package-dir maps them: on PYTHONPATH, `import xbench.common` then works with no install."""
    mapping = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    for package, source in mapping.items():
        link = folder.joinpath(*package.split("."))
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(REPO / source, target_is_directory=True)
    return folder


def xbench(*args: str) -> int:
    print("+ xbench " + " ".join(args), flush=True)
    return subprocess.run([sys.executable, "-m", "xbench.cli.main", *args], cwd=REPO).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/gpu-check")
    parser.add_argument("--only", choices=("mnist", "gpt", "jax"))
    arguments = parser.parse_args()
    out = Path(arguments.out).resolve()
    why = refusal()
    if why:
        print(f"gpu-check: nothing run: {why}", file=sys.stderr)
        return 2
    import torch
    gpus = torch.cuda.device_count()
    names = sorted({torch.cuda.get_device_name(i) for i in range(gpus)})
    print(f"gpu-check: torch {torch.__version__} (CUDA {torch.version.cuda}) sees {gpus} GPU(s): "
          f"{', '.join(names)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="xbench-uninstalled-") as folder:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [
            str(link_packages(Path(folder))), os.environ.get("PYTHONPATH")]))
        parts = {"mnist": check, "gpt": check_gpt, "jax": check_jax}
        codes = [part(out, gpus) for name, part in parts.items()
                 if arguments.only in (None, name)]
        return next((code for code in codes if code), 0)


def data_folder() -> Path | None:
    """Where MNIST is (Tiny Shakespeare is looked for beside it), or None."""
    found = next((d for d in (os.environ.get("XBENCH_DATA_DIR"), *DATA)
                  if d and (REPO / d).is_dir()), None)
    return REPO / found if found else None


def report(results: Path, folder: Path) -> None:
    """The report of `results` in `folder`, and its rates, MFU and memory printed."""
    xbench("report", str(results), "--out", str(folder), "--format", "md,csv")
    summary = (folder / "summary.md").read_text().split("\n\n")
    for index, block in enumerate(summary):
        if block.startswith(PRINTED):
            print(f"\n{block}\n\n{summary[index + 1]}")


def check_gpt(out: Path, gpus: int) -> int:
    """The gpt-gpu preset on 1 ... all the GPUs, and its report."""
    data = data_folder()
    text = data and any((folder / "input.txt").is_file()
                        for folder in (data, data / "tinyshakespeare",
                                       data.parent / "tinyshakespeare"))
    results = out / "gpt-gpu.jsonl"
    code = xbench("grid", "--preset", "gpt-gpu",
                  "--devices", ",".join(map(str, device_counts(gpus))), "--results", str(results),
                  *(["--data-dir", str(data)] if text else ["--data", "synthetic"]))
    report(results, out / "gpt-report")
    return code


def check_jax(out: Path, gpus: int) -> int:
    """JAX's matmul probe, then jax-single and jax-dp (keras-jax where Keras is installed) on the
    smoke grid and on gpt-small at bf16, on 1 ... all the GPUs, and their report; nothing, said
    so, where JAX is not installed."""
    if importlib.util.find_spec("jax") is None:
        print("gpu-check: jax is not importable here: the JAX part is not run", flush=True)
        return 0
    backends = ["jax-single", "jax-dp"] + (["keras-jax"] if importlib.util.find_spec("keras")
                                            else [])
    counts, data = ",".join(map(str, device_counts(gpus))), data_folder()
    xbench("probe", "--backend", "jax-single", "--device", "cuda", "--results-dir", str(out))
    results = out / "jax.jsonl"
    code = xbench("grid", "--preset", "smoke", "--backend", ",".join(backends), "--device",
                  "cuda", "--devices", counts, "--batch", "128,512", "--max-train-samples", "0",
                  "--repeat", "3", "--results", str(results),
                  *(["--data-dir", str(data)] if data else ["--data", "synthetic"]))
    text = data and (data.parent / "tinyshakespeare" / "input.txt").is_file()
    code = code or xbench(
        "grid", "--preset", "gpt-gpu", "--backend", ",".join(backends), "--model", "gpt-small",
        "--bucket-mb", "0", "--compression", "none", "--devices", counts, "--results",
        str(results), *(["--data-dir", str(data.parent / "tinyshakespeare")] if text
                        else ["--data", "synthetic"]))
    report(results, out / "jax-report")
    return code


def check(out: Path, gpus: int) -> int:
    """The probe, the grid, its report and the profile, each through the `xbench` command."""
    counts = device_counts(gpus)
    backends = ["pt-single", "pt-dp", "pt-ddp"]
    if importlib.util.find_spec("horovod"):
        backends.append("hvd-torch")
    many = [c for c in counts if c > 1]
    probes = ["pt-single"] + (["pt-ddp", "hvd-torch"] if many else [])
    xbench("probe", "--backend", ",".join(b for b in probes if b in backends), "--device", "cuda",
           "--devices", ",".join(map(str, many or [2])), "--results-dir", str(out))
    data = data_folder()
    results = out / "gpu-check.jsonl"
    code = xbench("grid", "--preset", "smoke", "--backend", ",".join(backends), "--device", "cuda",
                  "--devices", ",".join(map(str, counts)), "--batch", "128,512",
                  "--max-train-samples", "0", "--repeat", "3", "--results", str(results),
                  *(["--data-dir", str(data)] if data else ["--data", "synthetic"]))
    report(results, out / "report")
    profiled = xbench("profile", "--model", "resnet18", "--batch", "128", "--backend", "pt-single",
                      "--device", "cuda", "--steps", "30", "--warmup", "5",
                      "--out", str(out / "profile-resnet18"))
    return code or profiled


if __name__ == "__main__":
    sys.exit(main())
