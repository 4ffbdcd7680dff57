"""A framework imported as an environment holding only that framework would import it.

xbench's environment holds every framework and the libraries of its reports, and frameworks
import what they find: TensorFlow 2.21 imports JAX (tf.lite's optional `jax.jit`), Keras 3
imports pandas, matplotlib and SciPy (optional data adapters, a plotting helper, sparse
inputs). Measured here: TensorFlow's import took 2.96-3.04 s with them, 2.11 s without, and
its process holds their modules for its whole life. A user who installed only TensorFlow
(none of those is among its or Keras' requirements) pays neither, so a row's start-up and
memory would hold what xbench's environment adds. While the framework is imported, the
packages its own install lacks (`Framework.not_in_its_install`) are hidden: its optional
imports of them find nothing, as they would there. Afterwards they are importable again: a
user's model file may import pandas, and xbench's profile imports SciPy.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
from types import ModuleType


class _Hidden:
    """A finder, first on sys.meta_path, that finds each hidden top-level package missing."""

    def __init__(self, packages: frozenset[str]):
        self.packages = packages

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.packages:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden while a framework is "
                                      f"imported: xbench.common.running.framework_import)",
                                      name=name)
        return None


@contextlib.contextmanager
def _hidden(packages: tuple[str, ...]):
    finder = _Hidden(frozenset(packages))
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def import_as_installed_alone(module: str, not_in_its_install: tuple[str, ...]) -> ModuleType:
    """`module`, imported with `not_in_its_install` hidden. A hidden package already imported
    by this process stays (nothing here unloads it); one that `module` imported before is not
    imported again."""
    with _hidden(not_in_its_install):
        return importlib.import_module(module)
