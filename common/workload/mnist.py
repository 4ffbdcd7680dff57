"""MNIST: find it (the four IDX files, gzipped or not, or Keras' mnist.npz), verify it against
the published checksums, read it into uint8 arrays; and download it for a user with a network."""
import contextlib
import gzip
import hashlib
import os
from pathlib import Path

import numpy as np

from xbench.common import cache
from xbench.common.errors import UserError
from xbench.common.workload.samples import Images, verified

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



def candidate_dirs(data_dir=None):
    """Where MNIST is looked for, in order."""
    dirs = []
    if data_dir:
        dirs += [Path(data_dir), Path(data_dir) / "MNIST" / "raw"]
    if os.environ.get("XBENCH_DATA_DIR"):
        dirs += [Path(os.environ["XBENCH_DATA_DIR"]),
                 Path(os.environ["XBENCH_DATA_DIR"]) / "MNIST" / "raw"]
    if not data_dir:
        dirs += [Path("data"), Path("data") / "MNIST" / "raw", Path.home() / ".keras" / "datasets"]
    return dirs


def load_mnist(data_dir=None):
    """Real MNIST from the first place that has it, checksums verified."""
    for folder in candidate_dirs(data_dir):
        if all(_idx_path(folder, stem) for stem, _, _ in IDX_FILES.values()):
            paths = {key: _idx_path(folder, stem) for key, (stem, _, _) in IDX_FILES.items()}
            arrays = {key: _read_idx(paths[key], md5_gz, md5_raw)
                      for key, (_, md5_gz, md5_raw) in IDX_FILES.items()}
            return Images(**{k: v[..., None] if "images" in k else v for k, v in arrays.items()},
                          dataset="mnist", source=str(folder.resolve()), layout="mnist",
                          files=tuple(str(p.resolve()) for p in paths.values()))
        if (folder / "mnist.npz").is_file():
            return _read_keras_npz(folder / "mnist.npz")
    looked = "\n  ".join(str(d) for d in candidate_dirs(data_dir))
    raise UserError(f"MNIST not found. Looked for the four IDX .gz files (or Keras' mnist.npz) "
                    f"in:\n  {looked}\n{HOW_TO_GET}")


def _idx_path(folder, stem):
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


def _read_idx(path, md5_gz, md5_raw):
    raw = verified(path, md5_gz if path.suffix == ".gz" else md5_raw, "MNIST",
                    f"fetch it again with `xbench data download --to {path.parent}`")
    if path.suffix == ".gz":
        raw = unpacked(raw, md5_raw)
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape).copy()


def unpacked(packed: bytes, md5_raw: str) -> bytes:
    """A verified .gz file's contents. Unpacking the 60,000 training images takes 0.2 s of every
    process of every cell, checking their published MD5 a third of that: so they are kept
    (common.cache, named by that MD5) and read back where they still match it; a kept file
    changed since is unpacked again. Where the cache cannot be written, nothing is kept: the
    data is still read."""
    kept = cache.cache_path("data", f"mnist-{md5_raw}")
    with contextlib.suppress(OSError):
        raw = kept.read_bytes()
        if hashlib.md5(raw).hexdigest() == md5_raw:
            return raw
    raw = gzip.decompress(packed)
    with contextlib.suppress(OSError):
        cache.write_whole(kept, raw)
    return raw


def _read_keras_npz(path):
    if hashlib.sha256(path.read_bytes()).hexdigest() != KERAS_NPZ_SHA256:
        raise UserError(f"{path} is corrupt or not Keras' MNIST file: its SHA-256 does not match. "
                        f"Delete it, then {HOW_TO_GET}")
    with np.load(path) as f:
        return Images(f["x_train"][..., None], f["y_train"], f["x_test"][..., None], f["y_test"],
                      dataset="mnist", source=str(path.resolve()), layout="mnist",
                      files=(str(path.resolve()),))


def download(to):
    """Fetch the four .gz files (for users with internet; never used by tests or CI). Each is
    written beside its final name and renamed once whole; a failure is one line."""
    import urllib.error
    import urllib.request
    to = Path(to)
    try:
        to.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot make the folder {to} for MNIST: {e.strerror}") from None
    for stem, md5_gz, _ in IDX_FILES.values():
        target = to / f"{stem}.gz"
        if not target.is_file() or hashlib.md5(target.read_bytes()).hexdigest() != md5_gz:
            print(f"downloading {stem}.gz")
            partial = target.with_name(f"{target.name}.part")
            try:
                with urllib.request.urlopen(DOWNLOAD_URL + f"{stem}.gz", timeout=60) as answer:
                    partial.write_bytes(answer.read())
                partial.replace(target)
            except (urllib.error.URLError, OSError) as e:
                partial.unlink(missing_ok=True)
                reason = getattr(e, "reason", None) or e.strerror or e
                raise UserError(f"could not download MNIST from {DOWNLOAD_URL}{stem}.gz: "
                                f"{reason}; without a network, copy the four .gz files into "
                                f"{to} by hand") from None
        if hashlib.md5(target.read_bytes()).hexdigest() != md5_gz:
            raise UserError(f"{target} downloaded but its MD5 is wrong; try again")
    return to
