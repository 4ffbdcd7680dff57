"""MNIST, CIFAR-10 and Tiny Shakespeare: find them, verify them, read them into uint8 arrays, and
say which samples each rank trains on.

Images stay uint8 (N, H, W, C) in memory (an 8x multiple of MNIST is 480,000 images); the framework
normalises a batch, per channel, when it forms it. Text is characters as uint8 token ids, a sample
a window of a language model's context (`text_windows`). A dataset multiple k is the training set
concatenated k times (the blog's method), done by index arithmetic instead of copies.
"""
import gzip
import hashlib
import io
import os
import pickle
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xbench.common.errors import UserError
from xbench.common.workload import user_models
from xbench.common.workload.models import (
    INPUT_SHAPES,
    MODELS,
    NUM_CLASSES,
    VOCAB,
    input_shape,
    user_model,
)

# Per-channel mean and standard deviation of each dataset's training pixels after /255.
NORMALISATION = {"mnist": ((0.1307,), (0.3081,)),
                 "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))}
TRAIN_SAMPLES = {"mnist": 60000, "cifar10": 50000}  # the base training set of each dataset
TEST_SAMPLES = 10000
# synthetic: random images (or tokens) shaped as the model's; model: a model file's own data()
DATA_KINDS = ("mnist", "cifar10", "shakespeare", "synthetic", "model")

# Tiny Shakespeare (karpathy/char-rnn's input.txt): its SHA-256, its length, and nanoGPT's split
# (the first 90% of the characters trains, the last 10% validates).
SHAKESPEARE_FILE = "input.txt"
SHAKESPEARE_FOLDER = "tinyshakespeare"
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SHAKESPEARE_CHARACTERS = 1115394
TRAIN_SHARE = 0.9
SHAKESPEARE_HOW_TO_GET = (f"put Tiny Shakespeare's {SHAKESPEARE_FILE} (karpathy/char-rnn, "
                          f"data/tinyshakespeare; SHA-256 {SHAKESPEARE_SHA256[:12]}...) in a "
                          f"folder and pass --data-dir FOLDER (or set XBENCH_DATA_DIR); or run "
                          f"with --data synthetic to time on random tokens")

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
class Images:
    """A dataset in memory: uint8 images (n, H, W, C) and their labels, or a text's windows:
    uint8 token ids (n, T) and the next token of each (n, T)."""
    train_images: np.ndarray
    train_labels: np.ndarray  # uint8 (n,), or (n, T) next tokens
    test_images: np.ndarray
    test_labels: np.ndarray
    dataset: str              # "mnist", "cifar10" or "synthetic"
    source: str               # where it was read from
    layout: str               # whose samples these are: mnist, cifar10, shakespeare, or model
                              # (a model file's: inputs as they are, float32 or int64)

    @property
    def is_text(self) -> bool:
        """Token windows for a language model (else images for a classifier)."""
        return self.layout == "shakespeare"

    @property
    def as_given(self) -> bool:
        """A model file's samples: the model takes them as they are (no normalisation)."""
        return self.layout == "model"

    @property
    def mean(self) -> tuple[float, ...]:
        """Per-channel mean of the dataset's training images (0-1 scale), as normalised."""
        return NORMALISATION[self.layout][0]

    @property
    def std(self) -> tuple[float, ...]:
        """Per-channel standard deviation of the dataset's training images (0-1 scale)."""
        return NORMALISATION[self.layout][1]


def data_layout(data: str, model: str) -> str:
    """The dataset whose samples a cell of `data` for `model` holds: synthetic data takes the
    model's (a model file's: shaped as its inputs)."""
    if data != "synthetic":
        return data
    return MODELS[model].dataset if model in MODELS else "model"


def train_samples(data: str, model: str) -> int:
    """The base training set of a cell of `data` for `model` (synthetic: as large as the
    dataset it imitates); for text, the windows of the model's context in the training split."""
    layout = data_layout(data, model)
    if layout == "shakespeare":
        return window_count(int(SHAKESPEARE_CHARACTERS * TRAIN_SHARE), input_shape(model)[0])
    if layout == "model":
        return user_model(model).data["train"] if data == "model" else user_models.SYNTHETIC_TRAIN
    return TRAIN_SAMPLES[layout]


def test_samples(data: str, model: str) -> int:
    """The test set of a cell of `data` for `model`: 10,000 images, or the windows of the
    model's context in the validation split."""
    layout = data_layout(data, model)
    if layout == "shakespeare":
        return window_count(SHAKESPEARE_CHARACTERS - int(SHAKESPEARE_CHARACTERS * TRAIN_SHARE),
                            input_shape(model)[0])
    if layout == "model":
        return user_model(model).data["test"] if data == "model" else user_models.SYNTHETIC_TEST
    return TEST_SAMPLES


def window_count(characters: int, context: int) -> int:
    """Windows of context + 1 characters a text of `characters` holds, one every `context`
    characters (each window's last character is the next one's first input)."""
    return (characters - 1) // context


def check_fits(data: str, model: str) -> None:
    """A clear error where the model cannot take the dataset's samples."""
    if model not in MODELS:
        return check_file_fits(data, user_model(model))
    if data == "model":
        raise UserError(f"--data model is a model file's own data(); '{model}' is xbench's: use "
                        f"--data {MODELS[model].dataset} (or synthetic)")
    wanted = MODELS[model].dataset
    if data not in ("synthetic", wanted):
        def shape(dataset):
            return "x".join(map(str, INPUT_SHAPES[dataset]))
        takes = "text" if wanted == "shakespeare" else f"images ({shape(wanted)})"
        holds = "text" if data == "shakespeare" else f"{shape(data)} images"
        raise UserError(f"model '{model}' takes {wanted} {takes}; --data {data} holds {holds}: "
                        f"use --data {wanted} (or synthetic), or a model for {data}: "
                        f"{', '.join(m for m, spec in MODELS.items() if spec.dataset == data)}")


# What each framework's loop gives a model of a dataset's images (the rows' framework names):
# PyTorch's channels first, TensorFlow's channels last.
IMAGE_LAYOUT = {"torch": lambda c, h, w: (c, h, w), "tensorflow": lambda c, h, w: (h, w, c)}


def check_file_fits(data: str, model: user_models.UserModel) -> None:
    """A clear error where a model file cannot take `data`: its own data() where it has one,
    random samples of its shapes, or MNIST or CIFAR-10 where it takes their images (channels
    first in PyTorch, last in Keras) into 10 classes."""
    name = Path(model.path).name
    instead = "--data model (its data()) or synthetic" if model.data else "--data synthetic"
    if data == "model" and model.data is None:
        raise UserError(f"--data model: {name} defines no data(); use --data synthetic, or a "
                        f"dataset its inputs fit")
    if data in INPUT_SHAPES:
        for framework, built in model.built.items():
            wanted = IMAGE_LAYOUT[framework](*INPUT_SHAPES[data])
            if (tuple(built["input_shape"]) != wanted or model.input_dtype != "float32"
                    or model.classes != NUM_CLASSES or model.target_shape):
                raise UserError(
                    f"--data {data} (the grid's data; mnist unless given): {name}'s {framework} "
                    f"model takes {tuple(built['input_shape'])} {model.input_dtype} into "
                    f"{model.classes} classes; {data} is {wanted} float32 images of "
                    f"{NUM_CLASSES} classes: use {instead}")
    elif data == "shakespeare":
        raise UserError(f"--data shakespeare is for xbench's gpt models; {name} takes its own "
                        f"data() (--data model), random samples (synthetic), mnist or cifar10")


def synthetic_samples(model: str, framework: str, seed: int, train: int | None,
                      test: int | None) -> Images:
    """Random samples shaped as a model file's (as `framework` takes them): inputs from N(0, 1)
    (token ids below its classes where it takes int64), targets below its classes."""
    user = user_model(model)
    rng = np.random.default_rng(seed)
    shape = input_shape(model, framework)

    def samples(count):
        inputs = (rng.integers(0, user.classes, (count, *shape)) if user.input_dtype == "int64"
                  else rng.standard_normal((count, *shape), np.float32))
        return inputs, rng.integers(0, user.classes, (count, *user.target_shape))

    return Images(*samples(train or user_models.SYNTHETIC_TRAIN),
                  *samples(test or user_models.SYNTHETIC_TEST), dataset="synthetic",
                  source="synthetic", layout="model")


def model_file_data(model: str) -> Images:
    """A model file's own data(), in the types the model takes, checked to be the arrays that
    were checked before the grid ran (each rank calls data() itself)."""
    user = user_model(model)
    takes = {**user.by(), "input_dtype": user.input_dtype, "target_shape": user.target_shape,
             "classes": user.classes}
    name = Path(user.path).name
    arrays = user_models.call(user_models.import_file(model), "data", Path(user.path))
    if user_models.data_check(arrays, takes, name)["digest"] != user.data["digest"]:
        raise UserError(f"{name}: data() returned other arrays than when the grid checked it; "
                        f"every rank calls it, so it must return the same arrays each time")
    parts = [user_models.as_trained(*arrays[part], user.input_dtype) for part in ("train", "test")]
    return Images(*parts[0], *parts[1], dataset="model", source=user.path, layout="model")


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
            arrays = {key: _read_idx(_idx_path(folder, stem), md5_gz, md5_raw)
                      for key, (stem, md5_gz, md5_raw) in IDX_FILES.items()}
            return Images(**{k: v[..., None] if "images" in k else v for k, v in arrays.items()},
                          dataset="mnist", source=str(folder.resolve()), layout="mnist")
        if (folder / "mnist.npz").is_file():
            return _read_keras_npz(folder / "mnist.npz")
    looked = "\n  ".join(str(d) for d in candidate_dirs(data_dir))
    raise UserError(f"MNIST not found. Looked for the four IDX .gz files (or Keras' mnist.npz) "
                    f"in:\n  {looked}\n{HOW_TO_GET}")


def synthetic_tokens(model: str, seed: int = 0, train: int | None = None,
                     test: int | None = None) -> Images:
    """Random token windows shaped as the model's (as many as Tiny Shakespeare has unless
    `train` and `test` say): timings only, loss and accuracy mean nothing."""
    rng = np.random.default_rng(seed)
    context = input_shape(model)[0]
    train = train or train_samples("shakespeare", model)
    test = test or test_samples("shakespeare", model)
    windows = [rng.integers(0, VOCAB, (count, context + 1), dtype=np.uint8)
               for count in (train, test)]
    return Images(*_split_windows(windows[0]), *_split_windows(windows[1]), dataset="synthetic",
                  source="synthetic", layout="shakespeare")


def _split_windows(windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Windows of context + 1 tokens as (inputs, next tokens), each (n, context)."""
    return np.ascontiguousarray(windows[:, :-1]), np.ascontiguousarray(windows[:, 1:])


def text_windows(tokens: np.ndarray, context: int) -> tuple[np.ndarray, np.ndarray]:
    """The text's windows of context + 1 tokens, one every `context` tokens from its start,
    as (inputs, next tokens)."""
    count = window_count(len(tokens), context)
    starts = np.arange(count)[:, None] * context + np.arange(context + 1)
    return _split_windows(tokens[starts])


def shakespeare_dirs(data_dir=None) -> list[Path]:
    """Where Tiny Shakespeare is looked for, in order: the folder given, its tinyshakespeare
    folder, and a tinyshakespeare folder beside it (so a --data-dir that holds MNIST in a
    shared data folder finds the text beside it); then $XBENCH_DATA_DIR the same way, then
    ./data."""
    roots = [Path(data_dir)] if data_dir else []
    if os.environ.get("XBENCH_DATA_DIR"):
        roots.append(Path(os.environ["XBENCH_DATA_DIR"]))
    if not data_dir:
        roots.append(Path("data"))
    return [folder for root in roots
            for folder in (root, root / SHAKESPEARE_FOLDER, root.parent / SHAKESPEARE_FOLDER)]


def load_shakespeare(data_dir=None, context: int = 64) -> Images:
    """Tiny Shakespeare's characters as token ids (its 65 characters in sorted order), split as
    nanoGPT splits it, cut into windows of `context` + 1; its SHA-256 verified."""
    for folder in shakespeare_dirs(data_dir):
        path = folder / SHAKESPEARE_FILE
        if path.is_file():
            raw = path.read_bytes()
            if hashlib.sha256(raw).hexdigest() != SHAKESPEARE_SHA256:
                raise UserError(f"{path} is not Tiny Shakespeare's {SHAKESPEARE_FILE}: its SHA-256 "
                                f"does not match ({len(raw):,} bytes, expected "
                                f"{SHAKESPEARE_CHARACTERS:,}). {SHAKESPEARE_HOW_TO_GET}")
            alphabet = np.unique(np.frombuffer(raw, np.uint8))
            assert len(alphabet) == VOCAB, len(alphabet)
            tokens = np.searchsorted(alphabet, np.frombuffer(raw, np.uint8)).astype(np.uint8)
            split = int(len(tokens) * TRAIN_SHARE)
            return Images(*text_windows(tokens[:split], context),
                          *text_windows(tokens[split:], context), dataset="shakespeare",
                          source=str(path.resolve()), layout="shakespeare")
    looked = "\n  ".join(str(d) for d in shakespeare_dirs(data_dir))
    raise UserError(f"Tiny Shakespeare not found. Looked for {SHAKESPEARE_FILE} in:\n  {looked}\n"
                    f"{SHAKESPEARE_HOW_TO_GET}")


def synthetic_images(layout="mnist", seed=0, train=None, test=TEST_SAMPLES):
    """Random images shaped as `layout`'s (as many as it has unless `train` says): timings only,
    accuracy means nothing. Rows say dataset=synthetic."""
    rng = np.random.default_rng(seed)
    channels, height, width = INPUT_SHAPES[layout]
    train = TRAIN_SAMPLES[layout] if train is None else train
    return Images(rng.integers(0, 256, (train, height, width, channels), dtype=np.uint8),
                  rng.integers(0, 10, train, dtype=np.uint8),
                  rng.integers(0, 256, (test, height, width, channels), dtype=np.uint8),
                  rng.integers(0, 10, test, dtype=np.uint8), dataset="synthetic",
                  source="synthetic", layout=layout)


def load(cell, framework: str) -> Images:
    """The cell's data: real or synthetic, its base training set capped by max_train_samples
    and its test set by max_test_samples (a model file's synthetic samples shaped as
    `framework`'s model takes them)."""
    layout = data_layout(cell.data, cell.model)
    if cell.data == "model":
        data = model_file_data(cell.model)
    elif cell.data == "synthetic" and layout == "model":
        data = synthetic_samples(cell.model, framework, cell.seed, cell.max_train_samples or None,
                                 cell.max_test_samples or None)
    elif cell.data == "synthetic" and layout == "shakespeare":
        data = synthetic_tokens(cell.model, cell.seed, cell.max_train_samples or None,
                                cell.max_test_samples or None)
    elif cell.data == "synthetic":
        data = synthetic_images(layout, cell.seed, cell.max_train_samples or None,
                                cell.max_test_samples or TEST_SAMPLES)
    elif cell.data == "shakespeare":
        data = load_shakespeare(cell.data_dir, input_shape(cell.model)[0])
    else:
        data = (load_cifar10 if cell.data == "cifar10" else load_mnist)(cell.data_dir)
    if cell.max_train_samples:
        data.train_images = data.train_images[:cell.max_train_samples]
        data.train_labels = data.train_labels[:cell.max_train_samples]
    if cell.max_test_samples:
        data.test_images = data.test_images[:cell.max_test_samples]
        data.test_labels = data.test_labels[:cell.max_test_samples]
    return data


def data_folder(data: str, data_dir=None) -> str:
    """The absolute folder (or archive) `data` is read from, checksums verified: resolved once,
    where the user gave it, so that every cell reads exactly that whatever its working
    directory."""
    loader = {"cifar10": load_cifar10, "shakespeare": load_shakespeare}.get(data, load_mnist)
    source = Path(loader(data_dir).source)
    return str(source if source.is_dir() else source.parent)


def _idx_path(folder, stem):
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


def _read_idx(path, md5_gz, md5_raw):
    raw = _verified(path, md5_gz if path.suffix == ".gz" else md5_raw, "MNIST",
                    f"fetch it again with `xbench data download --to {path.parent}`")
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
        return Images(f["x_train"][..., None], f["y_train"], f["x_test"][..., None], f["y_test"],
                      dataset="mnist", source=str(path.resolve()), layout="mnist")


def epoch_order(samples, seed, epoch):
    """The shuffled order of one epoch: the same for every backend, rank and framework."""
    return np.random.default_rng([seed, epoch]).permutation(samples)


def rank_indices(samples: int, global_batch: int, seed: int, epoch: int, rank: int, world: int,
                 replicas: int = 1) -> np.ndarray:
    """Indices process `rank` of `world` trains on in `epoch`, in order, as DistributedSampler
    deals them.

    The incomplete last global batch is dropped, then sample i goes to rank i % world; consecutive
    per-device batches of every rank together make exactly the global batches of a 1-device run.
    A process that splits its batch into `replicas` contiguous parts itself (DataParallel,
    MirroredStrategy, jax.jit's sharded batch) gets each batch reordered so that part r holds
    every r-th sample, what DistributedSampler gives rank r: BatchNorm then normalises over the
    same samples per replica in every backend that normalises per replica (JAX's normalise over
    the whole global batch).
    """
    order = epoch_order(samples, seed, epoch)[: samples // global_batch * global_batch][rank::world]
    per_replica = global_batch // world // replicas
    return order.reshape(-1, per_replica, replicas).transpose(0, 2, 1).reshape(-1)


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
            return _cifar_images(parts, str(folder.resolve()))
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


def _verified(path: Path, md5: str, dataset: str = "CIFAR-10",
              remedy: str = CIFAR_HOW_TO_GET) -> bytes:
    """The file's bytes if their MD5 is the published one, else a UserError saying how to get
    the file again."""
    raw = path.read_bytes()
    if hashlib.md5(raw).hexdigest() != md5:
        raise UserError(f"{path} is corrupt or not the original {dataset} file: its MD5 does not "
                        f"match the published one ({path.stat().st_size:,} bytes; an interrupted "
                        f"download or extraction leaves a truncated file). Delete it and "
                        f"{remedy}")
    return raw


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
    return _cifar_images(parts, source)


def _cifar_images(parts: dict, source: str) -> Images:
    """The five training batches in order and the test batch, as (n, 32, 32, 3) images."""
    def images(rows):
        return np.ascontiguousarray(rows.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))

    train = [parts[f"data_batch_{i}"] for i in range(1, 6)]
    test_rows, test_labels = parts["test_batch"]
    return Images(images(np.concatenate([rows for rows, _ in train])),
                  np.concatenate([labels for _, labels in train]), images(test_rows),
                  test_labels, dataset="cifar10", source=source, layout="cifar10")
