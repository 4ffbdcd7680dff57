"""What a cell trains on: the dataset's kind (MNIST, CIFAR-10, Tiny Shakespeare, random samples,
a model file's own data()), how many samples it holds for a model, and the cell's samples in
memory (`load`). The datasets themselves: common.workload.mnist, cifar10 and shakespeare; which
samples each rank trains on: common.workload.samples.
"""
from pathlib import Path

import numpy as np

from xbench.common.errors import UserError
from xbench.common.workload.cifar10 import load_cifar10
from xbench.common.workload.file_checks import as_trained, data_check, seeded_data
from xbench.common.workload.mnist import load_mnist
from xbench.common.workload.model import Model
from xbench.common.workload.model_file import (
    SYNTHETIC_TEST,
    SYNTHETIC_TRAIN,
    ModelFile,
    import_file,
)
from xbench.common.workload.models import INPUT_SHAPES, VOCAB
from xbench.common.workload.samples import Images
from xbench.common.workload.shakespeare import (
    SHAKESPEARE_CHARACTERS,
    TRAIN_SHARE,
    load_shakespeare,
    split_windows,
    window_count,
)

TRAIN_SAMPLES = {"mnist": 60000, "cifar10": 50000}  # the base training set of each dataset
TEST_SAMPLES = 10000
# synthetic: random images (or tokens) shaped as the model's; model: a model file's own data()
DATA_KINDS = ("mnist", "cifar10", "shakespeare", "synthetic", "model")


def data_layout(data: str, model: Model) -> str:
    """The dataset whose samples a cell of `data` for `model` holds: synthetic data takes the
    model's (a model file's, "model": shaped as its inputs)."""
    return model.dataset if data == "synthetic" else data


def train_samples(data: str, model: Model) -> int:
    """The base training set of a cell of `data` for `model` (synthetic: as large as the
    dataset it imitates); for text, the windows of the model's context in the training split."""
    layout = data_layout(data, model)
    if layout == "shakespeare":
        return window_count(int(SHAKESPEARE_CHARACTERS * TRAIN_SHARE), model.input_shape()[0])
    if layout == "model":
        return model.data["train"] if data == "model" else SYNTHETIC_TRAIN
    return TRAIN_SAMPLES[layout]


def test_samples(data: str, model: Model) -> int:
    """The test set of a cell of `data` for `model`: 10,000 images, or the windows of the
    model's context in the validation split."""
    layout = data_layout(data, model)
    if layout == "shakespeare":
        return window_count(SHAKESPEARE_CHARACTERS - int(SHAKESPEARE_CHARACTERS * TRAIN_SHARE),
                            model.input_shape()[0])
    if layout == "model":
        return model.data["test"] if data == "model" else SYNTHETIC_TEST
    return TEST_SAMPLES


def synthetic_samples(model: ModelFile, framework: str, seed: int, train: int | None,
                      test: int | None) -> Images:
    """Random samples shaped as a model file's (as `framework` takes them): inputs from N(0, 1)
    (token ids below its classes where it takes int64), targets below its classes."""
    rng = np.random.default_rng(seed)
    shape = model.input_shape(framework)

    def samples(count):
        inputs = (rng.integers(0, model.classes, (count, *shape)) if model.input_dtype == "int64"
                  else rng.standard_normal((count, *shape), np.float32))
        return inputs, rng.integers(0, model.classes, (count, *model.target_shape))

    return Images(*samples(train or SYNTHETIC_TRAIN), *samples(test or SYNTHETIC_TEST),
                  dataset="synthetic", source="synthetic", layout="model")


def model_file_data(model: ModelFile) -> Images:
    """A model file's own data(), in the types the model takes, checked to be the arrays that
    were checked before the grid ran (each rank calls data() itself)."""
    takes = {**model.by(), "input_dtype": model.input_dtype, "target_shape": model.target_shape,
             "classes": model.classes}
    name = Path(model.path).name
    arrays = seeded_data(import_file(model.name), Path(model.path))
    if data_check(arrays, takes, name)["digest"] != model.data["digest"]:
        raise UserError(f"{name}: data() returned other arrays than when the grid checked it; "
                        f"every rank calls it, so it must return the same arrays each time")
    parts = [as_trained(*arrays[part], model.input_dtype) for part in ("train", "test")]
    return Images(*parts[0], *parts[1], dataset="model", source=model.path, layout="model")


def synthetic_tokens(model: Model, seed: int = 0, train: int | None = None,
                     test: int | None = None) -> Images:
    """Random token windows shaped as the model's (as many as Tiny Shakespeare has unless
    `train` and `test` say): timings only, loss and accuracy mean nothing."""
    rng = np.random.default_rng(seed)
    context = model.input_shape()[0]
    train = train or train_samples("shakespeare", model)
    test = test or test_samples("shakespeare", model)
    windows = [rng.integers(0, VOCAB, (count, context + 1), dtype=np.uint8)
               for count in (train, test)]
    return Images(*split_windows(windows[0]), *split_windows(windows[1]), dataset="synthetic",
                  source="synthetic", layout="shakespeare")


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


def load(cell, model: Model, framework: str) -> Images:
    """The cell's data for its `model`: real or synthetic, its base training set capped by
    max_train_samples and its test set by max_test_samples (a model file's synthetic samples
    shaped as `framework`'s model takes them)."""
    layout = data_layout(cell.data, model)
    if cell.data == "model":
        data = model_file_data(model)
    elif cell.data == "synthetic" and layout == "model":
        data = synthetic_samples(model, framework, cell.seed, cell.max_train_samples or None,
                                 cell.max_test_samples or None)
    elif cell.data == "synthetic" and layout == "shakespeare":
        data = synthetic_tokens(model, cell.seed, cell.max_train_samples or None,
                                cell.max_test_samples or None)
    elif cell.data == "synthetic":
        data = synthetic_images(layout, cell.seed, cell.max_train_samples or None,
                                cell.max_test_samples or TEST_SAMPLES)
    elif cell.data == "shakespeare":
        data = load_shakespeare(cell.data_dir, model.input_shape()[0])
    else:
        data = (load_cifar10 if cell.data == "cifar10" else load_mnist)(cell.data_dir)
    if cell.max_train_samples:
        data.train_images = data.train_images[:cell.max_train_samples]
        data.train_labels = data.train_labels[:cell.max_train_samples]
    if cell.max_test_samples:
        data.test_images = data.test_images[:cell.max_test_samples]
        data.test_labels = data.test_labels[:cell.max_test_samples]
    return data


def data_folder(data: str, data_dir=None) -> tuple[str, tuple[str, ...]]:
    """The absolute folder (or archive) `data` is read from, checksums verified: resolved once,
    where the user gave it, so that every cell reads exactly that whatever its working
    directory; and the files read there (no output may be one of them)."""
    loader = {"cifar10": load_cifar10, "shakespeare": load_shakespeare}.get(data, load_mnist)
    found = loader(data_dir)
    source = Path(found.source)
    return str(source if source.is_dir() else source.parent), found.files
