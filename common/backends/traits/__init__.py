"""What each backend is, in one framework-free table: the registry of backends by name.

Every reader that is not one of a backend's own processes reads a backend here: the grid's checks,
the runner and the dry run (how its processes start, what it supports on which device kind), `xbench
backends`, and the report and `xbench predict` (how its gradients cross, in which messages). None
of them imports a framework or a backend's module. A backend's own processes run the class named by
`rank` (common.backends.backend.Backend), which says only what happens inside them.

Each framework's backends have their rows in a module of their own (pytorch, tensorflow, horovod,
jax), with the texts only they use; what a row holds (`Traits`) and the texts several frameworks'
rows share are in shared. `TRAITS` puts them together in the table's order, the order of every
report. The texts say why, as each library documents it; the tests check them against what the
smoke grid's rows record.
"""
from __future__ import annotations

from collections.abc import Callable

from xbench.common.backends.protocol import BY_REDUCTION, NONE, Protocol

# The table's parts; `X as X`: what readers outside read from the table's path.
from xbench.common.backends.traits.horovod import HOROVOD_EXTENSIONS as HOROVOD_EXTENSIONS
from xbench.common.backends.traits.horovod import HOROVOD_TRAITS
from xbench.common.backends.traits.jax import JAX_TRAITS
from xbench.common.backends.traits.jax import JIT_BATCHNORM as JIT_BATCHNORM
from xbench.common.backends.traits.pytorch import PYTORCH_TRAITS
from xbench.common.backends.traits.shared import Traits
from xbench.common.backends.traits.tensorflow import TENSORFLOW_TRAITS

TRAITS: dict[str, Traits] = {t.name: t for t in [
    *PYTORCH_TRAITS, *TENSORFLOW_TRAITS, *HOROVOD_TRAITS, *JAX_TRAITS]}


def references() -> dict[str, str]:
    """{framework: its single-device reference}: the backend of each framework with no parallel
    wrapper (what the others cost at one device is measured against it)."""
    return {t.framework.name: t.name for t in TRAITS.values() if not t.spans_devices}


def having(test: Callable[[Traits], object]) -> list[str]:
    """The backends whose traits pass `test`, in the table's order."""
    return [t.name for t in TRAITS.values() if test(t)]


def in_words(names: list[str], last: str = "and") -> str:
    """'a', 'a and b', 'a, b and c' (or `last` another word): backends named in a sentence."""
    return f" {last} ".join(filter(None, [", ".join(names[:-1]), names[-1]])) if names else "none"


def served(capability: Callable[[Traits], object]) -> str:
    """'pt-ddp: X; hvd-torch and hvd-tf: Y': what each backend that has a `capability` (its
    value, not None or empty) has of it, backends of the same value together."""
    found: dict[object, list[str]] = {}
    for traits in TRAITS.values():
        if capability(traits):
            found.setdefault(capability(traits), []).append(traits.name)
    return "; ".join(f"{in_words(names)}: {value}" for value, names in found.items())


def profiled() -> list[str]:
    """The single-device references whose model's units `xbench profile` times."""
    return [name for name in references().values() if TRAITS[name].framework.units_timed]


def spanning_nodes() -> list[str]:
    """The backends whose ranks can run on several machines."""
    return [t.name for t in TRAITS.values() if t.spans_nodes]


def one_per_library() -> list[str]:
    """One backend per collective library between processes (the first in the table): what the
    probe measures each library's all-reduce through."""
    found: dict[str, str] = {}
    for traits in TRAITS.values():
        if traits.library:
            found.setdefault(traits.library, traits.name)
    return list(found.values())


def protocol_of(backend: str, device_type: str | None, recorded: str | None) -> Protocol:
    """How a row's gradients crossed: its backend's protocol on its device type, unless the row
    recorded another reduction (a backend of one device records none; a backend not in this
    table is known only by what it recorded)."""
    traits = TRAITS.get(backend)
    known = traits.protocol.get(device_type) if traits else None
    if known and (not isinstance(recorded, str) or recorded == known.reduction):
        return known
    return BY_REDUCTION.get(recorded, NONE) if isinstance(recorded, str) else NONE
