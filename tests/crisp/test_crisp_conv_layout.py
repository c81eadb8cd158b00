"""The channel-packed convolution layout in plain integer polynomials (no encryption):
every layout the feasibility rule (he_conv.spill_ok) admits reads the exact convolution
at its targets in both halves -- value and MAC -- and the rule is not vacuous: one block
more than it allows breaks a target for some channel-group size."""

import os
import sys

import numpy as np
import pytest

from secinfer.crypto.he.params import get_params
from secinfer.protocols.crisp import he_conv

sys.path.insert(0, os.path.dirname(__file__))
from crisp_helpers import lin_step  # noqa: E402


def _negacyclic(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = a.size
    full = np.convolve(a, b)
    out = full[:n].copy()
    out[:full.size - n] -= full[n:]
    return out


def _step(c, m, hin, stride):
    o = (hin - 1) // stride + 1
    return lin_step({"op": "lin", "node_op": "Conv", "name": "conv", "in_shape": [1, c, hin, hin],
            "out_shape": [1, m, o, o], "wbits": 4,
            "attrs": {"kernel_shape": [3, 3], "strides": [stride, stride], "pads": [1, 1, 1, 1],
                      "dilations": [1, 1], "group": 1}})


def _conv(x, w, stride):
    """Naive reference: x (C, Hp, Wp) already padded, w (M, C, 3, 3)."""
    m, c, kh, kw = w.shape
    oh = (x.shape[1] - kh) // stride + 1
    ow = (x.shape[2] - kw) // stride + 1
    out = np.zeros((m, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, i, j] = np.tensordot(w, patch, axes=([1, 2, 3], [0, 1, 2]))
    return out


def _exact(lay, params, x, x_im, w, stride) -> bool:
    n = params.n
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    xp_im = np.pad(x_im, ((0, 0), (1, 1), (1, 1)))
    want, want_im = _conv(xp, w, stride), _conv(xp_im, w, stride)
    for mb in range(lay.n_mb):
        acc = np.zeros(n, np.int64)
        for cg in range(lay.n_cg):
            cs = slice(cg * lay.C_b, min((cg + 1) * lay.C_b, lay.C))
            (t,) = he_conv.client_poly(n, xp[cs], xp_im[cs])      # one limb: small test values
            k = he_conv.kernel_coeffs(n, lay, w, cg, mb).astype(np.int64)
            acc += _negacyclic(t, k)
        ms, pos = lay.positions(mb)
        if not (np.array_equal(acc[pos], want[ms]) and np.array_equal(acc[pos + n // 2], want_im[ms])):
            return False
    return True


@pytest.mark.parametrize("c,m,hin,stride", [(6, 20, 13, 1), (12, 3, 9, 2), (9, 7, 7, 1), (4, 30, 5, 2)])
def test_every_admitted_layout_is_exact_and_the_rule_is_tight(c, m, hin, stride):
    params = get_params("ckks-n12-wide-insecure")
    rng = np.random.default_rng(c * 100 + m)
    x = rng.integers(0, 1 << 10, (c, hin, hin))
    x_im = rng.integers(0, 1 << 10, (c, hin, hin))
    w = rng.integers(-8, 8, (m, c, 3, 3))
    step = _step(c, m, hin, stride)
    wp = hin + 2
    broken = 0
    cands = list(he_conv.feasible(step, params))
    assert cands
    for c_b, m_max, dm in cands:
        lay = he_conv.ConvLayout(params, 104, step, 40, c_b, m_max, dm)   # the rule's boundary
        assert _exact(lay, params, x, x_im, w, stride), (c_b, m_max)
        if m_max < m:      # one block more than the rule admits
            o = (c_b - 1) * wp * wp + 2 * wp + 2
            assert not he_conv.spill_ok(params, c_b * wp * wp, o, dm, m_max + 1, he_conv._last_target(step, wp))
            lay = he_conv.ConvLayout(params, 104, step, 40, c_b, m_max + 1, dm)
            try:
                broken += not _exact(lay, params, x, x_im, w, stride)
            except IndexError:      # a target beyond the ring: unreadable
                broken += 1
    assert broken > 0
