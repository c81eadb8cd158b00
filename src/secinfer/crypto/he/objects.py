"""HE objects bound to a parameter set: handles into the Go layer, freed deterministically.

Every object holds its :class:`~secinfer.crypto.he.params.CKKSParams` and an opaque
handle. ``close()`` (or leaving a ``with`` block) frees the Go object at once; a
finaliser frees it when the Python object is collected otherwise. Serialisation wraps
the Go bytes in an envelope that names the object kind and the parameter set's
fingerprint, so loading checks both before the Go layer validates the payload.
"""

from __future__ import annotations

import ctypes as C
import struct
import weakref
from typing import TYPE_CHECKING

import numpy as np

from secinfer.native import lib as N
from secinfer.crypto.he.errors import (
    HEArgumentError, HEClosedError, HESerializationError, ParameterMismatchError,
)

if TYPE_CHECKING:  # pragma: no cover
    from secinfer.crypto.he.params import CKKSParams

MAGIC = b"SIHE"
VERSION = 2   # 2: residues packed at their prime's bit width
_HEADER = struct.Struct("<4sBB16sQ")  # magic, version, kind, params fingerprint, payload length

KIND_SK, KIND_PK, KIND_EVK, KIND_PT, KIND_CT, KIND_LWE = 1, 2, 3, 4, 5, 6


class HEObject:
    """Base: a Go handle bound to one parameter set."""

    KIND = 0

    def __init__(self, params: "CKKSParams", handle: int) -> None:
        self.params = params
        self._h = handle
        # The finaliser holds the handle value only, never self.
        self._fin = weakref.finalize(self, N.free_handle, handle)

    @property
    def handle(self) -> int:
        if not self._fin.alive:
            raise HEClosedError(f"{type(self).__name__} was closed")
        return self._h

    @property
    def closed(self) -> bool:
        return not self._fin.alive

    def close(self) -> None:
        """Free the Go object now (idempotent)."""
        self._fin()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check_params(self, params: "CKKSParams", what: str = "") -> None:
        if params is not self.params and params.fingerprint != self.params.fingerprint:
            raise ParameterMismatchError(
                f"{what or type(self).__name__} is bound to parameter set "
                f"{self.params.name!r}, not {params.name!r}")

    def poly(self, which: int = 0) -> np.ndarray:
        """Coefficient-domain residues mod q_0..q_level of component ``which`` (ciphertext
        component, plaintext, secret key or public-key component; Q part, out of NTT and
        Montgomery form): uint64 array of shape (levels, N). For proofs and tests."""
        return self.params._poly(self, which)

    # ------------------------------------------------------------ serialisation

    def to_bytes(self) -> bytes:
        kind = C.c_int(0)
        buf = N.P_bytes()
        n = N.csize(0)
        N.call("he_marshal", self.params.handle, self.handle, C.byref(kind), C.byref(buf),
               C.byref(n))
        payload = N.take_bytes(buf, n.value)
        return _HEADER.pack(MAGIC, VERSION, kind.value, self.params.fingerprint,
                            len(payload)) + payload


