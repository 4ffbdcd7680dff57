"""A model a user brings (`--model FILE.py`): a wrong file is one line and exit 2 before any cell
runs; the example vision transformer runs through PyTorch's and TensorFlow's backends on real
MNIST, and the report and `xbench predict` work on its rows; a file's own data() trains, in
keras-jax on tf-mirrored's trajectory; a framework the file does not serve, and JAX's Flax
backends, are `unsupported`, with the reason; a changed file is a new cell."""
import json
import os
import shutil
import textwrap

import numpy as np
import pytest

from tests.helpers import REPO, xbench, xbench_here
from xbench.common.backends.model_files import described
from xbench.common.results.store import read_rows
from xbench.common.workload.data import model_file_data
from xbench.common.workload.model_file import NotDescribed
from xbench.common.workload.resolve import resolve_model

EXAMPLE = REPO / "examples" / "vit_mnist.py"
SLICE = 1024

# A small classifier of 8 numbers into 3 classes, its data() drawn with numpy.
DATA = '''
import numpy as np


def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((640, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    return {"train": (x[:512], y[:512]), "test": (x[512:], y[512:])}
'''
MLP = DATA + '''

def pytorch():
    from torch import nn
    return {"model": nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3)),
            "inputs": ((8,), "float32"), "classes": 3}
'''
# The same classifier in Keras alone, its initial weights set from numpy: Keras on TensorFlow
# and on JAX draw different weights from one seed, so a file that sets its own starts
# tf-mirrored and keras-jax on one trajectory.
KERAS_MLP = DATA + '''

def keras():
    import keras
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(3)])
    rng = np.random.default_rng(1)
    model.set_weights([rng.normal(0, 0.3, w.shape).astype(np.float32)
                       for w in model.get_weights()])
    return {"model": model, "inputs": ((8,), "float32"), "classes": 3}
'''


@pytest.fixture
def cache(tmp_path):
    """The model facts' folder of this test alone (XBENCH_CACHE): the environment of a process
    of its own, or what xbench_here adds to this one's."""
    return {**os.environ, "XBENCH_CACHE": str(tmp_path / "cache")}


def model_file(folder, text, name="model.py"):
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


BAD_FILES = {
    "a syntax error": ("def pytorch(:\n", "model.py has a syntax error at line 1"),
    "a function that raises": ("def pytorch():\n    raise ValueError('no weights here')\n",
                               "model.py: pytorch() raised ValueError: no weights here"),
    "a wrong return type": ("def pytorch():\n    return [1, 2]\n",
                            "pytorch() returned list, not a dict"),
    "no model function": ("x = 1\n", "model.py defines neither pytorch() nor keras()"),
    "bad inputs": ("def pytorch():\n    from torch import nn\n    return {'model': nn.Linear(8, "
                   "3), 'inputs': (8, 'float32'), 'classes': 3}\n",
                   "pytorch()'s inputs is (8, 'float32'), not (shape of one sample"),
    "logits that do not fit its classes": (
        "def pytorch():\n    from torch import nn\n    return {'model': nn.Linear(8, 4), "
        "'inputs': ((8,), 'float32'), 'classes': 3}\n",
        "pytorch()'s model returned (2, 4) for a batch of 2; its targets and classes need "
        "logits of (2, 3)"),
    "a model that fails on its inputs": (
        "def pytorch():\n    from torch import nn\n    return {'model': nn.Linear(5, 3), "
        "'inputs': ((8,), 'float32'), 'classes': 3}\n",
        "pytorch()'s model on inputs of (2, 8) raised RuntimeError"),
    "a sys.exit at import": ("import sys\nsys.exit(3)\n",
                             "model.py: importing it raised SystemExit: 3"),
    "data() that raises": (MLP.replace("    rng = np.random", "    raise OSError('no disk')\n"
                                       "    rng = np.random"),
                           "model.py: data() raised OSError: no disk"),
    "data() targets outside its classes": (MLP.replace("(x[:, 1] > 0.5)", "(x[:, 1] > 0.5) * 5"),
                                           "data()['train']'s targets must be whole numbers from "
                                           "0 to 2"),
    "data() inputs of the wrong type": (MLP.replace(".astype(np.float32)", " > 0"),
                                        "data()['train']'s inputs are bool; the model takes "
                                        "float32"),
    "data() of complex numbers": (MLP.replace(".astype(np.float32)", ".astype(np.complex64)"),
                                 "data()['train']'s inputs are complex64; the model takes "
                                 "float32"),
    "an os._exit at import": ("import os\nos._exit(3)\n",
                              "model.py: building its pytorch() model in PyTorch, its process "
                              "ended with exit code 3 without an answer"),
    "an atexit hook that ends the process": (
        "import atexit, os\natexit.register(lambda: os._exit(3))\n" + MLP,
        "model.py: building its pytorch() model in PyTorch, its process ended with exit code 3 "
        "after it answered"),
    "a model with no trainable weights": (
        MLP.replace("nn.Linear(32, 3))", "nn.Linear(32, 3)).requires_grad_(False)"),
        "model.py: pytorch()'s model has no trainable weights"),
    "a Keras model with no trainable weights": (
        KERAS_MLP.replace("    return {", "    model.trainable = False\n    return {"),
        "model.py: keras()'s model has no trainable weights"),
    "data() with a NaN input": (MLP.replace("    y = (x", "    x[3, 2] = np.nan\n    y = (x"),
                                "data()['train']'s inputs hold values that are not finite as "
                                "float32 (NaN, inf, or beyond float32's 3.4e38)"),
    "data() beyond float32": (MLP.replace(".astype(np.float32)", " * 1e300"),
                              "data()['train']'s inputs hold values that are not finite as "
                              "float32"),
    "data() that does not fit": (
        MLP.replace("x[:512], y[:512]", "x[:512, :4], y[:512]"),
        "data()['train'] holds inputs (512, 4) and targets (512,); the model takes samples of "
        "(8,)"),
}


