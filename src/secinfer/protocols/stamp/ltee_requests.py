"""The LTEE emulation's parsing of host requests (``ltee_device``): byte strings, ring
payloads and operation specs, each checked before use -- a malformed one is ``Refused``
(the host's input is untrusted) -- the device's operation count and the import of its
plaintext kernels."""

from __future__ import annotations

import json

import numpy as np

from secinfer.errors import ProtocolError
from secinfer.protocols.stamp.ltee_counters import Refused

SPEC_CACHE = 1024          # operation specs the device keeps parsed (``_parse_spec``)


def _parse_spec(kernels, raw, cache: dict | None = None) -> dict:
    """A request's JSON operation spec, validated (malformed: ``Refused``); ``raw``: the
    argument, or its bytes already taken (``_blob``: the caches' key). ``cache``: specs
    already validated, keyed by their exact bytes (``Device.specs``, filled by ``cmd_specs``
    before the online phase and by every parse): the same bytes give the same spec, and
    nothing downstream changes a spec, so a hit is what parsing again would return."""
    b = raw if type(raw) is bytes else _blob(raw)
    if cache is not None:
        hit = cache.get(b)
        if hit is not None:
            return hit
    try:
        spec = json.loads(b.decode())
        kernels.validate(spec)
    except (ValueError, ProtocolError) as e:
        raise Refused("bad-request", f"spec: {e}") from None
    if cache is not None:
        if len(cache) >= SPEC_CACHE:
            cache.clear()
        cache[b] = spec
    return spec


class _OpCount:
    """Primitive operations executed (the same fields as ``kernels.OpCount``)."""

    def __init__(self) -> None:
        self.int_ops = 0
        self.float_ops = 0
        self.exp_ops = 0


def _blob(a) -> bytes:
    """A host-supplied byte string: only a 1-d uint8 array is one (``bytes()`` of a 0-d
    integer array would allocate that many bytes)."""
    if not isinstance(a, np.ndarray) or a.dtype != np.uint8 or a.ndim != 1:
        raise Refused("bad-request", "a byte-string argument must be a 1-d uint8 array")
    return a.tobytes()


def _ring_in(a: np.ndarray, n: int) -> np.ndarray:
    if a.shape != (n,) or a.dtype not in (np.uint32, np.uint64):
        raise Refused("bad-request", "payload shape or type")
    return a.astype(np.uint64)


def _kernels():
    """The plaintext kernels. ``ltee_device.start`` begins importing them in a thread as soon
    as the device starts, while the host runs Protocol 1 (the device answers its bus
    meanwhile), so the import (~70 ms) never lands in the first evaluation of the online phase; a call
    before it finished waits for it on Python's import lock."""
    from secinfer.protocols.rep3 import kernels
    return kernels


def _preload_kernels() -> None:
    try:
        _kernels()
    except Exception:  # noqa: BLE001 - the first real use imports again and reports the error
        pass
