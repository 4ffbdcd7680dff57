"""The conventions a command-line tool keeps: --version, --json, colour only on a terminal and
never under NO_COLOR, and no framework or library noise without -v (what a process of its own
prints, C++ logs included)."""
import json
import os
import re

import click

from tests.helpers import XBENCH, run_in_terminal, strict_json, xbench, xbench_here
from tests.report_fixtures import make_row, write_rows


def test_version_json_and_no_color():
    version = xbench_here("--version")
    assert version.returncode == 0 and version.stdout.startswith("xbench, version ")
    backends = strict_json(xbench_here("backends", "--json").stdout)
    assert {"backend", "available", "reason", "spans_nodes"} <= set(backends[0])


def test_models_show_their_shapes_with_progress_and_keep_what_they_counted(tmp_path):
    """Counted on a terminal with a bar as it goes; then kept: --json reads what was kept, and a
    damaged entry is counted again."""
    cache = {**os.environ, "XBENCH_CACHE": str(tmp_path / "cache"), "COLUMNS": "100"}
    code, shown = run_in_terminal([*XBENCH, "models"], env=cache)
    assert code == 0, shown
    assert "measuring the models" in shown and "JAX: gpt-medium" in shown  # the bar, as it goes
    table = " ".join(shown[shown.index("takes and gives"):].split())  # as read, lines joined
    assert "64-token context over 65 characters" in table and "1x28x28 image -> 10 classes" in table
    assert "809,856" in table and "PyTorch" in table
    assert "TensorFlow" not in shown.replace("Keras 3.15 on tensorflow", "")
    kept = sorted((tmp_path / "cache" / "counted").glob("PyTorch-small-*.json"))
    assert len(kept) == 1
    kept[0].write_text('{"framework": "PyTorch", "params": "many"}')
    listed = xbench("models", "--json", env=cache)
    models = strict_json(listed.stdout)
    specs = {m["model"]: m for m in models if m["source"] == "spec (common)"}
    assert {(name, m["params"]) for name, m in specs.items()} == {
        ("small", 402_442), ("large", 4_104_202), ("resnet18", 11_173_962), ("vgg19", 20_040_522),
        ("gpt-tiny", 809_856), ("gpt-small", 10_770_816), ("gpt-medium", 85_892_352),
        ("phantom-mlp", 5_012_490)}
    counted = {(m["model"], m["source"].split()[0]): m["params"] for m in models}
    assert all(counted[(name, framework)] == spec["params"] for name, spec in specs.items()
               for framework in ("PyTorch", "Keras", "JAX")), counted
    assert (specs["small"]["input_shape"], specs["small"]["output_values"]) == ([1, 28, 28], 10)
    assert (specs["gpt-tiny"]["context"], specs["gpt-tiny"]["heads"]) == (64, 4)
    assert json.loads(kept[0].read_text())["params"] == 402_442  # counted again, and kept
    assert "TensorFlow" not in listed.stderr  # framework log lines kept off
    assert "measuring" not in listed.stderr  # no progress off a terminal
    bad = [*XBENCH, "grid", "--preset", "smoke", "--backend", "nope"]
    _, coloured = run_in_terminal(bad)
    _, plain = run_in_terminal(bad, env={**os.environ, "NO_COLOR": "1"})
    assert "\x1b[31m" in coloured and "unknown backend" in coloured
    assert "\x1b[" not in plain and "unknown backend 'nope'" in plain



NOISE = ("absl::InitializeLog", "oneDNN custom operations", "Warning:", "warnings.warn",
         "RuntimeWarning", "UserWarning")


def test_no_framework_or_library_noise_without_verbose(tmp_path):
    base = write_rows(tmp_path / "base.jsonl", [make_row(rates=(80, 100))])
    for done in (xbench("-q", "backends"), xbench("grid", "--preset", "smoke", "--dry-run",
                                                  "--results", tmp_path / "r.jsonl"),
                 xbench("report", base, "--out", tmp_path / "out", "--format", "png,md")):
        assert done.returncode == 0, done.stderr
        assert not any(noise in done.stdout + done.stderr for noise in NOISE), done.stderr


def named_backends(text: str) -> set[str]:
    """The backends a help text names (whole names: pt-dp is not pt-ddp)."""
    from xbench.common.backends.traits import TRAITS
    return {name for name in TRAITS if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)}


def test_every_list_of_backends_in_the_help_is_the_traits_tables():
    """A help text that lists backends lists what their traits say (the help is generated from
    them, so it cannot drift): every option that names any is here, with exactly its set."""
    from xbench.cli.main import main
    from xbench.common.backends.frameworks import FRAMEWORKS
    from xbench.common.backends.traits import TRAITS, one_per_library, profiled
    from xbench.common.backends.traits import references as single
    knobs = [t.name for t in TRAITS.values() if t.bucket_knob]
    expected = {
        ("grid", "backends"): set(TRAITS),
        ("grid", "compression"): {t.name for t in TRAITS.values() if len(t.compressions) > 1},
        ("probe", "backend"): {*single().values(), *one_per_library()},
        ("profile", "backend"): set(profiled()),
        ("grid", "set_epoch"): {t.name for t in TRAITS.values() if t.distributed_sampler},
        ("grid", "reshard"): {t.name for t in TRAITS.values() if t.shards_parameters},
        ("grid", "bucket_mb"): set(knobs),
        ("grid", "accumulate"): {t.name for t in TRAITS.values() if "last" in t.sync_modes},
        ("grid", "accumulate_sync"): {t.name for t in TRAITS.values() if "each" in t.sync_modes},
        ("grid", "compile"): {t.name for t in TRAITS.values() if t.compiler},
    }
    named = {(command, param.name): named_backends(param.help or "")
             for command, group in main.commands.items()
             for param in group.params if isinstance(param, click.Option)}
    assert {key: found for key, found in named.items() if found} == expected
    assert all(framework.title in main.help for framework in FRAMEWORKS)
    assert f"{len(TRAITS)} backends" in main.help
