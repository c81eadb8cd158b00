"""CKKS homomorphic operations on ciphertexts bound to one parameter set."""

from __future__ import annotations

import ctypes as C

import numpy as np

from secinfer.native import lib as N
from secinfer.crypto.he.errors import HEArgumentError
from secinfer.crypto.he.objects import Ciphertext, EvalKeys, HEObject, Plaintext
from secinfer.crypto.he.params import CKKSParams

_ADD, _SUB, _MUL, _MULRELIN, _MULADD = 0, 1, 2, 3, 4
_RESCALE, _RELIN, _CONJ, _ROT, _DROP = 0, 1, 2, 3, 4


class Evaluator(HEObject):
    """Evaluates CKKS operations with a set of evaluation keys (may be ``None``).

    Operations return new ciphertexts and never modify their inputs, unless an ``out=``
    ciphertext is given (``add``, ``sub``, ``mul``, ``mul_plain``, ``rescale``): the
    result is then written into ``out`` (which may be one of the operands, e.g.
    ``mul_plain(ct, pt, out=ct)``) and ``out`` is returned; the result is bit-identical
    to the allocating call. (Allocating add / sub / ciphertext x plaintext take their
    outputs from a pool that closed ciphertexts return to, so closing temporaries
    promptly keeps them cheap too.) :meth:`mul_plain_add` accumulates ``acc += a * pt``.
    Rotations need the matching Galois keys, ``mul(..., relin=True)`` the
    relinearisation key.
    """

    def __init__(self, params: CKKSParams, keys: EvalKeys | None = None) -> None:
        kh = params._own(keys, "evaluation keys") if keys is not None else 0
        super().__init__(params, N.new_handle("he_evaluator_new", params.handle, kh))
        self.keys = keys

    def _ct(self, ct, what="ciphertext") -> int:
        if not isinstance(ct, Ciphertext):
            raise HEArgumentError(f"{what} must be a Ciphertext, got {type(ct).__name__}")
        return self.params._own(ct, what)

    def _operand(self, x) -> int:
        if not isinstance(x, (Ciphertext, Plaintext)):
            raise HEArgumentError(f"operand must be a Ciphertext or Plaintext, got {type(x).__name__}")
        return self.params._own(x, "operand")

    def _bin(self, op: int, a, b, out=None) -> Ciphertext:
        if out is not None:
            N.call("he_binop_into", self.params.handle, self.handle, op, self._ct(a),
                   self._operand(b), self._ct(out, "out"))
            return out
        h = N.new_handle("he_binop", self.params.handle, self.handle, op, self._ct(a),
                         self._operand(b))
        return Ciphertext(self.params, h)

    def _un(self, op: int, a, k: int = 0) -> Ciphertext:
        h = N.new_handle("he_unop", self.params.handle, self.handle, op, self._ct(a), int(k))
        return Ciphertext(self.params, h)

    # ------------------------------------------------------------ arithmetic

    def add(self, a: Ciphertext, b: Ciphertext | Plaintext, out: Ciphertext | None = None) -> Ciphertext:
        return self._bin(_ADD, a, b, out)

    def sub(self, a: Ciphertext, b: Ciphertext | Plaintext, out: Ciphertext | None = None) -> Ciphertext:
        return self._bin(_SUB, a, b, out)

    def mul(self, a: Ciphertext, b: Ciphertext | Plaintext, relin: bool = True,
            out: Ciphertext | None = None) -> Ciphertext:
        """Product (scale multiplies; call :meth:`rescale` afterwards)."""
        return self._bin(_MULRELIN if relin and isinstance(b, Ciphertext) else _MUL, a, b, out)

    def mul_plain(self, a: Ciphertext, pt: Plaintext, out: Ciphertext | None = None) -> Ciphertext:
        """Ciphertext times an already encoded plaintext, at min(a.level, pt.level);
        ``out=a`` multiplies in place. The plaintext's Montgomery form is computed on its
        first product and kept with it (one more polynomial of memory)."""
        if not isinstance(pt, Plaintext):
            raise HEArgumentError(f"mul_plain takes a Plaintext, got {type(pt).__name__}")
        return self._bin(_MUL, a, pt, out)

    def mul_plain_add(self, a: Ciphertext, pt: Plaintext, acc: Ciphertext) -> Ciphertext:
        """``acc += a * pt`` in place (multiply-accumulate); returns ``acc``. ``acc`` must
        be another ciphertext than ``a``; its scale should be a.scale * pt.scale (otherwise
        Lattigo first scales ``acc`` up by the integer ratio)."""
        if not isinstance(pt, Plaintext):
            raise HEArgumentError(f"mul_plain_add takes a Plaintext, got {type(pt).__name__}")
        if acc is a:
            raise HEArgumentError("the accumulator must be a different ciphertext than the factor")
        return self._bin(_MULADD, a, pt, acc)

    def mul_rescale(self, a: Ciphertext, b: Ciphertext | Plaintext) -> Ciphertext:
        with self.mul(a, b) as t:
            return self.rescale(t)

    def add_scalar(self, a: Ciphertext, c: complex) -> Ciphertext:
        c = complex(c)
        return Ciphertext(self.params, N.new_handle("he_scalarop", self.params.handle,
                                                    self.handle, 0, self._ct(a), c.real, c.imag))

    def mul_scalar(self, a: Ciphertext, c: complex) -> Ciphertext:
        """Multiply by a constant (integers keep the scale; others scale up, then rescale)."""
        c = complex(c)
        return Ciphertext(self.params, N.new_handle("he_scalarop", self.params.handle,
                                                    self.handle, 1, self._ct(a), c.real, c.imag))

    def mul_plain_vector(self, a: Ciphertext, values, rescale: bool = True) -> Ciphertext:
        """Slot-wise product with a public vector encoded at the ciphertext's level."""
        scale = np.log2(float(self.params.q[a.level])) if rescale else None
        with self.params.encode(values, level=a.level, log_slots=a.log_slots,
                                log_scale=scale) as pt:
            out = self.mul(a, pt)
        if not rescale:
            return out
        with out:
            return self.rescale(out)

    def rescale(self, a: Ciphertext, out: Ciphertext | None = None) -> Ciphertext:
        if out is not None:
            N.call("he_rescale_into", self.params.handle, self.handle, self._ct(a),
                   self._ct(out, "out"))
            return out
        return self._un(_RESCALE, a)

    def relinearize(self, a: Ciphertext) -> Ciphertext:
        return self._un(_RELIN, a)

    def drop_level(self, a: Ciphertext, levels: int = 1) -> Ciphertext:
        return self._un(_DROP, a, levels)

    # ------------------------------------------------------------ slot permutations

    def rotate(self, a: Ciphertext, k: int) -> Ciphertext:
        """Cyclic left rotation of the slots by ``k`` (slot i receives slot i+k)."""
        return self._un(_ROT, a, k)

    def conjugate(self, a: Ciphertext) -> Ciphertext:
        return self._un(_CONJ, a)

    def rotate_hoisted(self, a: Ciphertext, ks) -> dict[int, Ciphertext]:
        """Several rotations of one ciphertext sharing one key-switch decomposition."""
        ks = sorted({int(k) for k in ks})
        arr = np.ascontiguousarray(ks, dtype=np.int64)
        out = np.zeros(len(ks), dtype=np.uint64)
        N.call("he_rotate_hoisted", self.params.handle, self.handle, self._ct(a),
               N.ptr(arr, N.i64), len(ks), N.ptr(out, N.u64))
        return {k: Ciphertext(self.params, int(h)) for k, h in zip(ks, out)}

    def rotate_and_sum(self, a: Ciphertext, step: int, count: int) -> Ciphertext:
        """sum_{c < count} rotate(a, c*step) for power-of-two ``count`` (log2(count) rotations)."""
        if count < 1 or count & (count - 1):
            raise HEArgumentError("count must be a power of two")
        acc = a
        s = step
        while count > 1:
            with self.rotate(acc, s) as r:
                nxt = self.add(acc, r)
            if acc is not a:
                acc.close()
            acc = nxt
            s *= 2
            count //= 2
        return acc if acc is not a else self.add_scalar(a, 0)

    # ------------------------------------------------------------ linear maps

    def matvec(self, a: Ciphertext, plan) -> Ciphertext:
        """Plaintext matrix times encrypted vector (see :mod:`secinfer.crypto.he.linear`)."""
        return plan.apply(self, a)
