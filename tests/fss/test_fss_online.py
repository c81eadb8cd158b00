"""Two-party online phase over Endpoints (run_local): outputs, metered cost = declared cost,
the compositions (truncate-then-ReLU, MaxPool) and what a deviating client changes."""

import numpy as np
import pytest

from secinfer.crypto.fss.gates import make_gate
from secinfer.crypto.fss.layers import low_bits, maxpool_key_counts, maxpool_tree, relu_of_truncated
from secinfer.crypto.preprocessing import Dealer, PreprocessingStore, StoreProvider
from secinfer.crypto.prg import PRG
from secinfer.errors import FrameError
from secinfer.net.channel import run_local

PARTIES = ("P0", "P1")


def _signed(v, n):
    v = int(v) % (1 << n)
    return v - (1 << n) if v >> (n - 1) else v


def _share(prg, x, n):
    mask = np.uint64((1 << n) - 1 if n < 64 else (1 << 64) - 1)
    x0 = prg.ring(x.shape, n)
    return x0, (x - x0) & mask


def _deal(gate, count, label, mu=None, seed=1):
    stores = (PreprocessingStore("P0"), PreprocessingStore("P1"))
    Dealer(PRG.for_tests(seed)).produce(gate, label, count, stores, mac_key=mu)
    return stores


@pytest.mark.parametrize("n,k", [(32, 72), (64, 104), (32, 32)])
def test_relu_online_one_round_2n_bits(n, k):
    prg = PRG.for_tests(n + k)
    mac = k > n
    gate = make_gate("relu", n, k, mac=mac)
    count = 257
    mu = 0xDEADBEEFCAFEBABE1234 % (1 << k) if mac else None
    stores = _deal(gate, count, "layer1/relu", mu)
    x = np.concatenate([np.array([0, (1 << n) - 1, 1 << (n - 1), (1 << (n - 1)) - 1], np.uint64),
                        prg.ring((count - 4,), n)])
    xs = _share(prg, x, n)

    def party(b):
        def fn(ep):
            key = StoreProvider(stores[b]).take("layer1/relu", expect=gate, party=b)
            with ep.phase("online"):
                out = gate.online(ep, PARTIES[1 - b], key, xs[b], "relu1")
            return out, ep.meter
        return fn

    res = run_local({p: party(b) for b, p in enumerate(PARTIES)})
    (o0, m0), (o1, m1) = res["P0"], res["P1"]
    g = gate.group
    relu = g.to_int(g.add(o0["relu"], o1["relu"]))
    assert [int(v) for v in relu] == [max(_signed(v, n), 0) for v in x]
    if mac:
        mu_relu = g.to_int(g.add(o0["mu_relu"], o1["mu_relu"]))
        mu_x = g.to_int(g.add(o0["mu_x"], o1["mu_x"]))
        assert [int(v) for v in mu_relu] == [(mu * max(_signed(v, n), 0)) % (1 << k) for v in x]
        assert [int(v) for v in mu_x] == [(mu * _signed(v, n)) % (1 << k) for v in x]
    cost = gate.cost().for_count(count)
    for meter in (m0, m1):
        assert meter.total("online", "sent") == cost["online_payload_bytes_per_party"] == count * n // 8
        assert meter.messages("online", "sent") == cost["messages_per_party"] == 1
        assert meter.rounds("online") == cost["rounds"] == 1


def test_client_error_on_share_is_visible_in_mac_relation():
    """Delta^1 of [CRISP Claim 2]: the client adds an error to its share before opening.
    The outputs are then consistent for x + Delta, so mu_x differs from mu * x by mu * Delta,
    which the final consistency check (s^Im - u) catches."""
    n, k = 32, 72
    prg = PRG.for_tests(5)
    gate = make_gate("relu", n, k, mac=True)
    count, mu = 64, 987654321987654321 % (1 << k)
    stores = _deal(gate, count, "r", mu)
    x = prg.ring((count,), n)
    xs = _share(prg, x, n)
    delta = np.zeros(count, np.uint64)
    delta[7] = 1

    def party(b):
        def fn(ep):
            key = stores[b].take("r", expect=gate, party=b)
            share = xs[b] if b == 0 else (xs[1] + delta) & np.uint64(0xFFFFFFFF)
            return gate.online(ep, PARTIES[1 - b], key, share, "relu")
        return fn

    res = run_local({p: party(b) for b, p in enumerate(PARTIES)})
    g = gate.group
    mu_x = g.to_int(g.add(res["P0"]["mu_x"], res["P1"]["mu_x"]))
    honest = [(mu * _signed(v, n)) % (1 << k) for v in x]
    diff = [i for i in range(count) if int(mu_x[i]) != honest[i]]
    assert diff == [7]


def test_oversized_masked_value_rejected():
    n = 12
    gate = make_gate("relu", n)
    stores = _deal(gate, 4, "r")

    def p0(ep):
        return gate.online(ep, "P1", stores[0].take("r"), np.zeros(4, np.uint64), "relu")

    def p1(ep):  # a malicious client sends a value with bits above n
        ep.send("P0", "relu", np.full(4, 1 << 15, np.uint16))
        return None

    res = run_local({"P0": p0, "P1": p1}, timeout=30)
    assert isinstance(res["P0"], FrameError)


