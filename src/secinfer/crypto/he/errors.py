"""Typed errors of the HE layer; all are subclasses of :class:`secinfer.errors.HEError`."""

from __future__ import annotations

from secinfer.errors import HEError, NativeBuildError, ParameterMismatchError, SerializationError

__all__ = [
    "HEError", "ParameterMismatchError", "HESerializationError", "HENativeBuildError",
    "HEArgumentError", "HEInternalError", "HEClosedError",
]


class HESerializationError(HEError, SerializationError):
    """Bytes that do not decode to the expected HE object (truncated, foreign, corrupted)."""


class HENativeBuildError(HEError, NativeBuildError):
    """The Lattigo shared library is missing and cannot be built (e.g. no Go toolchain)."""


class HEArgumentError(HEError, ValueError):
    """A bad argument: wrong length, level, rotation without a key, unknown handle."""


class HEInternalError(HEError):
    """Lattigo panicked on an input that passed validation (recovered, never a crash)."""


class HEClosedError(HEError):
    """An object was used after ``close()``."""
