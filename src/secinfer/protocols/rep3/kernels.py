"""Plaintext kernels the (emulated) LTEE runs on unmasked ring values [STAMP 4.2-4.5].

The device delegates every canonical op to the bit-exact fixed-point reference kernels
(``secinfer.ir.fixed_ops.run_node``), so a secure output equals the oracle exactly; only
softmax (Protocol 6) is computed from the exponent/mantissa split and is within a
documented error budget (docs/protocols/stamp.md). Every step also adds to an
``OpCount`` (integer ops, soft-float ops, float exponentials) for the LTEE cost model.

A device computation is a chain described by a JSON-able ``spec``:

    {"shape": [input shape], "out_shape": [output shape], "params": [[shape], ...],
     "steps": [{"op": "trunc"}, {"op": "bias", "axis": 1, "param": 0},
               {"op": "node", "node": <Node.to_json()>, "params": [1, 2]}, ...]}

The parameters (bias, BatchNorm scale/shift, LayerNorm gamma/beta: secret model values)
travel masked after the data, in the order of ``params``.

Two steps serve STAMP's range guard (docs/protocols/stamp.md, "Range guard"; ``shadow_make``,
``shadow_check``): ``{"op": "shadow-make", "s": s, "a1": a1}`` appends the shadow
floor(y / 2^s) of the result as further rows, ``{"op": "shadow-check", "s": s, "e": e,
"layer": name}`` takes a product's sum over [rows; shadow rows] and keeps the rows, or
raises ``FixedPointRangeError`` when the sum left the ring.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from secinfer.arith.fixed import FixedPointConfig
from secinfer.arith.linalg import conv_columns, pool_patches, ring_conv2d, window_output_size
from secinfer.arith.ring import Ring, thin_matmul
from secinfer.errors import FixedPointRangeError, ProtocolError
from secinfer.ir.fixed_ops import run_node
from secinfer.ir.graph import Node, lift_2d

_MAX_DIMS = 6
_MAX_ELEMS = 1 << 27
DEVICE_NODE_OPS = ("Add", "Mul", "Relu", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
                   "BatchNormalization", "LayerNormalization", "Sigmoid", "Tanh", "Erf", "Gelu",
                   "Exp", "Sqrt", "Softmax")
_EXP_OPS = ("Sigmoid", "Tanh", "Erf", "Gelu", "Exp", "Sqrt", "Softmax")


class OpCount:
    def __init__(self) -> None:
        self.int_ops = 0
        self.float_ops = 0
        self.exp_ops = 0


_M16 = np.uint64(0xFFFF)
_M32 = np.uint64(0xFFFFFFFF)
_MAX_INNER32 = 1 << 20


def matmul32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact product mod 2^32 with three float64 BLAS products of 16-bit limbs
    (a0 b0 + (a0 b1 + a1 b0) 2^16); exact while the inner dimension is below 2^20."""
    a = np.asarray(a, np.uint64)
    b = np.asarray(b, np.uint64)
    direct = thin_matmul(a, b)      # a batch-1 layer: 15x faster than the limbs
    if direct is not None:
        return direct & np.uint64(0xFFFFFFFF)
    if a.shape[-1] >= _MAX_INNER32:
        return Ring(32).matmul(a, b)
    a0, a1 = (a & _M16).astype(np.float64), ((a >> np.uint64(16)) & _M16).astype(np.float64)
    b0, b1 = (b & _M16).astype(np.float64), ((b >> np.uint64(16)) & _M16).astype(np.float64)
    lo = np.matmul(a0, b0).astype(np.uint64)
    mid = (np.matmul(a0, b1) + np.matmul(a1, b0)).astype(np.uint64)
    return (lo + (mid << np.uint64(16))) & np.uint64(0xFFFFFFFF)


_CONV_CHUNK = 1 << 24     # im2col elements per slice of the batch (memory bound)
_WS_MAX = 1 << 19         # float64 elements a ``FixedConv32`` keeps between calls (4 MiB)


