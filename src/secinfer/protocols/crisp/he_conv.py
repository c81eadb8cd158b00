"""Channel-packed convolutions for the HE linear layer (coefficient encoding).

The row layout of ``ckks_engine`` runs a convolution as im2col rows: one answer per
(row group, output block), ~10^4 answers for a 64->64 3x3 layer on 32x32. Here the
client's (zero-padded) share tensor of C_b channels goes into one polynomial and each
output channel is one plaintext product -- the homomorphic convolution of Cheetah
(Huang et al., USENIX Security 2022, Sec. 3.1), re-derived for our packing:

    t(X)   = sum_{c, i, j} T[c, i, j] X^(c H W + i W + j)                  (H, W padded)
    k_m(X) = sum_{c, l, l'} K[m, c, l, l'] X^(O - c H W - l W - l'),
    O      = (C_b - 1) H W + (h - 1) W + (w - 1)

Coefficient O + i W + j of t k_m is sum_{c,l,l'} T[c, i+l, j+l'] K[m, c, l, l'] -- the
stride-1 output (m, i, j): any other pair landing there would need
(c' - c) H W + (i' - l - i) W + (j' - l' - j) = 0 with |j' - l' - j| < W and
|i' - l - i| < H, forcing c' = c, i' = i + l, j' = j + l'. M_b output channels share one
answer through k = sum_m X^(m D) k_m with block stride
D >= max(O + (H - h) W + (W - w) + 1, C_b H W), which keeps every block's useful window
clear of the other blocks' support. The support may run past N/2 (the MAC half starts at
offset N/2 = the imaginary unit) as long as it stays below N/2 + O and every target below
N/2: then no target of either half meets the other half (``spill_ok``). The layout with
the fewest online bytes is chosen (``conv_layout``). Strides subsample the
stride-1 output. Channel groups (inputs longer than N/4) are accumulated per answer.
The masking/flooding budget is ``budget.Budget`` with terms = nnz = C_b h w M_b per
group and n_acc = number of channel groups.
"""

from __future__ import annotations

import numpy as np

from secinfer.net.channel import ArraySpec
from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.he.trimmed import packed_poly_size, trimmed_size
from secinfer.crypto.zk import popk
from secinfer.protocols.crisp import proof
from secinfer.protocols.crisp.budget import Budget
from secinfer.protocols.crisp.he_core import SERVER, _as_limbs, close_all, ct_pt_dot, digit_limbs


