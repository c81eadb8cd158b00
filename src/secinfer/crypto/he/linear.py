"""Plaintext-matrix times encrypted-vector products and convolution layouts.

All products use the diagonal method with baby-step giant-step rotations (Lattigo's
``lintrans``, hoisted key switching) [CRISP Sec. III-B, following SIMC 2.0's diagonal
encoding]. Two layouts:

* dense ``m x n`` matrices with ``m, n <= slots`` (:meth:`LinearPlan.dense`): the input
  lives in ``n_p = 2^ceil(log2 n)`` slots (sparse packing), the matrix is cut into
  ``m_p = 2^ceil(log2 m)`` generalised diagonals D_k[t] = M[t mod m_p, (t + k) mod n_p]
  and a final rotate-and-sum over steps m_p, 2 m_p, ... folds the n_p / m_p partial sums
  (the "hybrid" method of Juvekar et al., GAZELLE). Cost: m_p plaintext products,
  ~2 sqrt(m_p) rotations, log2(n_p / m_p) more rotations, one rescale.
* any sparse matrix given by coordinates (:meth:`LinearPlan.from_coo`), cut into square
  blocks of ``2^log_slots`` slots; only non-zero diagonals are encoded. Convolutions
  (:func:`conv2d_plan`) use it with the output written on the input's spatial grid, so
  each (c_in, c_out, dy, dx) tap is one diagonal: at most (C_in + C_out - 1) * k_h * k_w
  diagonals per block pair, independent of the image size.

Inputs and outputs of a plan are lists of ciphertexts, one per block.
"""

from __future__ import annotations

import ctypes as C
from dataclasses import dataclass

import numpy as np

from secinfer.native import lib as N
from secinfer.crypto.he.errors import HEArgumentError
from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.he.objects import Ciphertext, HEObject, PublicKey, SecretKey
from secinfer.crypto.he.params import CKKSParams


def _pow2(x: int) -> int:
    return 1 if x <= 1 else 1 << (int(x) - 1).bit_length()


class DiagonalTransform(HEObject):
    """One encoded diagonal-form linear transform on 2^log_slots slots (then one rescale,
    then an optional rotate-and-sum)."""

    def __init__(self, params: CKKSParams, diags: dict[int, np.ndarray], log_slots: int,
                 level: int, sum_step: int = 0, sum_count: int = 1, bsgs_ratio: int = 1) -> None:
        slots = 1 << log_slots
        keys = sorted(diags)
        if not keys:
            raise HEArgumentError("a linear transform needs at least one non-zero diagonal")
        mat = np.zeros((len(keys), slots), dtype=np.complex128)
        for r, k in enumerate(keys):
            v = np.asarray(diags[k])
            if v.shape != (slots,):
                raise HEArgumentError(f"diagonal {k} must have {slots} entries")
            mat[r] = v
        idx = np.ascontiguousarray(keys, dtype=np.int64)
        re = np.ascontiguousarray(mat.real)
        im = np.ascontiguousarray(mat.imag)
        h = N.new_handle("he_lt_new", params.handle, N.ptr(idx, N.i64), len(keys),
                         N.ptr(re, N.f64), N.ptr(im, N.f64), log_slots, level, bsgs_ratio)
        super().__init__(params, h)
        self.log_slots, self.level = log_slots, level
        self.n_diagonals = len(keys)
        self.sum_step, self.sum_count = sum_step, sum_count

    def galois_elements(self) -> list[int]:
        out = np.zeros(4 * self.n_diagonals + 64, dtype=np.uint64)
        n = C.c_int(0)
        N.call("he_lt_galois", self.params.handle, self.handle, N.ptr(out, N.u64), len(out),
               C.byref(n))
        els = {int(v) for v in out[: n.value]}
        if self.sum_count > 1:
            steps, s = [], self.sum_step
            for _ in range(int(np.log2(self.sum_count))):
                steps.append(s)
                s *= 2
            els.update(self.params.galois_elements(rotations=steps))
        return sorted(els)

    def apply(self, ev: Evaluator, ct: Ciphertext) -> Ciphertext:
        ct.check_params(self.params, "ciphertext")
        if ct.level != self.level:
            raise HEArgumentError(
                f"transform encoded for level {self.level}, ciphertext is at level {ct.level}")
        h = N.new_handle("he_lt_eval", self.params.handle, ev.handle, ev._ct(ct), self.handle)
        with Ciphertext(self.params, h) as raw:
            out = ev.rescale(raw)
        if self.sum_count > 1:
            with out:
                return ev.rotate_and_sum(out, self.sum_step, self.sum_count)
        return out


@dataclass
class _Block:
    ob: int
    ib: int
    transform: DiagonalTransform


