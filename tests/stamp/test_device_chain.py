"""``kernels.Chain`` (a device spec parsed once, the LTEE's ninth-pass chain) equals the
step-by-step reading of the spec with the reference kernels bit for bit, with the same
operation counts, and leaves its input untouched; the device parses a shipped spec once
(``cmd_specs``) and reuses that chain online (docs/protocols/stamp.md, "Ninth pass")."""

import json
import math

import numpy as np
import pytest

from secinfer.arith.fixed import FixedPointConfig
from secinfer.crypto.prg import PRF
from secinfer.errors import FixedPointRangeError, ProtocolError
from secinfer.ir.fixed_ops import run_node
from secinfer.ir.graph import Node
from secinfer.protocols.rep3 import kernels
from secinfer.protocols.stamp import ltee_device


def _reference(cfg, spec, flat):
    """The spec read step by step with the reference kernels (``fixed_ops.run_node``)."""
    cnt = kernels.OpCount()
    shape = tuple(spec["shape"])
    n = math.prod(shape)
    x, params, pos = flat[:n].reshape(shape), [], n
    for shp in spec.get("params", []):
        params.append(flat[pos:pos + math.prod(shp)].reshape(shp))
        pos += math.prod(shp)
    for st in spec["steps"]:
        if st["op"] == "trunc":
            x = cfg.trunc(x)
            cnt.int_ops += x.size
        elif st["op"] == "bias":
            shp = [1] * x.ndim
            shp[st["axis"]] = -1
            x = cfg.ring.add(x, params[st["param"]].reshape(shp))
            cnt.int_ops += x.size
        elif st["op"] == "shadow-make":
            x = kernels.shadow_make(cfg, x, st["s"], st["a1"])
            cnt.int_ops += x.size
        elif st["op"] == "shadow-check":
            x = kernels.shadow_check(cfg, x, st["s"], st["e"], st.get("layer", "?"))
            cnt.int_ops += 3 * x.size
        else:
            node = Node.from_json(st["node"])
            y = run_node(node, [x] + [params[k] for k in st.get("params", [])], cfg)[0]
            kernels._count(node.op, x, y, cnt)
            x = y
    return x, cnt


def _node(op, attrs=None):
    return {"op": "node", "params": [], "node": {"name": op.lower(), "op": op, "inputs": ["a"], "outputs": ["b"],
                                                 "attrs": attrs or {}}}


def _pool(k, s, pads, dil=(1, 1), ceil=0):
    return _node("MaxPool", {"kernel_shape": list(k), "strides": list(s), "pads": list(pads),
                             "dilations": list(dil), "ceil_mode": ceil})


TRUNC, RELU = {"op": "trunc"}, _node("Relu")
SPECS = [
    # W3's hidden layer and output step
    {"shape": [1, 128], "params": [[128]], "steps": [TRUNC, {"op": "bias", "axis": -1, "param": 0}, RELU]},
    {"shape": [1, 10], "params": [[10]], "steps": [TRUNC, {"op": "bias", "axis": -1, "param": 0}]},
    # W4's first layer: trunc, bias, Relu, 2x2 MaxPool
    {"shape": [1, 16, 24, 24], "params": [[16]], "out_shape": [1, 16, 12, 12],
     "steps": [TRUNC, {"op": "bias", "axis": 1, "param": 0}, RELU, _pool((2, 2), (2, 2), (0, 0, 0, 0))]},
    # pools on an input the chain did not make (the caller's array), overlapping, odd sides,
    # strided dilated, padded, ceil mode, 1-d
    {"shape": [2, 3, 9, 9], "out_shape": [2, 3, 4, 4], "steps": [_pool((3, 3), (2, 2), (0, 0, 0, 0))]},
    {"shape": [1, 2, 11, 10], "out_shape": [1, 2, 5, 5], "steps": [RELU, _pool((2, 2), (2, 2), (0, 0, 0, 0))]},
    {"shape": [1, 2, 12, 12], "out_shape": [1, 2, 4, 5], "steps": [TRUNC, _pool((2, 3), (3, 2), (0, 0, 0, 0), (2, 1))]},
    {"shape": [1, 2, 7, 7], "out_shape": [1, 2, 4, 4], "steps": [TRUNC, _pool((3, 3), (2, 2), (1, 1, 1, 1))]},
    {"shape": [1, 2, 8, 8], "out_shape": [1, 2, 4, 4], "steps": [TRUNC, _pool((3, 3), (2, 2), (0, 0, 0, 0), ceil=1)]},
    {"shape": [2, 3, 10], "out_shape": [2, 3, 5], "steps": [TRUNC, RELU, _node("MaxPool", {
        "kernel_shape": [2], "strides": [2], "pads": [0, 0], "dilations": [1], "ceil_mode": 0})]},
    # bias first (on the caller's array), a reference node with a parameter, average pool
    {"shape": [1, 4, 4, 4], "params": [[4]], "out_shape": [1, 4, 2, 2],
     "steps": [{"op": "bias", "axis": 1, "param": 0}, RELU, _node("AveragePool", {
         "kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0], "dilations": [1, 1], "ceil_mode": 0,
         "count_include_pad": 0})]},
]


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("spec", SPECS, ids=range(len(SPECS)))
def test_chain_equals_step_by_step_reading(bits, spec):
    cfg = FixedPointConfig("t", bits, 13)
    kernels.validate(spec)
    chain = kernels.Chain(cfg, spec)
    rng = np.random.default_rng(bits)
    n_in = math.prod(spec["shape"]) + kernels.n_params(spec)
    for trial in range(4):
        if trial == 0:      # values at the ring's edges (the signed order's corner cases)
            flat = rng.choice(np.array([0, 1, (1 << (bits - 1)) - 1, 1 << (bits - 1), (1 << bits) - 1], np.uint64), n_in)
        else:
            flat = rng.integers(0, 1 << bits, n_in, dtype=np.uint64) if bits < 64 else \
                rng.integers(0, 1 << 63, n_in, dtype=np.uint64) * np.uint64(2) + np.uint64(trial & 1)
        before = flat.copy()
        want, cnt_want = _reference(cfg, spec, flat)
        cnt = kernels.OpCount()
        got = chain(flat, cnt)
        assert got.dtype == np.uint64 and got.shape == want.shape and np.array_equal(got, want)
        assert (cnt.int_ops, cnt.float_ops, cnt.exp_ops) == (cnt_want.int_ops, cnt_want.float_ops, cnt_want.exp_ops)
        assert np.array_equal(flat, before)          # the input is never written
        cnt2 = kernels.OpCount()
        assert np.array_equal(kernels.run_chain(cfg, spec, flat, cnt2), want) and cnt2.int_ops == cnt.int_ops


