"""Plaintext kernels the (emulated) LTEE runs on unmasked ring values [STAMP 4.2-4.5].

Every kernel works on ring elements of the session's fixed-point configuration and
matches the bit-exact fixed-point reference (``secinfer.ir.fixed_exec``) whenever that
module offers the same kernel; the device delegates to it so the secure output equals
the oracle exactly. Each kernel also returns the number of primitive operations it
executed (integer ops, soft-float ops, float exponentials) for the LTEE cost model.

A device computation is a *chain* of steps, described by a JSON-able dict ``spec``:

    {"shape": [..input shape..], "nparams": k,
     "steps": [{"op": "trunc"}, {"op": "bn", "axis": 1}, {"op": "relu"},
               {"op": "maxpool", "kernel": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0]}]}

The secret parameters of a step (BatchNorm's per-channel scale and shift, LayerNorm's
gamma and beta) travel masked after the data, in the order the steps list them.
"""

from __future__ import annotations

import math

import numpy as np

from secinfer.arith.fixed import FixedPointConfig
from secinfer.errors import ProtocolError

_MAX_DIMS = 6
_SOFT_FLOAT_PER_EXP = 1  # counted separately as "exp"


class OpCount:
    def __init__(self) -> None:
        self.int_ops = 0
        self.float_ops = 0
        self.exp_ops = 0

    def as_array(self) -> np.ndarray:
        return np.array([self.int_ops, self.float_ops, self.exp_ops], dtype=np.int64)


def _signed(cfg: FixedPointConfig, v: np.ndarray) -> np.ndarray:
    return cfg.ring.to_signed(v)


def relu(cfg: FixedPointConfig, x: np.ndarray, cnt: OpCount) -> np.ndarray:
    cnt.int_ops += 2 * x.size  # compare + select  [STAMP Protocol 4 step 4]
    return np.where(_signed(cfg, x) > 0, x, np.uint64(0)).astype(np.uint64)


def trunc(cfg: FixedPointConfig, x: np.ndarray, cnt: OpCount) -> np.ndarray:
    cnt.int_ops += x.size  # one arithmetic shift  [STAMP Protocol 5 step 5]
    return cfg.trunc(x)


