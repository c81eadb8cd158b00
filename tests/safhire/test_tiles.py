"""Structured round maps (``secinfer.ir.convmap``) and the server's tiled rounds: the maps
read from the layers equal the probed ones, the tiles' products equal the whole product,
and a run with a forced tiny tile gives the same bits as whole rounds."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from secinfer.ir import quantize as Q
from secinfer.ir.convmap import ConvMap
from secinfer.protocols.safhire import linprod as LP
from tests.safhire.helpers import options, run
from tests.safhire.qhelpers import tiny_resnet

Q53 = 9007199254781953            # rlwe-n11-q53's prime


@pytest.mark.parametrize("k,s,p,h", [(3, 1, 1, 7), (3, 2, 1, 8), (1, 2, 0, 6), (7, 2, 3, 9), (4, 4, 0, 8), (3, 1, 0, 5)])
def test_convmap_product_equals_its_matrix(k, s, p, h):
    rng = np.random.default_rng(k * 100 + s * 10 + p)
    ho = (h + 2 * p - k) // s + 1
    cm = ConvMap(rng.integers(-9, 10, (3, 2, k, k)), (s, s), (p, p), (2, h, h), (3, ho, ho))
    v = rng.integers(-50, 51, (2 * h * h, 4))
    want = cm.tocsr().toarray().astype(object).dot(v.astype(object))
    assert np.array_equal(cm @ v, want.astype(np.int64))
    assert np.array_equal(cm @ v[:, 0], want[:, 0].astype(np.int64))
    assert cm.nnz == cm.tocsr().nnz
    big = v * (1 << 40)                               # beyond float64's exact range: integer path
    assert np.array_equal(cm @ big, (cm.tocsr().toarray().astype(object).dot(big.astype(object))).astype(np.int64))


def _resnet16():
    from secinfer.ir import zoo
    from secinfer.ir.onnx_import import load_model

    net = zoo._Net("resnet-16px", 0, {})
    x_shape, out, out_shape = zoo._resnet(net, 1, [1, 1], [4, 8], "cifar", 16, 3, fold_bn=False)
    return Q.batch_free(load_model(net.finish(x_shape, out, out_shape).SerializeToString()))


@pytest.mark.parametrize("model", ["resnet16", "tiny"])
def test_structured_maps_equal_probed_maps(model, monkeypatch):
    """Read from the layers (conv, batch norm, residual add, 1x1 strided shortcut, global
    average pool + Gemm head) or probed: the same integer model, bit for bit."""
    g = _resnet16() if model == "resnet16" else Q.batch_free(tiny_resnet())
    cal = Q.calibration_inputs(g, None, 16)
    read = []
    orig = Q._structured_map

    def spy(*a, **k):
        m = orig(*a, **k)
        read.append(m is not None)
        return m
    monkeypatch.setattr(Q, "_structured_map", spy)
    structured = Q.quantize(g, 12, cal)
    assert all(read), read
    assert all(isinstance(w, ConvMap) for rd in structured.rounds for w in rd.weights if w.nnz)
    monkeypatch.setattr(Q, "_structured_map", lambda *a, **k: None)
    probed = Q.quantize(g, 12, cal)
    for a, b in zip(structured.rounds, probed.rounds):
        assert a.eta == b.eta and a.worst == b.worst and np.array_equal(a.bias, b.bias)
        for wa, wb in zip(a.weights, b.weights):
            wa = wa.tocsr() if isinstance(wa, ConvMap) else wa
            assert wa.shape == wb.shape and (wa != wb).nnz == 0


def test_a_misread_layer_falls_back_to_probing(monkeypatch):
    """The structured map is checked against the float graph: a wrong one is not used."""
    from secinfer.ir import convmap

    g = _resnet16()
    orig = convmap.read_round

    def wrong(*a, **k):
        got = orig(*a, **k)
        if got is None:
            return None
        mats, bias = got
        return mats, bias + 0.5
    monkeypatch.setattr(convmap, "read_round", wrong)
    qm = Q.quantize(g, 12, Q.calibration_inputs(g, None, 8))
    assert not any(isinstance(w, ConvMap) for rd in qm.rounds for w in rd.weights)


def _rand_x(rng, n, cols):
    return [rng.integers(0, Q53, (n, 3), dtype=np.uint64), rng.integers(0, Q53, (n, cols - 3), dtype=np.uint64)]


def test_tiles_cover_the_round_and_equal_the_whole_product():
    """A residual round (3x3 conv of one source + 1x1 stride-2 shortcut of another + an
    identity term) cut into one-row bands: every output row once, the same residues."""
    rng = np.random.default_rng(3)
    a = ConvMap(rng.integers(-7, 8, (4, 4, 3, 3)), (1, 1), (1, 1), (4, 5, 6), (4, 5, 6))
    b = ConvMap(rng.integers(-7, 8, (4, 2, 1, 1)), (2, 2), (0, 0), (2, 10, 12), (4, 5, 6))
    ident = ConvMap(np.eye(4, dtype=np.int64)[:, :, None, None], (1, 1), (0, 0), (4, 5, 6), (4, 5, 6))
    p = LP.plan([a, b, ident], [None, None, None], (4, 5, 6))
    assert p.kinds() == ["conv", "conv", "sparse"]
    xs = [_rand_x(rng, w.shape[1], 9) for w in (a, b, ident)]
    whole = LP.product_mod(p, xs, Q53)
    want = sum(w.tocsr().toarray().astype(object).dot(np.concatenate(x, 1).astype(object))
               for w, x in zip((a, b, ident), xs)) % Q53
    assert np.array_equal(whole.astype(object), want)
    ts = LP.tiles(p, (4, 5, 6), 9, 1)                # a 1-byte budget: one output row per tile
    assert len(ts) == 5
    seen = np.concatenate([t.rows for t in ts])
    assert np.array_equal(np.sort(seen), np.arange(p.m))
    for t in ts:
        part = LP.product_mod(t.plan, [[x[0][n], x[1][n]] for x, n in zip(xs, t.needs)], Q53)
        assert np.array_equal(part, whole[t.rows])
    assert len(LP.tiles(p, (4, 5, 6), 9, None)) == 1
    assert len(LP.tiles(p, (4, 5, 6), 9, 1 << 30)) == 1


@pytest.mark.parametrize("b,gamma", [(16, 0), (12, 2)])
def test_forced_tiny_tiles_give_the_same_bits_as_whole_rounds(b, gamma):
    """The tiny ResNet (max pooling, residual additions, a strided shortcut) with one output
    row per tile and every round's output held on disk (out_mb=0, ``outbuf``), and with
    whole rounds in memory: the same decrypted values in every round."""
    from secinfer.protocols.safhire.lwe import fast_available

    if gamma and not fast_available():
        pytest.skip("gamma > 0 needs the HE core's partial trace extraction")
    g = tiny_resnet()
    x = np.random.default_rng(9).uniform(-1, 1, (1, 3, 8, 8))
    got = {}
    for tile, out_mb in (("none", "none"), ("1e-9", "0")):
        res = run(g, x, options(b=b, gamma=gamma, trace=1, tile_mb=tile, out_mb=out_mb))
        assert not isinstance(res["server"], BaseException), res["server"]
        got[tile] = res["client"].info
        tiles = res["server"].info["tiles"]
        assert max(tiles) == 1 if tile == "none" else max(tiles) >= 4, tiles
        spilled = res["server"].info["spilled_rounds"]
        assert spilled == ([] if out_mb == "none" else list(range(len(tiles)))), spilled
    assert got["none"]["finals"] == got["1e-9"]["finals"]
    assert all(np.array_equal(u, v) for u, v in zip(got["none"]["trace"], got["1e-9"]["trace"]))
    assert got["1e-9"]["rounds"] == 7            # 6 + the pooling round (issue 18)


@pytest.mark.parametrize("lo,hi", [(0, 63), (-31, 31)])
def test_worst_bound_is_attained_and_never_exceeded(lo, hi):
    """The accumulator bound the ring's Delta is chosen by: no in-range input exceeds it,
    and the extreme input (hi where W > 0, lo where W < 0, or the reverse) attains it."""
    rng = np.random.default_rng(lo + 100)
    a = ConvMap(rng.integers(-20, 21, (3, 2, 3, 3)), (1, 1), (1, 1), (2, 5, 5), (3, 5, 5))
    b = sp.csr_matrix(rng.integers(-5, 6, (75, 10)) * (rng.random((75, 10)) < 0.3))
    bias = rng.integers(-300, 301, 75)
    bound = Q.worst_bound([a, b], [0, 1], bias, {0: (lo, hi), 1: (-7, 7)})
    wa, wb = a.toarray(), b.toarray()
    best = 0
    for sign in (1, -1):
        for r in range(75):
            va = np.where(sign * wa[r] > 0, hi, lo)
            vb = np.where(sign * wb[r] > 0, 7, -7)
            best = max(best, abs(int(wa[r] @ va + wb[r] @ vb + bias[r])))
    assert bound == best
    for _ in range(20):
        v = rng.integers(lo, hi + 1, 50)
        u = rng.integers(-7, 8, 10)
        assert np.max(np.abs(wa @ v + wb @ u + bias)) <= bound


@pytest.mark.parametrize("backend,gamma", [("classic", 0), ("fast", 0), ("fast", 2)])
def test_extract_at_equals_the_whole_extraction_selected(backend, gamma, monkeypatch):
    """A tile's extraction (any positions, any order, across chunks) gives the members the
    whole extraction has at those positions."""
    from secinfer.crypto import he
    from secinfer.protocols.safhire import lwe as L

    if backend == "fast" and not L.fast_available():
        pytest.skip("no fast backend")
    monkeypatch.setattr(L, "backend", lambda g: backend)
    P = he.get_params("ckks-n10-insecure", allow_insecure=True)
    kp = P.keygen()
    v = np.arange(2 * P.n + 5) % 23 - 11
    cts = L.encrypt(P, v, kp.sk, 30, gamma)
    whole = L.extract(P, cts, len(v), gamma)
    pos = np.random.default_rng(1).permutation(len(v))[:300]
    part = L.extract_at(P, cts, pos, gamma)
    assert np.array_equal(part.b, whole.b[pos]) and np.array_equal(part.a, whole.a[pos])
    L.close_all(cts)