class LinearPlan:
    """y = M x for a public M, x encrypted as blocks of 2^log_slots slots."""

    def __init__(self, params: CKKSParams, in_dim: int, out_dim: int, log_slots: int,
                 level: int, blocks: list[_Block], out_slot: np.ndarray,
                 in_period: int | None = None) -> None:
        self.params, self.in_dim, self.out_dim = params, in_dim, out_dim
        self.log_slots, self.level = log_slots, level
        self.block = 1 << log_slots
        self.blocks = blocks
        self.out_slot = out_slot  # output i lives at global slot out_slot[i]
        self.in_blocks = -(-in_dim // self.block)
        self.out_blocks = int(out_slot.max()) // self.block + 1 if len(out_slot) else 1
        # Input replicated with this period inside each block (dense plans), else not.
        self.in_period = in_period

    # ------------------------------------------------------------ construction

    @classmethod
    def dense(cls, params: CKKSParams, matrix, level: int | None = None,
              bsgs_ratio: int = 1, replicate: bool = True) -> "LinearPlan":
        """Plan for a dense matrix whose sides fit one ciphertext (generalised diagonals).

        With ``replicate`` the input is tiled R = slots / n_p times and replica r computes
        the rows r*K'..(r+1)*K'-1 (K' = m_p / R): R times fewer diagonals; output row
        r*K' + i is read from slot r*n_p + i."""
        M = np.asarray(matrix)
        if M.ndim != 2:
            raise HEArgumentError("matrix must be 2-d")
        m, n = M.shape
        m_p, n_p = _pow2(m), _pow2(n)
        n_p = max(n_p, m_p)
        if n_p > params.max_slots:
            nz = np.nonzero(M)
            return cls.from_coo(params, nz[0], nz[1], M[nz], m, n, level=level)
        level = params.max_level if level is None else level
        S = params.max_slots if replicate else n_p
        R = min(S // n_p, m_p)
        K = m_p // R  # diagonals per replica
        I, J = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
        r, i_loc = I // K, I % K
        dd = (J - i_loc) % n_p
        k = dd % K
        t = r * n_p + i_loc + K * (dd // K)
        diag = np.zeros((K, S), dtype=np.complex128)
        diag[k, t] = M
        diags = {int(j): diag[j] for j in range(K) if np.any(diag[j] != 0)}
        if not diags:
            diags = {0: diag[0]}
        log_s = S.bit_length() - 1
        lt = DiagonalTransform(params, diags, log_s, level, sum_step=K, sum_count=n_p // K,
                               bsgs_ratio=bsgs_ratio)
        rows = np.arange(m, dtype=np.int64)
        out_slot = (rows // K) * n_p + rows % K
        return cls(params, n, m, log_s, level, [_Block(0, 0, lt)], out_slot, in_period=n_p)

    @classmethod
    def from_coo(cls, params: CKKSParams, rows, cols, vals, out_dim: int, in_dim: int,
                 out_slot=None, level: int | None = None, log_slots: int | None = None,
                 bsgs_ratio: int = 1) -> "LinearPlan":
        """Plan for y[r] += v * x[c] over coordinates (r, c, v). Output r is written to global
        slot out_slot[r] (default r); blocks of 2^log_slots slots (default: all slots)."""
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        vals = np.asarray(vals, dtype=np.complex128)
        if not (rows.shape == cols.shape == vals.shape):
            raise HEArgumentError("rows, cols, vals must have the same shape")
        if len(rows) and (rows.min() < 0 or rows.max() >= out_dim or cols.min() < 0
                          or cols.max() >= in_dim):
            raise HEArgumentError("coordinate out of range")
        out_slot = np.arange(out_dim, dtype=np.int64) if out_slot is None else \
            np.asarray(out_slot, dtype=np.int64)
        if len(np.unique(out_slot)) != out_dim:
            raise HEArgumentError("output slots must be distinct")
        log_slots = params.log_max_slots if log_slots is None else log_slots
        B = 1 << log_slots
        level = params.max_level if level is None else level
        orow = out_slot[rows]
        ob, ib = orow // B, cols // B
        t = orow % B
        kk = (cols % B - t) % B
        blocks: list[_Block] = []
        pair = ob * (in_dim // B + 1) + ib
        for key in np.unique(pair):
            sel = pair == key
            diag_keys = kk[sel]
            diags: dict[int, np.ndarray] = {}
            for k in np.unique(diag_keys):
                s2 = diag_keys == k
                v = np.zeros(B, dtype=np.complex128)
                np.add.at(v, t[sel][s2], vals[sel][s2])
                diags[int(k)] = v
            blocks.append(_Block(int(ob[sel][0]), int(ib[sel][0]),
                                 DiagonalTransform(params, diags, log_slots, level,
                                                   bsgs_ratio=bsgs_ratio)))
        return cls(params, in_dim, out_dim, log_slots, level, blocks, out_slot)

    # ------------------------------------------------------------ keys

    def galois_elements(self) -> list[int]:
        els: set[int] = set()
        for b in self.blocks:
            els.update(b.transform.galois_elements())
        return sorted(els)

    @property
    def n_diagonals(self) -> int:
        return sum(b.transform.n_diagonals for b in self.blocks)

    # ------------------------------------------------------------ data

    def input_slots(self, x) -> list[np.ndarray]:
        x = np.asarray(x).reshape(-1)
        if len(x) != self.in_dim:
            raise HEArgumentError(f"input has {len(x)} entries, plan expects {self.in_dim}")
        if self.in_period is not None:
            one = np.zeros(self.in_period, dtype=np.complex128)
            one[: self.in_dim] = x
            return [np.tile(one, self.block // self.in_period)]
        buf = np.zeros(self.in_blocks * self.block, dtype=np.complex128)
        buf[: self.in_dim] = x
        return [buf[i * self.block:(i + 1) * self.block] for i in range(self.in_blocks)]

    def encrypt_input(self, x, key: PublicKey | SecretKey) -> list[Ciphertext]:
        return [self.params.encrypt(v, key, level=self.level, log_slots=self.log_slots)
                for v in self.input_slots(x)]

    def apply(self, ev: Evaluator, cts: list[Ciphertext] | Ciphertext) -> list[Ciphertext]:
        if isinstance(cts, Ciphertext):
            cts = [cts]
        if len(cts) != self.in_blocks:
            raise HEArgumentError(f"plan takes {self.in_blocks} input ciphertexts, got {len(cts)}")
        for c in cts:
            if c.log_slots != self.log_slots:
                raise HEArgumentError(
                    f"input ciphertext has 2^{c.log_slots} slots, plan expects 2^{self.log_slots}")
        acc: dict[int, Ciphertext] = {}
        for b in self.blocks:
            part = b.transform.apply(ev, cts[b.ib])
            if b.ob in acc:
                prev = acc[b.ob]
                acc[b.ob] = ev.add(prev, part)
                prev.close()
                part.close()
            else:
                acc[b.ob] = part
        missing = [ob for ob in range(self.out_blocks) if ob not in acc]
        if missing:
            raise HEArgumentError(f"output blocks {missing} have no contributing entries")
        return [acc[ob] for ob in range(self.out_blocks)]

    def output_from_slots(self, slot_values: list[np.ndarray]) -> np.ndarray:
        flat = np.concatenate([np.asarray(v)[: self.block] for v in slot_values])
        return flat[self.out_slot]

    def decrypt_output(self, cts: list[Ciphertext], sk: SecretKey) -> np.ndarray:
        return self.output_from_slots([self.params.decrypt_decode(c, sk) for c in cts])


def conv2d_coo(weight, in_shape, stride: int = 1, padding: int = 0):
    """Coordinates of a 2-d convolution (NCHW, no dilation, groups = 1) as a matrix acting
    on the channel-major flattened input, with outputs on the input's grid: output
    (co, oy, ox) at slot co*H*W + (stride*oy)*W + stride*ox. Returns
    (rows, cols, vals, out_dim, in_dim, out_slot, out_shape)."""
    w = np.asarray(weight)
    if w.ndim != 4:
        raise HEArgumentError("conv weight must be (C_out, C_in, k_h, k_w)")
    co_n, ci_n, kh, kw = w.shape
    c_in, H, W = in_shape
    if c_in != ci_n:
        raise HEArgumentError(f"weight expects {ci_n} input channels, input has {c_in}")
    Ho = (H + 2 * padding - kh) // stride + 1
    Wo = (W + 2 * padding - kw) // stride + 1
    if Ho < 1 or Wo < 1 or stride * (Ho - 1) >= H or stride * (Wo - 1) >= W:
        raise HEArgumentError("this convolution's outputs do not fit the input grid layout")
    co, ci, dy, dx, oy, ox = np.meshgrid(np.arange(co_n), np.arange(ci_n), np.arange(kh),
                                         np.arange(kw), np.arange(Ho), np.arange(Wo),
                                         indexing="ij")
    iy = stride * oy - padding + dy
    ix = stride * ox - padding + dx
    ok = (iy >= 0) & (iy < H) & (ix >= 0) & (ix < W)
    rows = (co * Ho * Wo + oy * Wo + ox)[ok]
    cols = (ci * H * W + iy * W + ix)[ok]
    vals = w[co, ci, dy, dx][ok]
    out_dim = co_n * Ho * Wo
    r = np.arange(out_dim)
    o_c, o_y, o_x = r // (Ho * Wo), (r // Wo) % Ho, r % Wo
    out_slot = o_c * H * W + (stride * o_y) * W + stride * o_x
    return rows, cols, vals, out_dim, c_in * H * W, out_slot, (co_n, Ho, Wo)


def conv2d_plan(params: CKKSParams, weight, in_shape, stride: int = 1, padding: int = 0,
                level: int | None = None, log_slots: int | None = None) -> LinearPlan:
    """Convolution as a :class:`LinearPlan` (see :func:`conv2d_coo` for the layout).
    The logical output (C_out*H_o*W_o, channel-major) comes back from
    :meth:`LinearPlan.decrypt_output`."""
    rows, cols, vals, out_dim, in_dim, out_slot, _ = conv2d_coo(weight, in_shape, stride, padding)
    if log_slots is None:
        need = max(in_dim, int(out_slot.max()) + 1)
        log_slots = min(params.log_max_slots, _pow2(need).bit_length() - 1)
    return LinearPlan.from_coo(params, rows, cols, vals, out_dim, in_dim, out_slot=out_slot,
                               level=level, log_slots=log_slots)
