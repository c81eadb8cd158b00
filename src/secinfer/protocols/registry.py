"""Name -> ProtocolSpec. Protocol subpackages register themselves here on import."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from secinfer.errors import ConfigError

if TYPE_CHECKING:   # (names() stays cheap: the command line's help lists them before numpy is imported)
    from secinfer.protocols.base import ProtocolSpec

# name -> module that defines SPEC; imported lazily so one protocol's heavy dependencies
# (the HE library, say) do not load for another.
_MODULES = {
    "reference": "secinfer.protocols.reference.protocol",
    "crisp": "secinfer.protocols.crisp.protocol",
    "stamp": "secinfer.protocols.stamp.protocol",
    "falcon": "secinfer.protocols.falcon.protocol",
    "astra": "secinfer.protocols.astra.protocol",
    "aby3": "secinfer.protocols.aby3.protocol",
    "safhire": "secinfer.protocols.safhire.protocol",
    "certified": "secinfer.protocols.certified.protocol",
}


def register_module(name: str, module: str) -> None:
    _MODULES[name] = module


def names() -> list[str]:
    return sorted(_MODULES)


def get(name: str) -> ProtocolSpec:
    mod = _MODULES.get(name)
    if mod is None:
        raise ConfigError(f"unknown protocol {name!r}; available: {', '.join(names())}")
    return importlib.import_module(mod).SPEC
