"""Falcon's DReLU (wrap + private compare over Z_67, ``falcon/compare.py``), modes "falcon"
(Falcon's round structure: beta products online, Falcon's select) and "pc" (both
preprocessed), and the carry chain where it applies: exact against the plaintext sign on
boundary and random values, both rings and securities; the private compare's boundary
cases with chosen masks; and one deviation per checked step (malicious): every honest
party aborts and p1 gets no output."""

import numpy as np
import pytest

from secinfer.arith.fixed import FX32, FX64
from secinfer.crypto.prg import PRG
from secinfer.errors import PeerDeadError, ProtocolAbort
from secinfer.net.channel import run_local
from secinfer.protocols.falcon.compare import PcMaterial
from secinfer.protocols.falcon.mpc import FalconMPC
from secinfer.protocols.falcon.triples import P
from secinfer.sharing import replicated as rss
from secinfer.sharing.replicated import Pair
from secinfer.protocols.rep3.engine import Engine

NAMES = ("p0", "p1", "p2")
U64 = np.uint64


MODES = ["falcon", "pc"]


def _run(fx, malicious, compute, shares, setup=None, timeout=120, mode="falcon"):
    """compute(mpc, share) -> list of Pairs (online), revealed to p1. The triples, the
    comparison preprocessing and the select masks are planned by a dry run and made offline
    first; ``setup(i, eng, mpc)`` then installs a deviation (a party's tampering) before the
    online phase."""
    def party(i):
        def f(ep):
            with ep.phase("setup"):
                eng = Engine(ep, NAMES, i, fx, malicious, PRG.for_tests(60 + i))
                eng.setup_keys()
            m = FalconMPC(eng, fx, drelu=mode)
            with ep.phase("offline"):
                dry = FalconMPC(eng, fx, dry_run=True, drelu=mode)
                compute(dry, rss.zeros(shares[i].a.shape))
                if malicious:
                    m.triples.prepare(dry.requests)
                m.pc.prepare(dry.pc_requests, dry.sel_requests)
            if setup:
                setup(i, eng, m)
            with ep.phase("online"):
                outs = compute(m, shares[i])
                m.flush()
                return [eng.reveal_to(1, o) for o in outs], outs
        return f
    res = run_local({n: party(i) for i, n in enumerate(NAMES)}, timeout=timeout)
    return [res[n] for n in NAMES]


def _boundary_values(fx, n_random=300, seed=5):
    bits = fx.ring_bits
    L, H = 1 << bits, 1 << (bits - 1)
    special = [0, 1, 2, 3, L - 1, L - 2, L - 3, H - 1, H - 2, H, H + 1, H + 2, H // 2, H // 2 - 1, L - H // 2,
               (1 << (bits - 2)) - 1, L - (1 << (bits - 2))]
    rng = np.random.default_rng(seed)
    rand = rng.integers(0, 2 ** 63, size=n_random, dtype=np.uint64) * U64(2) + rng.integers(0, 2, n_random,
                                                                                               dtype=np.uint64)
    return fx.ring.reduce(np.concatenate([np.array(special, dtype=object).astype(np.uint64), rand]))


def _shares(fx, x, seed=7):
    """Random components, plus rows whose components wrap twice (L-1, L-1, x+2) and never
    (0, 0, x)."""
    ring = fx.ring
    rng = np.random.default_rng(seed)
    pairs = rss.share(ring, x, lambda s: rng.integers(0, 2 ** 64 - 1, size=s, dtype=np.uint64, endpoint=True))
    k = min(8, x.size)
    comps = np.array([p.a for p in pairs])             # component j = party j's a
    comps[0][:k] = ring.reduce(U64(2 ** 64 - 1))
    comps[1][:k] = ring.reduce(U64(2 ** 64 - 1))
    comps[2][:k] = ring.add(x[:k], U64(2))
    comps[0][k:2 * k] = 0
    comps[1][k:2 * k] = 0
    comps[2][k:2 * k] = x[k:2 * k]
    return rss.pairs_from_components([comps[0], comps[1], comps[2]])


def _signed_ref(fx, x):
    return (fx.ring.to_signed(x) >= 0).astype(np.uint64)


