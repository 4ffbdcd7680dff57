"""MNIST loading and the per-epoch order every backend shares; damaged data and a download
without a network stopped with one clear message (the real command line, in this process)."""
import os
import shutil

import numpy as np
import pytest

from tests.helpers import refused, xbench, xbench_here
from xbench.common import cache
from xbench.common.errors import UserError
from xbench.common.running import timings
from xbench.common.workload import data, mnist
from xbench.common.workload.samples import NORMALISATION, epoch_order, rank_indices

TRAIN_LABEL_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
TEST_LABEL_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def test_real_mnist_shapes_and_label_counts(mnist):
    assert mnist.train_images.shape == (60000, 28, 28, 1) and mnist.train_images.dtype == np.uint8
    assert mnist.test_images.shape == (10000, 28, 28, 1)
    assert np.bincount(mnist.train_labels).tolist() == TRAIN_LABEL_COUNTS
    assert np.bincount(mnist.test_labels).tolist() == TEST_LABEL_COUNTS
    pixels = mnist.train_images / 255.0
    assert (pixels.mean(),) == pytest.approx(mnist.mean, abs=1e-4)
    assert (pixels.std(),) == pytest.approx(mnist.std, abs=1e-4)
    assert mnist.dataset == "mnist"


def test_unpacked_mnist_is_kept_and_unpacked_again_when_changed(mnist_dir, tmp_path,
                                                                monkeypatch):
    """What every cell's processes read: kept unpacked, read back the same; a kept file that no
    longer matches its MD5 is unpacked again; a cache that cannot be written keeps nothing and
    the data is still read."""
    monkeypatch.setenv("XBENCH_CACHE", str(tmp_path / "cache"))
    first = mnist.load_mnist(mnist_dir)
    kept = list((tmp_path / "cache" / "data").glob("mnist-*"))
    assert len(kept) == 4
    images = next(k for k in kept if k.stat().st_size == 47_040_016)  # the training images
    images.write_bytes(images.read_bytes()[:-1] + b"\xff")  # one pixel changed
    for again in (mnist.load_mnist(mnist_dir), mnist.load_mnist(mnist_dir)):
        assert np.array_equal(again.train_images, first.train_images)
        assert np.array_equal(again.test_labels, first.test_labels)
    assert np.bincount(first.train_labels).tolist() == TRAIN_LABEL_COUNTS
    (tmp_path / "a file").write_text("")
    monkeypatch.setenv("XBENCH_CACHE", str(tmp_path / "a file"))
    assert np.array_equal(mnist.load_mnist(mnist_dir).train_images, first.train_images)


def test_a_cache_that_is_a_loop_of_links_keeps_nothing_and_stops_nothing(mnist_dir, tmp_path,
                                                                         monkeypatch):
    """XBENCH_CACHE a loop of symbolic links (it was a traceback from Path.resolve in `models
    --json` and the dry run): every path under it is found, nothing is kept, what reads it goes
    on (MNIST, the dry run's timings), and what must keep something (a model file's facts) is
    one line naming the cache."""
    (tmp_path / "loopA").symlink_to("loopB")
    (tmp_path / "loopB").symlink_to("loopA")
    monkeypatch.setenv("XBENCH_CACHE", str(tmp_path / "loopA"))
    assert cache.cache_path("counted", "x.json").parent.parent == cache.cache_root()
    assert cache.read_kept(cache.cache_path("counted", "x.json"), {})[0] is None
    assert timings.kept_timings() == {}
    assert mnist.load_mnist(mnist_dir).train_images.shape == (60000, 28, 28, 1)
    with pytest.raises(UserError, match=r"cannot keep what xbench finds of model.py in "
                                        r"XBENCH_CACHE \(.*loopA\): Too many levels of symbolic"):
        cache.keep(cache.cache_path("models", "m.json"), {}, "model.py")


