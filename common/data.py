"""MNIST: find it, verify it, read it into uint8 arrays, and say which samples each rank trains on.

Images stay uint8 in memory (an 8x multiple is 480,000 images); the framework normalises a batch
when it forms it. A dataset multiple k is the training set concatenated k times (the blog's method),
done by index arithmetic instead of copies.
"""
import gzip
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import UserError

MEAN, STD = 0.1307, 0.3081  # of the training pixels after /255
TRAIN_SAMPLES = {"mnist": 60000, "synthetic": 60000}  # the base training set of each data kind
TEST_SAMPLES = 10000

# MD5 of each file as torchvision checks it: the .gz release and its gunzipped IDX file.
IDX_FILES = {
    "train_images": ("train-images-idx3-ubyte", "f68b3c2dcbeaaa9fbdd348bbdeb94873",
                     "6bbc9ace898e44ae57da46a324031adb"),
    "train_labels": ("train-labels-idx1-ubyte", "d53e105ee54ea40749a09fcbcd1e9432",
                     "a25bea736e30d166cdddb491f175f624"),
    "test_images": ("t10k-images-idx3-ubyte", "9fb629c4189551a2d022fa330f9573f3",
                    "2646ac647ad5339dbf082846283269ea"),
    "test_labels": ("t10k-labels-idx1-ubyte", "ec29112dd5afa0611ce80d1b7f02629c",
                    "27ae3e4e09519cfbb04c329615203637"),
}
KERAS_NPZ_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
DOWNLOAD_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
HOW_TO_GET = ("get it with `xbench data download --to DIR` and pass --data-dir DIR (or set "
              "XBENCH_DATA_DIR), or run with --data synthetic to time on random MNIST-shaped data")


@dataclass
class MNIST:
    train_images: np.ndarray  # uint8 (n, 28, 28)
    train_labels: np.ndarray  # uint8 (n,)
    test_images: np.ndarray
    test_labels: np.ndarray
    dataset: str              # "mnist" or "synthetic"
    source: str               # where it was read from


def candidate_dirs(data_dir=None):
    """Where MNIST is looked for, in order."""
    dirs = []
    if data_dir:
        dirs += [Path(data_dir), Path(data_dir) / "MNIST" / "raw"]
    if os.environ.get("XBENCH_DATA_DIR"):
        dirs += [Path(os.environ["XBENCH_DATA_DIR"]), Path(os.environ["XBENCH_DATA_DIR"]) / "MNIST" / "raw"]
    if not data_dir:
        dirs += [Path("data"), Path("data") / "MNIST" / "raw", Path.home() / ".keras" / "datasets"]
    return dirs


def load_mnist(data_dir=None):
    """Real MNIST from the first place that has it, checksums verified."""
    for folder in candidate_dirs(data_dir):
        if all(_idx_path(folder, stem) for stem, _, _ in IDX_FILES.values()):
            arrays = {key: _read_idx(_idx_path(folder, stem), md5_gz, md5_raw)
                      for key, (stem, md5_gz, md5_raw) in IDX_FILES.items()}
            return MNIST(**arrays, dataset="mnist", source=str(folder.resolve()))
        if (folder / "mnist.npz").is_file():
            return _read_keras_npz(folder / "mnist.npz")
    looked = "\n  ".join(str(d) for d in candidate_dirs(data_dir))
    raise UserError(f"MNIST not found. Looked for the four IDX .gz files (or Keras' mnist.npz) in:\n"
                    f"  {looked}\n{HOW_TO_GET}")


def mnist_folder(data_dir=None) -> str:
    """The absolute folder MNIST is read from (checksums verified): resolved once, where the user
    gave it, so that every cell reads exactly that folder whatever its working directory."""
    source = Path(load_mnist(data_dir).source)
    return str(source if source.is_dir() else source.parent)


def synthetic_mnist(seed=0, train=TRAIN_SAMPLES["synthetic"], test=TEST_SAMPLES):
    """Random MNIST-shaped data: timings only, accuracy means nothing. Rows say dataset=synthetic."""
    rng = np.random.default_rng(seed)
    return MNIST(rng.integers(0, 256, (train, 28, 28), dtype=np.uint8),
                 rng.integers(0, 10, train, dtype=np.uint8),
                 rng.integers(0, 256, (test, 28, 28), dtype=np.uint8),
                 rng.integers(0, 10, test, dtype=np.uint8), dataset="synthetic", source="synthetic")


def load(cell):
    """The cell's data: real or synthetic, its base training set capped by max_train_samples."""
    data = synthetic_mnist(cell.seed) if cell.data == "synthetic" else load_mnist(cell.data_dir)
    if cell.max_train_samples:
        data.train_images = data.train_images[:cell.max_train_samples]
        data.train_labels = data.train_labels[:cell.max_train_samples]
    return data


def _idx_path(folder, stem):
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


def _read_idx(path, md5_gz, md5_raw):
    raw = path.read_bytes()
    expected = md5_gz if path.suffix == ".gz" else md5_raw
    if hashlib.md5(raw).hexdigest() != expected:
        raise UserError(f"{path} is corrupt or not the original MNIST file: its MD5 does not match "
                        f"({path.stat().st_size:,} bytes; an interrupted download leaves a truncated "
                        f"file). Delete it and fetch it again with `xbench data download --to "
                        f"{path.parent}`")
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape).copy()


def _read_keras_npz(path):
    if hashlib.sha256(path.read_bytes()).hexdigest() != KERAS_NPZ_SHA256:
        raise UserError(f"{path} is corrupt or not Keras' MNIST file: its SHA-256 does not match. "
                        f"Delete it, then {HOW_TO_GET}")
    with np.load(path) as f:
        return MNIST(f["x_train"], f["y_train"], f["x_test"], f["y_test"],
                     dataset="mnist", source=str(path.resolve()))


def epoch_order(samples, seed, epoch):
    """The shuffled order of one epoch: the same for every backend, rank and framework."""
    return np.random.default_rng([seed, epoch]).permutation(samples)


def rank_indices(samples, global_batch, seed, epoch, rank, world):
    """Indices rank `rank` trains on in `epoch`, in order, as DistributedSampler deals them.

    The incomplete last global batch is dropped, then sample i goes to rank i % world; consecutive
    per-device batches of every rank together make exactly the global batches of a 1-device run.
    """
    order = epoch_order(samples, seed, epoch)[: samples // global_batch * global_batch]
    return order[rank::world]


def download(to):
    """Fetch the four .gz files (for users with internet; never used by tests or CI)."""
    import urllib.request
    to = Path(to)
    to.mkdir(parents=True, exist_ok=True)
    for stem, md5_gz, _ in IDX_FILES.values():
        target = to / f"{stem}.gz"
        if not target.is_file() or hashlib.md5(target.read_bytes()).hexdigest() != md5_gz:
            print(f"downloading {stem}.gz")
            urllib.request.urlretrieve(DOWNLOAD_URL + f"{stem}.gz", target)
        if hashlib.md5(target.read_bytes()).hexdigest() != md5_gz:
            raise UserError(f"{target} downloaded but its MD5 is wrong; try again")
    return to