def test_chain_range_guard_and_bad_steps_raise_when_run():
    cfg = FixedPointConfig("t", 32, 13)
    # a shadow pair that wrapped: the check refuses, as the step-by-step reading did
    spec = {"shape": [2, 3], "out_shape": [1, 3], "steps": [{"op": "shadow-check", "s": 4, "e": 10, "layer": "L"}]}
    x = np.array([5, 6, 7, 0, 0, 1 << 20], np.uint64)
    with pytest.raises(FixedPointRangeError, match="'L'"):
        kernels.Chain(cfg, spec)(x, kernels.OpCount())
    ok = np.array([32, 48, 64, 2, 3, 4], np.uint64)
    assert np.array_equal(kernels.Chain(cfg, spec)(ok, kernels.OpCount()), _reference(cfg, spec, ok)[0])
    # softmax is no ring kernel: the chain parses, and refuses when run, after the steps before it
    sm = kernels.Chain(cfg, {"shape": [3], "steps": [{"op": "softmax"}]})
    with pytest.raises(ProtocolError, match="not a ring kernel"):
        sm(np.zeros(3, np.uint64), kernels.OpCount())
    # a bias naming a missing parameter fails when run (an IndexError, refused by the device)
    bad = kernels.Chain(cfg, {"shape": [3], "steps": [{"op": "bias", "axis": 0, "param": 2}]})
    with pytest.raises(IndexError):
        bad(np.zeros(3, np.uint64), kernels.OpCount())


def _device():
    d = ltee_device.Device()
    d.cmd_ready([])
    d.index, d.out_party, d.malicious, d.session = 0, 1, False, bytes(16)
    d.cfg = FixedPointConfig("device", 32, 13)
    for j in range(3):
        d._keys[j] = bytes([j + 1]) * 16
        d._prf[j] = PRF(d._keys[j])
    return d


@pytest.mark.parametrize("ship", [True, False])
def test_device_parses_a_chain_once_and_reuses_it(ship, monkeypatch):
    """Shipped (``cmd_specs``) or first seen online, a spec's chain is parsed once per spec
    bytes; the evaluations' results, op counts and AES totals equal a device that parses
    every call (the step-by-step ``run_chain``)."""
    spec = SPECS[2]
    raw = np.frombuffer(json.dumps(spec).encode(), np.uint8)
    n_in = math.prod(spec["shape"]) + kernels.n_params(spec)
    n_op = ltee_device.SLOTS * n_in
    made = []
    real_chain = kernels.Chain

    class Counting(real_chain):
        def __init__(self, *a):
            made.append(1)
            super().__init__(*a)

    def run(dev, ops):
        rng = np.random.default_rng(3)
        outs = []
        for op in ops:
            s = rng.integers(0, 1 << 32, n_in, dtype=np.uint64)
            outs.append(dev.cmd_eval([np.array([op, n_op, op * n_op, 0, 0, 0], np.int64), raw, s]))
        return outs, (dev.cnt.int_ops, dev.cnt.float_ops, dev.cnt.exp_ops, dev.aes_bytes)

    monkeypatch.setattr(kernels, "Chain", Counting)
    dev = _device()
    if ship:
        dev.cmd_specs([raw])
        assert len(made) == 1
    outs, totals = run(dev, range(3))
    assert len(made) == 1 and len(dev.chains) == 1
    # the reference device: a fresh chain for every call
    monkeypatch.setattr(ltee_device.Device, "_chain_of", lambda self, k, key, sp: real_chain(self.cfg, sp))
    ref = _device()
    if ship:
        ref.cmd_specs([raw])
    ref_outs, ref_totals = run(ref, range(3))
    assert totals == ref_totals
    for a, b in zip(outs, ref_outs):
        assert all(np.array_equal(u, v) for u, v in zip(a, b))
