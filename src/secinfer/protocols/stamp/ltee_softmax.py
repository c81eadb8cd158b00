"""The LTEE emulation's exp/softmax evaluation [STAMP Protocol 6 step 3] (``ltee_device.cmd_eval``
mode 2), kept apart from the device's request handling."""

from __future__ import annotations

import math

import numpy as np

from secinfer.protocols.stamp.ltee_bus import EXP_BITS, MANT_BITS
from secinfer.protocols.stamp.ltee_counters import Refused
from secinfer.protocols.stamp.ltee_requests import _kernels, _ring_in


def softmax_step(dev, spec, arrays, j, hat, ctr) -> np.ndarray:
    """[STAMP Protocol 6 step 3] exp(x) from the masked mantissa/exponent of exp(x_{d-1}) and
    the host's exp(x_d + x_{d+1}); then softmax of each row. ``dev``: the device
    (``ltee_device.Device``) serving the ``eval`` request, whose counter ``ctr`` on stream
    ``j`` (duplicate ``hat``) its ``_begin`` has granted."""
    cfg = dev.cfg
    shape = tuple(spec["shape"])
    n = math.prod(shape)
    qsum, mstar, mhat = arrays
    qsum = _ring_in(qsum, n)
    for a in (mstar, mhat):
        if a.shape != (n,) or a.dtype != np.uint64:
            raise Refused("bad-request", "softmax payload shape")
    alpha = dev._elems(j, f"ma/{hat}", ctr, n) & np.uint64((1 << MANT_BITS) - 1)
    beta = dev._elems(j, f"mb/{hat}", ctr, n) & np.uint64((1 << EXP_BITS) - 1)
    q = ((qsum - beta) & np.uint64((1 << EXP_BITS) - 1)).astype(np.int64)      # q_j + q^_j
    # mantissas: 52-bit fractions -> doubles in [1, 2) (bit moves: integer operations)
    m1 = 1.0 + ((mstar - alpha) & np.uint64((1 << MANT_BITS) - 1)).astype(np.float64) / 2.0 ** MANT_BITS
    m2 = 1.0 + (mhat & np.uint64((1 << MANT_BITS) - 1)).astype(np.float64) / 2.0 ** MANT_BITS
    mant = m1 * m2                                           # the device's one multiplication
    # exp(L / 2^fp) = 2^(qL) * mL: one factor per missing wrap of L [STAMP Protocol 6 step 3 a-c];
    # the case is read off the exponent alone (the mantissa in [1, 4) moves it by < 2,
    # which matters only for |x| within 2^-17 of the ring's limit 2^18)
    big = (1 << cfg.ring_bits) / cfg.scale * np.log2(np.e)
    q_l = int(np.floor(big))
    inv_ml = np.array([1.0, 2.0 ** -(big - q_l), 2.0 ** (-2 * (big - q_l))])
    k = np.clip(q // int(np.ceil(big / 2.0)), 0, 3)
    corr = (k + 1) // 2          # 0: none, 1: one exp(-L/2^fp), 2: two
    q = q - corr * q_l
    mant = mant * inv_ml[corr]                               # one table multiplication
    dev.cnt.int_ops += 10 * n   # unmask (2), fraction -> double (2 x 2), case, exponent (3)
    dev.cnt.float_ops += 2 * n
    return _kernels().softmax_from_log2(cfg, q.reshape(shape), mant.reshape(shape), dev.cnt)