@pytest.mark.processes(
    "a model file is described in processes of its own (xbench.pt_backend.user_model)")
@pytest.mark.parametrize("text, message", BAD_FILES.values(), ids=BAD_FILES.keys())
def test_a_wrong_model_file_is_one_line_and_exit_2(text, message, tmp_path, cache):
    path = model_file(tmp_path, text)
    done = xbench_here("grid", "--preset", "smoke", "--model", path, "--data", "synthetic",
                       "--backend", "pt-ddp", "--devices", "1", "--results", tmp_path / "r.jsonl",
                       env=cache)
    assert (done.returncode, "Traceback" in done.stderr) == (2, False), done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("arguments, message", [
    (["--model", "no/such/model.py"], "no model file no/such/model.py"),
    (["--model", "no_such_package.model"], "no module no_such_package.model to import"),
    (["--model", "EXAMPLE", "--data", "model"], "--data model: vit_mnist.py defines no data()"),
    (["--model", "EXAMPLE", "--data", "cifar10"],
     "vit_mnist.py's torch model takes (1, 28, 28) float32 into 10 classes; cifar10 is "
     "(3, 32, 32) float32 images of 10 classes: use --data synthetic"),
])
def test_a_model_that_is_not_there_or_does_not_fit_the_data_is_one_line(arguments, message,
                                                                         tmp_path, cache, request):
    if "EXAMPLE" in arguments:  # what the grid checks, on the example's facts as kept
        shutil.copytree(request.getfixturevalue("described_example"), cache["XBENCH_CACHE"])
    arguments = [str(EXAMPLE) if a == "EXAMPLE" else a for a in arguments]
    done = xbench_here("grid", "--preset", "smoke", *arguments, "--backend", "pt-ddp",
                       "--results", tmp_path / "r.jsonl", env=cache)
    assert (done.returncode, "Traceback" in done.stderr) == (2, False), done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


# What the user's code prints is no answer: a line with no newline, an atexit hook printing an
# empty object (the describer's answer travels on a file of its own).
CHATTY = """import atexit
print("loading... ", end="")
atexit.register(lambda: print("{}"))
"""


@pytest.mark.processes(
    "a model file is described in processes of its own (xbench.pt_backend.user_model)")
