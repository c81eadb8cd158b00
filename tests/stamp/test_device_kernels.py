"""``kernels.FixedConv32`` (the model owner's first-layer conv with its weight laid out
offline) equals the generic ring convolution bit for bit."""

import numpy as np
import pytest

from secinfer.arith.ring import Ring
from secinfer.protocols.rep3 import kernels

R32 = Ring(32)


def _attrs(k, strides, pads, dil, group=1):
    return {"kernel_shape": list(k), "strides": list(strides), "pads": list(pads), "dilations": list(dil),
            "group": group}


CASES = [
    ((1, 1, 28, 28), (16, 1, 5, 5), _attrs((5, 5), (1, 1), (0, 0, 0, 0), (1, 1))),
    ((3, 3, 9, 11), (4, 3, 3, 3), _attrs((3, 3), (2, 1), (1, 2, 0, 1), (1, 1))),
    ((2, 2, 12, 10), (5, 2, 3, 2), _attrs((3, 2), (1, 2), (2, 0, 1, 1), (2, 1))),
    ((2, 3, 17), (4, 3, 4), _attrs((4,), (2,), (1, 2), (1,))),
]


@pytest.mark.parametrize("xs,ws,attrs", CASES)
def test_fixed_conv_equals_generic(xs, ws, attrs):
    rng = np.random.default_rng(5)
    w = rng.integers(0, 1 << 32, ws, dtype=np.uint64)
    f = kernels.bilinear("Conv", attrs, R32)
    assert kernels.FixedConv32.applies("Conv", attrs, R32, w.shape)
    g = kernels.FixedConv32(attrs, w)
    for _ in range(3):       # the workspace is reused from call to call
        x = rng.integers(0, 1 << 32, xs, dtype=np.uint64)
        y = g(x)
        assert y.dtype == np.uint64 and np.array_equal(y, R32.reduce(f(x, w)))
    # the extremes of every limb
    x = np.full(xs, (1 << 32) - 1, np.uint64)
    wmax = np.full(ws, (1 << 32) - 1, np.uint64)
    assert np.array_equal(kernels.FixedConv32(attrs, wmax)(x), R32.reduce(f(x, wmax)))


def test_fixed_conv_batch_slices_and_shape_change(monkeypatch):
    """Slices of a batch larger than ``_CONV_CHUNK``, and another batch size after the
    workspace was laid out, give the same result; a returned array is never overwritten."""
    xs, ws, attrs = CASES[1]
    rng = np.random.default_rng(6)
    w = rng.integers(0, 1 << 32, ws, dtype=np.uint64)
    f = kernels.bilinear("Conv", attrs, R32)
    g = kernels.FixedConv32(attrs, w)
    x1 = rng.integers(0, 1 << 32, (5,) + xs[1:], dtype=np.uint64)
    y1 = g(x1)
    y1_copy = y1.copy()
    monkeypatch.setattr(kernels, "_CONV_CHUNK", 200)
    x2 = rng.integers(0, 1 << 32, (7,) + xs[1:], dtype=np.uint64)
    assert np.array_equal(g(x2), R32.reduce(f(x2, w)))
    assert np.array_equal(y1, y1_copy) and np.array_equal(y1, R32.reduce(f(x1, w)))


def test_fixed_conv_applies_only_where_exact():
    a = _attrs((3, 3), (1, 1), (0, 0, 0, 0), (1, 1))
    assert not kernels.FixedConv32.applies("Conv", a, Ring(64), (4, 3, 3, 3))
    assert not kernels.FixedConv32.applies("Conv", dict(a, group=3), R32, (3, 1, 3, 3))
    assert not kernels.FixedConv32.applies("Gemm", a, R32, (4, 3))
    from secinfer.errors import ProtocolError
    g = kernels.FixedConv32(a, np.zeros((4, 3, 3, 3), np.uint64))
    with pytest.raises(ProtocolError):
        g(np.zeros((1, 2, 5, 5), np.uint64))


def _pool_node(k, strides, pads, dil, ceil):
    from secinfer.ir.graph import Node
    return Node("pool", "MaxPool", ["x"], ["y"], {"kernel_shape": list(k), "strides": list(strides),
                                                  "pads": list(pads), "dilations": list(dil),
                                                  "ceil_mode": int(ceil)})


POOLS = [((1, 16, 24, 24), ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False)),
         ((2, 3, 7, 9), ((3, 2), (2, 3), (1, 0, 2, 1), (1, 2), True)),
         ((2, 3, 7, 9), ((2, 2), (2, 2), (1, 1, 1, 1), (1, 1), True)),
         ((2, 4, 11), ((3,), (2,), (1, 1), (1,), True))]


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("shape,pool", POOLS)
def test_device_relu_maxpool_equal_reference(bits, shape, pool):
    """The device's Relu and MaxPool (``kernels.Chain``'s steps, run by ``run_chain``)
    equal ``fixed_ops.run_node`` bit for bit: random values (both signs), the extremes of
    the ring, unreduced uint64 input."""
    from secinfer.arith.fixed import FixedPointConfig
    from secinfer.ir.fixed_ops import run_node
    from secinfer.ir.graph import Node
    cfg = FixedPointConfig("t", bits, 8)
    rng = np.random.default_rng(bits)
    relu = Node("relu", "Relu", ["x"], ["y"], {})
    mp = _pool_node(*pool)
    n = int(np.prod(shape))
    top = (1 << bits) - 1
    for x in (rng.integers(0, 1 << 63, shape, dtype=np.uint64) * np.uint64(2) + np.uint64(1),
              cfg.ring.reduce(rng.integers(0, 1 << 63, shape, dtype=np.uint64)),
              np.resize(np.array([0, 1, 1 << (bits - 1), (1 << (bits - 1)) - 1, top], np.uint64), shape)):
        for nodes in ([relu], [mp], [relu, mp]):
            ref = x
            for nd in nodes:
                ref = run_node(nd, [ref], cfg)[0]
            spec = {"shape": list(shape), "out_shape": list(ref.shape), "params": [],
                    "steps": [{"op": "node", "node": nd.to_json()} for nd in nodes]}
            got = kernels.run_chain(cfg, spec, x.reshape(-1).copy(), kernels.OpCount())
            assert got.dtype == np.uint64 and np.array_equal(got, ref), (nodes, x.ravel()[:4])
    assert n > 0


def test_owner_first_layer_uses_fixed_conv(monkeypatch):
    """W4 batch 1 (semi-honest): the model owner's first-layer conv runs through its
    ``FixedConv32`` (the offline half on x_0, the warm dry run and the online one on x_1), and the output
    equals the reference."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from test_stamp_models import run_model

    from secinfer.arith.fixed import FX32
    from secinfer.bench.peers_suite import build_workload, workload_input
    from secinfer.ir.fixed_exec import run_fixed
    from secinfer.ir.onnx_import import load_model

    calls = []
    orig = kernels.FixedConv32.__call__

    def counted(self, x):
        calls.append(tuple(x.shape))
        return orig(self, x)
    monkeypatch.setattr(kernels.FixedConv32, "__call__", counted)
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "w4.onnx"
        p.write_bytes(build_workload("W4").SerializeToString())
        g = load_model(str(p))
    x = workload_input("W4", 1)
    res = run_model(g, x, "semi-honest")
    assert np.array_equal(res["p1"].output_ring, run_fixed(g.with_batch(1), x, FX32))
    # the offline half on x_0, the online one on x_1 -- and, between them, the warm dry run's
    # (option stamp_warm_online, default on; ``StampBackend.warm``)
    assert calls == [(1, 1, 28, 28)] * 3
