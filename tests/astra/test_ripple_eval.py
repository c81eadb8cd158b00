"""P0's evaluation of the ripple-carry comparison on the semi-honest direct path through its
own native kernel (``gcm.RippleEvaluator``, ``native/go/gc/ripple.go``, docs/protocols/
astra.md "Seventh pass"): the same output labels as the generic evaluators (the bound
``OpenedEvaluator`` it replaced and the numpy reference ``evaluate_opened``) on random
labels and tables of every width and batch (across the kernel's groups of four instances),
the right decoded bit on honestly garbled instances (edge values included), buffers reused
across calls, and its refusals."""

import numpy as np
import pytest

from secinfer.crypto.gc import garble as gcm
from secinfer.crypto.gc.circuit import bits_of, msb_sub_ripple
from secinfer.errors import ShapeError


def _generic(circ, tables, k1, k2, k3):
    """The old path: the wire buffer, the bound generic evaluator, and the numpy reference."""
    wires = gcm.wire_buffer(circ, {"u2": k2, "u3": k3})
    ev = gcm.OpenedEvaluator(circ, tables, wires, "u1")
    ev.labels[...] = k1
    got = ev().copy()
    ref = gcm.evaluate_opened(circ, tables, gcm.wire_buffer(circ, {"u2": k2, "u3": k3}), "u1", k1, native=False)
    assert np.array_equal(got, ref)
    return got


@pytest.mark.parametrize("native", [True, False], ids=["native", "fallback"])
@pytest.mark.parametrize("l,batch", [(2, 1), (3, 2), (17, 4), (64, 1), (64, 5), (64, 9), (40, 33)])
def test_ripple_equals_generic_on_random_labels(native, l, batch, monkeypatch):
    if not native:
        monkeypatch.setattr(gcm, "_native_lib", lambda: None)
    circ = msb_sub_ripple(l)
    gen = np.random.default_rng(l * 100 + batch)
    tables = gen.integers(0, 2**64, (batch, circ.and_count, 2, 2), dtype=np.uint64)
    k3 = gen.integers(0, 2**64, (batch, 1, 2), dtype=np.uint64)
    ev = gcm.RippleEvaluator(l, tables, k3)
    assert (ev._fn is not None) == native
    for _ in range(3):   # the same buffers, fresh inputs each call
        k1, k2 = (gen.integers(0, 2**64, (batch, l, 2), dtype=np.uint64) for _ in range(2))
        np.copyto(ev.u1, k1)
        np.copyto(ev.u2, k2)
        got = ev()
        assert got is ev.out and got.shape == (batch, 1, 2)
        assert np.array_equal(got, _generic(circ, tables, k1, k2, k3))


@pytest.mark.parametrize("native", [True, False], ids=["native", "fallback"])
def test_ripple_decodes_msb_of_the_difference(native, monkeypatch):
    if not native:
        monkeypatch.setattr(gcm, "_native_lib", lambda: None)
    circ, n = msb_sub_ripple(64), 12
    gen = np.random.default_rng(3)
    R, zeros = gcm.input_labels(circ, n, lambda shape: gen.integers(0, 2**63, shape, dtype=np.uint64))
    g = gcm.garble(circ, R, zeros)
    r = gen.integers(0, 2, (n, 1)).astype(np.uint8)
    ev = gcm.RippleEvaluator(64, g.tables, gcm.select(zeros["u3"], r, R))
    top = np.uint64(1 << 63)
    edges = [(0, 0), (5, 5), (0, 1), (1, 0), (top, 0), (0, top), (top - np.uint64(1), np.uint64(2**64 - 1)),
             (2**64 - 1, 0), (7, 2**64 - 3)]
    for rnd in range(2):
        a, b = gen.integers(0, 2**64, n, dtype=np.uint64), gen.integers(0, 2**64, n, dtype=np.uint64)
        if rnd == 0:
            for i, (x, y) in enumerate(edges):
                a[i], b[i] = x, y
        np.copyto(ev.u1, gcm.select(zeros["u1"], bits_of(a, 64), R))
        np.copyto(ev.u2, gcm.select(zeros["u2"], bits_of(b, 64), R))
        want = ((a - b) >> np.uint64(63)).astype(np.uint8) ^ r[:, 0]
        assert np.array_equal(gcm.decode(ev(), g.decode)[:, 0], want)


def test_ripple_refuses_bad_shapes():
    t = np.zeros((2, 63, 2, 2), np.uint64)
    with pytest.raises(ShapeError):
        gcm.RippleEvaluator(64, t, np.zeros((1, 1, 2), np.uint64))     # batch of u3
    with pytest.raises(ShapeError):
        gcm.RippleEvaluator(63, t, np.zeros((2, 1, 2), np.uint64))     # width of the tables
    with pytest.raises(ShapeError):
        gcm.RippleEvaluator(1, np.zeros((2, 0, 2, 2), np.uint64), np.zeros((2, 1, 2), np.uint64))   # no AND gate
