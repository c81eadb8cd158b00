"""STAMP's LTEE-assisted protocols against the fixed-point oracle, and their costs."""

import numpy as np
import pytest

from secinfer.arith.fixed import FX32
from secinfer.crypto.prg import PRG
from secinfer.ir import fixed_ops
from secinfer.ir.graph import Node
from secinfer.protocols.stamp import costmodel
from secinfer.protocols.stamp.backend import StampBackend
from stamp_harness import dealer_pairs, run3

cfg = FX32
ring = cfg.ring
SECS = [False, True]
POOL = {"kernel_shape": (2, 2), "strides": (2, 2), "pads": (0, 0, 0, 0), "dilations": (1, 1), "ceil_mode": 0}


def _rand(shape, seed, scale=2.0):
    prg = PRG.for_tests(seed)
    u = prg.uint64(shape).astype(np.float64) / 2.0 ** 64
    return cfg.encode((u - 0.5) * 2 * scale)


def _secure(body_fn, tensors, malicious):
    """Deal ``tensors`` (list of ring arrays), run body(backend, eng, pairs) -> Pair, reveal to 1."""
    shares = [dealer_pairs(t, 100 + k) for k, t in enumerate(tensors)]

    def body(i, eng, ops):
        be = StampBackend(eng, ops)
        y = body_fn(be, eng, [s[i] for s in shares])
        return eng.reveal_to(1, y)
    res, meters = run3(body, malicious=malicious)
    for v in res.values():
        if isinstance(v, Exception):
            raise v
    return res[1], meters


@pytest.mark.parametrize("mal", SECS)
def test_relu_and_maxpool_chain(mal):
    x = _rand((6, 2, 4, 4), 1)
    nodes = [Node("m", "MaxPool", [], [], POOL), Node("r", "Relu", [], [], {})]
    y, _ = _secure(lambda be, eng, p: be.chain(p[0], nodes, [[], []], (6, 2, 2, 2)), [x], mal)
    assert np.array_equal(y, fixed_ops.relu(fixed_ops.maxpool(x, cfg, POOL), cfg))


@pytest.mark.parametrize("mal", SECS)
def test_fused_gemm_bias_relu(mal):
    x, w, b = _rand((7, 12), 2), _rand((12, 5), 3, 0.5), _rand((5,), 4, 0.5)
    node = Node("g", "Gemm", [], [], {})
    relu = Node("r", "Relu", [], [], {})
    y, _ = _secure(lambda be, eng, p: be.product(node, p[0], p[1], p[2], [relu], [[]], (7, 5)), [x, w, b], mal)
    assert np.array_equal(y, fixed_ops.relu(fixed_ops.gemm(x, w, b, cfg), cfg))


