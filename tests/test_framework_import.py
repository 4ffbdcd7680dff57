"""A framework imported as an environment holding only it would (common.running.framework_import):
its optional imports of what xbench's environment adds find nothing while it is imported, are
found again afterwards, and every row says what was hidden."""
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO
from xbench.common.backends.frameworks import FRAMEWORKS, JAX, TENSORFLOW
from xbench.common.backends.traits import TRAITS
from xbench.common.running.framework_import import import_as_installed_alone

# A framework's optional import, as TensorFlow's of JAX and Keras' of pandas are written
FRAMEWORK = """try:
    import extra
except ImportError:
    extra = None
"""


def test_an_optional_import_finds_nothing_while_hidden_and_the_package_is_found_after(
        tmp_path, monkeypatch):
    (tmp_path / "framework.py").write_text(FRAMEWORK)
    (tmp_path / "extra.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("framework", "extra"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    finders = list(sys.meta_path)
    framework = import_as_installed_alone("framework", ("extra", "other"))
    assert framework.extra is None and "extra" not in sys.modules
    assert sys.meta_path == finders  # nothing left behind
    import extra  # a user's model file may import it afterwards
    assert extra.__name__ == "extra"


def test_each_framework_hides_the_others_and_the_reports_libraries_never_its_own():
    own = {"torch": {"torch"}, "tensorflow": {"tensorflow", "keras"},
           "jax": {"jax", "jaxlib", "flax", "optax", "keras", "scipy"}}  # JAX requires SciPy
    for framework in FRAMEWORKS:
        hidden = set(framework.not_in_its_install)
        assert not hidden & own[framework.name], framework.name
        others = set().union(*(own[f.name] for f in FRAMEWORKS if f is not framework))
        assert others - own[framework.name] <= hidden, framework.name
        assert {"pandas", "matplotlib"} <= hidden  # xbench's reports', no framework's


@pytest.mark.parametrize("framework, module, environment", [
    (TENSORFLOW, "tensorflow", {}),
    (JAX, "keras", {"KERAS_BACKEND": "jax"}),  # keras-jax's Keras (jax_backend.keras)
])
def test_a_real_framework_loads_none_of_what_it_does_not_require(framework, module,
                                                                 environment):
    """TensorFlow 2.21 imports JAX, and Keras 3 pandas and matplotlib, where they are
    installed (they are, in xbench's environment); imported as installed alone, neither does."""
    script = (f"import sys\n"
              f"from xbench.common.backends.frameworks import {framework.name.upper()} as f\n"
              f"from xbench.common.running.framework_import import import_as_installed_alone\n"
              f"import_as_installed_alone({module!r}, f.not_in_its_install)\n"
              f"print(sorted(p for p in f.not_in_its_install if p in sys.modules))\n"
              f"import pandas\n"  # found again afterwards
              f"print(pandas.__name__)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **environment},
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "pandas"]


def test_every_row_of_the_shared_grid_says_what_its_framework_was_imported_without(smoke):
    for row in smoke.all:
        if row["status"] == "ok":
            framework = TRAITS[row["backend"]].framework
            assert row["env"]["imported_without"] == list(framework.not_in_its_install)
