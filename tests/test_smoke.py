"""The smoke preset through the real command line: a row for every backend, side by side."""
from common.backend import BACKENDS
from common.results import read_rows
from conftest import xbench


def test_smoke_grid_has_a_row_for_every_backend(mnist_dir, tmp_path):
    results = tmp_path / "smoke.jsonl"
    run = xbench("grid", "--preset", "smoke", "--max-train-samples", 1024, "--data-dir", mnist_dir,
                 "--results", results, timeout=1800)
    assert run.returncode == 0, run.stderr
    rows, problems = read_rows(results)
    assert not problems
    by_cell = {(r["backend"], r["devices"]): r for r in rows}
    assert set(by_cell) == {(b, d) for b in BACKENDS for d in (1, 2)}
    for (backend, devices), row in by_cell.items():
        if (backend, devices) == ("pt-dp", 2):
            assert row["status"] == "unsupported"  # DataParallel needs GPUs for N > 1
        else:
            assert row["status"] == "ok", f"{backend} d{devices}: {row['error']}"
            assert row["epochs"][1]["rate"] > 0 and row["test_accuracy"] > 0.5
    # the printed table names every backend, and the run says where its results are
    assert all(backend in run.stdout for backend in BACKENDS)
    assert f"results: {results}" in run.stdout
    # one network everywhere: same parameter count in every ok row
    assert {r["params"] for r in rows if r["status"] == "ok"} == {402_442}
