"""Fidelity benchmark for JAX: does xbench's JAX loop cost anything a plain Flax + Optax loop
would not?

Runs the same model, batch and data through xbench's jax-single backend (in this process, as
benchmarks/fidelity.py runs pt-dp) and through the plain hand-written loop (one jax.jit step with
its state donated, `block_until_ready` each step, the batch indexed in numpy), alternately over
rounds, and prints each round's two epoch-2 rates, the ratio of their means and each side's
spread. Target: jax-single >= 0.95 x the plain loop.

Both sides run in one process: jax-single configures JAX in its set-up (the CPU platform, one
host device, float32's matmul precision) before JAX starts, and JAX accepts the same settings
again in later rounds; the plain loop runs after it, under the same settings. The process
keeps the cores jax-single's set-up gave it (all it may use: `cpu_cores()` threads), so both
sides run on the same ones. The plain loop trains xbench's network definition (the spec's
model in Flax, jax_backend.models.build_model: the same layers and initial weights) with
optax.adam as anyone writes it, and normalises each batch inside its compiled step, as xbench
does (uint8 images in), so that the two compile the same arithmetic.

`--backend keras-jax` does the same for keras-jax against Keras' own `fit` on its JAX backend
(xbench's Keras model and optimizer, compiled with the loss as anyone writes it, the images
normalised in numpy before the clock, each epoch's samples in `epoch_order`'s order,
shuffle off): the loop Keras users run.

    python benchmarks/jax_fidelity.py --data-dir ../shared/data/mnist [--rounds 6 --samples 8192]
    python benchmarks/jax_fidelity.py --data-dir ../shared/data/mnist --backend keras-jax
"""
import argparse
import os
import statistics
import time
from functools import partial

from xbench.common.backends.registry import get_backend
from xbench.common.grids.cell import Cell
from xbench.common.machine import cpu_cores
from xbench.common.running.job import Job
from xbench.common.workload.mnist import load_mnist
from xbench.common.workload.models import ADAM, MODELS
from xbench.common.workload.samples import epoch_order


def xbench_rate(cell, data, threads):
    job = Job(cell, MODELS[cell.model], data, threads, time.time())
    measurement = get_backend(cell.backend).train(job)
    return measurement.epochs[1]["rate"], measurement.epochs[1]["loss"]


