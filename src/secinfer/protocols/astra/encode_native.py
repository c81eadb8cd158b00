"""The client's encode-and-mask on the semi-honest direct path in one native call
(``r64_encode_mask``, ``native/go/ring64/encode.go``; docs/protocols/astra.md "Seventh
pass"): m_x = encode(x) + lambda_x over Z_2^64 into lambda_x's buffer, the IEEE steps of
``direct.encode_masked`` (x 2^f, + 0.5, floor, the cast to int64) element by element. After
a wake-up every numpy call costs its own cold code and dispatch (``encode_masked`` makes
four); this is one call whose arguments are ctypes values made offline, so nothing is
converted online. The query's values are read by the call itself, online; only the
addresses of the client's query and mask buffers are taken offline."""

from __future__ import annotations

import ctypes as C

import numpy as np

from secinfer.native import lib as N


def _native():
    """The loaded library's kernel, or None (not built, or without it)."""
    try:
        return getattr(N.load(), "r64_encode_mask", None)
    except Exception:  # noqa: BLE001 - no native library: the numpy path is used
        return None


class BoundEncode:
    """``direct.encode_masked(x, frac, lam, ...)`` bound to one query ``x`` and one mask
    buffer ``lam`` (written in place and returned by each call). ``ok`` is False, and
    ``encode_masked`` is to be used, when the library is missing or the arrays are not a
    C-contiguous float64 query and a writable C-contiguous uint64 buffer of its size."""

    def __init__(self, x: np.ndarray, frac: int, lam: np.ndarray) -> None:
        self.x, self.lam = x, lam
        fn = _native()
        self.ok = (fn is not None and isinstance(x, np.ndarray) and x.dtype == np.float64
                   and x.flags.c_contiguous and lam.dtype == np.uint64 and lam.flags.c_contiguous
                   and lam.flags.writeable and lam.size == x.size and 0 <= frac < 64)
        if not self.ok:
            return
        self._err = C.create_string_buffer(2048)
        # a prototype-less function object on ctypes values made now: no conversion per call
        self._fn = type(fn)(("r64_encode_mask", N.load()))
        self._fn.restype = C.c_int
        self._args = (C.c_void_p(x.ctypes.data), C.c_void_p(lam.ctypes.data), C.c_int64(x.size),
                      C.c_double(float(2 ** frac)), self._err, C.c_int(len(self._err)))

    def __call__(self) -> np.ndarray:
        if self._fn(*self._args) != 0:
            N.call("r64_encode_mask", N.ptr(self.x, C.c_double), N.ptr(self.lam, C.c_uint64), self.x.size,
                   self._args[3].value)   # (the typed error of the same call)
        return self.lam
