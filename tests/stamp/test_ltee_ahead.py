"""The LTEE's announced requests (``cmd_expect``, ``ltee_ahead``): the stream seeds and
expansions of an announced ``eval`` / ``output`` are computed before the query; the answers,
operation counts and AES totals equal a device that was told nothing, bit for bit; a wrong
announcement changes nothing but leaves its values unused; the announcement changes no
counter and releases nothing; malformed ones are refused (docs/protocols/stamp.md, "Twelfth
pass")."""

import json
import math

import numpy as np
import pytest

from secinfer.arith.fixed import FixedPointConfig
from secinfer.crypto.prg import PRF
from secinfer.protocols.rep3 import kernels
from secinfer.protocols.stamp import ltee_ahead, ltee_device
from secinfer.protocols.stamp.ltee_counters import Refused

SLOTS = ltee_device.SLOTS
RELU = {"shape": [1, 16], "params": [[16]], "steps": [
    {"op": "trunc"}, {"op": "bias", "axis": 1, "param": 0},
    {"op": "node", "node": {"op": "Relu", "inputs": ["x"], "outputs": ["y"], "attrs": {}, "name": "r"}}]}
OUT = {"shape": [1, 10], "params": [[10]], "steps": [{"op": "trunc"}, {"op": "bias", "axis": 1, "param": 0}]}


def _device(index: int, out_party: int = 1):
    d = ltee_device.Device()
    d.cmd_ready([])
    d.index, d.out_party, d.malicious, d.session = index, out_party, False, bytes(16)
    d.cfg = FixedPointConfig("device", 32, 13)
    for j in range(3):
        d._keys[j] = bytes([j + 7]) * 16
        d._prf[j] = PRF(d._keys[j])
    return d


def _raw(spec):
    return np.frombuffer(json.dumps(spec).encode(), np.uint8)


def _n_in(spec):
    return math.prod(spec["shape"]) + kernels.n_params(spec)


def _requests(op0: int = 3):
    """Online requests of one device: evaluations on both paths (mode 0: replicated, 1:
    3-out-of-3) in slots 0 and 2, then the output step; each (code, meta, spec, payload)."""
    rng = np.random.default_rng(11)
    out, ctr = [], 1000
    for k, (mode, sub) in enumerate([(1, 0), (0, 2), (1, 4)]):
        n_op = SLOTS * 40
        meta = np.array([op0 + k, n_op, ctr, sub, mode, 0], np.int64)
        out.append((0, meta, _raw(RELU), rng.integers(0, 1 << 32, _n_in(RELU), dtype=np.uint64)))
        ctr += n_op
    meta = np.array([op0 + 3, SLOTS * 20, ctr, 0, 0], np.int64)
    out.append((1, meta, _raw(OUT), rng.integers(0, 1 << 32, _n_in(OUT), dtype=np.uint64)))
    return out


def _serve(dev, reqs):
    answers = []
    for code, meta, raw, payload in reqs:
        if code == 1 and dev.index != dev.out_party:
            continue
        tag, res = ltee_device.serve(dev, ltee_ahead.EXPECTABLE[code], [meta, raw, payload])
        assert tag == "ok", bytes(res[0])
        answers.append(res)
    return answers, (dev.cnt.int_ops, dev.cnt.float_ops, dev.cnt.exp_ops, dev.aes_bytes)


def _expect(dev, reqs):
    codes = np.array([c for c, _, _, _ in reqs], np.int64)
    return dev.cmd_expect([codes] + [a for _, m, r, _ in reqs for a in (m, r)])


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y)
        for u, v in zip(x, y):
            assert u.dtype == v.dtype and np.array_equal(u, v)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_announced_requests_answer_as_unannounced(index):
    reqs = _requests()
    ref, ref_totals = _serve(_device(index), reqs)
    dev = _device(index)
    before = dev.aes_bytes
    assert _expect(dev, reqs) == []
    assert dev.aes_bytes == before and dev.op_last == -1 and not dev.reserved   # nothing charged or begun
    assert dev._kept_streams and dev._kept_words == sum(v.size for v in dev._kept_streams.values())
    kept = dict(dev._kept_streams)
    got, totals = _serve(dev, reqs)
    _same(got, ref)
    assert totals == ref_totals
    assert not dev._kept_streams and dev._kept_words == 0     # every expansion kept was taken
    # and each kept value is the expansion it is keyed by
    for (seed, n), v in kept.items():
        assert np.array_equal(v, ltee_device.expand(seed, n))


def test_a_wrong_announcement_changes_nothing():
    reqs = _requests()
    ref, ref_totals = _serve(_device(0), reqs)
    wrong = []
    for code, meta, raw, payload in reqs:
        m = meta.copy()
        m[2] += SLOTS     # another counter: other seeds
        wrong.append((code, m, raw, payload))
    dev = _device(0)
    _expect(dev, wrong)
    n_kept = len(dev._kept_streams)
    assert n_kept
    got, totals = _serve(dev, reqs)
    _same(got, ref)
    assert totals == ref_totals
    assert len(dev._kept_streams) == n_kept     # nothing of it was used


def test_an_announcement_begins_nothing_and_a_stale_request_is_still_refused():
    reqs = _requests()
    dev = _device(0)
    _serve(dev, reqs[:2])
    ctr, op_last = dict(dev.ctr), dev.op_last
    _expect(dev, reqs)                       # announces operations already run, among others
    assert dev.ctr == ctr and dev.op_last == op_last and not dev.reserved
    code, meta, raw, payload = reqs[0]       # an older operation: refused as before
    tag, res = ltee_device.serve(dev, "eval", [meta, raw, payload])
    assert tag == "refused" and bytes(res[0]).startswith(b"stale-counter")


