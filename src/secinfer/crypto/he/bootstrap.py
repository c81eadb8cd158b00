"""CKKS bootstrapping and polynomial evaluation over Lattigo v6 (``go/ckksboot.go``), for
the fully encrypted inference baseline SAFHIRE is compared with [SAFHIRE Sec. 6,
ORION-style baseline].

A bootstrappable parameter set (``ParamSpec.secret_h > 0``, e.g. ``ckks-boot-n16-128``) is an
ordinary :class:`CKKSParams`: the *residual* chain users compute on. :class:`Bootstrapper`
generates Lattigo's bootstrapping keys for a secret key and refreshes ciphertexts (its
parameters extend the residual chain with the CoeffsToSlots, EvalMod and SlotsToCoeffs
levels; Lattigo's default N = 2^16 bootstrapping literal, four 61-bit P primes).
Security of the extended chain: for a dense-ternary set (``ParamSpec.boot_log_p``, e.g.
``ckks-boot-n16-dense-128``) the extended log2(QP) must fit ``HE_STANDARD_128_EXT`` (1747 at
N = 2^16, ternary secret, 128-bit classical), else :class:`Bootstrapper` refuses it with
``InsecureParametersError`` before any key is made (:func:`plan` gives the figures without
keys). For the sparse H = 192 sets (``ckks-boot-n16-128``) the 128-bit figure is Lattigo's
(its bootstrapping package documents its default N = 2^16 sets as 128-bit), not
re-estimated here.

Memory (``dft_on_demand``, on by default for ``boot_log_p`` sets): Lattigo's evaluator keeps
the CoeffsToSlots and SlotsToCoeffs matrices encoded (3.6 GB at N = 2^16, 2^14 slots, next
to 5.0 GB of keys); on demand, ``go/ckksboot.go`` encodes each just before its step and drops
it after, and never holds the matrices and the Galois keys together while the keys are made.

:func:`chebyshev` interpolates a function on [a, b] (numpy, independent of Lattigo) and
:func:`poly_eval` evaluates the series on every slot of a ciphertext.
"""

from __future__ import annotations

import json

import numpy as np
from numpy.polynomial import chebyshev as npcheb

from secinfer.native import lib as N
from secinfer.crypto.he.errors import HEArgumentError
from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.he.objects import Ciphertext, HEObject, SecretKey
from secinfer.crypto.he.params import HE_STANDARD_128_EXT, CKKSParams
from secinfer.errors import InsecureParametersError


def _spec_json(params: CKKSParams, log_slots: int | None, dft_on_demand: bool | None) -> tuple[bytes, int]:
    if not params.spec.bootstrappable:
        raise HEArgumentError(f"parameter set {params.name!r} is not bootstrappable "
                              "(needs ParamSpec.secret_h or ParamSpec.boot_log_p)")
    if log_slots is None:
        log_slots = params.spec.boot_log_slots or params.log_max_slots
    log_slots = int(log_slots)
    if log_slots != params.log_max_slots:
        # measured with Lattigo v6.1.1 (same ring for both sets, dense or sparse secret):
        # a ciphertext of 2^(logN - 2) or fewer slots came back with errors ~0.6 on values in
        # [-0.5, 0.5] (N = 2^13: 2^11 and 2^10 slots; N = 2^16: 2^14), full slots 5e-8
        raise HEArgumentError(f"bootstrapping bootstraps full ciphertexts only (2^{params.log_max_slots} "
                              f"slots), not 2^{log_slots}: sparse slots lost the values here")
    if dft_on_demand is None:
        dft_on_demand = bool(params.spec.boot_log_p)
    d = {"LogSlots": log_slots, "LogP": list(params.spec.boot_log_p), "DFTOnDemand": bool(dft_on_demand)}
    return json.dumps(d).encode(), log_slots


def plan(params: CKKSParams, log_slots: int | None = None) -> dict:
    """The bootstrapping extension of ``params`` without making keys: its ring, slots, Q and
    P prime counts, ceil(log2 QP), decomposition count dnum, Galois keys, bytes per Galois
    key (2 dnum N (#Q + #P) 8), the keys' total (Galois + relinearisation), depth, output
    level, and the 128-bit verdict for the extended chain (see the module docstring)."""
    spec, ls = _spec_json(params, log_slots, None)
    out = np.zeros(10, dtype=np.uint64)
    N.call("he_boot_plan", params.handle, spec, N.ptr(out, N.u64), len(out))
    keys = ("log_n", "log_slots", "q_count", "p_count", "log_qp", "dnum", "galois_keys",
            "galois_key_bytes", "depth", "output_level")
    p = {k: int(v) for k, v in zip(keys, out)}
    p["key_bytes_estimate"] = p["galois_key_bytes"] * (p["galois_keys"] + 1)
    p["secret"] = f"sparse ternary H = {params.spec.secret_h}" if params.spec.secret_h else "dense ternary"
    bound = HE_STANDARD_128_EXT.get(p["log_n"])
    if params.spec.secret_h:
        p["security"] = "Lattigo's figure for its sparse-secret sets (not re-estimated)"
        p["security_bits"] = None
    else:
        p["security_bits"] = 128 if bound is not None and p["log_qp"] <= bound else 0
        p["security"] = (f"extended log2 QP = {p['log_qp']} vs {bound} (N = 2^{p['log_n']}, "
                         "ternary secret, 128-bit classical)")
    return p


