"""Typed errors of the HE layer; all are subclasses of :class:`secinfer.errors.HEError`.

The errors the native library itself reports live in :mod:`secinfer.native.errors` (the
layer below) and are re-exported here unchanged.
"""

from __future__ import annotations

from secinfer.errors import HEError, ParameterMismatchError
from secinfer.native.errors import (
    HEArgumentError, HEInternalError, HENativeBuildError, HESerializationError,
)

__all__ = [
    "HEError", "ParameterMismatchError", "HESerializationError", "HENativeBuildError",
    "HEArgumentError", "HEInternalError", "HEClosedError",
]


class HEClosedError(HEError):
    """An object was used after ``close()``."""
