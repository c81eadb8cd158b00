"""Exact ring kernels for convolution and pooling on uint64 arrays mod 2^64.

These kernels are linear (or pure data movement), so protocols reuse them unchanged on
additive shares: ``ring_conv2d(share_x, w)`` is a share of ``ring_conv2d(x, w)``.

Layout follows ONNX: activations are NCHW, convolution weights are (M, C/group, kH, kW).
Padding is given as ``(top, left, bottom, right)`` (ONNX ``pads`` order for 2-D:
x1_begin, x2_begin, x1_end, x2_end).

``im2col`` / ``pool_patches`` are dtype-agnostic (indexing only) and also serve the float
executor, so float, fixed-point and secure paths see exactly the same windows.

Products never use numpy's integer matmul: ``ring_conv2d`` lowers to
``secinfer.arith.ring.ring_matmul`` (16-bit limbs over float64 BLAS, exact).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from secinfer.arith.ring import Ring, ring_matmul
from secinfer.errors import ShapeError


def _pair(v: int | Sequence[int], name: str) -> tuple[int, int]:
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    t = tuple(int(a) for a in v)
    if len(t) != 2:
        raise ShapeError(f"{name} must have 2 entries for a 2-D window, got {t}")
    return t


def _quad(v: int | Sequence[int]) -> tuple[int, int, int, int]:
    if isinstance(v, (int, np.integer)):
        return (int(v),) * 4
    t = tuple(int(a) for a in v)
    if len(t) != 4:
        raise ShapeError(f"pads must be (top, left, bottom, right), got {t}")
    return t


def window_output_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int,
                       dilation: int = 1, ceil_mode: bool = False) -> int:
    """Number of window positions along one axis (ONNX Conv/Pool formula).

    With ``ceil_mode`` the last window may hang over the end padding, but it must start
    inside the input or the begin padding (the rule onnxruntime and PyTorch apply).
    """
    span = dilation * (kernel - 1) + 1
    total = size + pad_begin + pad_end - span
    if total < 0:
        raise ShapeError(f"window of extent {span} does not fit an axis of size {size} "
                         f"padded by ({pad_begin}, {pad_end})")
    if ceil_mode:
        out = -(-total // stride) + 1
        if (out - 1) * stride >= size + pad_begin:
            out -= 1
    else:
        out = total // stride + 1
    return out


def im2col(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int] = (1, 1),
           pads: Sequence[int] = (0, 0, 0, 0), dilations: Sequence[int] = (1, 1),
           pad_value=0, out_hw: tuple[int, int] | None = None) -> np.ndarray:
    """Window patches of an NCHW array: returns shape (N, C, kH*kW, OH, OW).

    ``pad_value`` fills the padding (0 for convolution/sum pooling, the minimum for max
    pooling). ``out_hw`` overrides the output size (ceil_mode pooling); any window part
    beyond the given pads reads ``pad_value`` too.
    """
    if x.ndim != 4:
        raise ShapeError(f"im2col expects an NCHW array, got shape {x.shape}")
    kh, kw = _pair(kernel, "kernel")
    sh, sw = _pair(strides, "strides")
    dh, dw = _pair(dilations, "dilations")
    pt, pl, pb, pr = _quad(pads)
    n, c, h, w = x.shape
    if out_hw is None:
        oh = window_output_size(h, kh, sh, pt, pb, dh)
        ow = window_output_size(w, kw, sw, pl, pr, dw)
    else:
        oh, ow = out_hw
    # Enough padding at the end for every window (ceil_mode may need more than pads).
    need_h = (oh - 1) * sh + dh * (kh - 1) + 1
    need_w = (ow - 1) * sw + dw * (kw - 1) + 1
    eb = max(pb, need_h - h - pt)
    er = max(pr, need_w - w - pl)
    if pt or pl or eb or er:
        xp = np.full((n, c, h + pt + eb, w + pl + er), pad_value, dtype=x.dtype)
        xp[:, :, pt:pt + h, pl:pl + w] = x
    else:
        xp = x
    cols = np.empty((n, c, kh * kw, oh, ow), dtype=x.dtype)
    for i in range(kh):
        r0 = i * dh
        for j in range(kw):
            c0 = j * dw
            cols[:, :, i * kw + j] = xp[:, :, r0:r0 + sh * (oh - 1) + 1:sh, c0:c0 + sw * (ow - 1) + 1:sw]
    return cols


def conv_columns(x: np.ndarray, w_shape: Sequence[int], strides, pads, dilations,
                 groups: int) -> tuple[np.ndarray, tuple[int, int]]:
    """im2col arranged for a grouped matmul: (N, groups, C/g*kH*kW, OH*OW), and (OH, OW)."""
    m, cg, kh, kw = (int(a) for a in w_shape)
    n, c = x.shape[:2]
    if c != cg * groups or m % groups:
        raise ShapeError(f"conv: input has {c} channels, weight {tuple(w_shape)} with "
                         f"group={groups} expects {cg * groups}")
    cols = im2col(x, (kh, kw), strides, pads, dilations)
    oh, ow = cols.shape[-2:]
    return cols.reshape(n, groups, cg * kh * kw, oh * ow), (oh, ow)


_LIMB = 16
_EXACT_INNER = 1 << 20  # 2^32 * 2^20 < 2^53: float64 sums of 16-bit limb products stay exact


def ring_matmul_bits(a: np.ndarray, b: np.ndarray, bits: int = 64) -> np.ndarray:
    """Exact ``a @ b mod 2^bits`` (numpy matmul broadcasting), reduced mod 2^bits.

    Like ``secinfer.arith.ring.ring_matmul`` but only the 16-bit limb products that
    reach below 2^bits are formed: 3 float64 products for Z_2^32 instead of 10.
    """
    if bits >= 64:
        return ring_matmul(a, b)
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    mask = np.uint64((1 << bits) - 1)
    inner = a.shape[-1]
    if inner >= _EXACT_INNER:
        out = None
        step = _EXACT_INNER - 1
        for s in range(0, inner, step):
            part = ring_matmul_bits(a[..., s:s + step], b[..., s:s + step, :], bits)
            out = part if out is None else (out + part) & mask
        return out
    nl = -(-bits // _LIMB)
    m16 = np.uint64(0xFFFF)
    al = [((a >> np.uint64(_LIMB * i)) & m16).astype(np.float64) for i in range(nl)]
    bl = [((b >> np.uint64(_LIMB * j)) & m16).astype(np.float64) for j in range(nl)]
    out = None
    for i in range(nl):
        for j in range(nl - i):
            p = np.matmul(al[i], bl[j]).astype(np.uint64) << np.uint64(_LIMB * (i + j))
            out = p if out is None else out + p
    return out & mask


def ring_conv2d(x: np.ndarray, w: np.ndarray, stride=(1, 1), pads=(0, 0, 0, 0),
                dilations=(1, 1), groups: int = 1, bits: int = 64) -> np.ndarray:
    """Exact 2-D convolution (cross-correlation, ONNX Conv) over Z_2^bits, no bias.

    x: (N, C, H, W) uint64; w: (M, C/groups, kH, kW) uint64 -> (N, M, OH, OW) uint64,
    reduced mod 2^bits.
    """
    x = np.asarray(x, dtype=np.uint64)
    w = np.asarray(w, dtype=np.uint64)
    if w.ndim != 4:
        raise ShapeError(f"ring_conv2d expects a (M, C/g, kH, kW) weight, got {w.shape}")
    m = w.shape[0]
    cols, (oh, ow) = conv_columns(x, w.shape, stride, pads, dilations, groups)
    wg = w.reshape(groups, m // groups, -1)            # (g, M/g, K)
    out = ring_matmul_bits(wg, cols, bits)             # (N, g, M/g, OH*OW)
    return out.reshape(x.shape[0], m, oh, ow)


def float_conv2d(x: np.ndarray, w: np.ndarray, stride=(1, 1), pads=(0, 0, 0, 0),
                 dilations=(1, 1), groups: int = 1, dtype=np.float64) -> np.ndarray:
    """The same convolution in floating point (float64: the float executor's kernel)."""
    x = np.asarray(x, dtype=dtype)
    w = np.asarray(w, dtype=dtype)
    m = w.shape[0]
    cols, (oh, ow) = conv_columns(x, w.shape, stride, pads, dilations, groups)
    out = np.matmul(w.reshape(groups, m // groups, -1), cols)
    return out.reshape(x.shape[0], m, oh, ow)


def pool_patches(x: np.ndarray, kernel, strides, pads, dilations=(1, 1), pad_value=0,
                 ceil_mode: bool = False) -> np.ndarray:
    """Pooling windows (N, C, kH*kW, OH, OW) with ONNX output size (ceil_mode aware)."""
    kh, kw = _pair(kernel, "kernel")
    sh, sw = _pair(strides, "strides")
    dh, dw = _pair(dilations, "dilations")
    pt, pl, pb, pr = _quad(pads)
    oh = window_output_size(x.shape[2], kh, sh, pt, pb, dh, ceil_mode)
    ow = window_output_size(x.shape[3], kw, sw, pl, pr, dw, ceil_mode)
    return im2col(x, (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw), pad_value, (oh, ow))


def ring_sum_pool(x: np.ndarray, kernel, strides, pads, dilations=(1, 1),
                  ceil_mode: bool = False) -> np.ndarray:
    """Exact window sums over Z_2^64 (padding contributes 0): (N, C, OH, OW)."""
    cols = pool_patches(np.asarray(x, dtype=np.uint64), kernel, strides, pads, dilations,
                        np.uint64(0), ceil_mode)
    return cols.sum(axis=2, dtype=np.uint64)


def pool_counts(shape: Sequence[int], kernel, strides, pads, dilations=(1, 1),
                ceil_mode: bool = False, count_include_pad: bool = False) -> np.ndarray:
    """Divisor of each average-pool window, shape (OH, OW) (public, input-independent).

    Positions beyond the explicit pads (ceil_mode overhang) are never counted; explicit
    pad positions are counted only with ``count_include_pad``.
    """
    h, w = int(shape[-2]), int(shape[-1])
    pt, pl, pb, pr = _quad(pads)
    if count_include_pad:
        kh, kw = _pair(kernel, "kernel")
        sh, sw = _pair(strides, "strides")
        dh, dw = _pair(dilations, "dilations")
        oh = window_output_size(h, kh, sh, pt, pb, dh, ceil_mode)
        ow = window_output_size(w, kw, sw, pl, pr, dw, ceil_mode)
        ones = np.ones((1, 1, h + pt + pb, w + pl + pr), dtype=np.int64)
        cols = im2col(ones, (kh, kw), (sh, sw), (0, 0, 0, 0), (dh, dw), 0, (oh, ow))
    else:
        ones = np.ones((1, 1, h, w), dtype=np.int64)
        cols = pool_patches(ones, kernel, strides, pads, dilations, 0, ceil_mode)
    return cols.sum(axis=2)[0, 0]


def ring_max_signed(windows: np.ndarray, axis: int, bits: int = 64) -> np.ndarray:
    """Max over ``axis`` of ring values read as signed bits-wide integers (plaintext only)."""
    r = Ring(bits)
    return r.from_signed(r.to_signed(windows).max(axis=axis))