@pytest.mark.parametrize("mal", SECS)
def test_fused_conv_batchnorm_relu(mal):
    attrs = {"kernel_shape": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    x, w, b = _rand((4, 2, 5, 5), 5), _rand((3, 2, 3, 3), 6, 0.5), _rand((3,), 7, 0.5)
    sc, sh = _rand((3,), 8, 1.5), _rand((3,), 9, 1.0)
    conv = Node("c", "Conv", [], [], attrs)
    bn, relu = Node("bn", "BatchNormalization", [], [], {}), Node("r", "Relu", [], [], {})
    y, _ = _secure(lambda be, eng, p: be.product(conv, p[0], p[1], p[2], [bn, relu], [[p[3], p[4]], []],
                                                 (4, 3, 5, 5)), [x, w, b, sc, sh], mal)
    ref = fixed_ops.relu(fixed_ops.batchnorm(fixed_ops.conv(x, w, b, cfg, attrs), sc, sh, cfg), cfg)
    assert np.array_equal(y, ref)


@pytest.mark.parametrize("mal", SECS)
def test_layernorm(mal):
    x, g, b = _rand((3, 4, 8), 10), _rand((8,), 11, 1.0), _rand((8,), 12, 1.0)
    node = Node("ln", "LayerNormalization", ["x", "g", "b"], ["y"], {"axis": 2, "epsilon": 1e-5})
    y, _ = _secure(lambda be, eng, p: be.chain(p[0], [node], [[p[1], p[2]]], (3, 4, 8)), [x, g, b], mal)
    assert np.array_equal(y, fixed_ops.float_fn(node, [x, g, b], cfg))


@pytest.mark.slow
@pytest.mark.parametrize("mal", SECS)
def test_softmax_within_budget(mal):
    """Protocol 6: error budget 2 units of 2^-13 against the oracle (float softmax, encoded)."""
    x = _rand((5, 3, 9), 13, 6.0)
    node = Node("s", "Softmax", ["x"], ["y"], {"axis": -1})
    y, _ = _secure(lambda be, eng, p: be.softmax(p[0], node), [x], mal)
    ref = fixed_ops.float_fn(node, [x], cfg)
    err = np.abs(ring.to_signed(y) - ring.to_signed(ref))
    assert err.max() <= 2
    if mal:
        return
    # axis other than the last: transposed around the device path
    node1 = Node("s", "Softmax", ["x"], ["y"], {"axis": 1})
    y1, _ = _secure(lambda be, eng, p: be.softmax(p[0], node1), [x], mal)
    assert np.abs(ring.to_signed(y1) - ring.to_signed(fixed_ops.float_fn(node1, [x], cfg))).max() <= 2


@pytest.mark.slow
@pytest.mark.parametrize("mal", SECS)
def test_relu_cost_matches_declaration(mal):
    n = 300
    x = _rand((3, 100), 14)
    relu = Node("r", "Relu", [], [], {})
    sec = "malicious" if mal else "semi-honest"

    def body(be, eng, p):
        before = eng.ep.meter.total("online")
        y = be.chain(p[0], [relu], [[]], (3, 100))
        eng.stats["relu_bytes"] = eng.ep.meter.total("online") - before
        eng.stats["relu_rounds"] = eng.ep.meter.rounds("online")
        return y

    shares = dealer_pairs(x, 7)
    out = {}

    def wrapped(i, eng, ops):
        from secinfer.protocols.stamp.backend import StampBackend as SB
        body(SB(eng, ops), eng, [shares[i]])
        out[i] = (eng.stats["relu_bytes"], eng.stats["relu_rounds"], ops.link.meter.total)
        return None
    run3(wrapped, malicious=mal)
    total = sum(v[0] for v in out.values())
    decl = costmodel.declared("rss", n, sec, elem=4)
    assert total == decl["bytes"]
    assert max(v[1] for v in out.values()) == decl["rounds"] == 2
    bus = sum(v[2] for v in out.values())
    dbus = costmodel.declared_bus("rss", n, sec)
    assert dbus <= bus <= dbus + 8000   # + request headers (meta, spec JSON) and 16-byte seeds, < 500 B each
    # semi-honest per-party share of the batch-split ReLU vs the paper's Table 7 (5n per party)
    if not mal:
        assert total / 3 <= costmodel.TABLE7_STAMP["ReLU"]["bytes_per_n"] * n


def test_fused_matmul_relu_cost_is_two_rounds():
    x, w = _rand((6, 10), 15), _rand((10, 4), 16, 0.5)
    node, relu = Node("g", "Gemm", [], [], {}), Node("r", "Relu", [], [], {})
    y, meters = _secure(lambda be, eng, p: be.product(node, p[0], p[1], None, [relu], [[]], (6, 4)), [x, w], False)
    # the whole MatMul + truncation + ReLU is 2 rounds (+1 for the reveal) [STAMP 4.3]
    assert max(m[0].rounds("online") for m in meters.values()) == 3
    n = 24
    assert sum(m[0].total("online") for m in meters.values()) == \
        costmodel.declared("3of3", n, "semi-honest", elem=4)["bytes"] + 4 * n
    assert np.array_equal(y, fixed_ops.relu(fixed_ops.gemm(x, w, None, cfg), cfg))


def test_malicious_product_cost_matches_declaration():
    """Verified product with its weight's sigma opened offline: measured bytes of the
    offline sigma opening, the product (reshare + rho + the duplicated device path, with
    the delta check riding on its step 5) equal the declarations (no sigma online)."""
    from types import SimpleNamespace
    x, w = _rand((6, 12), 31), _rand((12, 5), 32, 0.5)
    node, relu = Node("g", "Gemm", ["x", "w"], ["h"], {}), Node("r", "Relu", [], [], {})
    xs, ws = dealer_pairs(x, 33), dealer_pairs(w, 34)
    out = {}

    def body(i, eng, ops):
        be = StampBackend(eng, ops)
        m = eng.ep.meter
        b0 = m.total("online")
        be.prepare(SimpleNamespace(nodes=[node], weight_info={"w": None}), {"w": ws[i]})
        b1 = m.total("online")
        y = be.product(node, xs[i], ws[i], None, [relu], [[]], (6, 5))
        b2 = m.total("online")
        eng.flush_checks()
        b3 = m.total("online")
        out[i] = (b1 - b0, b2 - b1, b3 - b2)
        return y
    res, _ = run3(body, malicious=True)
    assert not any(isinstance(r, Exception) for r in res.values())
    sig, prod, check = (sum(v[k] for v in out.values()) for k in range(3))
    assert sig == costmodel.declared_sigma_offline([w.size])
    # the delta check's hashes travel with the device step's step-5 messages
    # (``Engine.start_check``): nothing is left for the check before the reveal
    assert prod == (costmodel.declared_verified_product(x.size, 30)["bytes"]
                    + costmodel.declared("rss", 30, "malicious", elem=4)["bytes"] + costmodel.DELTA_CHECK_BYTES)
    assert check == 0


@pytest.mark.parametrize("chunk", [1 << 24, 300, 1])
def test_conv32_over_batch_slices_equals_ring_conv(monkeypatch, chunk):
    """conv32 over slices of the batch (memory bound) equals the whole-batch ring
    convolution mod 2^32, grouped and strided too."""
    from secinfer.arith.linalg import ring_conv2d
    from secinfer.arith.ring import Ring
    from secinfer.protocols.rep3 import kernels

    monkeypatch.setattr(kernels, "_CONV_CHUNK", chunk)
    rng = np.random.default_rng(7)
    for groups, stride in ((1, (1, 1)), (2, (2, 1))):
        x = rng.integers(0, 1 << 32, size=(5, 4, 6, 7), dtype=np.uint64)
        w = rng.integers(0, 1 << 32, size=(6, 4 // groups, 3, 3), dtype=np.uint64)
        got = kernels.conv32(x, w, stride, (1, 1, 1, 1), (1, 1), groups)
        want = Ring(32).reduce(ring_conv2d(x, w, stride, (1, 1, 1, 1), (1, 1), groups))
        assert got.shape == want.shape and np.array_equal(got, want)


@pytest.mark.parametrize("ashape,bshape", [((1, 9), (9, 6)), ((6, 9), (9, 2)), ((6, 9), (9, 6)), ((9,), (9, 6))])
def test_matmul32_paths_match_python_integers(ashape, bshape):
    """``kernels.matmul32`` (thin products directly in uint64, others as 16-bit limbs over
    BLAS) equals the product of Python integers mod 2^32."""
    from secinfer.crypto.prg import PRG
    from secinfer.protocols.rep3.kernels import matmul32

    prg = PRG.for_tests(32)
    a, b = prg.uint64(ashape) >> np.uint64(32), prg.uint64(bshape) >> np.uint64(32)
    a[..., 0] = (1 << 32) - 1
    want = np.matmul(a.astype(object), b.astype(object)) % (1 << 32)
    assert matmul32(a, b).tolist() == np.asarray(want).tolist()


def test_device_stream_seeds_and_expansion_equal_the_prf():
    """The LTEE's stream seed F_k(label, ctr) (one cached AES-ECB block per key,
    ``ltee_device.Device._seed``) and ``ltee_bus.expand`` (the label's prefix computed once)
    equal ``crypto.prg.PRF``'s CTR keystream, the independent reference, on labels, counters
    up to 2^64 - 1 and sizes that are not whole blocks."""
    import os

    from secinfer.crypto.prg import PRF
    from secinfer.errors import ConfigError
    from secinfer.protocols.stamp.ltee_bus import expand
    from secinfer.protocols.stamp.ltee_device import Device
    from secinfer.protocols.stamp.ltee_counters import Refused

    dev = Device()
    for j in range(3):
        dev._keys[j] = os.urandom(16)
        dev._prf[j] = PRF(dev._keys[j])
    for label in ("m/0", "m/1", "out/2", "in/1", "fin/1", "pad/0"):
        for ctr in (0, 1, 7, 2 ** 33 + 5, 2 ** 64 - 1):
            for j in range(3):
                assert dev._seed(j, label, ctr) == PRF(dev._keys[j]).keystream(label, ctr, 16)
    with pytest.raises(Refused):
        dev._seed(0, "m/0", 2 ** 64)
    with pytest.raises(ConfigError):
        PRF(dev._keys[0]).keystream("m/0", 2 ** 64, 16)
    for n in (1, 2, 3, 17, 128, 1001):
        seed = os.urandom(16)
        got = expand(seed, n)
        assert got.flags.writeable and got.dtype == np.uint64 and got.shape == (n,)
        assert np.array_equal(got, np.frombuffer(PRF(seed).keystream("expand", 0, 8 * n), dtype=np.uint64))