def unwrap(params: "CKKSParams", data: bytes, expected_kind: int | None) -> tuple[int, bytes]:
    """Check an envelope against ``params``; return (kind, payload)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise HESerializationError(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < _HEADER.size:
        raise HESerializationError(f"{len(data)} bytes is shorter than an HE object header")
    magic, version, kind, fp, length = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise HESerializationError("not a secinfer HE object (bad magic)")
    if version != VERSION:
        raise HESerializationError(f"unsupported HE object version {version}")
    if kind not in _KINDS:
        raise HESerializationError(f"unknown HE object kind {kind}")
    if expected_kind is not None and kind != expected_kind:
        raise HESerializationError(
            f"expected a {_KINDS[expected_kind].__name__}, got a {_KINDS[kind].__name__}")
    if fp != params.fingerprint:
        raise ParameterMismatchError(
            f"serialised object belongs to another parameter set than {params.name!r}")
    payload = data[_HEADER.size:]
    if len(payload) != length:
        raise HESerializationError(
            f"payload has {len(payload)} bytes, header says {length} (truncated or padded)")
    return kind, payload


def load(params: "CKKSParams", data: bytes, expected: type | None = None):
    """Deserialise any HE object (or only ``expected``'s kind) under ``params``."""
    kind, payload = unwrap(params, data, expected.KIND if expected is not None else None)
    h = N.new_handle("he_unmarshal", params.handle, kind, payload, len(payload))
    return _KINDS[kind](params, h)


# ---------------------------------------------------------------- concrete kinds


class SecretKey(HEObject):
    KIND = KIND_SK


class PublicKey(HEObject):
    KIND = KIND_PK


class EvalKeys(HEObject):
    """Relinearisation key (optional) and Galois keys."""

    KIND = KIND_EVK

    def info(self) -> tuple[bool, list[int]]:
        buf = np.zeros(4 * self.params.log_n + 8192, dtype=np.uint64)
        n = C.c_int(0)
        N.call("he_evk_info", self.params.handle, self.handle, N.ptr(buf, N.u64), len(buf),
               C.byref(n))
        vals = [int(v) for v in buf[: n.value]]
        return bool(vals[0]), sorted(vals[1:])

    @property
    def galois_elements(self) -> list[int]:
        return self.info()[1]

    @property
    def has_relin(self) -> bool:
        return self.info()[0]


class _Element(HEObject):
    def _info(self) -> np.ndarray:
        out = np.zeros(5, dtype=np.float64)
        N.call("he_ct_info", self.params.handle, self.handle, N.ptr(out, N.f64))
        return out

    @property
    def level(self) -> int:
        return int(self._info()[0])

    @property
    def log_scale(self) -> float:
        return float(self._info()[2])

    @property
    def log_slots(self) -> int:
        return int(self._info()[3])

    @property
    def slots(self) -> int:
        return 1 << self.log_slots


class Plaintext(_Element):
    KIND = KIND_PT


class Ciphertext(_Element):
    KIND = KIND_CT

    @property
    def degree(self) -> int:
        return int(self._info()[1])


class LWEBatch(HEObject):
    """LWE ciphertexts (one per extracted coefficient): b + <a, s> = m + e mod Q_level."""

    KIND = KIND_LWE

    def _info(self) -> tuple[int, int]:
        cnt, lvl = C.c_int(0), C.c_int(0)
        N.call("he_lwe_info", self.params.handle, self.handle, C.byref(cnt), C.byref(lvl))
        return cnt.value, lvl.value

    def __len__(self) -> int:
        return self._info()[0]

    @property
    def level(self) -> int:
        return self._info()[1]

    def select(self, indices) -> "LWEBatch":
        """A new batch with members ``indices`` (any order, repeats allowed): shuffling."""
        idx = np.ascontiguousarray(indices, dtype=np.int64).reshape(-1)
        h = N.new_handle("he_lwe_select", self.params.handle, self.handle,
                         N.ptr(idx, N.i64), len(idx))
        return LWEBatch(self.params, h)

    def lincomb(self, weights) -> "LWEBatch":
        """out[r] = sum_j weights[r, j] * self[j] for small integer weights."""
        w = np.asarray(weights)
        if w.ndim != 2 or w.shape[1] != len(self):
            raise HEArgumentError(f"weights must have shape (m, {len(self)}), got {w.shape}")
        if not np.issubdtype(w.dtype, np.integer):
            if not np.all(np.equal(np.round(w), w)):
                raise HEArgumentError("LWE linear combinations take integer weights")
        w = np.ascontiguousarray(w, dtype=np.int64)
        h = N.new_handle("he_lwe_lincomb", self.params.handle, self.handle,
                         N.ptr(w, N.i64), w.shape[0], w.shape[1])
        return LWEBatch(self.params, h)

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(b, a): b has shape (count, level+1), a (count, level+1, N), uint64 RNS residues."""
        cnt, lvl = self._info()
        b = np.zeros((cnt, lvl + 1), dtype=np.uint64)
        a = np.zeros((cnt, lvl + 1, self.params.n), dtype=np.uint64)
        N.call("he_lwe_export", self.params.handle, self.handle, N.ptr(b, N.u64),
               N.ptr(a, N.u64))
        return b, a


_KINDS: dict[int, type] = {
    KIND_SK: SecretKey, KIND_PK: PublicKey, KIND_EVK: EvalKeys, KIND_PT: Plaintext,
    KIND_CT: Ciphertext, KIND_LWE: LWEBatch,
}
