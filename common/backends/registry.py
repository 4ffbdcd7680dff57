"""The backends by name (Lightning's strategy registry is the model): the table of their traits
(common.backends.traits), and the class each one's processes run, imported only when a cell of
that backend runs in them, so that nothing else imports a framework.
"""
import importlib

from xbench.common.backends.traits import TRAITS
from xbench.common.errors import known_name

BACKENDS = list(TRAITS)  # every name, in the table's order (the order of every report)


def check_backend_name(name: str) -> str:
    """`name` if a backend is registered under it, else a clear error with a near miss."""
    return known_name(name, TRAITS, "backend")


def get_backend(name: str):
    """What `name`'s processes run (a common.backends.backend.Backend): importing its module
    imports no framework (the frameworks are imported in its methods)."""
    module, cls = TRAITS[check_backend_name(name)].rank.split(":")
    found = getattr(importlib.import_module(module), cls)
    assert found.name == name, f"{TRAITS[name].rank} says it is '{found.name}', not '{name}'"
    return found()
