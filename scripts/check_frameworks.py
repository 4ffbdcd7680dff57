"""After `make setup`: what each installed framework sees, and a clear failure when a GPU set-up
(`--expect-gpu 1`) left one of them without the GPUs (a CPU wheel, missing CUDA libraries, a
Horovod built without NCCL).

    usage: .venv/bin/python scripts/check_frameworks.py --expect-gpu 0|1
"""
import argparse
import importlib.util
import sys


def seen() -> dict[str, tuple[int, str]]:
    """{framework: (GPUs it sees, what it is)} for each installed framework."""
    found = {}
    if importlib.util.find_spec("torch"):
        import torch
        found["torch"] = (torch.cuda.device_count(),
                          f"torch {torch.__version__}, "
                          f"CUDA {torch.version.cuda or 'none (CPU build)'}")
    if importlib.util.find_spec("tensorflow"):
        import tensorflow as tf
        cuda = tf.sysconfig.get_build_info().get("cuda_version") or "none (CPU build)"
        found["tensorflow"] = (len(tf.config.list_physical_devices("GPU")),
                               f"tensorflow {tf.__version__}, CUDA {cuda}")
    if importlib.util.find_spec("jax"):
        import jax
        gpus = [d for d in jax.devices() if d.platform == "gpu"] if _has_gpu_platform(jax) else []
        found["jax"] = (len(gpus), f"jax {jax.__version__}, backend {jax.default_backend()}")
    if importlib.util.find_spec("horovod"):
        try:
            import horovod.torch as hvd
            found["horovod"] = (1 if hvd.nccl_built() else 0,
                                f"horovod, NCCL {'built' if hvd.nccl_built() else 'not built'}")
        except ImportError as e:
            found["horovod"] = (0, f"horovod.torch does not load: {e}")
    return found


def _has_gpu_platform(jax) -> bool:
    """Whether JAX has a GPU backend here (asking for absent ones raises)."""
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--expect-gpu", choices=("0", "1"), default="0")
    expect = parser.parse_args().expect_gpu == "1"
    missing = []
    for framework, (gpus, what) in seen().items():
        print(f"check_frameworks: {what}: sees {gpus} GPU(s)" if framework != "horovod"
              else f"check_frameworks: {what}")
        if expect and gpus == 0:
            missing.append(framework)
    if missing:
        print(f"check_frameworks: ERROR: this is a GPU set-up but {', '.join(missing)} cannot use "
              f"the GPUs; see README 'On a GPU machine'", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