@pytest.mark.parametrize("mode", MODES + ["carry"])
@pytest.mark.parametrize("mal", [False, True], ids=["semi-honest", "malicious"])
@pytest.mark.parametrize("fx", [FX32, FX64], ids=["z2^32", "z2^64"])
def test_drelu_relu_and_opened_sign_exact(fx, mal, mode):
    """[x >= 0] (boolean sharing), ReLU (arithmetic), the opened sign bit (Pow) and the
    running maximum (windows of 4, with the argmax kept) equal the plaintext on every
    value, including 0, +-1, +-2^(l-1) and shares that wrap (the maximum on the values
    shifted into [-2^(l-3), 2^(l-3)): its differences must not wrap)."""
    x = _boundary_values(fx)
    ring = fx.ring
    q = x.size // 4
    xm = ring.from_signed(ring.to_signed(x[:4 * q]) >> 2)
    sh = _shares(fx, np.concatenate([x, xm]))
    bits_seen = {}

    def compute(m, s):
        s, sm = (rss.apply(s, lambda v: v[:x.size]), rss.apply(s, lambda v: v[x.size:].reshape(q, 4)))
        d = m.drelu(s)
        y = m.relu(s)
        bits_seen[m.me] = m.sign_bits(s)
        mx = m.max_reduce(sm, 1, True, True)
        return [y, Pair(d.a & U64(1), d.b & U64(1)), mx]
    res = _run(fx, mal, compute, sh, mode=mode)
    for r in res:
        assert not isinstance(r, Exception), r
    ref = _signed_ref(fx, x)
    assert np.array_equal(res[1][0][0], np.where(ref == 1, x, 0))
    d = rss.bool_reconstruct([r[1][1] for r in res]) & U64(1)
    assert np.array_equal(d, ref)
    assert all(np.array_equal(bits_seen[i], ref) for i in range(3))
    assert np.array_equal(res[1][0][2], ring.from_signed(ring.to_signed(xm).reshape(q, 4).max(1)))


@pytest.mark.parametrize("mode", MODES)
def test_relu_costs_in_z2_64_match_declared(mode):
    """In Z_2^64 (6 Z_p levels): "falcon" ReLU 11 rounds and 144 bytes per element and party
    (c 8, 63 beta products, 63 tree products, d 1, the select's bit 1 and product 8), "pc" 8
    and 80, as ``costmodel`` declares them."""
    from secinfer.protocols.stamp.costmodel import falcon_declared_relu_bytes, falcon_declared_rounds
    x = _boundary_values(FX64, 100)
    seen = {}

    def compute(m, s):
        if m.dry:
            return [m.relu(s)]
        meter = m.eng.ep.meter
        b0, r0 = meter.total("online"), meter.rounds("online")
        y = m.relu(s)
        seen[m.me] = (meter.total("online") - b0, meter.rounds("online") - r0)
        return [y]
    res = _run(FX64, False, compute, _shares(FX64, x), mode=mode)
    assert all(not isinstance(r, Exception) for r in res), res
    want = falcon_declared_relu_bytes(x.size, drelu=mode, ring_bits=64)
    assert want == {"falcon": 144, "pc": 80}[mode] * x.size
    assert [seen[i][0] for i in range(3)] == [want] * 3
    assert max(seen[i][1] for i in range(3)) == falcon_declared_rounds("ReLU", drelu=mode, ring_bits=64) \
        == {"falcon": 11, "pc": 8}[mode]


