"""Grid files -> cells, and the clear errors for bad grids."""
import re

import pytest

from xbench.common.errors import UserError
from xbench.common.grid import expand, preset_path, read_grid_file

BASE = {"name": "t", "backends": ["pt-ddp"], "models": ["small"], "multiples": [1],
        "batches": [128], "devices": [1, 2]}


def test_seed_grid_is_the_blogs():
    cells = [c for c in expand(read_grid_file(preset_path("seed"))) if not c.reference_for]
    # 6 data-parallel backends on 1, 2, 4 devices; the 2 single-device references on 1
    assert len(cells) == (6 * 3 + 2) * 2 * 3 * 3
    assert {c.multiple for c in cells} == {1, 4, 8} and {c.batch for c in cells} == {128, 256, 512}
    assert {c.devices for c in cells} == {1, 2, 4} and {c.epochs for c in cells} == {2}
    assert {c.backend for c in cells} == {"pt-single", "pt-dp", "pt-ddp", "tf-single",
                                          "tf-mirrored", "tf-multiworker", "hvd-torch", "hvd-tf"}
    assert {c.devices for c in cells if c.backend.endswith("-single")} == {1}


def test_overrides_narrow_the_axes_and_batch_modes():
    cells = expand(read_grid_file(preset_path("seed")),
                   {"backends": ["pt-ddp"], "models": ["small"], "multiples": [1], "batches": [128],
                    "devices": [1, 2], "repeats": 2, "batch_mode": "per_device",
                    "compute_references": False})
    # repeat by repeat: each configuration once, then each again
    assert [(c.devices, c.repeat) for c in cells] == [(1, 0), (2, 0), (1, 1), (2, 1)]
    assert [(c.global_batch, c.per_device_batch) for c in cells[:2]] == [(128, 128), (256, 128)]
    strong = expand({**BASE, "compute_references": False})
    assert [(c.global_batch, c.per_device_batch) for c in strong] == [(128, 128), (128, 64)]
    assert len({c.key for c in cells}) == 2  # repeats share the key


def test_compute_references_run_each_n_device_cell_at_its_threads_and_per_device_batch(
        monkeypatch):
    monkeypatch.setattr("xbench.common.grid.cpu_cores", lambda: 8)
    cells = expand({**BASE, "devices": [1, 2, 4], "batches": [128, 256]})
    references = [c for c in cells if c.reference_for]
    assert sorted((c.batch, c.threads, c.devices) for c in references) == [
        (32, 2, 1), (64, 2, 1), (64, 4, 1), (128, 4, 1)]
    two = next(c for c in cells if c.devices == 2 and c.batch == 128)
    assert next(c for c in references if c.batch == 64 and c.threads == 4).reference_for == (two.key,)
    assert all("|t" in c.key and c.key != two.key for c in references)
    # a single-device reference backend spans no devices: it gets no N-device cell, no reference
    single = expand({**BASE, "backends": ["tf-single"], "devices": [1, 2]})
    assert [(c.backend, c.devices, c.reference_for) for c in single] == [("tf-single", 1, ())]


@pytest.mark.parametrize("change, message", [
    ({"backends": ["pt-dpp"]}, "unknown backend 'pt-dpp' (did you mean 'pt-dp'?)"),
    ({"models": ["medium"]}, "unknown model 'medium'"),
    ({"batches": [0]}, "'batches' must be positive"),
    ({"devices": [1.5]}, "'devices' must be a whole number"),
    ({"batches": [100], "devices": [3]}, "batch 100 on 3 devices"),
    ({"batch_mode": "local"}, "'batch_mode' must be one of global, per_device"),
    ({"epochs": -1}, "'epochs' must be positive"),
])
def test_bad_grids_name_the_field(change, message):
    with pytest.raises(UserError, match=re.escape(message)):
        expand({**BASE, **change})


def test_unknown_key_in_a_grid_file(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('backends = ["pt-ddp"]\nbatchs = [128]\n')
    with pytest.raises(UserError, match="unknown key 'batchs' \\(did you mean 'batches'\\?\\)"):
        read_grid_file(path)


def test_not_toml(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text("backends = [pt-ddp\n")
    with pytest.raises(UserError, match="is not valid TOML"):
        read_grid_file(path)
