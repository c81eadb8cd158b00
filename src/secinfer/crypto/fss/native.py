"""ctypes binding of the native FSS kernels (DCF key generation and evaluation, the MMO
hash), which live in secinfer's native library (``secinfer/native/go/fss/fss_*.go``, one
c-shared library, built by ``python -m secinfer.native.build`` / ``make install``; loaded and
declared by :mod:`secinfer.native.lib`).

The numpy code in ``dcf.py`` and ``expand.py`` stays the reference: the kernels produce the
same keys byte for byte and the same outputs from the same PRG draws (tested in
``tests/fss/test_fss_native.py``). Which one runs:

* a ``backend`` argument of ``dcf_gen`` / ``dcf_eval`` ("native", "numpy" or "auto"),
* else the innermost ``use_backend(...)`` context (tests force numpy through the gates),
* else the environment variable ``SECINFER_FSS_BACKEND`` (same values),
* else "auto": native when the library loads, numpy (with one warning) when it cannot be
  built, e.g. without a Go toolchain. Forcing "native" raises the build error instead.

``SECINFER_FSS_THREADS`` caps the goroutines a call uses (default 0: one per core).

Every buffer is checked here (dtype, shape, contiguity) before the library sees it, and
the library checks every length again; it keeps no pointer into a numpy buffer after
returning.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes as C
import os
import threading
import warnings

import numpy as np

from secinfer.errors import ConfigError, NativeBuildError, SecinferError, SerializationError
from secinfer.native import lib as N

BACKEND_ENV = "SECINFER_FSS_BACKEND"
THREADS_ENV = "SECINFER_FSS_THREADS"
_BACKENDS = ("auto", "native", "numpy")
MMO_IMPLS = {"default": 0, "go": 1, "aesni": 2}

_override: contextvars.ContextVar = contextvars.ContextVar("secinfer_fss_backend", default=None)
_lock = threading.Lock()
_lib = None
_load_error: NativeBuildError | None = None
_warned = False

# argument pointer types (the export signatures are declared in secinfer.native.lib)
P_u64, P_u8, P_i32 = C.POINTER(C.c_uint64), C.POINTER(C.c_uint8), C.POINTER(C.c_int32)


class FSSNativeError(SecinferError):
    """The native FSS kernel reported a failure on input that passed the Python checks."""


def _load():
    """The native library; raises ``NativeBuildError`` if it cannot be built (remembered, so
    a missing toolchain is probed once)."""
    global _lib, _load_error
    if _lib is not None:
        return _lib
    if _load_error is not None:
        raise _load_error
    with _lock:
        if _lib is None and _load_error is None:
            try:
                _lib = N.load()
            except NativeBuildError as e:
                _load_error = e
                raise
    if _lib is None:
        raise _load_error  # type: ignore[misc]
    return _lib


def available() -> bool:
    """True when the native kernels can be used (the library builds and loads)."""
    try:
        _load()
        return True
    except NativeBuildError:
        return False


def resolve(backend: str | None = None) -> str:
    """The backend a call uses: "native" or "numpy" (see the module docstring)."""
    global _warned
    name = backend or _override.get() or os.environ.get(BACKEND_ENV) or "auto"
    if name not in _BACKENDS:
        raise ConfigError(f"FSS backend must be one of {_BACKENDS}, got {name!r}")
    if name == "numpy":
        return "numpy"
    if name == "native":
        _load()
        return "native"
    try:
        _load()
        return "native"
    except NativeBuildError as e:
        if not _warned:
            _warned = True
            warnings.warn(f"secinfer FSS: native kernels unavailable, using numpy ({e})", RuntimeWarning,
                          stacklevel=3)
        return "numpy"


@contextlib.contextmanager
def use_backend(name: str):
    """Run the enclosed FSS calls with ``name`` ("native", "numpy", "auto") in this context."""
    if name not in _BACKENDS:
        raise ConfigError(f"FSS backend must be one of {_BACKENDS}, got {name!r}")
    tok = _override.set(name)
    try:
        yield
    finally:
        _override.reset(tok)


def _threads() -> int:
    raw = os.environ.get(THREADS_ENV, "0")
    try:
        t = int(raw)
    except ValueError:
        raise ConfigError(f"{THREADS_ENV} must be an integer, got {raw!r}") from None
    if not 0 <= t <= 1024:
        raise ConfigError(f"{THREADS_ENV} must be in 0..1024, got {t}")
    return t


def _call(name: str, *args) -> None:
    _load()   # remembers a build failure
    N.call(name, *args, errors={4: ConfigError}, default=FSSNativeError)


def info() -> str:
    """Version and AES implementation of the kernels, e.g. 'secinfer-fss/1 mmo=aesni-x8'."""
    lib = _load()
    buf = C.create_string_buffer(256)
    if lib.fss_info(buf, 256) != 0:
        raise FSSNativeError("fss_info failed")
    return buf.value.decode()


# ---- buffer checks -------------------------------------------------------------------
def _buf(a, dtype, shape: tuple, what: str, err=ConfigError) -> np.ndarray:
    """``a`` as a C-contiguous, aligned array of exactly ``dtype`` and ``shape`` (else
    ``err``); a strided array is copied, never handed over as it is."""
    if not isinstance(a, np.ndarray) or a.dtype != np.dtype(dtype) or a.shape != tuple(shape):
        got = f"{a.dtype}{a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
        raise err(f"FSS native: {what} must be {np.dtype(dtype)}{tuple(shape)}, got {got}")
    if not a.flags.c_contiguous or not a.flags.aligned:
        a = np.ascontiguousarray(a)
    return a


def _p(a: np.ndarray, ptype):
    """A ctypes pointer to ``a``'s data (the pointer object keeps ``a`` alive)."""
    return a.ctypes.data_as(ptype)


