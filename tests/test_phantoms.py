"""Phantoms: runs whose answer is known before they run (docs/numbers.md, "Phantoms"), the
phantoms preset through the real command line on the shared grid's slices of real MNIST, each
row's recorded numbers held to the answer:

- a model whose backward costs twice its forward (phantom-mlp): forward / (forward + backward)
  as its FLOPs say, in PyTorch, TensorFlow and JAX;
- a known number of gradient bytes over a capped link, in one bucket: the exposed communication
  is what the bytes take over the link, in every backend whose collectives cross it;
- a bucket known to be ready early (DDP's first, phantom-mlp's last two layers): the hidden
  share measured on one basis and the one the row's own timeline predicts agree.

Every row also keeps its invariants (tests/every_row.py checks each one the runner wrote). The
bounds are a quiet machine's: the cells run `alone` (the other worker of the suite waits), and a
failure says how much of the cores other processes took while its cell ran (on this 2-core
machine under a load of 10: pt-ddp's exposed 0.84 x, a rank waiting for the other while its
bucket crossed; pt-fsdp's 1.25 x, each blocking gather holding that wait; the bucket ready early
hidden 0.10 against 0.21, waiting for a core beside backward)."""
import numpy as np
import pytest

from tests.helpers import SMOKE_SLICE, SMOKE_TEST_SLICE, xbench
from xbench.common.backends.traits import TRAITS
from xbench.common.measuring.alone import REPLAYED
from xbench.common.measuring.basis import communication
from xbench.common.results.store import read_rows
from xbench.common.workload import faults
from xbench.common.workload.layers import Dense, layer_flops
from xbench.common.workload.models import MODELS
from xbench.reports.step_model.timeline import (
    exposed_seconds,
    hidden_share,
    messages,
    recorded_curve,
)

pytestmark = pytest.mark.alone("phantoms")  # timing bounds: the machine to itself for its cells

MLP = MODELS["phantom-mlp"]
# (a) forward / (forward + backward): issue 63's bound, about what the FLOPs say
FORWARD_SHARE, FORWARD_SHARE_TOLERANCE = 0.33, 0.08
# (b) exposed communication within this share of the bytes' time over the link
EXPOSED_TOLERANCE = 0.15
LINK = "link=200mbit"
CROSSING = ["pt-ddp", "pt-fsdp", "pt-replicate", "hvd-torch", "hvd-tf", "tf-multiworker",
            "jax-multiprocess"]
# (c) the hidden share measured and predicted within this of each other
HIDDEN_TOLERANCE = 0.10
EARLY = "link=1gbit"


@pytest.fixture(scope="module")
def phantoms(mnist_dir, tmp_path_factory):
    """The preset's rows: `rows[(backend, model, inject)]`, each cell once."""
    folder = tmp_path_factory.mktemp("phantoms")
    # the shared grid's contention limit, which marks nothing: a phantom's bound holds on every
    # row, however busy the machine was
    run = xbench("grid", "--preset", "phantoms", "--max-train-samples", SMOKE_SLICE,
                 "--max-test-samples", SMOKE_TEST_SLICE, "--data-dir", mnist_dir,
                 "--results", folder / "phantoms.jsonl", "--contention-limit", "1",
                 timeout=1800)
    assert run.returncode == 0, run.stdout + run.stderr
    rows, problems = read_rows(folder / "phantoms.jsonl")
    assert not problems and all(row["status"] == "ok" for row in rows), run.stdout
    return {(row["backend"], row["model"], row["inject"]): row for row in rows}


def last_epoch(row) -> list[dict]:
    return row["attribution"]["epochs"][-1]["ranks"]


def busy(row) -> str:
    """How much of a rank's cores other processes took while the row's last epoch ran."""
    return (f"other processes took {row['epochs'][-1]['contention']['other_cpu_share']:.0%} of "
            f"a rank's cores")


# --- (a) a backward that costs twice its forward ------------------------------------------------

def expected_forward_share() -> float:
    """Every layer of phantom-mlp is a dense one: its forward one matmul (a bias and a ReLU are
    1/1024 of it), its backward two of the same size (the weights' gradient and the input's),
    but for the first layer, whose input is the image: no framework computes its gradient. For
    L equal layers that is L / (3L - 1); phantom-mlp's first layer is 784 wide, not 1024, and
    its last 10: 0.352."""
    layers = [(layer, shape) for layer, shape in MLP.layer_shapes() if isinstance(layer, Dense)]
    forward = [layer_flops(layer, shape) for layer, shape in layers]
    backward = [2 * flops for flops in forward]
    backward[0] -= forward[0]
    return sum(forward) / (sum(forward) + sum(backward))