def test_what_a_model_file_prints_is_no_answer_and_data_may_use_numpys_generator(
        tmp_path, cache, monkeypatch):
    """A file that prints at import and at exit is described; a data() drawing from numpy's
    global generator returns in every rank (model_file_data, what each calls) the arrays its
    describer checked, whatever ran before."""
    path = model_file(tmp_path, CHATTY + MLP.replace("rng = np.random.default_rng(0)",
                                                     "rng = np.random"))
    done = xbench_here("grid", "--preset", "smoke", "--model", path, "--data", "model",
                       "--backend", "pt-ddp", "--devices", 1, "--max-train-samples", 0,
                       "--results", tmp_path / "r.jsonl", "--dry-run", env=cache)
    assert done.returncode == 0 and "1 to run" in done.stdout, done.stderr
    monkeypatch.setenv("XBENCH_CACHE", cache["XBENCH_CACHE"])
    np.random.seed(12345)  # a rank's generator is wherever its process left it
    assert model_file_data(resolve_model(str(path))).train_images.shape == (512, 8)


# an empty object, a list, a truncated file, a wrong type (None: classes "3"), no facts built
DAMAGED = ["{}", "[1, 2]", '{"path": "/x", "di', None, '{"built": {}}']


def test_a_damaged_kept_model_is_described_again(tmp_path, cache, monkeypatch):
    """Each damage is no model (read as each process reads it); the grid describes it again."""
    path = model_file(tmp_path, MLP)
    arguments = ("grid", "--preset", "smoke", "--model", path, "--data", "model", "--backend",
                 "pt-ddp", "--devices", 1, "--max-train-samples", 0, "--results",
                 tmp_path / "r.jsonl", "--dry-run")
    monkeypatch.setenv("XBENCH_CACHE", cache["XBENCH_CACHE"])
    described(str(path))  # what the grid does first
    [kept] = (tmp_path / "cache" / "models").glob("*.json")
    whole = json.loads(kept.read_text())
    for text in DAMAGED:
        kept.write_text(text or json.dumps({**whole, "classes": "3"}))
        with pytest.raises(NotDescribed, match="is damaged"):
            resolve_model(str(path))
    done = xbench_here(*arguments, env=cache)
    assert done.returncode == 0 and "1 to run" in done.stdout, done.stderr
    assert json.loads(kept.read_text()) == whole


@pytest.mark.parametrize("where, message", [
    ("a file", "Not a directory"), ("/proc/xbench", "No such file or directory"),
    ("a loop", "Too many levels of symbolic links")])
def test_a_cache_that_cannot_be_written_is_one_line(where, message, tmp_path):
    cache = tmp_path / where if where in ("a file", "a loop") else where
    (tmp_path / "a file").write_text("")
    (tmp_path / "a loop").symlink_to("another")
    (tmp_path / "another").symlink_to("a loop")
    done = xbench_here("grid", "--preset", "smoke", "--model", model_file(tmp_path, MLP),
                       "--data", "synthetic", "--backend", "pt-ddp", "--results",
                       tmp_path / "r.jsonl", "--dry-run", env={"XBENCH_CACHE": str(cache)})
    assert (done.returncode, "Traceback" in done.stderr) == (2, False), done.stderr
    assert f"cannot keep what xbench finds of model.py in XBENCH_CACHE ({cache}): {message}" \
        in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_profile_says_it_times_only_xbenchs_own_models(tmp_path, cache):
    done = xbench_here("profile", "--model", EXAMPLE, "--batch", 8, "--out", tmp_path, env=cache)
    assert done.returncode == 2 and "xbench profile times the units of xbench's own models" \
        in done.stderr, done.stderr


@pytest.fixture(scope="module")
def described_example(tmp_path_factory):
    """A cache folder (XBENCH_CACHE) with the example's facts, as `xbench grid` keeps them: its
    describers (one per framework, each loading it) run once for the tests that need them."""
    folder = tmp_path_factory.mktemp("described") / "cache"
    with pytest.MonkeyPatch.context() as patched:
        patched.setenv("XBENCH_CACHE", str(folder))
        described(str(EXAMPLE))
    return folder


