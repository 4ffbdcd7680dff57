"""Grid files -> cells, and the clear errors for bad grids."""
import re

import pytest

from xbench.common.errors import UserError
from xbench.common.grids.grid import expand, preset_path, read_grid_file

BASE = {"name": "t", "backends": ["pt-ddp"], "models": ["small"], "multiples": [1],
        "batches": [128], "devices": [1, 2]}


def test_seed_grid_is_the_blogs():
    cells = expand(read_grid_file(preset_path("seed")))
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
                    "devices": [1, 2], "repeats": 2, "batch_mode": "per_device"})
    # repeat by repeat: each configuration once, then each again
    assert [(c.devices, c.repeat) for c in cells] == [(1, 0), (2, 0), (1, 1), (2, 1)]
    assert [(c.global_batch, c.per_device_batch) for c in cells[:2]] == [(128, 128), (256, 128)]
    strong = expand(BASE)
    assert [(c.global_batch, c.per_device_batch) for c in strong] == [(128, 128), (128, 64)]
    assert len({c.key for c in cells}) == 2  # repeats share the key


def test_a_single_device_reference_has_no_n_device_cell():
    single = expand({**BASE, "backends": ["tf-single"], "devices": [1, 2]})
    assert [(c.backend, c.devices) for c in single] == [("tf-single", 1)]


def test_a_removed_key_says_why(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('backends = ["pt-ddp"]\ncompute_references = true\n')
    with pytest.raises(UserError, match="'compute_references' is no longer a setting: compute "
                                        "and communication are now counted"):
        read_grid_file(path)


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
