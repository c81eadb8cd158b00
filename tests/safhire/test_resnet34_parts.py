"""ResNet-34's two obstacles (issue 18): a round that is an average pooling followed by a
convolution (read as two structured stages, ``convmap.Pool`` then the convolution), and
round outputs larger than memory (``outbuf.RoundOutput``: an unlinked private file)."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

from secinfer.ir import quantize as Q
from secinfer.ir import zoo
from secinfer.ir.convmap import ConvMap, Pool
from secinfer.protocols.safhire import linprod as LP
from tests.safhire.helpers import options, run, server_seed
from tests.safhire.qhelpers import blocks_and_head

Q53 = 9007199254781953            # rlwe-n11-q53's prime


@functools.lru_cache(maxsize=None)
def pool_resnet():
    """16x16x3: conv 3x3/2 + BN + ReLU, average pool 3x3/2 pad 1 (ResNet-34's stem shape),
    two basic blocks (the first one's shortcut is the pooled stem), GAP + FC."""
    net = zoo._Net("pool-resnet", 5, {})
    h = net.relu(net.conv_bn("input", 3, 4, 3, 2, 1, gain=1.0, fold=False))
    h = net.avgpool(h, 3, 2, 1)
    return blocks_and_head(net, h, 16, fold=False)


def _pooled(rng, k=3, s=2, p=1, h=9, ci=3, co=4, kc=3, sc=1, pc=1):
    hz = (h + 2 * p - k) // s + 1
    ho = (hz + 2 * pc - kc) // sc + 1
    pre = Pool(np.ones((ci, k, k), np.int64), (s, s), (p, p), (ci, h, h), (ci, hz, hz))
    return ConvMap(rng.integers(-9, 10, (co, ci, kc, kc)), (sc, sc), (pc, pc), (ci, h, h), (co, ho, ho), pre)


@pytest.mark.parametrize("h,sc", [(9, 1), (12, 1), (10, 2)])
def test_pool_then_conv_product_equals_its_matrix(h, sc):
    """ConvMap with a pooling stage: ``@`` (the oracle), ``tocsr`` and the server's product
    (plan, one-row tiles) give the same integers as Python-integer arithmetic."""
    rng = np.random.default_rng(h + sc)
    cm = _pooled(rng, h=h, sc=sc)
    m = cm.tocsr().toarray().astype(object)
    v = rng.integers(0, 64, (cm.shape[1], 3))
    assert np.array_equal(cm @ v, m.dot(v.astype(object)).astype(np.int64))
    # the composite row l1 is bounded by the plan's (limb widths depend on it)
    assert np.all(np.abs(m).sum(axis=1) <= cm.row_l1())
    p = LP.plan([cm], [None], cm.out_shape)
    assert p.kinds() == ["conv"] and p.blocks[0].conv.pre is not None
    x = [rng.integers(0, Q53, (cm.shape[1], 2), dtype=np.uint64),
         rng.integers(0, Q53, (cm.shape[1], 37), dtype=np.uint64)]
    whole = LP.product_mod(p, [x], Q53)
    want = m.dot(np.concatenate(x, 1).astype(object)) % Q53
    assert np.array_equal(whole.astype(object), want)
    ts = LP.tiles(p, cm.out_shape, 39, 1)                 # one output row per tile
    assert len(ts) == cm.out_shape[1]
    assert np.array_equal(np.sort(np.concatenate([t.rows for t in ts])), np.arange(p.m))
    for t in ts:
        part = LP.product_mod(t.plan, [[a[t.needs[0]] for a in x]], Q53)
        assert np.array_equal(part, whole[t.rows])


def test_pool_then_conv_is_read_structurally_and_equals_the_probed_map(monkeypatch):
    """The round average pool -> conv -> BN is read as Pool + ConvMap (not probed), its
    float map equals the probed one, and the quantized model keeps the two stages (the
    pooling as an integer sum, its 1/9 in the convolution's scale) through the qcache."""
    import io

    from secinfer.ir.quantize_store import load_quantized, save_quantized

    g = Q.batch_free(pool_resnet())
    cal = Q.calibration_inputs(g, None, 8)
    rounds_s, lin = Q.split_rounds(g)
    from secinfer.ir.float_exec import run_float_all

    env = run_float_all(g, cal, intermediates=True)
    cid = {0: g.inputs[0].name, **{r + 1: rd.result for r, rd in enumerate(rounds_s[:-1])}}
    shapes = {c: tuple(env[t].shape[1:]) for c, t in cid.items()}
    widths = {c: int(np.prod(s)) for c, s in shapes.items()}
    rd = rounds_s[1]
    got = Q._structured_map(g, lin, rd, cid, widths, shapes)
    assert got is not None
    mats, bias = got
    assert isinstance(mats[0], ConvMap) and mats[0].pre is not None
    probed, pbias = Q._probed_map(g, lin, rd, cid, widths, shapes)
    assert np.allclose(mats[0].tocsr().toarray(), probed[0].toarray(), rtol=1e-9, atol=1e-12)
    assert np.allclose(bias, pbias, rtol=1e-9, atol=1e-12)
    qm = Q.quantize(g, 12, cal)
    w = qm.rounds[1].weights[0]
    assert isinstance(w, ConvMap) and w.pre is not None and np.all(w.pre.weight == 1)
    f = io.BytesIO()
    save_quantized(qm, f)
    f.seek(0)
    back = load_quantized(f)
    w2 = back.rounds[1].weights[0]
    assert w2.pre is not None and np.array_equal(w2.kernel, w.kernel) and w2.geometry() == w.geometry()
    x = qm.quantize_input(cal[:2])
    assert np.array_equal(back.run_int(x[0]), qm.run_int(x[0]))


def _trace_run(g, x, **kw):
    res = run(g, x, options(trace=1, **kw))
    for role in ("server", "client"):
        assert not isinstance(res[role], BaseException), res[role]
    return res


@pytest.mark.parametrize("b,gamma", [(12, 0), (16, 2)])
def test_pool_resnet_equals_the_oracle_in_every_round_and_spilled_rounds_change_nothing(b, gamma, tmp_path):
    """The pool-then-conv model through the protocol equals its quantized oracle in every
    round; with every round's output spilled to disk (out_mb=0) and one-row tiles the
    decrypted values are the same bits, and the spill directory is left empty."""
    from secinfer.protocols.safhire.lwe import fast_available
    from secinfer.protocols.safhire.protocol import ServerRound, _config, quantized_model
    from secinfer.protocols.base import PartyJob

    if gamma and not fast_available():
        pytest.skip("gamma > 0 needs the HE core's partial trace extraction")
    g = pool_resnet()
    x = np.random.default_rng(4).uniform(-1, 1, (1, 3, 16, 16))
    spill = tmp_path / "spill"
    spill.mkdir()
    mem = _trace_run(g, x, b=b, gamma=gamma, out_mb="none")
    disk = _trace_run(g, x, b=b, gamma=gamma, out_mb=0, tile_mb="1e-9", spill_dir=str(spill))
    assert mem["server"].info["spilled_rounds"] == []
    R = mem["client"].info["rounds"]
    assert disk["server"].info["spilled_rounds"] == list(range(R))
    assert max(disk["server"].info["tiles"]) >= 4
    a, d = mem["client"].info, disk["client"].info
    assert a["finals"] == d["finals"]
    assert all(np.array_equal(u, v) for u, v in zip(a["trace"], d["trace"]))
    assert os.listdir(spill) == []
    # every round equals the quantized oracle (rows in the client's shuffled order)
    opts = options(b=b, gamma=gamma)
    qm = quantized_model(g, _config(PartyJob("server", "semi-honest", None, None, options=opts)), opts)
    assert any(isinstance(w, ConvMap) and w.pre is not None for rd in qm.rounds for w in rd.weights)
    core = ServerRound(qm, None, 0, True)
    tr: list = []
    final = qm.run_int(qm.quantize_input(x)[0], tr)
    for r in range(R):
        assert np.array_equal(np.asarray(d["trace"][r]), tr[r][core.out_rows(server_seed(), 0, r)]), r
    assert np.array_equal(d["finals"][0], final)


def test_an_aborted_session_leaves_no_spill_file(tmp_path):
    """The client vanishes after round 2 (its round-3 message never comes): the server
    fails, and the spill directory holds nothing (the file is unlinked when made)."""
    from secinfer.errors import SecinferError

    class Drop:
        def __init__(self, ep):
            self.ep, self.n = ep, 0

        def send(self, to, tag, *a, **k):
            if tag == "sh/x":
                self.n += 1
                if self.n == 3:
                    raise RuntimeError("client gone")
            return self.ep.send(to, tag, *a, **k)

        def __getattr__(self, k):
            return getattr(self.ep, k)

    spill = tmp_path / "spill"
    spill.mkdir()
    seen = []
    orig = os.open

    def spy(path, *a, **k):
        if str(path).startswith(str(spill)):
            seen.append(path)
        return orig(path, *a, **k)
    import secinfer.protocols.safhire.outbuf as OB

    OB.os.open = spy
    try:
        res = run(pool_resnet(), np.zeros((1, 3, 16, 16)), options(out_mb=0, spill_dir=str(spill)), client_ep=Drop)
    finally:
        OB.os.open = orig
    assert isinstance(res["client"], BaseException)
    assert isinstance(res["server"], (BaseException, SecinferError))
    assert len(seen) >= 2                        # rounds 1 and 2 spilled
    assert os.listdir(spill) == []


def test_out_mb_and_spill_dir_are_checked():
    from secinfer.errors import ConfigError
    from secinfer.protocols.base import PartyJob
    from secinfer.protocols.safhire.protocol import _config

    for bad in ({"out_mb": "lots"}, {"out_mb": "-1"}, {"spill_dir": "/nonexistent/dir"}):
        with pytest.raises(ConfigError):
            _config(PartyJob("server", "semi-honest", None, None, options=options(**bad)))


def test_batched_calibration_keeps_the_same_quantization(monkeypatch):
    """Large models calibrate CALIB_BATCH inputs at a time keeping only the extremes of the
    round tensors (ResNet-34: 4.3 GB of float tensors otherwise): the same integer model."""
    from secinfer.ir.convmap import ConvMap as CM

    g = Q.batch_free(pool_resnet())
    cal = Q.calibration_inputs(g, None, 20)
    whole = Q.quantize(g, 8, cal)
    from secinfer.ir import calib_env as CE

    monkeypatch.setattr(CE, "CALIB_WHOLE_BYTES", 0)
    env = CE._calib_env(g, cal, False)
    assert any(isinstance(v, CE._Stat) for v in env.values())
    batched = Q.quantize(g, 8, cal)
    assert whole.calib == batched.calib
    for a, b in zip(whole.rounds, batched.rounds):
        assert a.eta == b.eta and a.s_acc == b.s_acc and np.array_equal(a.bias, b.bias)
        for wa, wb in zip(a.weights, b.weights):
            wa = wa.tocsr() if isinstance(wa, CM) else wa
            wb = wb.tocsr() if isinstance(wb, CM) else wb
            assert (wa != wb).nnz == 0