def test_models_describes_a_model_file_as_the_grid_would_from_what_was_kept(
        described_example, tmp_path):
    """`xbench models --model FILE`: per framework what it counted (parameters, FLOPs, input)
    and the backends that train it, the data a grid of it takes; read from what the grid kept
    (nothing is built again: the kept facts are unchanged), and one of xbench's own models is
    one line."""
    cache = {"XBENCH_CACHE": str(tmp_path / "cache")}
    shutil.copytree(described_example, cache["XBENCH_CACHE"])
    [kept] = (tmp_path / "cache" / "models").glob("*.json")
    before = kept.read_text()
    facts = json.loads(before)
    listed = xbench_here("models", "--model", EXAMPLE, "--json", env=cache)
    assert listed.returncode == 0, listed.stderr
    found = {f["framework"]: f for f in json.loads(listed.stdout)}
    assert kept.read_text() == before
    assert set(found) == {"torch", "tensorflow", "jax"} == set(facts["built"])
    for framework, built in facts["built"].items():
        assert (found[framework]["params"], found[framework]["flops_per_sample"],
                found[framework]["input_shape"]) == (built["params"], built["flops_per_sample"],
                                                     built["input_shape"])
    assert found["torch"]["backends"] == ["pt-single", "pt-dp", "pt-ddp", "pt-fsdp", "pt-replicate",
                                          "hvd-torch"]
    assert found["jax"]["backends"] == ["keras-jax"]  # the Flax backends train xbench's own
    assert found["torch"]["data"] == ["mnist", "synthetic"]  # 1x28x28 images of 10 classes
    table = xbench_here("models", "--model", EXAMPLE, env=cache)
    assert table.returncode == 0, table.stderr
    assert "float32 input -> a class of 10; --data mnist, synthetic" in table.stdout
    assert f"{facts['built']['torch']['params']:,}" in table.stdout
    own = xbench_here("models", "--model", "small", env=cache)
    assert own.returncode == 2 and "small is one of xbench's own models" in own.stderr


@pytest.fixture(scope="module")
def example(mnist_dir, tmp_path_factory, described_example):
    """The example vision transformer on 1,024 real MNIST images: pt-ddp on 1 and 2 devices,
    pt-fsdp and tf-mirrored on 2, through the real command line."""
    folder = tmp_path_factory.mktemp("vit")
    results = folder / "vit.jsonl"
    shutil.copytree(described_example, folder / "cache")
    for backends, devices in (("pt-ddp", "1,2"), ("pt-fsdp,tf-mirrored", "2")):
        run = xbench("grid", "--preset", "smoke", "--model", EXAMPLE, "--backend", backends,
                     "--devices", devices, "--max-train-samples", SLICE, "--max-test-samples",
                     512, "--data-dir", mnist_dir, "--results", results, "--contention-limit",
                     "1", timeout=1800, env={**os.environ, "XBENCH_CACHE": str(folder / "cache")})
        assert run.returncode == 0, run.stderr
    rows, problems = read_rows(results)
    assert not problems
    return folder, results, {(r["backend"], r["devices"]): r for r in rows}


def test_the_example_runs_in_both_frameworks_and_says_what_it_counted(example):
    _, _, rows = example
    for key in [("pt-ddp", 1), ("pt-ddp", 2), ("pt-fsdp", 2), ("tf-mirrored", 2)]:
        row = rows[key]
        assert row["status"] == "ok", (key, row["error"])
        assert row["model"].startswith(str(EXAMPLE)) and "@" in row["model"]
        assert row["params"] == 71_946 and row["dataset"] == "mnist"
        recorded = row["backend_details"]["model_file"]
        assert recorded["frameworks"] == ["jax", "tensorflow", "torch"]
        assert recorded["one_trajectory"].startswith("not claimed")
        assert row["backend_details"]["traffic"] if key[1] == 2 else True
    # PyTorch's FlopCounterMode beside TensorFlow's own count, each in its framework's rows
    torch_flops, keras_flops = (rows[(b, 2)]["flops_per_sample"]
                                for b in ("pt-ddp", "tf-mirrored"))
    assert torch_flops == 2_329_856 and keras_flops != torch_flops
    # PyTorch's backends seed torch alike: the same model, one trajectory among them
    for mine, theirs in zip(rows[("pt-fsdp", 2)]["epochs"], rows[("pt-ddp", 2)]["epochs"],
                            strict=True):
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=2e-5)
    assert rows[("pt-ddp", 2)]["epochs"][-1]["accuracy"] > 0.3  # it learns (10 classes)


def test_the_report_and_predict_work_on_its_rows(example):
    folder, results, _ = example
    report = xbench_here("report", results, "--out", folder / "report", "--format", "md")
    assert report.returncode == 0, report.stderr
    assert "mnist.py@" in (folder / "report" / "summary.md").read_text()  # vit\\_mnist (markdown)
    predicted = xbench_here("predict", results, "--devices", "1,8", "--link", "ib-ndr",
                            "--format", "md")
    assert predicted.returncode == 0, predicted.stderr
    scaled = predicted.stdout.split("Predicted, not measured")[1]
    assert [line for line in scaled.splitlines()
            if line.startswith("| A | pt-ddp | ") and "mnist.py@" in line and "| 1 × 8 |" in line]