def test_phantom_mlps_backward_is_twice_its_forward_by_its_flops():
    share = expected_forward_share()
    assert share == pytest.approx(MLP.flops_per_sample() / MLP.training_flops_per_sample())
    assert share == pytest.approx(0.352, abs=5e-4)
    layers = sum(isinstance(layer, Dense) for layer, _ in MLP.layer_shapes())
    assert 1 / 3 < share < layers / (3 * layers - 1)  # the narrow first layer misses less
    assert abs(share - FORWARD_SHARE) < FORWARD_SHARE_TOLERANCE / 3  # the bound is about it


@pytest.mark.parametrize("backend", [
    "pt-single", "tf-single",
    pytest.param("jax-single", marks=pytest.mark.xfail(strict=False, reason=(
        "a step's time split by what ran: 0.40-0.43 on a quiet machine, 0.42-0.51 on a busy "
        "one before time two parts share was split equally and the gaps between one part's "
        "ops were that part's; 0.39-0.42 after, at load 7 (a whole call timed alone: "
        "0.32-0.36). Its ops are labelled right (forward under jvp, backward under transpose); "
        "what is left is not found")))])
def test_forward_is_a_third_of_forward_and_backward(phantoms, backend):
    """phantom-mlp on one device: each framework's forward and backward parts of the last
    epoch's steps (PyTorch's marks, TensorFlow's and JAX's traces), as their FLOPs say."""
    row = phantoms[(backend, "phantom-mlp", "none")]
    [rank] = last_epoch(row)
    forward, backward = (rank["parts"][part]["seconds"] for part in ("forward", "backward"))
    measured = forward / (forward + backward)
    print(f"{backend}: forward / (forward + backward) = {measured:.3f} (its FLOPs: "
          f"{expected_forward_share():.3f}); {busy(row)}")
    assert abs(measured - FORWARD_SHARE) <= FORWARD_SHARE_TOLERANCE, (measured, busy(row))


# --- (b) known bytes over a capped link ----------------------------------------------------------

@pytest.mark.parametrize("backend", [
    "pt-ddp", "pt-fsdp", "hvd-torch", "hvd-tf", "tf-multiworker",
    pytest.param("pt-replicate", marks=pytest.mark.xfail(strict=False, reason=(
        "measured 0.98-0.99 x in two whole runs of the suite here, 1.27 x at load 7: within "
        "15% only on a quiet machine; it has no bucket to set (its units are its messages, 3 on "
        "the small model, each paying its ring's latencies on the capped link), and its "
        "blocking all-reduces hold the wait for the slower rank, but the last one's"))),
    pytest.param("jax-multiprocess", marks=pytest.mark.xfail(strict=False, reason=(
        "measured 1.12-1.27 x here: XLA's CPU all-reduce of the gradients (one instruction, "
        "its operands the small model's 6 tensors) runs one gloo all-reduce per operand, each "
        "paying its ring's latencies, which bytes over the rate leave out: on the same capped "
        "link, 6 tensors in one jitted all-reduce took 145 ms, their 1.6 MB as one array "
        "122 ms, torch's gloo all-reduce of them 115 ms (the jax backend would cross them as "
        "one vector, as its --accumulate path does)")))])
