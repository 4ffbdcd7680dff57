"""TensorFlow's part of `xbench profile` (common.running.profile): the passes of each unit and of
the whole training step, each pass a compiled tf.function as in training (the gradient of a
tf.function runs as a compiled function too), in training mode."""
import tensorflow as tf

from xbench.common.running.profile import STEP_PASSES, time_passes
from xbench.common.workload.data import load
from xbench.common.workload.resolve import resolve_model
from xbench.keras_models.models import KerasTiedLogits, build_model, build_optimizer
from xbench.tf_backend.device import device_name
from xbench.tf_backend.pipeline import model_inputs
from xbench.tf_backend.step import cross_entropy


def profile(cell, kind, request):
    """The seconds of every pass of `request`'s units and of the step (common.running.profile)."""
    spec = resolve_model(cell.model)
    data = load(cell, spec, "tensorflow")
    model = build_model(spec, cell.seed)
    x = model_inputs(tf.constant(data.train_images), data)
    labels = tf.constant(data.train_labels.astype("int64"))
    generator = tf.random.Generator.from_seed(cell.seed)
    passes, unit_input = [], x
    for index, unit in enumerate(model.layers):
        output = unit(unit_input, training=True)  # batch statistics, as PyTorch in train mode
        if unit.name in request["units"]:
            gradient = generator.normal(output.shape)
            passes += unit_passes(unit, unit_input, gradient, input_gradient=index > 0)
        unit_input = output
    optimizer = build_optimizer()
    optimizer.build(model.trainable_variables)
    passes += step_passes(model, optimizer, x, labels)
    timed = time_passes(passes, lambda: sync(kind), request["steps"], request["warmup"],
                        cell.contention_limit)
    return {"framework": "tensorflow", "framework_version": tf.__version__,
            "device_type": kind, "device_name": device_name(kind),
            "threads": tf.config.threading.get_intra_op_parallelism_threads(), **timed}


def sync(kind):
    """Wait for the GPU; on a CPU a call returns when its work is done."""
    if kind == "cuda":
        tf.raw_ops.SyncDevice()


def unit_passes(unit, unit_input, gradient, input_gradient: bool):
    """The unit's forward pass, and its backward pass: the gradients of its weights (and of its
    input where training needs them) from `gradient`."""
    run = tf.function(lambda inputs: unit(inputs, training=True))
    # the tied output layer's weight is the embedding's table: its gradient is computed there too
    weights = ([unit.embedding.token_table] if isinstance(unit, KerasTiedLogits)
               else unit.trainable_variables)
    kept = {}

    def forward():
        with tf.GradientTape() as tape:  # watches the trainable weights it sees used
            if input_gradient:
                tape.watch(unit_input)
            kept["output"] = run(unit_input)
        kept["tape"] = tape

    def backward():
        wanted = [*([unit_input] if input_gradient else []), *weights]
        kept.pop("tape").gradient(kept.pop("output"), wanted, output_gradients=gradient)

    has_backward = input_gradient or bool(weights)
    return ([(f"{unit.name}.forward", forward)]
            + ([(f"{unit.name}.backward", backward)] if has_backward else []))


def step_passes(model, optimizer, x, labels):
    """One training step as tf_backend.step runs it (the mean loss, the optimizer's update), in
    three timed passes."""
    loss_of = tf.function(lambda images, targets: tf.reduce_mean(
        cross_entropy(targets, model(images, training=True))))
    apply = tf.function(lambda gradients: optimizer.apply(gradients, model.trainable_variables))
    kept = {}

    def forward():
        with tf.GradientTape() as tape:
            kept["loss"] = loss_of(x, labels)
        kept["tape"] = tape

    def backward():
        kept["gradients"] = kept.pop("tape").gradient(kept.pop("loss"), model.trainable_variables)

    def update():
        apply(kept.pop("gradients"))

    return [(f"step.{name}", run) for name, run in zip(STEP_PASSES, (forward, backward, update))]