def test_its_own_data_trains_and_an_unserved_framework_is_unsupported(tmp_path, cache):
    """A Keras file: tf-mirrored and keras-jax train its data() on one trajectory; PyTorch's
    backends have no pytorch() to train, and JAX's Flax backends take no model file."""
    path = model_file(tmp_path, KERAS_MLP)
    results = tmp_path / "r.jsonl"
    done = xbench("grid", "--preset", "smoke", "--model", path, "--data", "model", "--backend",
                  "pt-ddp,tf-mirrored,keras-jax,jax-dp", "--devices", "2", "--batch", 64,
                  "--max-train-samples", 0, "--results", results, env=cache)
    assert done.returncode == 0, done.stderr
    rows = {r["backend"]: r for r in read_rows(results)[0]}
    trained = rows["tf-mirrored"]
    for row in (trained, rows["keras-jax"]):
        assert row["status"] == "ok" and row["dataset"] == "model", row["error"]
        assert row["train_samples"] == 512 and row["dataset_source"] == str(path)
        assert row["backend_details"]["model_file"]["frameworks"] == ["jax", "tensorflow"]
    assert trained["epochs"][-1]["loss"] < trained["epochs"][0]["loss"]
    # the same weights and global batches: keras-jax on tf-mirrored's trajectory (the smoke
    # grid's tolerance for xbench's own models)
    for mine, theirs in zip(rows["keras-jax"]["epochs"], trained["epochs"], strict=True):
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=2e-5)
    assert rows["keras-jax"]["flops_per_sample"] > 0
    assert rows["keras-jax"]["backend_details"]["xla_flops_check"]["spec"] is None
    assert rows["pt-ddp"]["status"] == rows["jax-dp"]["status"] == "unsupported"
    assert rows["pt-ddp"]["error"].startswith("model.py defines no pytorch()")
    assert rows["jax-dp"]["error"].startswith("jax-single, jax-dp and jax-multiprocess train "
                                              "Flax models")
    # a changed file is a new cell
    path.write_text(path.read_text() + "\n# changed\n")
    again = xbench_here("grid", "--preset", "smoke", "--model", path, "--data", "model",
                        "--backend", "tf-mirrored", "--devices", "2", "--batch", 64,
                        "--max-train-samples", 0, "--results", results, "--dry-run", env=cache)
    assert again.returncode == 0, again.stderr
    assert trained["cell_key"].split("|")[1] not in again.stdout
    assert json.loads(json.dumps(trained["backend_details"]["model_file"]))["digest"] \
        in trained["model"]


def test_a_loss_that_is_not_finite_fails_its_row_at_its_epoch_and_step(tmp_path, cache):
    """Inputs of 1e18 and SGD at a learning rate of 100: step 1's update makes step 2's logits
    overflow float32, in each framework (PyTorch's, TensorFlow's and JAX's loop, over 2
    processes or 2 replicas). The row is failed at epoch 1, step 2, never ok with a loss of NaN,
    and the results file stays strict JSON."""
    path = model_file(tmp_path, MLP.replace("x[:512], y[:512]", "x[:512] * 1e18, y[:512]")
                      + KERAS_MLP.split(DATA)[1])
    results = tmp_path / "r.jsonl"
    done = xbench("grid", "--preset", "smoke", "--model", path, "--data", "model", "--backend",
                  "pt-ddp,tf-mirrored,keras-jax", "--devices", "2", "--batch", 64,
                  "--optimizer", "sgd", "--lr", 100, "--max-train-samples", 0, "--results",
                  results, env=cache)
    assert done.returncode == 3, done.stderr
    lines = results.read_text().splitlines()
    rows = [json.loads(line, parse_constant=lambda bare: pytest.fail(f"{bare} in a row"))
            for line in lines]
    assert sorted(row["backend"] for row in rows) == ["keras-jax", "pt-ddp", "tf-mirrored"]
    for row in rows:
        assert row["status"] == "failed", row["backend"]
        assert row["error"].startswith("epoch 1, step 2 of 8: the training loss became nan "
                                       "(not finite)"), row["error"]