def test_a_new_announcement_replaces_the_old_and_the_memory_is_bounded(monkeypatch):
    reqs = _requests()
    dev = _device(0)
    _expect(dev, reqs[:1])
    first = set(dev._kept_streams)
    _expect(dev, reqs[1:2])
    assert not first & set(dev._kept_streams)
    monkeypatch.setattr(ltee_ahead, "AHEAD_MAX_WORDS", 40)
    _expect(dev, reqs)
    assert 0 < dev._kept_words <= 40
    ref, _ = _serve(_device(0), reqs)
    got, _ = _serve(dev, reqs)
    _same(got, ref)


def test_malformed_announcements_are_refused():
    dev = _device(0)
    (code, meta, raw, _) = _requests()[0]
    one = np.array([0], np.int64)
    for bad in ([], [one], [one, meta], [np.array([0], np.int32), meta, raw], [np.array([2], np.int64), meta, raw],
                [np.array([-1], np.int64), meta, raw], [one, meta.astype(np.uint64), raw], [one, meta[:4], raw],
                [one, meta, np.frombuffer(b"{not json", np.uint8)], [one, meta, np.zeros(3, np.int64)],
                [one, meta, _raw({"shape": [1], "steps": [{"op": "nope"}]})],
                [np.zeros(ltee_ahead.EXPECT_MAX + 1, np.int64)] + [meta, raw] * (ltee_ahead.EXPECT_MAX + 1)):
        with pytest.raises(Refused):
            dev.cmd_expect(bad)
    with pytest.raises(Refused) as e:       # before the keys exist
        ltee_device.Device().cmd_expect([one, meta, raw])
    assert e.value.code == "not-initialised"
    tag, _ = ltee_device.serve(dev, "expect", [one, meta])   # over the dispatch: a refusal
    assert tag == "refused"


# ---- in the protocol: the hosts announce their online requests with the prefetch -------------
from secinfer.arith.fixed import FX32  # noqa: E402
from secinfer.bench.peers_suite import build_workload, workload_input  # noqa: E402
from secinfer.ir.fixed_exec import run_fixed  # noqa: E402
from secinfer.ir.onnx_import import load_model  # noqa: E402

from test_stamp_models import run_model  # noqa: E402

ROLES = ("p0", "p1", "p2")


@pytest.mark.parametrize("wl", ["W3", "W4"])
@pytest.mark.parametrize("ship", [True, False])
def test_hosts_announce_their_online_requests_and_the_devices_use_them(wl, ship, monkeypatch):
    """W3 and W4 at batch 1 (devices in the hosts' process, so they can be looked at): p0
    announces its evaluations, p1 its output step, p2 nothing (option ``stamp_ship_specs``);
    every expansion a device kept was taken online; the output is the reference's; the
    online bus bytes and transactions do not change."""
    made = []
    start = ltee_device.start

    def spy():
        d = start()
        made.append(d)
        return d
    monkeypatch.setattr(ltee_device, "start", spy)
    g = load_model(build_workload(wl))
    x = workload_input(wl, 1)
    ref = run_fixed(g.with_batch(1), x, FX32)
    res = run_model(g, x, "semi-honest", options={"stamp_ship_specs": ship, "stamp_ltee": "inprocess"})
    assert np.array_equal(res["p1"].output_ring, ref)
    kinds = {r: res[r].info["bus"]["by_kind"] for r in ROLES}
    assert [kinds[r].get("expect", [0, 0, 0])[2] for r in ROLES] == ([1, 1, 0] if ship else [0, 0, 0])
    assert len(made) == 3
    assert all(not d._kept_streams and d._kept_words == 0 for d in made)
    if ship:
        assert sum(bool(d._kept_seeds) for d in made) == 2
    on = [(res[r].info["bus"]["online_bytes"], res[r].info["bus"]["online_transactions"]) for r in ROLES]
    assert on[2] == (0, 0) and on[0][1] == {"W3": 2, "W4": 1}[wl] and on[1][1] == 1


def test_the_device_spins_after_an_online_request_unless_it_was_the_last_announced():
    dev = _device(0)
    assert all(dev.spin_after(c) for c in ("eval", "output", "batch", "eval"))   # nothing announced
    reqs = _requests()                                    # three evaluations and an output step
    _expect(dev, reqs)
    assert dev.spin_after("batch") and dev.spin_after("stats")    # not announced kinds: no count
    assert [dev.spin_after(c) for c in ("eval", "eval", "eval")] == [True, True, True]
    assert dev.spin_after("output") is False
    assert dev.spin_after("eval") is False and dev.spin_after("batch") is False   # (nothing left)
    _expect(dev, reqs[:1])                                # a new announcement counts anew
    assert dev.spin_after("eval") is False


def test_a_host_announces_at_most_expect_max_requests():
    from secinfer.protocols.stamp.ltee import expect_arrays
    code, meta, raw, _ = _requests()[0]
    arrays = expect_arrays([(0, meta, raw)] * (ltee_ahead.EXPECT_MAX + 5))
    assert arrays[0].shape == (ltee_ahead.EXPECT_MAX,) and len(arrays) == 1 + 2 * ltee_ahead.EXPECT_MAX
    dev = _device(0)
    assert dev.cmd_expect(arrays) == [] and dev._left == ltee_ahead.EXPECT_MAX