def _pool_windows(xs: np.ndarray, kernel, strides, pads, fill) -> np.ndarray:
    """(N, C, H, W) -> (N, C, OH, OW, kh*kw) windows, padded with ``fill``."""
    if xs.ndim != 4:
        raise ProtocolError(f"pooling expects NCHW input, got shape {xs.shape}")
    kh, kw = kernel
    sh, sw = strides
    pt, pl, pb, pr = pads
    xp = np.pad(xs, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    n, c, h, w = xp.shape
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ProtocolError("pooling window larger than its input")
    cols = [xp[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw] for i in range(kh) for j in range(kw)]
    return np.stack(cols, axis=-1)


def maxpool(cfg: FixedPointConfig, x: np.ndarray, step: dict, cnt: OpCount) -> np.ndarray:
    kernel, strides = list(step["kernel"]), list(step.get("strides", step["kernel"]))
    pads = list(step.get("pads", [0, 0, 0, 0]))
    s = _signed(cfg, x)
    win = _pool_windows(s, kernel, strides, pads, np.iinfo(np.int64).min)
    out = win.max(axis=-1)
    cnt.int_ops += 2 * win.size  # compare + select per window element
    return cfg.ring.from_signed(out)


def avgpool(cfg: FixedPointConfig, x: np.ndarray, step: dict, cnt: OpCount) -> np.ndarray:
    kernel, strides = list(step["kernel"]), list(step.get("strides", step["kernel"]))
    pads = list(step.get("pads", [0, 0, 0, 0]))
    s = _signed(cfg, x)
    win = _pool_windows(s, kernel, strides, pads, 0)
    k = kernel[0] * kernel[1]
    total = win.sum(axis=-1)
    cnt.int_ops += win.size + 2 * total.size
    return cfg.ring.from_signed(np.floor_divide(total, k))


def affine(cfg: FixedPointConfig, x: np.ndarray, scale: np.ndarray, shift: np.ndarray, axis: int,
           cnt: OpCount) -> np.ndarray:
    """BatchNorm in inference form y = trunc(x * a) + b, a/b per channel on ``axis``."""
    shp = [1] * x.ndim
    shp[axis] = -1
    a = scale.reshape(shp)
    b = shift.reshape(shp)
    cnt.int_ops += 3 * x.size  # multiply, shift, add  [STAMP 4.4: about two mults/element]
    return cfg.ring.add(cfg.trunc(cfg.ring.mul(x, a)), b)


def layernorm(cfg: FixedPointConfig, x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float,
              cnt: OpCount) -> np.ndarray:
    """LayerNorm over the last axis, computed on decoded values and re-encoded."""
    v = cfg.decode(x)
    mu = v.mean(axis=-1, keepdims=True)
    var = ((v - mu) ** 2).mean(axis=-1, keepdims=True)
    y = (v - mu) / np.sqrt(var + eps) * cfg.decode(gamma) + cfg.decode(beta)
    cnt.float_ops += 8 * x.size
    return cfg.encode(np.clip(y, -cfg.max_abs + 1, cfg.max_abs - 1))


def softmax_from_log2(cfg: FixedPointConfig, q: np.ndarray, mant: np.ndarray, cnt: OpCount) -> np.ndarray:
    """Softmax along the last axis from exp(x) = 2^q * mant (q integer, mant in [0.25, 4)).

    [STAMP Protocol 6 step 3, end]: O(n) additions, one division per row, n multiplications.
    """
    qmax = q.max(axis=-1, keepdims=True)
    e = mant * np.exp2(np.maximum(q - qmax, -1100).astype(np.float64))
    y = e / e.sum(axis=-1, keepdims=True)
    cnt.float_ops += 4 * q.size
    return cfg.encode(y)


def n_params(spec: dict) -> int:
    total = 0
    for st in spec["steps"]:
        if st["op"] in ("bn", "layernorm"):
            total += 2 * int(st["channels"])
    return total


def out_shape(spec: dict) -> tuple:
    shape = tuple(int(d) for d in spec["shape"])
    for st in spec["steps"]:
        if st["op"] in ("maxpool", "avgpool"):
            kh, kw = st["kernel"]
            sh, sw = st.get("strides", st["kernel"])
            pt, pl, pb, pr = st.get("pads", [0, 0, 0, 0])
            shape = (shape[0], shape[1], (shape[2] + pt + pb - kh) // sh + 1, (shape[3] + pl + pr - kw) // sw + 1)
    return shape


def validate(spec: dict) -> None:
    if not isinstance(spec, dict) or "shape" not in spec or "steps" not in spec:
        raise ProtocolError("device spec needs shape and steps")
    shape = spec["shape"]
    if not (1 <= len(shape) <= _MAX_DIMS) or any((not isinstance(d, int)) or d <= 0 for d in shape):
        raise ProtocolError(f"bad device tensor shape {shape}")
    if math.prod(shape) > 1 << 27:
        raise ProtocolError("device tensor too large")
    for st in spec["steps"]:
        if st.get("op") not in ("trunc", "relu", "maxpool", "avgpool", "bn", "layernorm", "softmax", "identity"):
            raise ProtocolError(f"device cannot run step {st.get('op')!r}")


def run_chain(cfg: FixedPointConfig, spec: dict, flat: np.ndarray, cnt: OpCount) -> np.ndarray:
    """Apply the chain to ``flat`` = data followed by the steps' parameters."""
    shape = tuple(int(d) for d in spec["shape"])
    n = math.prod(shape)
    x = flat[:n].reshape(shape)
    pos = n
    for st in spec["steps"]:
        op = st["op"]
        if op == "trunc":
            x = trunc(cfg, x, cnt)
        elif op == "relu":
            x = relu(cfg, x, cnt)
        elif op == "maxpool":
            x = maxpool(cfg, x, st, cnt)
        elif op == "avgpool":
            x = avgpool(cfg, x, st, cnt)
        elif op == "bn":
            c = int(st["channels"])
            a, b = flat[pos:pos + c], flat[pos + c:pos + 2 * c]
            pos += 2 * c
            x = affine(cfg, x, a, b, int(st.get("axis", 1)), cnt)
        elif op == "layernorm":
            c = int(st["channels"])
            g, b = flat[pos:pos + c], flat[pos + c:pos + 2 * c]
            pos += 2 * c
            x = layernorm(cfg, x, g, b, float(st.get("eps", 1e-5)), cnt)
        elif op == "identity":
            pass
        else:
            raise ProtocolError(f"step {op!r} is not a ring kernel")
    return x
