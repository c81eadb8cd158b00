"""Interval-containment / spline gates with public pieces against plaintext evaluation."""

import numpy as np
import pytest
from fss_helpers import run_local_gate

from secinfer.crypto.fss.gates import GateKey, make_gate
from secinfer.crypto.prg import PRG
from secinfer.errors import ConfigError
from secinfer.net.channel import run_local


def _signed(v, n):
    v = int(v) % (1 << n)
    return v - (1 << n) if v >> (n - 1) else v


def _plain(pieces, v):
    return sum(sum(a * v ** j for j, a in enumerate(c)) for p, q, c in pieces if p <= v <= q)


def _evaluate(gate, prg, x, mu=None):
    return {k: [int(v) for v in arr] for k, arr in run_local_gate(gate, prg, x, mu).items()}


N8 = [
    (8, 0, False, [(-5, 17, [1])]),                                     # one interval indicator
    (8, 0, False, [(-128, -128, [1]), (127, 127, [1])]),                # single points at min and max
    (48, 0, True, [(-128, 127, [3]), (-3, -3, [-7]), (0, 127, [2])]),   # lifted ring, full-domain piece
    (8, 2, True, [(-128, -1, [1, -2, 3]), (0, 50, [5, 1]), (51, 127, [0, 0, 1])]),
    (8, 1, False, [(0, 127, [0, 1])]),                                  # ReLU as a 2-piece spline
]


@pytest.mark.parametrize("k,deg,mac,pieces", N8)
def test_spline_every_point_n8(k, deg, mac, pieces):
    prg = PRG.for_tests(31 + k + deg)
    gate = make_gate("spline", 8, k, mac=mac, degree=deg, pieces=pieces)
    x = np.arange(256, dtype=np.uint64)
    mu = 0x1234567 if mac else None
    got = _evaluate(gate, prg, x, mu)
    want = [_plain(pieces, _signed(v, 8)) % (1 << k) for v in x]
    assert got["y"] == want
    if mac:
        assert got["mu_y"] == [(mu * w) % (1 << k) for w in want]


def test_interval_large_domain_boundaries():
    n, k = 64, 104
    lo, hi = -(1 << 40), (1 << 40) + 5
    pieces = [(lo, hi, [1]), (-(1 << 63), -(1 << 63), [9]), ((1 << 63) - 1, (1 << 63) - 1, [-2])]
    gate = make_gate("spline", n, k, mac=True, pieces=pieces)
    prg = PRG.for_tests(77)
    edges = [lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, 0, -1, -(1 << 63), (1 << 63) - 1]
    x = np.concatenate([np.array([e % (1 << 64) for e in edges], np.uint64), prg.ring((50,), n)])
    mu = (1 << 100) + 3
    got = _evaluate(gate, prg, x, mu)
    want = [_plain(pieces, _signed(v, n)) % (1 << k) for v in x]
    assert got["y"] == want and got["mu_y"] == [(mu * w) % (1 << k) for w in want]


def test_spline_key_roundtrip_and_online():
    pieces = [(-100, 100, [7, 1])]
    gate = make_gate("spline", 16, degree=1, pieces=pieces)
    k0, k1 = gate.gen(PRG.for_tests(5), 40)
    back = GateKey.from_bytes(k0.to_bytes(), expect=gate, party=0)
    assert back.count == 40 and back.nbytes() == 40 * gate.cost().key_bytes
    x = PRG.for_tests(6).ring((40,), 16)
    x0 = PRG.for_tests(7).ring((40,), 16)
    xs = (x0, (x - x0) & np.uint64(0xFFFF))

    def party(b, key):
        def fn(ep):
            with ep.phase("online"):
                out = gate.online(ep, ("P0", "P1")[1 - b], key, xs[b], "spl")
            return out, ep.meter
        return fn

    res = run_local({"P0": party(0, back), "P1": party(1, k1)})
    (o0, m0), (o1, _) = res["P0"], res["P1"]
    g = gate.group
    got = [int(v) for v in g.to_int(g.add(o0["y"], o1["y"]))]
    assert got == [_plain(pieces, _signed(v, 16)) % (1 << 16) for v in x]
    assert m0.rounds("online") == 1 and m0.total("online", "sent") == 40 * 2


def test_spline_parameter_validation():
    with pytest.raises(ConfigError):
        make_gate("spline", 8, 48, degree=1, pieces=[(0, 1, [0, 1])])   # degree >= 1 needs k = n
    with pytest.raises(ConfigError):
        make_gate("spline", 8, pieces=[(5, 4, [1])])                    # empty interval
    with pytest.raises(ConfigError):
        make_gate("spline", 8, pieces=[(0, 200, [1])])                  # out of the signed range
    with pytest.raises(ConfigError):
        make_gate("spline", 8, pieces=[(0, 1, [1, 2])])                 # too many coefficients
    with pytest.raises(ConfigError):
        make_gate("relu", 8, pieces=[(0, 1, [1])])
    gate = make_gate("spline", 8)
    k0, _ = gate.gen(PRG.for_tests(1), 2)
    with pytest.raises(ConfigError):
        gate.eval_local(k0, np.zeros(2, np.uint64))                     # no pieces given
    assert gate.with_pieces([(0, 3, [1])]).eval_local(k0, np.zeros(2, np.uint64))["y"].shape == (2, 1)
