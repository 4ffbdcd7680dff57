"""The registry of backends by name (Lightning's strategy registry is the model): the name a user
types -> the import path of its class (common.backends.backend.Backend).

It holds import paths, not classes, so that `common` never imports a framework: a backend's
module is imported only when a cell of that backend is asked for.
"""
import importlib

from xbench.common.errors import known_name

BACKENDS = {
    "pt-single": "xbench.pt_backend.single:SingleDeviceTorchBackend",
    "pt-dp": "xbench.pt_backend.dp:DataParallelBackend",
    "pt-ddp": "xbench.pt_backend.ddp:DistributedDataParallelBackend",
    "pt-fsdp": "xbench.pt_backend.fsdp:FullyShardedBackend",
    "tf-single": "xbench.tf_backend.single:SingleDeviceTensorFlowBackend",
    "tf-mirrored": "xbench.tf_backend.mirrored:MirroredBackend",
    "tf-multiworker": "xbench.tf_backend.multiworker:MultiWorkerMirroredBackend",
    "hvd-torch": "xbench.pt_backend.hvd:HorovodTorchBackend",
    "hvd-tf": "xbench.tf_backend.hvd:HorovodTensorFlowBackend",
}


def check_backend_name(name: str) -> str:
    """`name` if a backend is registered under it, else a clear error with a near miss."""
    return known_name(name, BACKENDS, "backend")


def backend_class(name: str) -> type:
    """The class (a common.backends.backend.Backend) registered under `name`; importing its module
    imports no framework. (This module imports no backend, not even for its types: the settings
    check names here, and the Backend contract names the Cell they make.)"""
    module, cls = BACKENDS[check_backend_name(name)].split(":")
    found = getattr(importlib.import_module(module), cls)
    assert found.name == name, f"{BACKENDS[name]} says it is '{found.name}', not '{name}'"
    return found


def get_backend(name: str):
    """A backend (common.backends.backend.Backend) of the class registered under `name`."""
    return backend_class(name)()