class ConvLayout(Budget):
    def __init__(self, params, k, step, sigma, c_b, m_b, dm):
        n_, c, h_in, w_in = step.in_shape
        self.C, self.M = c, step.out_shape[1]
        pt, pl, pb, pr = self.pads = _pads(step)
        self.Hp, self.Wp = h_in + pt + pb, w_in + pl + pr
        self.kh, self.kw = step.attrs["kernel_shape"]
        self.sh, self.sw = step.attrs.get("strides", [1, 1])
        self.OH, self.OW = step.out_shape[2], step.out_shape[3]
        self.C_b, self.M_b, self.Dm = c_b, m_b, dm
        self.n_cg = -(-c // c_b)
        self.n_mb = -(-self.M // m_b)
        self.O = (c_b - 1) * self.Hp * self.Wp + (self.kh - 1) * self.Wp + (self.kw - 1)
        nnz = c_b * self.kh * self.kw * m_b
        super().__init__(params, k, nnz * self.n_cg, nnz, self.n_cg, step.wbits, sigma)

    def positions(self, mb: int):
        """(channels of block mb, target coefficients (len, OH, OW))."""
        ms = np.arange(mb * self.M_b, min((mb + 1) * self.M_b, self.M))
        ii = np.arange(self.OH) * self.sh
        jj = np.arange(self.OW) * self.sw
        pos = ((ms - mb * self.M_b)[:, None, None] * self.Dm + self.O
               + ii[None, :, None] * self.Wp + jj[None, None, :])
        return ms, pos


def _pads(step) -> tuple:
    p = step.attrs.get("pads", [0, 0, 0, 0])
    return int(p[0]), int(p[1]), int(p[2]), int(p[3])


def conv_layout(step, params, k: int, sigma: int, harden=None, malicious: bool = False):
    """The packed layout for a Conv step with the fewest online bytes, or None when it
    does not apply (groups, dilations, or a single padded channel larger than N/2).

    A candidate (C_b, M_b) is feasible when (1) C_b H W + (M_b - 1) D_m <= N/2 and (2) every
    target lies below N/2. The product's support may then run past N/2 (up to
    N/2 + O - 1), but never onto a target of either half: see :func:`spill_ok`. Among the
    feasible candidates the one with the fewest bytes wins: the client's ciphertexts, the
    trimmed answers and (malicious) the proofs of plaintext knowledge, each sized with the
    budget the engine will use (``harden``: the malicious client's proven bounds)."""
    if step.node_op != "Conv" or len(step.in_shape) != 4:
        return None
    at = step.attrs
    if int(at.get("group", 1)) != 1 or any(int(d) != 1 for d in at.get("dilations", [1, 1])):
        return None
    m_out = step.out_shape[1]
    best, best_cost = None, None
    for c_b, m_max, dm in feasible(step, params):
        m_b = -(-m_out // -(-m_out // m_max))     # as few per block as the block count allows
        lay = ConvLayout(params, k, step, sigma, c_b, m_b, dm)
        lay = harden(lay) if harden is not None else lay
        cost = _online_bytes(params, lay, malicious)
        if best_cost is None or cost < best_cost:
            best, best_cost = lay, cost
    return best


def feasible(step, params):
    """(C_b, the largest M_b that :func:`spill_ok` allows, D_m) for every channel-group size
    with at least one feasible block size."""
    half = params.n // 2
    _, c, h_in, w_in = step.in_shape
    pt, pl, pb, pr = _pads(step)
    hp, wp = h_in + pt + pb, w_in + pl + pr
    kh, kw = step.attrs["kernel_shape"]
    hw = hp * wp
    m_out = step.out_shape[1]
    last = _last_target(step, wp)
    for c_b in range(min(c, half // hw), 0, -1):
        o = (c_b - 1) * hw + (kh - 1) * wp + (kw - 1)
        dm = max(o + (hp - kh) * wp + (wp - kw) + 1, c_b * hw)
        m_max = m_out
        while m_max >= 1 and not spill_ok(params, c_b * hw, o, dm, m_max, last):
            m_max -= 1
        if m_max >= 1:
            yield c_b, m_max, dm


def _last_target(step, wp: int) -> int:
    """Offset of the last stride-1 target inside an output channel's window."""
    sh, sw = step.attrs.get("strides", [1, 1])
    return (step.out_shape[2] - 1) * sh * wp + (step.out_shape[3] - 1) * sw


def spill_ok(params, t_len: int, o: int, dm: int, m_b: int, last: int) -> bool:
    """May a packed product with a client polynomial of t_len coefficients (the real
    half; the MAC half at N/2 + the same), a kernel of degree o + (m_b - 1) dm and
    targets o + m dm + [0, last] be read exactly in both halves?

    With t = a + X^(N/2) b and L = t_len - 1 + o + (m_b - 1) dm the top degree of a k and
    b k (negacyclic, X^(N/2) = i): coefficient j < N/2 of t k is (a k)_j - (b k)_(j + N/2)
    and coefficient N/2 + j is (a k)_(N/2 + j) + (b k)_j. For a target j >= o both
    foreign terms vanish iff L < N/2 + o, and the targets themselves must lie below N/2
    (a value target at N/2 + j' with j' < o would meet (b k)_j'). Non-target
    coefficients may then mix both halves; they are masked like every coefficient and
    never sent (trimmed answers)."""
    half = params.n // 2
    top = t_len - 1 + o + (m_b - 1) * dm
    return top < half + o and o + (m_b - 1) * dm + last < half and t_len <= half


def _online_bytes(params, lay: "ConvLayout", malicious: bool) -> int:
    """Bytes a layout sends per input: client ciphertexts, trimmed answers and (malicious)
    proof responses."""
    halves = 2 if malicious else 1
    per_block = lay.M_b * lay.OH * lay.OW
    last = (lay.M - (lay.n_mb - 1) * lay.M_b) * lay.OH * lay.OW
    level = lay.level - lay.drop
    answers = (lay.n_mb - 1) * trimmed_size(params, level, halves * per_block) + \
        trimmed_size(params, level, halves * last)
    cts = lay.n_cg * lay.T
    total = lay.T * answers + cts * 2 * packed_poly_size(params, lay.level)
    if malicious:
        sup = proof.support_positions(lay, params.n).size
        total += sum(popk.Geometry(params.n, n, sup, lay.D).payload_bytes for n in proof._chunks(cts))
    return total


def _padded(a: np.ndarray, lay: ConvLayout) -> np.ndarray:
    pt, pl, pb, pr = lay.pads
    return np.pad(a, ((0, 0), (0, 0), (pt, pb), (pl, pr), (0, 0)))


def client_conv(eng, ep, idx, lay: ConvLayout, v1, w1):
    """Client: encrypt the padded channel groups (value and MAC halves), read the answers."""
    g = eng.g
    re = _padded(v1, lay)
    im = _padded(w1, lay) if eng.malicious else None
    n_ = re.shape[0]
    for b in range(n_):
        for cg in range(lay.n_cg):
            cs = slice(cg * lay.C_b, min((cg + 1) * lay.C_b, lay.C))
            for t in range(lay.T):
                blk = digit_limbs(re[b, cs], lay.D * t, lay.D)
                blk_im = None if im is None else digit_limbs(im[b, cs], lay.D * t, lay.D)
                eng.encrypt_send(ep, idx, client_poly(eng.params.n, blk, blk_im), lay)
    acc_re = g.zeros((n_, lay.M, lay.OH, lay.OW))
    acc_im = g.zeros((n_, lay.M, lay.OH, lay.OW)) if eng.malicious else None
    for b in range(n_):
        for mb in range(lay.n_mb):
            for t in range(lay.T):
                (raw,) = ep.recv(SERVER, f"crisp/lin/{idx}/res", ArraySpec(np.uint8, (None,), max_elems=1 << 28))
                ms, pos = lay.positions(mb)
                vals = eng.decrypt_positions(raw, lay, pos)
                sel = (b, slice(ms[0], ms[-1] + 1))
                acc_re[sel] = g.add(acc_re[sel], g.shl(vals[0], lay.D * t))
                if eng.malicious:
                    acc_im[sel] = g.add(acc_im[sel], g.shl(vals[1], lay.D * t))
    return acc_re, acc_im


def client_poly(n_ring: int, re, im) -> np.ndarray:
    """t(X) of one channel group as (L, N) int64 limbs: the padded (C_b, Hp, Wp) digits at
    0.., the MAC half's at N/2.. (digits as lists of 40-bit limb arrays, ``digit_limbs``,
    or one integer array)."""
    re = _as_limbs(re)
    blk = re.reshape(re.shape[0], -1)
    poly = np.zeros((re.shape[0], n_ring), np.int64)
    poly[:, :blk.shape[1]] = blk
    if im is not None:
        poly[:, n_ring // 2:n_ring // 2 + blk.shape[1]] = _as_limbs(im).reshape(re.shape[0], -1)
    return poly


def kernel_coeffs(n_ring: int, lay: ConvLayout, w: np.ndarray, cg: int, mb: int) -> np.ndarray:
    """k(X) = sum_m X^(m D_m) k_m(X) for channel group cg and output block mb (float64)."""
    poly = np.zeros(n_ring, np.float64)
    hw = lay.Hp * lay.Wp
    c0 = cg * lay.C_b
    cc = np.arange(c0, min(c0 + lay.C_b, lay.C))
    ll, lp = np.meshgrid(np.arange(lay.kh), np.arange(lay.kw), indexing="ij")
    for mi, m in enumerate(range(mb * lay.M_b, min((mb + 1) * lay.M_b, lay.M))):
        for c in cc:
            idx = mi * lay.Dm + lay.O - (c - c0) * hw - ll * lay.Wp - lp
            poly[idx] = w[m, c]
    return poly


def kernel_polys(eng, lay: ConvLayout, w: np.ndarray) -> dict:
    return {(cg, mb): eng.weight_plaintext(kernel_coeffs(eng.params.n, lay, w, cg, mb), lay.level)
            for cg in range(lay.n_cg) for mb in range(lay.n_mb)}


def server_conv(eng, ep, idx, step, lay: ConvLayout, w: np.ndarray, prg):
    g = eng.g
    n_ = step.in_shape[0]
    ev = Evaluator(eng.params)
    kpolys = eng._wcache.pop(idx, None) or kernel_polys(eng, lay, w)
    cts = {}
    for b in range(n_):
        for cg in range(lay.n_cg):
            for t in range(lay.T):
                cts[b, cg, t] = eng.recv_client_ct(ep, idx, lay)
    m_re = g.zeros((n_, lay.M, lay.OH, lay.OW))
    m_im = g.zeros((n_, lay.M, lay.OH, lay.OW))
    raws = []     # computed while the client answers the proof, sent after the check
    for b in range(n_):
        for mb in range(lay.n_mb):
            for t in range(lay.T):
                acc = ct_pt_dot(ev, [cts[b, cg, t] for cg in range(lay.n_cg)],
                                [kpolys[cg, mb] for cg in range(lay.n_cg)])
                ms, pos = lay.positions(mb)
                eng.answer_into(idx, acc, lay, prg, pos, t, (m_re, m_im), (b, slice(ms[0], ms[-1] + 1)), raws)
    eng.send_answers(ep, idx, raws)
    close_all(kpolys, cts)
    ev.close()
    return m_re, m_im
