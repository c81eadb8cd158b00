"""The LTEE's announced requests bound before the query (``ltee_bound``): a request byte-equal
to an announced one runs its prepared dispatch and answers exactly as the general path (the
same results, operation counts and AES total), any other request goes the general path, and
every check on the device's live state still refuses on the bound path
(docs/protocols/stamp.md, "Fourteenth pass")."""

import json

import numpy as np
import pytest

from secinfer.arith.fixed import FixedPointConfig
from secinfer.errors import FixedPointRangeError
from secinfer.protocols.stamp import ltee_ahead, ltee_bound, ltee_device

from test_ltee_ahead import _device, _expect, _requests, _same, _serve


def _dev(index, bits):
    d = _device(index)
    d.cfg = FixedPointConfig("device", bits, 13)
    return d


def _no_general(monkeypatch):
    """The general handlers of ``eval`` and ``output`` fail: an answer came from the bound path."""
    def boom(self, arrays):
        raise AssertionError("general path")
    monkeypatch.setitem(ltee_device.COMMANDS, "eval", boom)
    monkeypatch.setitem(ltee_device.COMMANDS, "output", boom)


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("index", [0, 1, 2])
def test_bound_requests_answer_as_the_general_path(index, bits, monkeypatch):
    reqs = _requests()
    ref, ref_totals = _serve(_dev(index, bits), reqs)
    dev = _dev(index, bits)
    _expect(dev, reqs)
    assert len(dev._bound) == 3 + (index == dev.out_party)
    assert dev._bound_words > 0
    _no_general(monkeypatch)
    got, totals = _serve(dev, reqs)
    _same(got, ref)
    assert totals == ref_totals
    assert not dev._bound and dev._bound_words == 0
    assert not dev._kept_streams and dev._kept_words == 0     # ltee_ahead's expansions taken too


def _variants(meta, raw):
    """Requests unequal to the announced (meta, spec): another spec's bytes for the same spec,
    another slot, another mode's field, the meta as int32 or 2-d."""
    spec = json.loads(bytes(raw))
    m_sub = meta.copy()
    m_sub[3] += 1
    return [(meta, np.frombuffer(json.dumps(spec, indent=1).encode(), np.uint8)), (m_sub, raw),
            (meta.astype(np.int32), raw), (meta.reshape(2, 3), raw)]


@pytest.mark.parametrize("k", range(4))
def test_a_request_unequal_to_the_announced_one_goes_the_general_path(k):
    reqs = _requests()
    code, meta, raw, payload = reqs[0]
    vmeta, vraw = _variants(meta, raw)[k]
    ref = ltee_device.serve(_device(0), "eval", [vmeta, vraw, payload])
    dev = _device(0)
    _expect(dev, reqs)
    n = len(dev._bound)
    got = ltee_device.serve(dev, "eval", [vmeta, vraw, payload])
    assert got[0] == ref[0]
    _same([got[1]], [ref[1]])
    assert len(dev._bound) == n        # the announced record is still there, unused


def test_the_bound_path_keeps_every_refusal(monkeypatch):
    reqs = _requests()
    _no_general(monkeypatch)
    dev = _device(1)
    _expect(dev, reqs)
    (_, m0, r0, p0), (_, m1, r1, p1), (_, m2, r2, p2), (_, mo, ro, po) = reqs
    # an older operation after a newer one: stale counter
    assert ltee_device.serve(dev, "eval", [m1, r1, p1])[0] == "ok"
    tag, res = ltee_device.serve(dev, "eval", [m0, r0, p0])
    assert tag == "refused" and bytes(res[0]).startswith(b"stale-counter")
    # a payload of the wrong shape or type
    for bad in (p2[:-1], p2.astype(np.int64), p2.reshape(1, -1)):
        dev2 = _device(1)
        _expect(dev2, reqs)
        tag, res = ltee_device.serve(dev2, "eval", [m2, r2, bad])
        assert tag == "refused" and bytes(res[0]).startswith(b"bad-request"), bytes(res[0])
        assert not any(k[1] == m2.tobytes() for k in dev2._bound)      # taken: a retry goes the general way
    # the range guard's refusal from the chain
    dev3 = _device(1)
    _expect(dev3, reqs)
    key = ("eval", m2.tobytes(), r2.tobytes())

    def out_of_range(x, cnt):
        raise FixedPointRangeError("a sum left the ring")
    dev3._bound[key].chain = out_of_range
    tag, res = ltee_device.serve(dev3, "eval", [m2, r2, p2])
    assert tag == "refused" and bytes(res[0]).startswith(b"range")
    # the output step: at most once per session
    dev4 = _device(1)
    _expect(dev4, reqs)
    dev4.output_done = True
    tag, res = ltee_device.serve(dev4, "output", [mo, ro, po])
    assert tag == "refused" and bytes(res[0]).startswith(b"policy")
    # not initialised (the keys gone): refused before anything
    dev5 = _device(1)
    _expect(dev5, reqs)
    dev5._prf.clear()
    tag, res = ltee_device.serve(dev5, "eval", [m0, r0, p0])
    assert tag == "refused" and bytes(res[0]).startswith(b"not-initialised")


