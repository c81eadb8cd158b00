"""Typed errors shared by every layer (the bottom of the layer stack).

Anything that comes from a user or another party is validated and reported with one of
these, never with ``assert``. The CLI prints ``str(err)`` as one line and exits non-zero.
"""

from __future__ import annotations


class SecinferError(Exception):
    """Base of every error secinfer raises on purpose."""


class ConfigError(SecinferError):
    """A bad configuration: cluster file, parameter set, CLI option, fixed-point config."""


class InsecureParametersError(ConfigError):
    """A parameter set marked ``insecure`` was requested where it is refused (the CLI)."""


# --- models -------------------------------------------------------------------------


class ModelError(SecinferError):
    """A malformed or unusable model."""


class UnsupportedOpError(ModelError):
    """An operator or attribute that secinfer does not implement."""

    def __init__(self, op: str, node: str, detail: str = "") -> None:
        self.op, self.node, self.detail = op, node, detail
        msg = f"unsupported operator {op!r} at node {node!r}"
        super().__init__(msg + (f": {detail}" if detail else ""))


class ShapeError(ModelError):
    """An input or tensor whose shape does not match what the model expects."""


class FixedPointRangeError(SecinferError):
    """A value does not fit the fixed-point configuration's representable range."""


class QueryRefusedError(FixedPointRangeError):
    """The input party refused its query before sharing anything (outside the model owner's
    range certificate, ``secinfer party``): what every other party of the session raises."""


# --- network ------------------------------------------------------------------------


class NetworkError(SecinferError):
    """Transport-level failure."""


class PeerUnreachableError(NetworkError):
    """A peer could not be reached within the connect timeout."""


class PeerDeadError(NetworkError):
    """A peer stopped answering (missed heartbeats) or closed the session."""


class AuthenticationError(NetworkError):
    """A peer is unknown or failed authentication."""


class FrameError(NetworkError):
    """A received frame is malformed, oversized, or not what the protocol step expects."""


class MessageTooLargeError(FrameError):
    """A frame exceeds the size cap."""


class InboxFullError(NetworkError):
    """A peer sent more bytes than this party's per-peer inbox holds before it consumed them."""


class TimeoutError_(NetworkError):
    """A receive did not complete within its deadline."""


# --- protocols ----------------------------------------------------------------------


class ProtocolError(SecinferError):
    """A protocol could not run (unsupported model for this protocol, bad role inputs)."""


class ProtocolAbort(SecinferError):
    """A security check failed. Never retried; the session's secrets are wiped.

    ``check`` names the check that failed, ``suspect`` the party it points at (if known).
    """

    def __init__(self, check: str, suspect: str | None = None, detail: str = "") -> None:
        self.check, self.suspect, self.detail = check, suspect, detail
        msg = f"protocol abort: check {check!r} failed"
        if suspect:
            msg += f" (suspected party: {suspect})"
        super().__init__(msg + (f": {detail}" if detail else ""))

    @classmethod
    def require(cls, ok, check: str, suspect: str | None = None, detail: str = "") -> None:
        """Raise ``ProtocolAbort(check, suspect, detail)`` unless ``ok``.

        Every malicious-security check that is not tied to an endpoint (a trusted device,
        a proof verifier) goes through here, and every endpoint check goes through
        ``Endpoint.require``; the conformance suite's mutation run disables one check by
        name at these two places (from the tests, never from protocol code)."""
        if not ok:
            raise cls(check, suspect, detail)


class PeerAbortedError(ProtocolAbort):
    """Another party announced an abort; this party stops with no output."""


class PreprocessingReuseError(SecinferError):
    """A preprocessing item (triple, FSS key, mask) was requested a second time."""


# --- homomorphic encryption ---------------------------------------------------------


class HEError(SecinferError):
    """Errors from the homomorphic-encryption layer."""


class ParameterMismatchError(HEError):
    """Objects bound to different HE parameter sets were combined."""


class SerializationError(SecinferError):
    """Bytes that do not decode to the expected object."""


class NativeBuildError(SecinferError):
    """A native component (the Go/Lattigo library) is missing and cannot be built."""
