"""The one ctypes binding to secinfer's native library (``libsecinferhe.so``, built by
:mod:`secinfer.native.build` from the Go module in ``go/``): Lattigo HE, the FSS kernels,
garbled circuits and the ZK provers.

Every export returns a status code and writes an error message into a buffer that
this module supplies; :func:`call` turns codes into typed errors. Loading builds the
library first when it is missing or older than the Go sources. The layers above
(``secinfer.crypto.he``, ``.fss``, ``.gc``, ``.zk``) import this module, never each other's.
"""

from __future__ import annotations

import ctypes as C
import threading

from secinfer.native.errors import STATUS_ERRORS, HEError

_ERRLEN = 2048
_lock = threading.Lock()
_lib: C.CDLL | None = None

u64, i64, f64, cint, csize = C.c_uint64, C.c_int64, C.c_double, C.c_int, C.c_size_t
P_u64, P_i64, P_f64 = C.POINTER(u64), C.POINTER(i64), C.POINTER(f64)
P_bytes = C.POINTER(C.c_ubyte)

_CODES = STATUS_ERRORS

# name -> argument types (without the trailing errbuf, errlen pair); all return int.
P_u8, P_i32 = C.POINTER(C.c_uint8), C.POINTER(C.c_int32)
_FSS_SHAPE = [cint, cint, cint, P_i32, i64]   # n, out_bits, payload, entry bits, count of them
H = u64          # a handle
OUT_H = P_u64    # where a new handle is written
_SIGNATURES: dict[str, list] = {
    "he_params_new": [C.c_char_p, OUT_H],
    "he_params_info": [H, P_u64, cint],
    "he_keygen": [H, OUT_H, OUT_H],
    "he_pk_from_sk": [H, H, OUT_H],
    "he_galois_elements": [H, cint, P_i64, cint, P_u64, cint, C.POINTER(cint)],
    "he_evk_gen": [H, H, cint, P_u64, cint, OUT_H],
    "he_evk_info": [H, H, P_u64, cint, C.POINTER(cint)],
    "he_evaluator_new": [H, H, OUT_H],
    "he_encode": [H, P_f64, P_f64, cint, cint, cint, f64, OUT_H],
    "he_decode": [H, H, P_f64, P_f64, cint],
    "he_encrypt": [H, H, H, OUT_H],
    "he_decrypt": [H, H, H, OUT_H],
    "he_ct_info": [H, H, P_f64],
    "he_binop": [H, H, cint, H, H, OUT_H],
    "he_scalarop": [H, H, cint, H, f64, f64, OUT_H],
    "he_unop": [H, H, cint, H, i64, OUT_H],
    "he_binop_into": [H, H, cint, H, H, H],
    "he_rescale_into": [H, H, H, H],
    "he_rotate_hoisted": [H, H, H, P_i64, cint, P_u64],
    "he_lt_new": [H, P_i64, cint, P_f64, P_f64, cint, cint, cint, OUT_H],
    "he_lt_galois": [H, H, P_u64, cint, C.POINTER(cint)],
    "he_lt_eval": [H, H, H, H, OUT_H],
    "he_coeff_encode": [H, P_f64, cint, cint, f64, OUT_H],
    "he_coeff_decode": [H, H, P_f64, cint, f64],
    "he_lwe_extract": [H, H, P_i64, cint, OUT_H],
    "he_lwe_info": [H, H, C.POINTER(cint), C.POINTER(cint)],
    "he_lwe_lincomb": [H, H, P_i64, cint, cint, OUT_H],
    "he_lwe_select": [H, H, P_i64, cint, OUT_H],
    "he_lwe_export": [H, H, P_u64, P_u64],
    "he_lwe_import": [H, cint, cint, P_u64, P_u64, f64, OUT_H],
    "he_lwe_decrypt": [H, H, H, P_f64, f64],
    "he_lwe_pack": [H, H, H, P_i64, cint, OUT_H],
    "he_expand": [H, H, H, cint, P_i64, P_u64, cint, C.POINTER(cint)],
    "he_trace": [H, H, H, cint, OUT_H],
    "he_encrypt_rand": [H, H, H, cint, C.c_char_p, csize, P_i64, P_i64, P_i64, OUT_H],
    "he_flood": [H, H, H, cint, C.c_char_p, csize, OUT_H],
    "he_noise": [H, H, H, H, P_f64],
    "he_poly": [H, H, cint, P_u64, cint, C.POINTER(cint)],
    "he_ct_trim": [H, H, P_i64, cint, C.POINTER(P_bytes), C.POINTER(csize)],
    "he_trim_len": [H, cint, cint, C.POINTER(csize)],
    "he_decrypt_trimmed": [H, H, C.c_char_p, csize, cint, P_i64, cint, P_u64],
    "he_poly_pack": [H, cint, P_u64, C.POINTER(P_bytes), C.POINTER(csize)],
    "he_poly_unpack": [H, cint, C.c_char_p, csize, P_u64],
    "he_popk_hash": [H, H, cint, P_bytes, cint, P_i64, cint, P_i64, cint, P_u64, P_bytes, cint, P_u64, P_bytes],
    "he_popk_image": [H, H, cint, P_bytes, cint, P_i64, P_i64, P_u64],
    "he_encode_limbs": [H, cint, cint, P_bytes, cint, cint, P_i64, cint, P_i64, OUT_H],
    "he_keygen_seeded": [H, C.c_char_p, csize, C.c_char_p, csize, P_i64, P_i64, OUT_H, OUT_H],
    "he_pk_from_parts": [H, C.c_char_p, csize, P_u64, OUT_H],
    "he_keyproof_hash": [H, H, P_i64, cint, P_i64, cint, P_bytes, P_bytes],
    "he_keyproof_image": [H, H, P_i64, P_i64, P_u64],
    "he_gc_eval": [P_bytes, C.POINTER(C.c_int32), cint, cint, cint, cint, P_u64, P_u64],
    "he_gc_garble": [P_bytes, C.POINTER(C.c_int32), cint, cint, cint, cint, P_u64, P_u64, P_u64],
    "he_label_hash": [P_bytes, cint, P_u64, cint, P_bytes],
    "he_gc_eval_opened": [P_bytes, C.POINTER(C.c_int32), cint, cint, cint, cint, P_u64, P_u64, C.POINTER(C.c_int32),
                          cint, P_u64, P_bytes, P_u64, P_bytes, cint, C.POINTER(C.c_int32), cint, P_u64,
                          C.POINTER(cint)],
    "he_gc_eval_ripple": [P_bytes, cint, cint, P_u64, P_u64, P_u64, P_u64, P_u64],
    "he_marshal": [H, H, C.POINTER(cint), C.POINTER(P_bytes), C.POINTER(csize)],
    # ZKB++ for certified data (go/zkbpp_export.go; bound in secinfer.crypto.zk.zkbpp)
    "zk_prove": [P_i64, P_u64, P_bytes, P_u64, P_u64, P_bytes, P_i64, C.c_char_p, csize, C.c_char_p,
                 csize, C.POINTER(P_bytes), C.POINTER(csize)],
    "zk_verify": [P_i64, P_u64, P_bytes, P_u64, P_u64, P_bytes, csize, C.c_char_p, csize,
                  C.POINTER(cint)],
    "zk_evaluate": [P_i64, P_u64, P_u64, P_bytes, P_i64, P_bytes, P_u64],
    "zk_encode": [P_i64, P_u64, P_i64, P_u64],
    "zk_plaintext": [H, cint, cint, P_u64, OUT_H],
    "zk_lincomb": [cint, P_u64, cint, cint, P_u64, P_i64, P_u64],
    # fast packing / partial trace extraction (go/fastpack_cgo.go, secinfer.crypto.he.packing)
    "he_fp_elements": [H, cint, cint, P_u64, cint, C.POINTER(cint)],
    "he_fp_extract": [H, cint, cint, P_u64, cint, P_i64, P_i64, cint, P_u64, P_u64, cint],
    "he_fp_pack": [H, H, cint, cint, cint, P_u64, P_u64, P_i64, f64, cint, C.POINTER(cint), OUT_H],
    "he_unmarshal": [H, cint, C.c_char_p, csize, OUT_H],
    # bootstrapping and polynomial evaluation (go/ckksboot.go, secinfer.crypto.he.bootstrap)
    "he_boot_params_new": [C.c_char_p, OUT_H],
    "he_boot_new": [H, H, C.c_char_p, OUT_H],
    "he_boot_plan": [H, C.c_char_p, P_u64, cint],
    "he_go_memory": [i64, cint, P_u64, cint],
    "he_boot_info": [H, H, P_u64, cint],
    "he_boot_eval": [H, H, H, OUT_H],
    "he_poly_eval": [H, H, H, P_f64, cint, f64, f64, OUT_H],
    # FSS kernels (go/fss_*.go; bound in secinfer.crypto.fss.native)
    "fss_mmo_hash": [P_u64, i64, P_u64, i64, i64, P_u64, i64, cint],
    "fss_dcf_gen": _FSS_SHAPE + [i64, P_u64, i64, P_u64, i64, P_u64, i64, P_u64, i64,
                                 P_u64, i64, P_u8, i64, P_u8, i64, P_u64, i64, cint, cint],
    "fss_dcf_eval": _FSS_SHAPE + [cint, i64, i64, P_u64, i64, P_u64, i64, P_u8, i64, P_u8, i64,
                                  P_u64, i64, P_u64, i64, P_u64, i64, cint, cint],
}