def plain_step(model, seed, lr, mean, std):
    """The plain Flax + Optax training step of `model` (xbench's network definition and initial
    weights, optax.adam as anyone writes it), jitted with its state donated, and that state:
    (step, (params, batch_stats or None, opt_state)). The step takes uint8 NHWC images and int32
    labels, normalises the images as xbench does, and returns the new state and the loss."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from xbench.jax_backend.models import build_model

    module, variables = build_model(model, seed)
    params, stats = variables["params"], variables.get("batch_stats")
    optimizer = optax.adam(lr, b1=ADAM["beta_1"], b2=ADAM["beta_2"], eps=ADAM["epsilon"])
    mean, std = np.float32(mean), np.float32(std)

    @partial(jax.jit, donate_argnums=(0, 1, 2))
    def train_step(params, stats, opt_state, images, labels):
        def loss_fn(params):
            x = (images.astype(jnp.float32) / 255 - mean) / std
            if stats is None:
                logits, updated = module.apply({"params": params}, x, train=True), None
            else:
                logits, mutated = module.apply({"params": params, "batch_stats": stats}, x,
                                               train=True, mutable=["batch_stats"])
                updated = mutated["batch_stats"]
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return loss, updated

        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), stats, opt_state, loss

    return train_step, (params, stats, optimizer.init(params))


def minimal_rate(cell, data):
    """The loop anyone would write: index in numpy, one jitted step (state donated), wait. Its
    epoch-2 rate and mean loss (the step's losses kept as they come, summed after the clock)."""
    import numpy as np

    train_step, (params, stats, opt_state) = plain_step(cell.model, cell.seed, cell.lr,
                                                        data.mean[0], data.std[0])
    images, labels = data.train_images, data.train_labels.astype(np.int32)
    steps = len(images) // cell.batch
    for epoch in (1, 2):
        order = epoch_order(len(images), cell.seed, epoch)
        losses = []
        start = time.perf_counter()
        for step in range(steps):
            index = order[step * cell.batch:(step + 1) * cell.batch]
            params, stats, opt_state, loss = train_step(params, stats, opt_state,
                                                        images[index], labels[index])
            loss.block_until_ready()
            losses.append(loss)
        seconds = time.perf_counter() - start
    return steps * cell.batch / seconds, float(np.mean(losses))


def keras_fit_rate(cell, data):
    """Keras' own `fit` on its JAX backend, one epoch a call: its epoch-2 rate and loss."""
    import keras
    import numpy as np

    from xbench.common.workload.resolve import resolve_model
    from xbench.keras_models.models import build_model, build_optimizer

    model = build_model(resolve_model(cell.model), cell.seed)
    model.compile(optimizer=build_optimizer(cell.optimizer, cell.lr),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    mean, std = np.float32(data.mean[0]), np.float32(data.std[0])
    images = (data.train_images.astype(np.float32) / 255 - mean) / std
    labels = data.train_labels.astype(np.int32)
    for epoch in (1, 2):
        order = epoch_order(len(images), cell.seed, epoch)
        x, y = images[order], labels[order]
        start = time.perf_counter()
        history = model.fit(x, y, batch_size=cell.batch, epochs=1, shuffle=False, verbose=0)
        seconds = time.perf_counter() - start
    return (len(images) // cell.batch) * cell.batch / seconds, history.history["loss"][-1]


def spread(rates):
    sd = statistics.stdev(rates) if len(rates) > 1 else 0.0
    return (f"mean {statistics.mean(rates):,.0f}, min {min(rates):,.0f}, max {max(rates):,.0f}, "
            f"stdev {sd:,.0f} ({sd / statistics.mean(rates):.1%})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="small")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--samples", type=int, default=8192, help="training images per epoch")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--backend", choices=("jax-single", "keras-jax"), default="jax-single")
    args = parser.parse_args()
    if args.backend == "keras-jax":
        os.environ["KERAS_BACKEND"] = "jax"  # before Keras is first imported
    plain, name = ((keras_fit_rate, "Keras fit") if args.backend == "keras-jax"
                   else (minimal_rate, "plain loop"))
    if MODELS[args.model].dataset != "mnist":
        parser.error(f"{args.model} does not train on MNIST")

    threads = cpu_cores()
    data = load_mnist(args.data_dir)
    data.train_images, data.train_labels = (data.train_images[:args.samples],
                                            data.train_labels[:args.samples])
    cell = Cell(grid="fidelity", backend=args.backend, model=args.model, multiple=1,
                batch=args.batch, devices=1, epochs=2, batch_mode="global", seed=0,
                max_train_samples=args.samples, data="mnist", device="cpu", timeout=0)
    xbench, minimal = [], []
    for round_ in range(1, args.rounds + 1):
        rate, xbench_loss = xbench_rate(cell, data, threads)
        xbench.append(rate)
        rate, minimal_loss = plain(cell, data)
        minimal.append(rate)
        print(f"round {round_}: {args.backend} {xbench[-1]:,.0f} samples/s, "
              f"{name} {minimal[-1]:,.0f} samples/s ({xbench[-1] / minimal[-1]:.3f})",
              flush=True)
    print(f"{args.model} batch {args.batch}, {args.samples} images, {threads} cores, "
          f"{args.rounds} alternated rounds, epoch-2 rates (samples/s):")
    print(f"  {args.backend}  {spread(xbench)}")
    print(f"  {name}  {spread(minimal)}")
    print(f"  epoch-2 loss: {args.backend} {xbench_loss:.6f}, {name} {minimal_loss:.6f} "
          f"(one trajectory: the same model, data and order)")
    print(f"  {args.backend} / {name} = "
          f"{statistics.mean(xbench) / statistics.mean(minimal):.3f} "
          f"ratio of means, {statistics.median(xbench) / statistics.median(minimal):.3f} "
          f"of medians (target >= 0.95)")


if __name__ == "__main__":
    main()