def _material(fx, r_low, rho, beta, m, seed=11, mode="pc"):
    """Dealer sharings (test only) of chosen comparison preprocessing, per party (mode
    "falcon": no t = beta r' and no m r'_{n-1}, made online)."""
    ring, n = fx.ring, fx.ring_bits - 1
    rng = np.random.default_rng(seed)
    draw = lambda s: rng.integers(0, 2 ** 64 - 1, size=s, dtype=np.uint64, endpoint=True)  # noqa: E731

    def share_p(v):
        v = np.asarray(v, dtype=np.uint64) % U64(P)
        c0, c1 = draw(v.shape) % U64(P), draw(v.shape) % U64(P)
        return rss.pairs_from_components([c0, c1, (v + U64(2 * P) - c0 - c1) % U64(P)])
    rbits = (r_low[:, None] >> np.arange(n, dtype=np.uint64)[None, :]) & U64(1)
    g = rho ^ beta
    empty = np.zeros((r_low.size, 0), dtype=np.uint64)
    faithful = mode == "falcon"
    parts = [rss.share(ring, ring.add(r_low, rho << U64(n)), draw), rss.share(ring, g, draw),
             share_p(rbits), share_p(empty if faithful else rbits * beta[:, None]), share_p(beta), share_p(m),
             share_p(empty if faithful else m * rbits[:, n - 1]), share_p(m * beta)]
    return [PcMaterial(*(p[i] for p in parts)) for i in range(3)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mal", [False, True], ids=["semi-honest", "malicious"])
def test_private_compare_boundaries_with_chosen_masks(mal, mode):
    """The comparison c' < r' at its boundaries (r' = c', c' +- 1, c' = 2^n - 1, r' = 0 and
    2^n - 1), both directions beta, both top bits rho: the masks are chosen (test dealer)
    and x = c - r, so the opened c is the one wanted."""
    fx = FX32
    ring, n = fx.ring, fx.ring_bits - 1
    top = (1 << n) - 1
    cases = []
    for cl, rl in [(5, 5), (5, 6), (6, 5), (top, top), (top, 0), (0, top), (0, 0), (top, top - 1),
                   (top - 1, top), (1 << (n - 1), (1 << (n - 1)) - 1), ((1 << (n - 1)) - 1, 1 << (n - 1))]:
        for rho in (0, 1):
            for beta in (0, 1):
                for chi in (0, 1):                       # msb(c)
                    cases.append((cl + (chi << n), rl, rho, beta))
    c = np.array([v[0] for v in cases], dtype=np.uint64)
    r_low = np.array([v[1] for v in cases], dtype=np.uint64)
    rho = np.array([v[2] for v in cases], dtype=np.uint64)
    beta = np.array([v[3] for v in cases], dtype=np.uint64)
    m = (np.arange(len(cases), dtype=np.uint64) % U64(P - 1)) + U64(1)
    x = ring.sub(c, ring.add(r_low, rho << U64(n)))
    mats = _material(fx, r_low, rho, beta, m, mode=mode)
    sh = _shares(fx, x, 13)

    def setup(i, eng, mpc):
        mpc.pc.buf = [mats[i]]

    def compute(m_, s):
        return [m_.relu(s)]
    res = _run(fx, mal, compute, sh, setup, mode=mode)
    for r in res:
        assert not isinstance(r, Exception), r
    assert np.array_equal(res[1][0][0], np.where(_signed_ref(fx, x) == 1, x, 0))


# ---- malicious: one deviation per step ---------------------------------------------------
def _assert_all_honest_abort(res, adversary, checks):
    honest = [i for i in range(3) if i != adversary]
    seen = set()
    for i in honest:
        assert isinstance(res[i], (ProtocolAbort, PeerDeadError)), f"honest party {i}: {res[i]!r}"
        if isinstance(res[i], ProtocolAbort):
            seen.add(res[i].check)
    assert isinstance(res[1], ProtocolAbort), "p1 must abort with no output"
    assert all(isinstance(res[i], ProtocolAbort) for i in honest), res
    assert seen & set(checks), seen


def _bump_send(eng, prefix, nth):
    """The party adds 1 (mod p for one-byte Z_p shares) to the first element of its nth
    sent message with a tag starting with ``prefix`` (not the hash copies): its copy of a
    share differs from the copy the other holder has."""
    honest = eng.ep.send
    state = {"n": 0}

    def send(peer, tag, *arrays):
        if tag.startswith(prefix) and not tag.endswith("/h"):
            state["n"] += 1
            if state["n"] == nth:
                a = arrays[0].copy()
                a[0] = (a[0] + 1) % P if a.dtype == np.uint8 else a[0] + a.dtype.type(1)
                arrays = (a,) + arrays[1:]
        return honest(peer, tag, *arrays)
    eng.ep.send = send


def _bump_zero(eng, name, nth, p=None):
    """The party adds 1 to its nth reshared product component (kept and sent alike): an
    additive error in a product it helps compute."""
    honest = getattr(eng, name)
    state = {"n": 0}

    def wrapped(shape, *args):
        z = honest(shape, *args).copy()
        state["n"] += 1
        if state["n"] == nth:
            z.reshape(-1)[0] = (z.reshape(-1)[0] + U64(1)) % U64(p) if p else eng.ring.reduce(z.reshape(-1)[0] + U64(1))
        return z
    setattr(eng, name, wrapped)


X32 = _boundary_values(FX32, 60)


BEFORE_D = {"zp-product", "bit-product", "beta-product"}     # products checked before d is opened


@pytest.mark.covers_check("falcon", "reconstruct-consistency")
def test_inconsistent_masked_value_is_caught_at_its_opening():
    """The opening of c = x + r with one holder's copy altered: the other holder's hash
    does not match (``reconstruct-consistency``)."""
    sh = _shares(FX32, X32)

    def setup(i, eng, mpc):
        if i == 1:
            _bump_send(eng, "fal/open/", 1)
    res = _run(FX32, True, lambda m, s: [m.relu(s)], sh, setup, mode="falcon")
    _assert_all_honest_abort(res, 1, ["reconstruct-consistency"])


@pytest.mark.covers_check("falcon", "malformed-share")
def test_out_of_range_zp_share_aborts():
    """p0 sends p1 a Z_p share (one byte) of the private compare's d that is not below p = 67."""
    sh = _shares(FX32, X32)
    sent = {"n": 0}

    def setup(i, eng, mpc):
        if i != 0:
            return
        honest = eng.ep.send

        def send(peer, tag, *arrays):
            if tag.startswith("fal/open/") and not tag.endswith("/h"):
                sent["n"] += 1
                if sent["n"] == 2:          # d, in Z_p (one byte a share)
                    assert arrays[0].dtype == np.uint8
                    a = arrays[0].copy()
                    a[0] = 200
                    arrays = (a,) + arrays[1:]
            return honest(peer, tag, *arrays)
        eng.ep.send = send
    res = _run(FX32, True, lambda m, s: [m.relu(s)], sh, setup, mode="pc")
    assert sent["n"] >= 2
    # its receiver (p1, the output party) aborts with no output
    assert isinstance(res[1], ProtocolAbort) and res[1].check == "malformed-share", res[1]


@pytest.mark.parametrize("mode,attack,adversary,checks", [
    ("pc", "open-c", 0, ["reconstruct-consistency"]),          # the masked value c = x + r
    ("pc", "open-d", 2, ["reconstruct-consistency"]),          # the private compare's product d
    ("pc", "zp-product", 1, ["multiplication-check"]),         # a product of the Z_p tree
    ("pc", "bit-product", 0, ["multiplication-check"]),        # x g: the bit applied to x
    ("falcon", "open-c", 1, ["reconstruct-consistency"]),
    ("falcon", "open-d", 0, ["reconstruct-consistency"]),
    ("falcon", "beta-product", 2, ["multiplication-check"]),   # (-1)^beta (X_i - Y_i), online
    ("falcon", "zp-product", 0, ["multiplication-check"]),
    ("falcon", "select-open", 2, ["reconstruct-consistency"]),  # the select's b xor c
    ("falcon", "select-product", 1, ["multiplication-check"]),  # the select's product x b
])
def test_deviation_in_the_comparison_aborts(mode, attack, adversary, checks):
    """An inconsistent share in an opening (c, d, the select's b xor c) is caught by the
    other holder's hash; an additive error in a product (beta products, Z_p tree, x g) by
    the delta check, which runs before d is opened: no honest party sends its share of d
    then; an error in the select's product (after d) by the check before the output."""
    sh = _shares(FX32, X32)
    sent = {i: [] for i in range(3)}

    def setup(i, eng, mpc):
        honest_send = eng.ep.send

        def record(peer, tag, *arrays):
            sent[i].append(tag)
            return honest_send(peer, tag, *arrays)
        eng.ep.send = record
        if i != adversary:
            return
        if attack == "open-c":
            _bump_send(eng, "fal/open/", 1)
        elif attack == "open-d":
            _bump_send(eng, "fal/open/", 2)
        elif attack == "select-open":
            _bump_send(eng, "fal/open/", 3)
        elif attack == "beta-product":
            _bump_zero(eng, "zero3_mod", 1, P)                # the first online Z_p round
        elif attack == "zp-product":
            _bump_zero(eng, "zero3_mod", 3, P)
        else:                                                 # the only online ring product
            _bump_zero(eng, "zero3", 1)
    res = _run(FX32, True, lambda m, s: [m.relu(s)], sh, setup, mode=mode)
    _assert_all_honest_abort(res, adversary, checks)
    if attack in BEFORE_D:
        for i in range(3):
            if i != adversary:
                opens = [t for t in sent[i] if t.startswith("fal/open/") and not t.endswith("/h")]
                assert len(opens) == 1, opens            # c only: d was never sent


@pytest.mark.parametrize("mode,where", [("pc", "preprocessing-product"), ("falcon", "preprocessing-product"),
                                        ("falcon", "select-preprocessing"), ("falcon", "zp-triple")])
def test_deviation_in_the_offline_phase_aborts(mode, where):
    """An error in a product of the comparison preprocessing or of the selects' masks
    (caught by the batch's check before use) or in a Z_p triple the party helps generate
    (cut or sacrifice)."""
    sh = _shares(FX32, X32)

    def party(i):
        def f(ep):
            with ep.phase("setup"):
                eng = Engine(ep, NAMES, i, FX32, True, PRG.for_tests(60 + i))
                eng.setup_keys()
            m = FalconMPC(eng, FX32, drelu=mode)
            with ep.phase("offline"):
                dry = FalconMPC(eng, FX32, dry_run=True, drelu=mode)
                dry.relu(rss.zeros(X32.shape))
                if i == 2 and where == "zp-triple":
                    _bump_zero(eng, "zero3_mod", 1, P)
                m.triples.prepare(dry.requests)
                if i == 2 and where == "preprocessing-product":
                    # the batch first reshares its own Z_p triples (one call), then its products
                    _bump_zero(eng, "zero3_mod", 2, P)
                m.pc.prepare(dry.pc_requests)
                if i == 2 and where == "select-preprocessing":
                    # the batch first reshares its own ring triples (one call), then its products
                    _bump_zero(eng, "zero3", 2)
                m.pc.prepare([], dry.sel_requests)
            with ep.phase("online"):
                y = m.relu(sh[i])
                m.flush()
                return eng.reveal_to(1, y)
        return f
    out = run_local({n: party(i) for i, n in enumerate(NAMES)}, timeout=120)
    res = [out[n] for n in NAMES]
    checks = ["triple-cut", "triple-sacrifice"] if where == "zp-triple" else ["multiplication-check"]
    _assert_all_honest_abort(res, 2, checks)


def test_whole_protocol_deviation_in_private_compare_aborts(monkeypatch):
    """Through ``run_party`` (digits MLP, malicious): p2 adds an error to a Z_p product of
    an online private compare; every honest party aborts and p1 gets no output."""
    from secinfer.ir.bundled import bundled_path, bundled_testset
    from secinfer.ir.onnx_import import load_model
    from secinfer.protocols.base import PartyJob
    from secinfer.protocols.registry import get
    g = load_model(bundled_path("digits-mlp"))
    x, _ = bundled_testset("digits-mlp")
    honest = Engine.zero3_mod

    def zero3_mod(self, shape, p):
        z = honest(self, shape, p)
        if self.me == 2 and self.ep._phase == "online" and not getattr(self, "_spoiled", False):
            self._spoiled = True
            z = z.copy()
            z.reshape(-1)[0] = (z.reshape(-1)[0] + U64(5)) % U64(p)
        return z
    monkeypatch.setattr(Engine, "zero3_mod", zero3_mod)
    spec = get("falcon")

    def party(k, role):
        def f(ep):
            job = PartyJob(role=role, security="malicious", fixed=FX32, prg=PRG.for_tests(80 + k),
                           model=g if role == "p0" else None, input=x[:4] if role == "p1" else None)
            return spec.run_party(role, ep, job)
        return f
    out = run_local({r: party(k, r) for k, r in enumerate(spec.roles)}, timeout=300)
    _assert_all_honest_abort([out[r] for r in spec.roles], 2, ["multiplication-check"])


@pytest.mark.parametrize("mode", MODES)
def test_opened_values_are_masked(mode):
    """What the comparison opens hides the sign: on small positive x (whose carry eta is
    almost always 0) the opened beta' = [d = 0] = eta xor beta is 1 about half the time, and
    a non-zero d takes many values of Z_p^* (the random multiplier); the opened c = x + r
    has its top bit (msb(x) xor rho xor eta) set about half the time (rho is random). "falcon":
    the select's opened b xor c (b = 1 here) is 1 about half the time too."""
    fx = FX32
    x = np.arange(1, 401, dtype=np.uint64)
    sh = _shares(fx, x)
    seen, bits, cs = {}, {}, {}

    def setup(i, eng, mpc):
        honest_open, honest_round = mpc.open_many, mpc.mult_open_round

        def open_many(opens):
            got = honest_open(opens)
            seen.setdefault(i, []).append(got[0])
            return got

        def mult_open_round(items, opens):
            outs, got = honest_round(items, opens)
            bits.setdefault(i, []).extend(v for (kind, _), v in zip(opens, got) if kind == "bit")
            cs.setdefault(i, []).extend(v for (kind, _), v in zip(opens, got) if kind == "a")
            return outs, got
        mpc.open_many, mpc.mult_open_round = open_many, mult_open_round
    res = _run(fx, False, lambda m, s: [m.relu(s)], sh, setup, mode=mode)
    assert all(not isinstance(r, Exception) for r in res), res
    d = seen[0][0]
    assert all(np.array_equal(seen[i][0], d) for i in range(3))
    assert 0.4 < np.mean(d == 0) < 0.6, np.mean(d == 0)
    assert len(np.unique(d[d != 0])) >= 50
    assert np.array_equal(res[1][0][0], x)
    (c,) = cs[0]
    assert 0.4 < np.mean(c >> U64(31)) < 0.6, np.mean(c >> U64(31))
    if mode == "falcon":
        (f,) = bits[0]
        assert all(np.array_equal(bits[i][0], f) for i in range(3)) and f.size == x.size
        assert 0.4 < np.mean(f) < 0.6, np.mean(f)
    else:
        assert not any(bits.values())
