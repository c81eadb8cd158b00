"""Typed errors the native library reports (status codes of its exports) and its build step.

The library's exports share one status vocabulary (``go/handles.go``); the classes are
named for the HE layer, their first and main user, and ``secinfer.crypto.he.errors``
re-exports them (same class objects). Other layers map codes to their own errors through
``call(..., errors=..., default=...)``.
"""

from __future__ import annotations

from secinfer.errors import HEError, NativeBuildError, ParameterMismatchError, SerializationError

__all__ = [
    "HEError", "ParameterMismatchError", "HESerializationError", "HENativeBuildError",
    "HEArgumentError", "HEInternalError", "STATUS_ERRORS",
]


class HESerializationError(HEError, SerializationError):
    """Bytes that do not decode to the expected HE object (truncated, foreign, corrupted)."""


class HENativeBuildError(HEError, NativeBuildError):
    """The native library is missing and cannot be built (e.g. no Go toolchain)."""


class HEArgumentError(HEError, ValueError):
    """A bad argument: wrong length, level, rotation without a key, unknown handle."""


class HEInternalError(HEError):
    """Lattigo panicked on an input that passed validation (recovered, never a crash)."""


# Status code of an export -> error class (mirrors the constants in go/handles.go).
STATUS_ERRORS: dict[int, type[Exception]] = {
    1: HEError,
    2: HESerializationError,
    3: ParameterMismatchError,
    4: HEArgumentError,
    5: HEInternalError,
}