def conv32(x: np.ndarray, w: np.ndarray, strides, pads, dilations, groups: int) -> np.ndarray:
    """ring_conv2d mod 2^32 with ``matmul32``, over slices of the batch of at most about
    ``_CONV_CHUNK`` im2col elements: the columns and their three float64 limb copies of a
    whole batch do not fit (VGG16 at batch 128: ~75M columns per party for one layer)."""
    x = np.asarray(x, np.uint64)
    m = w.shape[0]
    wm = np.asarray(w, np.uint64).reshape(groups, m // groups, -1)
    per_image = max(1, groups * wm.shape[-1] * int(np.prod(x.shape[2:])))
    step = max(1, _CONV_CHUNK // per_image)
    outs = []
    for i in range(0, x.shape[0], step):
        cols, (oh, ow) = conv_columns(x[i:i + step], w.shape, strides, pads, dilations, groups)
        outs.append(matmul32(wm, cols).reshape(-1, m, oh, ow))
    return outs[0] if len(outs) == 1 else np.concatenate(outs)


class FixedConv32:
    """f(x, W) mod 2^32 of an ungrouped Conv with a fixed weight W, W's part laid out once
    (offline): the float64 16-bit limbs of W arranged as [[W0, 0], [W1, W0]] (2M x 2K), so
    that one BLAS product with the im2col columns of x's limbs [X0; X1] (2K x P, the limbs
    as channels, cut before the windows: W4's 1 x 28 x 28 input is 18x smaller than its
    25 x 576 columns) gives [W0 X0; W1 X0 + W0 X1] -- ``matmul32``'s lo and mid, exact while
    2K < 2^20 (every limb product is below 2^32, their sums below 2^53). Equal to
    ``bilinear("Conv", attrs, Ring(32))(x, W)`` bit for bit (tests/stamp/test_device_kernels.py)."""

    def __init__(self, attrs: dict, w: np.ndarray) -> None:
        p = lift_2d(Node("c", "Conv", [], [], dict(attrs)))
        self.one_d = p["spatial"] == 1
        self.strides, self.pads, self.dilations = p["strides"], p["pads"], p["dilations"]
        w = np.asarray(w, np.uint64)
        w4 = w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]) if self.one_d else w
        self.m, self.c, self.kh, self.kw = (int(d) for d in w4.shape)
        wm = w4.reshape(self.m, -1)
        w0 = (wm & _M16).astype(np.float64)
        w1 = ((wm >> np.uint64(16)) & _M16).astype(np.float64)
        self.wbig = np.ascontiguousarray(np.block([[w0, np.zeros_like(w0)], [w1, w0]]))
        self._local = threading.local()

    @staticmethod
    def applies(kind: str, attrs: dict, ring: Ring, w_shape) -> bool:
        k = int(np.prod(w_shape[1:])) if len(w_shape) > 1 else 0
        return (kind == "Conv" and ring.bits == 32 and int(attrs.get("group", 1)) == 1
                and 0 < 2 * k < _MAX_INNER32 and len(w_shape) in (3, 4))

    def _workspace(self, shape: tuple):
        """This thread's buffers for an input of ``shape`` (N, C, H, W): the zero-padded limb
        image, a strided view of its windows, the columns and the float64 product. Reused
        from call to call while they stay below ``_WS_MAX`` elements: the online step then
        allocates no large array (a fresh one costs a page fault per 4 KiB, ~0.4 ms of system
        time per W4 convolution at load 10)."""
        ws = getattr(self._local, "ws", None)
        if ws is not None and ws[0] == shape:
            return ws
        n, c, h, w = shape
        (sh, sw), (dh, dw) = self.strides, self.dilations
        pt, pl, pb, pr = self.pads
        oh = window_output_size(h, self.kh, sh, pt, pb, dh)
        ow = window_output_size(w, self.kw, sw, pl, pr, dw)
        xp = np.zeros((n, 2 * c, h + pt + pb, w + pl + pr), np.float64)
        s = xp.strides
        win = np.lib.stride_tricks.as_strided(
            xp, (n, 2 * c, self.kh, self.kw, oh, ow), (s[0], s[1], dh * s[2], dw * s[3], sh * s[2], sw * s[3]),
            writeable=False)
        cols = np.empty((n, 2 * c, self.kh, self.kw, oh, ow), np.float64)
        r = np.empty((n, 2 * self.m, oh * ow), np.float64)
        ws = (shape, xp, win, cols, r, (oh, ow))
        if xp.size + cols.size + r.size <= _WS_MAX:
            self._local.ws = ws
        return ws

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.uint64)
        x4 = x.reshape(x.shape[0], x.shape[1], 1, x.shape[2]) if self.one_d else x
        if x4.ndim != 4 or x4.shape[1] != self.c:
            raise ProtocolError(f"conv input of shape {x.shape} for a weight with {self.c} channels")
        per_image = max(1, self.wbig.shape[1] * int(np.prod(x4.shape[2:])))
        step = max(1, _CONV_CHUNK // per_image)
        outs = []
        pt, pl = self.pads[0], self.pads[1]
        h, w = x4.shape[2:]
        for i in range(0, x4.shape[0], step):
            part = x4[i:i + step]
            _, xp, win, cols, r, (oh, ow) = self._workspace(part.shape)
            # the limbs as channels, limb-major: the columns' rows are (limb, channel, kh, kw)
            np.copyto(xp[:, :self.c, pt:pt + h, pl:pl + w], part & _M16, casting="unsafe")
            np.copyto(xp[:, self.c:, pt:pt + h, pl:pl + w], (part >> np.uint64(16)) & _M16, casting="unsafe")
            np.copyto(cols, win)
            np.matmul(self.wbig, cols.reshape(cols.shape[0], -1, oh * ow), out=r)
            lo = r[:, :self.m].astype(np.uint64)
            lo += r[:, self.m:].astype(np.uint64) << np.uint64(16)
            lo &= _M32
            outs.append(lo.reshape(-1, self.m, oh, ow))
        y = outs[0] if len(outs) == 1 else np.concatenate(outs)
        return y.reshape(y.shape[0], y.shape[1], y.shape[3]) if self.one_d else y


def bilinear(kind: str, attrs: dict, ring: Ring):
    """The untruncated ring product of a linear node: f(x, w)."""
    if kind in ("Gemm", "MatMul"):
        return matmul32 if ring.bits == 32 else (lambda u, v: ring.matmul(u, v))
    if kind == "Mul":
        return lambda u, v: ring.mul(u, v)
    if kind == "Conv":
        p = lift_2d(Node("c", "Conv", [], [], dict(attrs)))
        one_d = p["spatial"] == 1

        def conv(u, v):
            u4 = u.reshape(u.shape[0], u.shape[1], 1, u.shape[2]) if one_d else u
            v4 = v.reshape(v.shape[0], v.shape[1], 1, v.shape[2]) if one_d else v
            if ring.bits == 32:
                y = conv32(u4, v4, p["strides"], p["pads"], p["dilations"], int(attrs["group"]))
            else:
                y = ring.reduce(ring_conv2d(u4, v4, p["strides"], p["pads"], p["dilations"], int(attrs["group"])))
            return y.reshape(y.shape[0], y.shape[1], y.shape[3]) if one_d else y
        return conv
    raise ProtocolError(f"{kind} is not a bilinear op")


def n_params(spec: dict) -> int:
    return sum(math.prod(s) for s in spec.get("params", []))


def out_shape(spec: dict) -> tuple:
    return tuple(int(d) for d in spec.get("out_shape", spec["shape"]))


def validate(spec: dict) -> None:
    if not isinstance(spec, dict) or "shape" not in spec or "steps" not in spec:
        raise ProtocolError("device spec needs shape and steps")
    for shp in [spec["shape"], spec.get("out_shape", spec["shape"])] + list(spec.get("params", [])):
        if not (0 <= len(shp) <= _MAX_DIMS) or any((not isinstance(d, int)) or d <= 0 for d in shp):
            raise ProtocolError(f"bad device tensor shape {shp}")
        if math.prod(shp) > _MAX_ELEMS:
            raise ProtocolError("device tensor too large")
    for st in spec["steps"]:
        op = st.get("op")
        if op == "node":
            if st.get("node", {}).get("op") not in DEVICE_NODE_OPS:
                raise ProtocolError(f"device cannot run {st.get('node', {}).get('op')!r}")
        elif op in ("shadow-make", "shadow-check"):
            if not (isinstance(st.get("s"), int) and 1 <= st["s"] <= 24
                    and isinstance(st.get("a1" if op == "shadow-make" else "e"), int)
                    and 0 <= st.get("a1" if op == "shadow-make" else "e") < 1 << 62):
                raise ProtocolError(f"bad {op} step")
        elif op not in ("trunc", "bias", "softmax"):
            raise ProtocolError(f"device cannot run step {op!r}")


def shadow_make(cfg: FixedPointConfig, x: np.ndarray, s: int, a1: int) -> np.ndarray:
    """[rows; floor(rows / 2^s)] along the first axis. ``a1`` bounds the l1 norm (ring units)
    of every weight vector of the products the shadow feeds: their sums over the shadow,
    |sum_i floor(x_i / 2^s) w_i| <= (max|x| / 2^s + 1) * a1, must stay inside the ring, else
    FixedPointRangeError (the value is too large even for the shadow)."""
    v = cfg.ring.to_signed(x)
    top = int(np.max(np.abs(v))) if v.size else 0
    if ((top >> s) + 1) * a1 >= 1 << (cfg.ring_bits - 1):
        raise FixedPointRangeError(f"a value reaches {top / cfg.scale:.6g}: too large for the range guard's shadow "
                                   f"(2^-{s} of it times the next layer's weights leaves the ring)")
    return np.concatenate([x, cfg.ring.reduce((v >> s).astype(np.uint64))], axis=0)


def shadow_check(cfg: FixedPointConfig, x: np.ndarray, s: int, e: int, layer: str) -> np.ndarray:
    """x = [acc; acc'] (a product over [h; h'], h' = floor(h / 2^s)), both mod 2^l. Exactly
    acc_true - 2^s acc'_true = sum_i (h_i mod 2^s) w_i, so |.| <= e = (2^s - 1) * max_k
    ||w_k||_1; acc' never wraps (``shadow_make``). If acc did not wrap, acc = acc_true and the
    check passes; if it wrapped by k 2^l, |acc - 2^s acc'| >= 2^l - e > e (e < 2^(l-1)): the
    check fails and the sum is refused (FixedPointRangeError naming the layer). Returns acc."""
    if x.shape[0] % 2:
        raise ProtocolError("shadow-check needs [rows; shadow rows]")
    n = x.shape[0] // 2
    v = cfg.ring.to_signed(x).astype(np.int64)
    d = v[:n] - (v[n:] << s)
    if d.size and int(np.max(np.abs(d))) > e:
        where = np.unravel_index(int(np.argmax(np.abs(d))), d.shape)
        raise FixedPointRangeError(
            f"range guard: the sum of products of layer {layer!r} left the {cfg.ring_bits}-bit ring at "
            f"{tuple(int(i) for i in where)} (its shadow says about {float(v[n:][where]) * 2.0 ** s / cfg.scale ** 2:.6g}, "
            f"the ring holds |.| < {cfg.product_max_abs:.6g}); the session ends without an output")
    return x[:n]


def _count(op: str, x: np.ndarray, y: np.ndarray, cnt: OpCount) -> None:
    """Primitive operations a microcontroller spends on one step (see costmodel.py)."""
    if op == "Relu":
        cnt.int_ops += 2 * x.size                       # compare + select
    elif op in ("MaxPool", "GlobalMaxPool"):
        cnt.int_ops += 2 * max(x.size, y.size)          # compare + select per window element
    elif op in ("AveragePool", "GlobalAveragePool"):
        cnt.int_ops += x.size + 3 * y.size              # window sums, multiply, shift
    elif op == "BatchNormalization":
        cnt.int_ops += 3 * x.size                       # multiply, shift, add [STAMP 4.4]
    elif op == "Mul":
        cnt.int_ops += 2 * x.size                       # multiply by the scale, shift
    elif op == "LayerNormalization":
        cnt.float_ops += 8 * x.size                     # decode, mean, variance, scale, encode
        cnt.exp_ops += max(1, x.size // max(1, x.shape[-1]))   # one sqrt per row
    elif op in _EXP_OPS:
        cnt.float_ops += 4 * x.size
        cnt.exp_ops += x.size
    else:
        cnt.int_ops += x.size


def run_chain(cfg: FixedPointConfig, spec: dict, flat: np.ndarray, cnt: OpCount) -> np.ndarray:
    """Apply the chain to ``flat`` = data followed by the parameters (``Chain``, parsed for
    this call; the LTEE parses a spec once and keeps the ``Chain``)."""
    return Chain(cfg, spec)(flat, cnt)


class Chain:
    """A device spec parsed once: shapes, parameter offsets, every step's node, attributes
    and pooling geometry, so a call does only the value-dependent work (the LTEE keeps one
    per spec, keyed by the spec's bytes: ``ltee_device.Device.chains``; docs: stamp.md,
    "Ninth pass"). Calling it equals the step-by-step reading of the spec bit for bit, with
    the same ``OpCount`` additions (tests/stamp/test_device_kernels.py). A step that is no
    ring kernel (``softmax``) or whose fields do not parse is kept as a step that raises
    when it runs, as the step-by-step reading did; steps before it still run."""

    def __init__(self, cfg: FixedPointConfig, spec: dict) -> None:
        self.cfg = cfg
        self.shape = tuple(int(d) for d in spec["shape"])
        self.n = math.prod(self.shape)
        self.params, pos = [], self.n
        for shp in spec.get("params", []):
            k = math.prod(shp)
            self.params.append((pos, pos + k, tuple(shp)))
            pos += k
        self.out_shape = out_shape(spec)
        self.steps = []
        owned = False          # is x, when this step runs, an array this chain made (reduced)?
        for st in spec["steps"]:
            try:
                step, owned = self._step(st, owned)
            except (ProtocolError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
                step, owned = _raiser(e), False
            self.steps.append(step)

    def _step(self, st: dict, owned: bool):
        cfg, ring = self.cfg, self.cfg.ring
        op = st["op"]
        fast = ring.limbs == 1 and ring.bits < 64
        if op == "trunc":                               # [STAMP Protocol 5 step 5]
            if not fast:
                return _counted(cfg.trunc, 1), False
            up, mask = np.uint64(64 - ring.bits), ring.mask
            down = np.int64(64 - ring.bits + cfg.frac_bits)

            def trunc(x, params, cnt):
                # Ring.arshift in one pass: sign-extend (<< 64-k, arithmetic >> 64-k) and shift by
                # f as one arithmetic shift, then reduce, in place on the one new array
                v = (np.asarray(x, np.uint64) << up).view(np.int64)
                v >>= down
                y = v.view(np.uint64)
                y &= mask
                cnt.int_ops += y.size
                return y
            return trunc, True
        if op == "shadow-check":
            s, e, layer = int(st["s"]), int(st["e"]), str(st.get("layer", "?"))[:100]

            def check(x, params, cnt):
                y = shadow_check(cfg, x, s, e, layer)
                cnt.int_ops += 3 * y.size
                return y
            return check, False
        if op == "shadow-make":
            s, a1 = int(st["s"]), int(st["a1"])
            return _counted(lambda x: shadow_make(cfg, x, s, a1), 1), False
        if op == "bias":
            k, axis = int(st["param"]), int(st["axis"])
            self.params[k]     # noqa: B018 - a missing parameter fails here, as it did at run time
            if not fast:
                def bias_any(x, params, cnt):
                    shp = [1] * x.ndim
                    shp[axis] = -1
                    y = ring.add(x, params[k].reshape(shp))
                    cnt.int_ops += y.size
                    return y
                return bias_any, False
            mask = ring.mask

            def bias(x, params, cnt):
                shp = [1] * x.ndim
                shp[axis] = -1
                y = np.add(x, params[k].reshape(shp), dtype=np.uint64)    # new array: x may be the input's
                y &= mask
                cnt.int_ops += y.size
                return y
            return bias, True
        if op == "node":
            node = Node.from_json(st["node"])
            pidx = [int(k) for k in st.get("params", [])]
            for k in pidx:
                self.params[k]  # noqa: B018
            if node.op == "Relu" and not pidx and ring.limbs == 1:
                return _relu_step(cfg, owned), True
            if node.op == "MaxPool" and not pidx and ring.limbs == 1:
                return _maxpool_step(cfg, node.attrs, owned), True

            def run(x, params, cnt):
                y = run_node(node, [x] + [params[k] for k in pidx], cfg)[0]
                _count(node.op, x, y, cnt)
                return y
            return run, False
        raise ProtocolError(f"step {op!r} is not a ring kernel")

    def __call__(self, flat: np.ndarray, cnt: OpCount) -> np.ndarray:
        x = flat[:self.n].reshape(self.shape)
        params = [flat[a:b].reshape(shp) for a, b, shp in self.params]
        with np.errstate(over="ignore"):
            for step in self.steps:
                x = step(x, params, cnt)
        if tuple(x.shape) != self.out_shape:
            raise ProtocolError(f"device chain produced shape {x.shape}, spec says {self.out_shape}")
        return x


def _raiser(err: Exception):
    def step(x, params, cnt):
        raise err
    return step


def _counted(fn, per: int):
    def step(x, params, cnt):
        y = fn(x)
        cnt.int_ops += per * y.size
        return y
    return step


def _relu_step(cfg: FixedPointConfig, owned: bool):
    """``fixed_ops.relu`` for the device, as a chain step (a ring of one limb): a reduced
    value is negative iff it is at least 2^(k-1), so no signed copy is made (bit-exact;
    tests/stamp/test_device_kernels.py); in place on an array the chain made (reduced)."""
    top, mask = np.uint64(1 << (cfg.ring_bits - 1)), cfg.ring.mask

    def relu(x, params, cnt):
        r = x if owned else np.asarray(x, np.uint64) & mask
        r[r >= top] = 0
        _count("Relu", x, r, cnt)
        return r
    return relu


def _maxpool_step(cfg: FixedPointConfig, attrs: dict, owned: bool):
    """``fixed_ops.maxpool`` for the device, as a chain step (a ring of one limb), its
    geometry parsed once. Flipping the sign bit of reduced values maps the signed order onto
    the unsigned one (the padding, the ring's minimum 2^(k-1), onto 0), so the window max
    runs on uint64 without a signed copy, and flipping back is the result. A pool without padding in
    floor mode (W4's 2x2) takes the maximum over its kh*kw strided views of the image, one
    ``np.maximum`` each, in place of ``pool_patches``'s window copies and the reduction over
    them (W4: ~12 us against ~140 us); a padded or ceil-mode pool goes through
    ``pool_patches`` as before (bit-exact either way: the same maxima)."""
    p = lift_2d(Node("pool", "MaxPool", [], [], attrs))
    top, mask = np.uint64(1 << (cfg.ring_bits - 1)), cfg.ring.mask
    one_d, (kh, kw), ceil = p["spatial"] == 1, p["kernel"], bool(attrs["ceil_mode"])
    (sh, sw), (dh, dw) = p["strides"], p["dilations"]
    views = not any(p["pads"]) and not ceil

    def maxpool(x, params, cnt):
        r = x if owned else np.asarray(x, np.uint64) & mask
        x_size = x.size
        r ^= top                                       # the signed order on uint64
        r4 = r.reshape(r.shape[0], r.shape[1], 1, r.shape[2]) if one_d else r
        h, w = r4.shape[2], r4.shape[3]
        oh = window_output_size(h, kh, sh, 0, 0, dh) if views else 0
        ow = window_output_size(w, kw, sw, 0, 0, dw) if views else 0
        if oh > 0 and ow > 0:
            y = None
            for i in range(kh):
                for j in range(kw):
                    v = r4[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                    if y is None:
                        y = v.copy()
                    else:
                        np.maximum(y, v, out=y)
        else:
            y = pool_patches(r4, p["kernel"], p["strides"], p["pads"], p["dilations"], np.uint64(0), ceil).max(axis=2)
        y ^= top
        y = y.reshape(y.shape[0], y.shape[1], y.shape[3]) if one_d else y
        cnt.int_ops += 2 * max(x_size, y.size)        # ``_count``'s MaxPool
        return y
    return maxpool


def softmax_from_log2(cfg: FixedPointConfig, q: np.ndarray, mant: np.ndarray, cnt: OpCount) -> np.ndarray:
    """Softmax along the last axis from exp(x) = 2^q * mant (q integer).

    [STAMP Protocol 6 step 3, end]: O(n) additions, a division per row, n multiplications.
    """
    qmax = q.max(axis=-1, keepdims=True)
    e = np.ldexp(mant, np.maximum(q - qmax, -1100).astype(np.int64))   # exponent-field add
    recip = 1.0 / e.sum(axis=-1, keepdims=True)
    y = e * recip
    rows = q.size // max(1, q.shape[-1])
    cnt.int_ops += 5 * q.size     # max, exponent difference, ldexp, encode (round, convert)
    cnt.float_ops += 2 * q.size + rows   # accumulate, scale by the row's reciprocal; one division a row
    return cfg.encode(y)