def test_nothing_is_bound_that_the_general_path_would_refuse_or_ahead_did_not_keep(monkeypatch):
    reqs = _requests()
    dev = _device(0)                                   # not the output party: no output record
    _expect(dev, reqs)
    assert all(k[0] == "eval" for k in dev._bound) and len(dev._bound) == 3
    _expect(dev, reqs[:1])                              # a new announcement replaces the records
    assert len(dev._bound) == 1
    mal = _device(1)
    mal.malicious = True
    _expect(mal, reqs)
    assert not mal._bound
    monkeypatch.setattr(ltee_ahead, "AHEAD_MAX_WORDS", 200)   # ltee_ahead keeps only the first ones
    small = _device(1)
    _expect(small, reqs)
    assert 0 < len(small._bound) < 4
    got, _ = _serve(small, reqs)
    ref, _ = _serve(_device(1), reqs)
    _same(got, ref)
    monkeypatch.setattr(ltee_bound, "BOUND_MAX_WORDS", 0)
    none = _device(1)
    _expect(none, reqs)
    assert not none._bound


# ---- in the protocol -----------------------------------------------------------------------
from secinfer.arith.fixed import FX32  # noqa: E402
from secinfer.bench.peers_suite import build_workload, workload_input  # noqa: E402
from secinfer.ir.fixed_exec import run_fixed  # noqa: E402
from secinfer.ir.onnx_import import load_model  # noqa: E402

from test_stamp_models import run_model  # noqa: E402


@pytest.mark.parametrize("wl", ["W3", "W4"])
@pytest.mark.parametrize("mode", ["inprocess", "process"])
def test_protocol_outputs_with_bound_requests(wl, mode, monkeypatch):
    """W3 and W4 at batch 1, LTEE in process and in its own process: the output is the
    reference's and the online transactions are unchanged; in process, every online request of
    p0 and p1 ran bound and no record is left."""
    made, hits = [], []
    start, run = ltee_device.start, ltee_bound.BoundRequests.run_bound

    def spy():
        d = start()
        made.append(d)
        return d

    def counted(self, cmd, arrays):
        r = run(self, cmd, arrays)
        hits.append((self.index, cmd, r is not None))
        return r
    monkeypatch.setattr(ltee_device, "start", spy)
    monkeypatch.setattr(ltee_bound.BoundRequests, "run_bound", counted)
    g = load_model(build_workload(wl))
    x = workload_input(wl, 1)
    ref = run_fixed(g.with_batch(1), x, FX32)
    res = run_model(g, x, "semi-honest", options={"stamp_ltee": mode})
    assert np.array_equal(res["p1"].output_ring, ref)
    on = [res[r].info["bus"]["online_transactions"] for r in ("p0", "p1", "p2")]
    assert on == [{"W3": 2, "W4": 1}[wl], 1, 0]
    if mode == "inprocess":
        online = [h for h in hits if h[1] in ("eval", "output")]
        assert online and all(h[2] for h in online) and len(online) == sum(on)
        assert all(not d._bound for d in made)