def test_torchvision_raw_layout_is_found(mnist_dir, tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    shutil.copytree(mnist_dir, raw)
    assert mnist.load_mnist(tmp_path).source == str(raw.resolve())


def test_checksum_failure_is_a_clear_error(mnist_dir, tmp_path):
    for f in mnist_dir.glob("*.gz"):
        shutil.copy(f, tmp_path / f.name)
    target = tmp_path / "train-labels-idx1-ubyte.gz"
    target.write_bytes(target.read_bytes()[:-100])  # truncated download
    with pytest.raises(UserError, match="train-labels-idx1-ubyte.gz is corrupt .*MD5"):
        mnist.load_mnist(tmp_path)


def test_missing_data_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("XBENCH_DATA_DIR", raising=False)
    with pytest.raises(UserError) as error:
        mnist.load_mnist(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(error.value)
    assert "xbench data download" in str(error.value) and "--data synthetic" in str(error.value)


def test_synthetic_data_says_so():
    fake = data.synthetic_images("mnist", seed=1)
    assert fake.dataset == "synthetic" and fake.train_images.shape == (60000, 28, 28, 1)
    cifar = data.synthetic_images("cifar10", seed=1, train=300, test=50)
    assert cifar.train_images.shape == (300, 32, 32, 3) and cifar.test_images.shape[0] == 50
    assert cifar.mean == NORMALISATION["cifar10"][0]


def test_epoch_order_is_seeded_per_epoch():
    a, b = epoch_order(1000, seed=3, epoch=1), epoch_order(1000, seed=3, epoch=2)
    assert sorted(a) == list(range(1000)) and not np.array_equal(a, b)
    assert np.array_equal(a, epoch_order(1000, seed=3, epoch=1))


@pytest.mark.parametrize("world", [2, 4])
def test_rank_shards_are_disjoint_and_rebuild_the_global_batches(world):
    samples, global_batch = 1030, 64
    shards = [rank_indices(samples, global_batch, 0, 1, rank, world) for rank in range(world)]
    single = rank_indices(samples, global_batch, 0, 1, 0, 1)
    assert len(single) == samples // global_batch * global_batch  # incomplete last batch dropped
    per_device = global_batch // world
    for step in range(len(single) // global_batch):
        together = np.concatenate([s[step * per_device:(step + 1) * per_device] for s in shards])
        assert sorted(together) == sorted(single[step * global_batch:(step + 1) * global_batch])
    assert len(np.unique(np.concatenate(shards))) == len(single)


@pytest.mark.parametrize("replicas", [2, 4])
def test_a_contiguous_split_over_replicas_gives_each_what_distributed_sampler_gives_its_rank(
        replicas):
    """DataParallel and MirroredStrategy cut one process's batch into contiguous parts: with the
    reordered indices, part r of every batch is rank r's per-device batch of a process per device
    (so BatchNorm normalises over the same samples in pt-dp, tf-mirrored and pt-ddp)."""
    samples, global_batch = 1030, 64
    one_process = rank_indices(samples, global_batch, 0, 1, 0, 1, replicas)
    per_device = global_batch // replicas
    for rank in range(replicas):
        shard = rank_indices(samples, global_batch, 0, 1, rank, replicas)
        parts = one_process.reshape(-1, replicas, per_device)[:, rank]
        assert np.array_equal(parts.reshape(-1), shard)


def flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path):
    path.write_bytes(path.read_bytes()[:1000])


@pytest.mark.parametrize("damage", [flip_a_byte, truncate])
def test_damaged_mnist_is_one_clear_message(damage, mnist_dir, tmp_path):
    folder = tmp_path / "mnist"
    shutil.copytree(mnist_dir, folder)
    damage(folder / "train-labels-idx1-ubyte.gz")
    done = xbench_here("grid", "--preset", "smoke", "--data-dir", folder, "--results",
                       tmp_path / "r.jsonl")
    refused(done, "train-labels-idx1-ubyte.gz is corrupt")
    assert f"xbench data download --to {folder}" in done.stderr
    assert not (tmp_path / "r.jsonl").exists()  # nothing ran, nothing was written


def test_a_download_without_a_network_is_one_line(tmp_path):
    """A process of its own: urllib keeps the proxies of its first download for the process."""
    env = {**os.environ, "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
    refused(xbench("data", "download", "--to", tmp_path / "mnist", env=env, timeout=120),
            "could not download MNIST")