def _shape_args(params) -> tuple:
    """(n, k, P, entry widths, P): the shape arguments every DCF export starts with."""
    bits = np.asarray(params.bits, np.int32)
    return (params.n, params.out_bits, params.payload, _p(bits, P_i32), bits.size)


# ---- kernels ---------------------------------------------------------------------------
def mmo_hash(seeds: np.ndarray, tweaks: np.ndarray, impl: str = "default") -> np.ndarray:
    """``expand.MMOHash.hash`` natively: (B, 2) seeds, (T,) or (B, T) tweaks -> (B, T, 2)."""
    code = _impl(impl)
    seeds = np.asarray(seeds)
    if seeds.ndim != 2:
        raise ConfigError(f"FSS native: seeds must be (B, 2) uint64, got shape {seeds.shape}")
    b = seeds.shape[0]
    seeds = _buf(seeds, np.uint64, (b, 2), "seeds")
    tweaks = np.asarray(tweaks)
    if tweaks.ndim not in (1, 2):
        raise ConfigError(f"FSS native: tweaks must be (T,) or (B, T), got shape {tweaks.shape}")
    t = tweaks.shape[-1]
    tweaks = _buf(tweaks, np.uint64, (t,) if tweaks.ndim == 1 else (b, t), "tweaks")
    out = np.empty((b, t, 2), np.uint64)
    _call("fss_mmo_hash", _p(seeds, P_u64), b, _p(tweaks, P_u64), t, b if tweaks.ndim == 2 else 0,
          _p(out, P_u64), out.size, code)
    return out


def _impl(impl: str) -> int:
    if impl not in MMO_IMPLS:
        raise ConfigError(f"MMO implementation must be one of {sorted(MMO_IMPLS)}, got {impl!r}")
    return MMO_IMPLS[impl]


def dcf_gen(params, alpha: np.ndarray, beta: np.ndarray, root0: np.ndarray, root1: np.ndarray,
            impl: str = "default"):
    """Correction words of B DCF keys from alpha (B,), reduced beta (B, P, L) and the two
    parties' root seeds (B, 2) (lowest bit clear): (s_cw, t_cw, v_cw, final) in the layout of
    ``dcf.DCFKeys`` (final unpacked, (B, P, L)). ``impl`` picks the AES of the hash
    ("default", "go" = crypto/aes, "aesni"); the results are the same."""
    alpha = np.asarray(alpha)
    b, lim, pay = int(alpha.shape[0]) if alpha.ndim == 1 else -1, params.group.limbs, params.payload
    alpha = _buf(alpha, np.uint64, (b,), "alpha")
    beta = _buf(beta, np.uint64, (b, pay, lim), "beta")
    root0 = _buf(root0, np.uint64, (b, 2), "root seed 0")
    root1 = _buf(root1, np.uint64, (b, 2), "root seed 1")
    from secinfer.crypto.fss.dcf import DCFKeys
    shapes = DCFKeys.stored_shapes(params, b)
    s_cw, t_cw, v_cw = (np.empty(*shapes[f]) for f in ("s_cw", "t_cw", "v_cw"))
    final = np.empty((b, pay, lim), np.uint64)
    _call("fss_dcf_gen", *_shape_args(params), b, _p(alpha, P_u64), alpha.size, _p(beta, P_u64), beta.size,
          _p(root0, P_u64), root0.size, _p(root1, P_u64), root1.size, _p(s_cw, P_u64), s_cw.size,
          _p(t_cw, P_u8), t_cw.size, _p(v_cw, P_u8), v_cw.size, _p(final, P_u64), final.size,
          _threads(), _impl(impl))
    return s_cw, t_cw, v_cw, final


def dcf_eval(keys, x: np.ndarray, impl: str = "default") -> np.ndarray:
    """Party ``keys.party``'s shares at x (B, M) uint64: (B, M, P, L). Every key field is
    checked against the shapes its params and count fix (``SerializationError``)."""
    params = keys.params
    b, lim, pay = keys.count, params.group.limbs, params.payload
    if keys.party not in (0, 1):
        raise SerializationError(f"DCF key party must be 0 or 1, got {keys.party}")
    from secinfer.crypto.fss.dcf import DCFKeys
    shapes = DCFKeys.stored_shapes(params, b)
    fields = {}
    for f in ("seed", "s_cw", "t_cw", "v_cw"):
        fields[f] = _buf(getattr(keys, f), shapes[f][1], shapes[f][0], f"DCF key field {f!r}", SerializationError)
    final = _buf(keys.final, np.uint64, (b, pay, lim), "DCF key field 'final'", SerializationError)
    if not isinstance(x, np.ndarray) or x.ndim != 2 or x.shape[0] != b:
        raise ConfigError(f"DCF eval: expected {b} rows of points, got shape {np.shape(x)}")
    m = int(x.shape[1])
    x = _buf(x, np.uint64, (b, m), "points")
    out = np.empty((b, m, pay, lim), np.uint64)
    _call("fss_dcf_eval", *_shape_args(params), keys.party, b, m,
          _p(fields["seed"], P_u64), fields["seed"].size, _p(fields["s_cw"], P_u64), fields["s_cw"].size,
          _p(fields["t_cw"], P_u8), fields["t_cw"].size, _p(fields["v_cw"], P_u8), fields["v_cw"].size,
          _p(final, P_u64), final.size, _p(x, P_u64), x.size, _p(out, P_u64), out.size, _threads(), _impl(impl))
    return out