def test_a_capped_links_exposed_communication_is_its_bytes_over_the_rate(phantoms, backend):
    """The small model's gradients in one message where the library takes a bucket (2 MiB:
    pt-ddp, hvd-torch, hvd-tf, tf-multiworker), FSDP2's units and XLA's one all-reduce
    otherwise, over a loopback capped at 200 Mbit/s that every rank's traffic crosses: what
    crosses a step (the row's traffic: a ring all-reduce puts 2(N-1)/N of the bytes on the wire
    from each of N ranks; FSDP2 gathers the parameters twice, and gloo's reduce-scatter is an
    all-reduce) over the rate is the step's exposed communication, on the steps that carry
    collectives (their mean), on the step's critical path: the longest a rank's collectives ran
    once every rank was ready (each rank's exposed part runs from the last rank's ready to its
    own collectives' end; the step goes on when the last ends). A rank's own exposed part can
    be short of it: one ready early counts the time until the last is ready as waiting while
    its first bytes already cross (TCP takes them before the peer joins). Seen here: pt-ddp's
    rank 1 ready 42 ms a step after rank 0, rank 0 exposed 0.74 x, rank 1 0.96 x; hvd-tf's
    ranks 0.85 x and 0.98 x."""
    row = phantoms[(backend, "small", LINK)]
    ranks = last_epoch(row)
    traffic = sum(item["bytes"] for item in row["backend_details"]["traffic"])
    expected = traffic / faults.parse(LINK).link_bytes_per_second
    exposed = max(rank["collective"]["exposed_mean"] for rank in ranks)
    print(f"{backend}: exposed {exposed * 1e3:.1f} ms, bytes over the link "
          f"{expected * 1e3:.1f} ms ({exposed / expected:.3f}; the ranks' "
          f"{[round(r['collective']['exposed_mean'] / expected, 3) for r in ranks]}); "
          f"{busy(row)}")
    assert abs(exposed / expected - 1) <= EXPOSED_TOLERANCE, (exposed, expected, busy(row))
    counted = {rank["collective"]["bytes_per_step"] for rank in ranks}
    assert counted <= {None, MODELS["small"].gradient_bytes()}  # where told, the gradients'


def test_every_backend_whose_collectives_cross_the_link_is_a_phantom():
    """Each backend whose gradients cross between its processes (through a library, over the
    link capped under them) has its phantom above; those of one process cross no link."""
    assert {name for name, traits in TRAITS.items()
            if traits.library and traits.protocol["cpu"].crosses} == set(CROSSING)


# --- (c) a bucket ready early --------------------------------------------------------------------

def predicted_hidden(timeline: dict, alone: float) -> tuple[float, list]:
    """The hidden share the rank's own timeline predicts (reports.step_model.timeline): its
    gradients as they became ready over its backward, formed into DDP's buckets (1 MiB, then
    25 MiB), queued on one stream, each lasting its share of the collectives' time alone (their
    bytes at the rate the replay measured); and the messages."""
    backward = timeline["backward_seconds"]
    curve = recorded_curve(timeline["gradients"], backward, backward)
    size = sum(gradient.size for gradient in curve)
    found = messages(curve, backward, TRAITS["pt-ddp"].protocol["cpu"], None,
                     lambda bytes_: alone * bytes_ / size)
    return hidden_share(exposed_seconds(found, backward), alone), found


def test_a_bucket_ready_early_is_hidden_as_its_timeline_predicts(phantoms):
    """pt-ddp, phantom-mlp, 2 ranks of 128 images on a 1 Gbit/s link: DDP's first bucket (its
    1 MiB cap) closes on the last two layers' gradients (21% of the bytes), ready a fifth into
    backward, and its all-reduce runs under the rest of backward; the second, the rest, after
    it. The hidden share (the collectives' time alone less the exposed communication, over
    their time alone, common.measuring.basis) and the one the timeline predicts agree."""
    row = phantoms[("pt-ddp", "phantom-mlp", EARLY)]
    ranks = last_epoch(row)
    found = communication(ranks, row["attribution"]["alone"])
    assert found.alone_source == REPLAYED and not found.after_backward
    predictions = []
    for rank in ranks:
        timeline = rank["timeline"]
        predicted, buckets = predicted_hidden(timeline, found.alone)
        predictions.append(predicted)
        # the timeline forms DDP's buckets: the recorded ones, the first launched in backward
        assert [int(m.size) for m in buckets] == [c["bytes"] for c in timeline["collectives"]]
        assert timeline["collectives"][0]["launch"] < 0.5 * timeline["backward_seconds"]
    last_two = sum(4 * (layer.in_features + 1) * layer.out_features
                   for layer, _ in list(MLP.layer_shapes())[-2:])
    assert all(rank["timeline"]["collectives"][0]["bytes"] == last_two for rank in ranks)
    predicted = float(np.mean(predictions))
    print(f"hidden share: measured {found.hidden_share:.3f}, predicted {predicted:.3f} (the "
          f"first bucket's bytes: {last_two / MLP.gradient_bytes():.3f}); {busy(row)}")
    assert abs(found.hidden_share - predicted) <= HIDDEN_TOLERANCE, (found, predicted, busy(row))
