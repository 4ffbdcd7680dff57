"""What the three PyTorch backends have in common (kept free of a torch import at module level)."""
from common.backend import Backend


class TorchBackend(Backend):
    framework = "torch"
    requires = ("torch",)
    install_hint = "install PyTorch with `make setup` (or `pip install torch` into the environment)"

    def is_out_of_memory(self, error):
        from pt_backend.train import is_out_of_memory
        return is_out_of_memory(error)