def test_truncate_then_relu_with_macs():
    n, k, f = 32, 72, 13
    prg = PRG.for_tests(8)
    ars, relu = make_gate("ars", n, k, mac=True, frac_bits=f), make_gate("relu", n, k, mac=True)
    count, mu = 200, 31337 * (1 << 50) + 17
    s_ars, s_relu = _deal(ars, count, "ars", mu, 2), _deal(relu, count, "relu", mu, 3)
    x = np.concatenate([np.array([0, 0xFFFFFFFF, 1 << 31, (1 << 31) - 1, 8191, 8192, 0xFFFFE000], np.uint64),
                        prg.ring((count - 7,), n)])
    xs = _share(prg, x, n)

    def party(b):
        def fn(ep):
            with ep.phase("online"):
                out = relu_of_truncated(ep, PARTIES[1 - b], ars, relu, s_ars[b].take("ars"),
                                        s_relu[b].take("relu"), xs[b], "L1")
            return out, ep.meter
        return fn

    res = run_local({p: party(b) for b, p in enumerate(PARTIES)})
    (o0, m0), (o1, m1) = res["P0"], res["P1"]
    g = relu.group
    got = g.to_int(g.add(o0["relu"], o1["relu"]))
    want = [max(_signed(v, n) >> f, 0) for v in x]
    assert [int(v) for v in got] == want
    assert [int(v) for v in g.to_int(g.add(o0["mu_relu"], o1["mu_relu"]))] == [(mu * w) % (1 << k) for w in want]
    for (a0, c0), (a1, c1) in zip(o0["checks"], o1["checks"]):
        assert np.array_equal(g.add(a0, a1), g.add(c0, c1))
    assert m0.rounds("online") == 2 and m0.total("online", "sent") == 2 * count * 4


def test_maxpool_tree_with_macs():
    n, k = 32, 72
    prg = PRG.for_tests(9)
    relu = make_gate("relu", n, k, mac=True)
    g = relu.group
    count, window, mu = 30, 5, 0xABCDEF1234567
    vals = [[int(v) for v in row] for row in prg.ring((count, window), 20).astype(np.int64) - (1 << 19)]
    x = g.from_int(vals)
    mx = g.from_int([[mu * v for v in row] for row in vals])
    x0, mx0 = g.random(prg, (count, window)), g.random(prg, (count, window))
    shares = ((x0, mx0), (g.sub(x, x0), g.sub(mx, mx0)))
    sizes = maxpool_key_counts(count, window)
    stores = (PreprocessingStore("P0"), PreprocessingStore("P1"))
    dealer = Dealer(PRG.for_tests(10))
    for lvl, c in enumerate(sizes):
        dealer.produce(relu, f"pool/{lvl}", c, stores, mac_key=mu)

    def party(b):
        def fn(ep):
            keys = [stores[b].take(f"pool/{lvl}") for lvl in range(len(sizes))]
            return maxpool_tree(ep, PARTIES[1 - b], relu, keys, shares[b][0], "pool", shares[b][1])
        return fn

    res = run_local({p: party(b) for b, p in enumerate(PARTIES)})
    o0, o1 = res["P0"], res["P1"]
    assert [int(v) for v in g.to_signed_int(g.add(o0["max"], o1["max"]))] == [max(r) for r in vals]
    assert [int(v) for v in g.to_int(g.add(o0["mu_max"], o1["mu_max"]))] == [(mu * max(r)) % (1 << k) for r in vals]
    for (a0, c0), (a1, c1) in zip(o0["checks"], o1["checks"]):
        assert np.array_equal(g.add(a0, a1), g.add(c0, c1))
    assert len(sizes) == 3


def test_low_bits():
    assert int(low_bits(np.array([[0x1234567890, 5]], np.uint64), 16)[0]) == 0x7890


def test_relu_online_with_key_pieces_equals_one_batch():
    """A batch delivered as consecutive key pieces: one message, same outputs as the whole
    batch; pieces that do not cover the input are refused."""
    from secinfer.errors import ConfigError

    n, k = 64, 104
    prg = PRG.for_tests(77)
    gate = make_gate("relu", n, k, mac=True)
    mu = 0x1234567890ABCDEF1234 % (1 << k)
    count = 300
    x = np.concatenate([np.array([0, (1 << n) - 1, 1 << (n - 1), (1 << (n - 1)) - 1], np.uint64),
                        prg.ring((count - 4,), n)])
    xs = _share(prg, x, n)
    pieces = [(PreprocessingStore("P0"), PreprocessingStore("P1")) for _ in range(3)]
    sizes = [128, 128, 44]
    for i, (st, size) in enumerate(zip(pieces, sizes)):
        Dealer(PRG.for_tests(90 + i)).produce(gate, "relu", size, st, mac_key=mu)

    def party(b):
        def fn(ep):
            keys = [StoreProvider(st[b]).take("relu", expect=gate, party=b) for st in pieces]
            with ep.phase("online"):
                out = gate.online(ep, PARTIES[1 - b], keys, xs[b], "relu1")
                with pytest.raises(ConfigError):
                    gate.online(ep, PARTIES[1 - b], keys[:2], xs[b], "relu2")
            return out, ep.meter
        return fn

    res = run_local({p: party(b) for b, p in enumerate(PARTIES)})
    (o0, m0), (o1, m1) = res["P0"], res["P1"]
    g = gate.group
    assert [int(v) for v in g.to_int(g.add(o0["relu"], o1["relu"]))] == [max(_signed(v, n), 0) for v in x]
    assert [int(v) for v in g.to_int(g.add(o0["mu_x"], o1["mu_x"]))] == [(mu * _signed(v, n)) % (1 << k) for v in x]
    for meter in (m0, m1):
        assert meter.messages("online", "sent") == 1 and meter.total("online", "sent") == count * n // 8