def _declare(lib: C.CDLL) -> None:
    for name, args in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = [*args, C.c_char_p, cint]
        fn.restype = cint
    lib.he_free_handle.argtypes = [u64]
    lib.he_free_handle.restype = None
    lib.he_free.argtypes = [C.c_void_p]
    lib.he_free.restype = None
    lib.he_live_handles.argtypes = []
    lib.he_live_handles.restype = i64
    lib.fss_info.argtypes = [C.c_char_p, cint]
    lib.fss_info.restype = cint


def load() -> C.CDLL:
    """Return the loaded library, building it first if needed."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            # Imported here so `python -m secinfer.native.build` runs cleanly.
            from secinfer.native import build as _build

            path = _build.build(quiet=False) if _build.needs_build() else _build.LIB_PATH
            lib = C.CDLL(str(path))
            _declare(lib)
            _lib = lib
    return _lib


_tls = threading.local()
_fns: dict = {}


def call(name: str, *args, errors: dict | None = None, default: type = HEError) -> None:
    """Call export ``name``; raise the typed error matching a non-zero status (``errors``:
    status -> error class for exports outside the HE layer, ``default`` for the rest)."""
    fn = _fns.get(name)
    if fn is None:
        fn = _fns[name] = getattr(load(), name)
    err = getattr(_tls, "err", None)
    if err is None:
        err = _tls.err = C.create_string_buffer(_ERRLEN)
    rc = fn(*args, err, _ERRLEN)
    if rc != 0:
        cls = (_CODES if errors is None else errors).get(rc, default)
        raise cls(err.value.decode("utf-8", "replace") or f"{name} failed (code {rc})")


def new_handle(name: str, *args) -> int:
    """Call an export whose last argument receives a new handle; return the handle."""
    out = u64(0)
    call(name, *args, C.byref(out))
    return int(out.value)


def ptr(arr, ctype):
    """ctypes pointer to a C-contiguous numpy array (kept alive by the caller)."""
    return arr.ctypes.data_as(C.POINTER(ctype))


def free_handle(h: int) -> None:
    if _lib is not None and h:
        _lib.he_free_handle(h)


def live_handles() -> int:
    return int(load().he_live_handles())


def take_bytes(ptr: P_bytes, n: int) -> bytes:
    """Copy C-allocated bytes into Python and free them."""
    try:
        return C.string_at(ptr, n) if n else b""
    finally:
        load().he_free(C.cast(ptr, C.c_void_p))


def version() -> str:
    """Version string of the Go layer (the library writes it into the message buffer)."""
    lib = load()
    buf = C.create_string_buffer(256)
    if lib.he_version(buf, 256) != 0:
        raise HEError("he_version failed")
    return buf.value.decode()
