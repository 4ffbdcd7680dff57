"""CIFAR-10: find it (the Python version's six pickles, or either archive unextracted), verify it
against the published MD5s, and read it into uint8 (n, 32, 32, 3) images."""
import io
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np

from xbench.common.errors import UserError
from xbench.common.workload.samples import Images, verified

# CIFAR-10 (https://www.cs.toronto.edu/~kriz/cifar.html): the MD5 of each file of the Python
# version as torchvision checks them, and the published MD5 of both archives.
CIFAR_FOLDER = "cifar-10-batches-py"
CIFAR_PICKLES = {"data_batch_1": "c99cafc152244af753f735de768cd75f",
                 "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
                 "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
                 "data_batch_4": "634d18415352ddfa80567beed471001a",
                 "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
                 "test_batch": "40351d587109b95175f43aff81a1287e"}
CIFAR_ARCHIVES = {"cifar-10-python.tar.gz": "c58f30108f718f92721af3b95e74349a",
                  "cifar-10-binary.tar.gz": "c32a1d4ab5d03f1284b67883e8d87530"}
CIFAR_HOW_TO_GET = ("download cifar-10-python.tar.gz (or cifar-10-binary.tar.gz) from "
                    "https://www.cs.toronto.edu/~kriz/cifar.html, put it (or the extracted "
                    f"{CIFAR_FOLDER} folder) in a folder and pass --data-dir FOLDER (or set "
                    "XBENCH_DATA_DIR); or run with --data synthetic to time on random "
                    "CIFAR-shaped images")


def cifar10_dirs(data_dir=None) -> list[Path]:
    """Where CIFAR-10 is looked for, in order: the folder given, then torchvision's usual root
    (./data) and Keras' cache (~/.keras/datasets), each also with cifar-10-batches-py in it."""
    roots = [Path(data_dir)] if data_dir else []
    if os.environ.get("XBENCH_DATA_DIR"):
        roots.append(Path(os.environ["XBENCH_DATA_DIR"]))
    if not data_dir:
        roots += [Path("data"), Path.home() / ".keras" / "datasets"]
    return [folder for root in roots for folder in (root, root / CIFAR_FOLDER)]


def load_cifar10(data_dir=None, pickles=CIFAR_PICKLES, archives=CIFAR_ARCHIVES) -> Images:
    """Real CIFAR-10 from the first place that has it: the Python version's six pickles, or
    either archive (the Python or the binary version) unextracted, each checked against its
    MD5 (`pickles`, `archives`: name -> MD5, the published ones unless a test writes its
    own)."""
    incomplete = {}
    for folder in cifar10_dirs(data_dir):
        missing = [name for name in pickles if not (folder / name).is_file()]
        if not missing:
            parts = {name: _cifar_pickle(_verified(folder / name, md5))
                     for name, md5 in pickles.items()}
            return _cifar_images(parts, str(folder.resolve()),
                                 tuple(str((folder / name).resolve()) for name in pickles))
        for name, md5 in archives.items():
            if (folder / name).is_file():
                return _cifar_archive(_verified(folder / name, md5), str((folder / name).resolve()))
        if len(missing) < len(pickles):
            incomplete[folder] = missing
    looked = "\n  ".join(str(d) + (f" (lacks {', '.join(incomplete[d])})" if d in incomplete
                                   else "")
                         for d in cifar10_dirs(data_dir))
    raise UserError(f"CIFAR-10 not found. Looked for {CIFAR_FOLDER}'s six files "
                    f"({', '.join(pickles)}) or {' or '.join(archives)} in:\n  {looked}\n"
                    f"{CIFAR_HOW_TO_GET}")


def _verified(path: Path, md5: str) -> bytes:
    return verified(path, md5, "CIFAR-10", CIFAR_HOW_TO_GET)


def _cifar_pickle(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """A batch of the Python version: rows of 3072 bytes (1024 red, green, blue), its labels."""
    batch = pickle.loads(raw, encoding="bytes")
    return np.asarray(batch[b"data"], np.uint8), np.asarray(batch[b"labels"], np.uint8)


def _cifar_binary(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """A batch of the binary version: records of a label byte and 3072 image bytes."""
    records = np.frombuffer(raw, np.uint8).reshape(-1, 3073)
    return records[:, 1:], records[:, 0].copy()


def _cifar_archive(raw: bytes, source: str) -> Images:
    """The batches read from the archive in memory (nothing is extracted to disk)."""
    parts = {}
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as archive:
        for member in archive.getmembers():
            stem = Path(member.name).name.removesuffix(".bin")
            if stem in CIFAR_PICKLES:
                content = archive.extractfile(member).read()
                parts[stem] = (_cifar_binary if member.name.endswith(".bin")
                               else _cifar_pickle)(content)
    missing = sorted(set(CIFAR_PICKLES) - set(parts))
    if missing:
        raise UserError(f"{source} lacks {', '.join(missing)}: not the CIFAR-10 archive. "
                        f"{CIFAR_HOW_TO_GET}")
    return _cifar_images(parts, source, (source,))


def _cifar_images(parts: dict, source: str, files: tuple[str, ...]) -> Images:
    """The five training batches in order and the test batch, as (n, 32, 32, 3) images."""
    def images(rows):
        return np.ascontiguousarray(rows.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))

    train = [parts[f"data_batch_{i}"] for i in range(1, 6)]
    test_rows, test_labels = parts["test_batch"]
    return Images(images(np.concatenate([rows for rows, _ in train])),
                  np.concatenate([labels for _, labels in train]), images(test_rows),
                  test_labels, dataset="cifar10", source=source, layout="cifar10", files=files)
