"""CKKS bootstrapping and polynomial evaluation over Lattigo v6 (``go/ckksboot.go``), for
the fully encrypted inference baseline SAFHIRE is compared with [SAFHIRE Sec. 6,
ORION-style baseline].

A bootstrappable parameter set (``ParamSpec.secret_h > 0``, e.g. ``ckks-boot-n16-128``) is an
ordinary :class:`CKKSParams`: the *residual* chain users compute on. :class:`Bootstrapper`
generates Lattigo's bootstrapping keys for a secret key and refreshes ciphertexts (its
parameters extend the residual chain with the CoeffsToSlots, EvalMod and SlotsToCoeffs
levels; Lattigo's default N = 2^16 bootstrapping literal, four 61-bit P primes).
Security of the extended chain: Lattigo's bootstrapping package documents its default
N = 2^16 sets (sparse ternary secret H = 192, logQP ~ 1550) as 128-bit; that figure is
Lattigo's, not re-estimated here.

:func:`chebyshev` interpolates a function on [a, b] (numpy, independent of Lattigo) and
:func:`poly_eval` evaluates the series on every slot of a ciphertext.
"""

from __future__ import annotations

import numpy as np
from numpy.polynomial import chebyshev as npcheb

from secinfer.native import lib as N
from secinfer.crypto.he.errors import HEArgumentError
from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.he.objects import Ciphertext, HEObject, SecretKey
from secinfer.crypto.he.params import CKKSParams


class Bootstrapper(HEObject):
    """Lattigo's bootstrapping evaluator and its keys, for one secret key."""

    def __init__(self, params: CKKSParams, sk: SecretKey, log_slots: int | None = None) -> None:
        if not params.spec.secret_h:
            raise HEArgumentError(f"parameter set {params.name!r} is not bootstrappable "
                                  "(needs a sparse secret: ParamSpec.secret_h)")
        log_slots = params.log_max_slots if log_slots is None else int(log_slots)
        h = N.new_handle("he_boot_new", params.handle, params._own(sk, "sk"), log_slots)
        super().__init__(params, h)
        self.log_slots = log_slots
        info = np.zeros(8, dtype=np.uint64)
        N.call("he_boot_info", params.handle, self.handle, N.ptr(info, N.u64), len(info))
        (self.output_level, self.log_n, self.log_qp, self.key_bytes, self.q_count,
         self.p_count, self.secret_h, self.depth) = (int(v) for v in info)

    def bootstrap(self, ct: Ciphertext) -> Ciphertext:
        """A fresh ciphertext of the same values at :attr:`output_level`. Values must stay
        within Lattigo's message bound (|x| well below 2^(log q0 - log scale - 8))."""
        ct.check_params(self.params, "ciphertext")
        if ct.log_slots != self.log_slots:
            raise HEArgumentError(f"bootstrapper set up for 2^{self.log_slots} slots, ciphertext "
                                  f"has 2^{ct.log_slots}")
        return Ciphertext(self.params, N.new_handle("he_boot_eval", self.params.handle,
                                                    self.handle, ct.handle))


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