def go_memory(limit_bytes: int = -1, gc_percent: int = -1) -> dict:
    """Set the Go runtime's soft memory limit and GC percent (negative: leave) for this
    process; returns the previous settings and the heap after a collection."""
    out = np.zeros(5, dtype=np.uint64)
    N.call("he_go_memory", int(limit_bytes), int(gc_percent), N.ptr(out, N.u64), len(out))
    prev_limit = int(out[0]) if out[0] < (1 << 63) else -1
    return {"previous_limit": prev_limit, "previous_gc_percent": int(np.int64(out[1])),
            "heap_live_bytes": int(out[2]), "heap_held_bytes": int(out[3]), "go_sys_bytes": int(out[4])}


class Bootstrapper(HEObject):
    """Lattigo's bootstrapping evaluator and its keys, for one secret key.

    ``log_slots``: slots bootstrapped (default: the set's ``boot_log_slots``, else N / 2);
    ``dft_on_demand``: see the module docstring (default: on for ``boot_log_p`` sets)."""

    def __init__(self, params: CKKSParams, sk: SecretKey, log_slots: int | None = None,
                 dft_on_demand: bool | None = None) -> None:
        spec, log_slots = _spec_json(params, log_slots, dft_on_demand)
        self.plan = plan(params, log_slots)
        if not params.insecure and self.plan["security_bits"] == 0:
            raise InsecureParametersError(
                f"bootstrapping {params.name!r} extends the chain to log2 QP = {self.plan['log_qp']}, "
                f"over the 128-bit bound {HE_STANDARD_128_EXT.get(self.plan['log_n'])} for N = "
                f"2^{self.plan['log_n']} with a ternary secret")
        h = N.new_handle("he_boot_new", params.handle, params._own(sk, "sk"), spec)
        super().__init__(params, h)
        self.log_slots = log_slots
        self._info()

    def _info(self) -> None:
        info = np.zeros(10, dtype=np.uint64)
        N.call("he_boot_info", self.params.handle, self.handle, N.ptr(info, N.u64), len(info))
        (self.output_level, self.log_n, self.log_qp, self.key_bytes, self.q_count,
         self.p_count, self.secret_h, self.depth) = (int(v) for v in info[:8])
        self.dft_on_demand = bool(info[8])
        self.dft_encode_s = float(info[9]) / 1e9

    def bootstrap(self, ct: Ciphertext) -> Ciphertext:
        """A fresh ciphertext of the same values at :attr:`output_level`. Values must stay
        within Lattigo's message bound (|x| well below 2^(log q0 - log scale - 8))."""
        ct.check_params(self.params, "ciphertext")
        if ct.log_slots != self.log_slots:
            raise HEArgumentError(f"bootstrapper set up for 2^{self.log_slots} slots, ciphertext "
                                  f"has 2^{ct.log_slots}")
        out = Ciphertext(self.params, N.new_handle("he_boot_eval", self.params.handle,
                                                   self.handle, ct.handle))
        if self.dft_on_demand:
            self._info()
        return out


def chebyshev(f, degree: int, a: float, b: float) -> np.ndarray:
    """Chebyshev coefficients of the degree-``degree`` interpolant of f at the Chebyshev
    points of [a, b] (in the variable t = (2x - a - b) / (b - a))."""
    if degree < 1:
        raise HEArgumentError("degree must be >= 1")
    if not b > a:
        raise HEArgumentError(f"empty interval [{a}, {b}]")
    return npcheb.chebinterpolate(lambda t: f(((b - a) * t + a + b) / 2.0), degree)


def cheb_value(coeffs, a: float, b: float, x) -> np.ndarray:
    """The series evaluated in the clear (the reference for :func:`poly_eval`)."""
    x = np.asarray(x, dtype=np.float64)
    return npcheb.chebval((2.0 * x - a - b) / (b - a), coeffs)


def poly_depth(degree: int) -> int:
    """Levels :func:`poly_eval` consumes: ceil(log2(degree + 1)) plus the change of basis."""
    return int(np.ceil(np.log2(degree + 1))) + 1


def poly_eval(ev: Evaluator, ct: Ciphertext, coeffs, a: float, b: float) -> Ciphertext:
    """sum_k coeffs[k] T_k((2x - a - b) / (b - a)) on every slot (needs relinearisation
    keys in ``ev``); the result has the default scale."""
    c = np.ascontiguousarray(np.asarray(coeffs, dtype=np.float64))
    if c.ndim != 1 or len(c) < 2:
        raise HEArgumentError("need at least two Chebyshev coefficients")
    h = N.new_handle("he_poly_eval", ev.params.handle, ev.handle, ev._ct(ct),
                     N.ptr(c, N.f64), len(c), float(a), float(b))
    return Ciphertext(ev.params, h)
