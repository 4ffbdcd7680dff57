"""The conventions a command-line tool keeps: --version, --json, colour only on a terminal and
never under NO_COLOR, and no framework or library noise without -v (what a process of its own
prints, C++ logs included)."""
import os

from tests.helpers import XBENCH, run_in_terminal, strict_json, xbench, xbench_here
from tests.report_fixtures import make_row, write_rows


def test_version_json_and_no_color():
    version = xbench_here("--version")
    assert version.returncode == 0 and version.stdout.startswith("xbench, version ")
    backends = strict_json(xbench_here("backends", "--json").stdout)
    assert {"backend", "available", "reason", "spans_nodes"} <= set(backends[0])
    listed = xbench("models", "--json")  # a process of its own: it loads every framework
    models = strict_json(listed.stdout)
    assert {(m["model"], m["params"]) for m in models if m["source"] == "spec (common)"} == {
        ("small", 402_442), ("large", 4_104_202), ("resnet18", 11_173_962), ("vgg19", 20_040_522),
        ("gpt-tiny", 809_856), ("gpt-small", 10_770_816), ("gpt-medium", 85_892_352)}
    assert "TensorFlow" not in listed.stderr  # framework log lines kept off
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
