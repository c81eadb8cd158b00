"""Semi-honest STAMP, option ``stamp_online_plan`` (``online_plan``): each party's online steps
compiled offline from the warm run into a flat list. It changes nothing any party or device
sees: with the plan and without (same host seeds) every party sends the same messages in the
same order (peer, tag, sizes; bytes wherever two runs agree), the meters, rounds, bus traffic,
device operation counts and the backend's counts are the same, every mask expanded ahead is
taken, and the output equals the fixed-point oracle. Where the plan does not cover a run (a
batch split across the LTEEs, a state moved after compiling, a spec that is not the dry run's,
malicious security, the option off) the unplanned path runs, exact."""

import numpy as np
import pytest

from secinfer.arith.fixed import FX32
from secinfer.bench.peers_suite import build_workload, workload_input
from secinfer.errors import ProtocolError
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model
from secinfer.protocols.stamp import online_plan, protocol
from stamp_harness import run_recorded  # tests/stamp helper

ROLES = ("p0", "p1", "p2")
_COUNTS = ("device_calls", "products", "sigma_reused", "rho_reused", "output_fused", "rho_from_device",
           "premultiplied")


def _run(graph, x, options, security="semi-honest"):
    return run_recorded(graph, x, options, security, seed=50)


def _seen(info):
    """What a party's run shows apart from time: meters per tag, rounds, bus, device counts."""
    b = info["bus"]
    m = info["meter"]
    return (m["by_tag"], m["phases"]["online"]["rounds"], b["to_device"], b["from_device"], b["online_bytes"],
            b["online_transactions"], b["preprocessing_bytes"], sorted(map(tuple, b["by_kind"].items())),
            {k: v for k, v in info["device_ops"].items() if k != "emulation_busy_s"},
            {k: info[k] for k in _COUNTS}, info["expanded_unused"], info["warmed"])


def _same_as_unplanned(g, x, options, planned):
    ref = run_fixed(g.with_batch(x.shape[0]), x, FX32)
    on, sent_on = _run(g, x, options)
    off, sent_off = _run(g, x, dict(options, stamp_online_plan=False))
    again, sent_again = _run(g, x, options)
    for res in (on, off, again):
        assert np.array_equal(res["p1"].output_ring, ref)
        assert [res[r].info["expanded_unused"] for r in ROLES] == [0, 0, 0]
    assert [on[r].info["planned"] for r in ROLES] == [planned] * 3
    assert [again[r].info["planned"] for r in ROLES] == [planned] * 3
    assert [off[r].info["planned"] for r in ROLES] == [False] * 3
    for r in ROLES:
        assert [(p, t, tuple(len(b) for b in bs)) for p, t, bs in sent_on[r]] == \
               [(p, t, tuple(len(b) for b in bs)) for p, t, bs in sent_off[r]]
        # byte for byte wherever two runs with the plan agree (the LTEEs' keys are fresh per
        # run, so a masked component differs between any two runs)
        agree = 0
        for a, b, c in zip(sent_on[r], sent_again[r], sent_off[r]):
            if a == b:
                assert a == c, (r, a[:2])
                agree += 1
        assert agree > 0
        assert _seen(on[r].info) == _seen(off[r].info) == _seen(again[r].info), r
    return on


@pytest.mark.slow
@pytest.mark.parametrize("workload,batch,mode", [("W3", 1, "inprocess"), ("W3", 1, "process"),
                                                  ("W4", 1, "inprocess"), ("W4", 1, "process")])
def test_plan_sends_and_computes_what_the_unplanned_path_does(workload, batch, mode):
    g = load_model(build_workload(workload))
    _same_as_unplanned(g, workload_input(workload, batch), {"stamp_ltee": mode}, planned=True)


@pytest.mark.slow
def test_plan_without_held_results():
    """Option stamp_owner_split off: no held result, every evaluator sends the real component
    to the third party and the later products are the stacked ones (the plan's other branches)."""
    g = load_model(build_workload("W3"))
    _same_as_unplanned(g, workload_input("W3", 1), {"stamp_ltee": "inprocess", "stamp_owner_split": False},
                       planned=True)


@pytest.mark.slow
def test_batch_split_across_the_ltees_is_not_planned():
    """W3 at batch 4: each device operation is three jobs (the batch split): not compiled,
    the unplanned path runs, everything as without the option."""
    g = load_model(build_workload("W3"))
    on = _same_as_unplanned(g, workload_input("W3", 4), {"stamp_ltee": "inprocess"}, planned=False)
    assert all(on[r].info["plan_why"] for r in ROLES)


def _patched_compile(monkeypatch, after):
    """``compile_plan`` as the protocol calls it, then ``after(backend, plan)``."""
    real = online_plan.compile_plan
    got = {}

    def compile_plan(backend, graph, env):
        plan = real(backend, graph, env)
        got[backend.eng.me] = plan
        return after(backend, plan)
    monkeypatch.setattr(protocol, "compile_plan", compile_plan)
    return got


@pytest.mark.parametrize("what", ["op", "seeds", "kept", "sent", "held"])
def test_a_moved_state_falls_back(monkeypatch, what):
    """The plan is compiled, then the live state moves before the online phase (the operation
    counter, a prefetched seed set, a component kept from the dry run, a message sent ahead,
    the held set): ``ready`` is False and the unplanned path runs -- exact, no plan used."""
    def after(backend, plan):
        ops = backend.ops
        if plan is None:
            return plan
        if what == "op":
            plan.start = (plan.start[0] + 1,) + plan.start[1:]
        elif what == "seeds":
            k = next(iter(ops._ahead))
            ops._ahead[k] = (ops._ahead[k][0], dict(ops._ahead[k][1]))   # equal, not the same
        elif what == "kept":
            if backend._z_ahead:
                k = next(iter(backend._z_ahead))
                backend._z_ahead[k] = backend._z_ahead[k].copy()
            else:
                plan.used = True
        elif what == "sent":
            if ops._sent_ahead:
                plan.steps[-1].sent = ("nothing", 0, "sent")
            else:
                plan.used = True
        else:
            plan.start = plan.start[:3] + ({"not held"},)
        return plan
    got = _patched_compile(monkeypatch, after)
    g = load_model(build_workload("W3"))
    x = workload_input("W3", 1)
    res, _ = _run(g, x, {"stamp_ltee": "inprocess"})
    assert np.array_equal(res["p1"].output_ring, run_fixed(g, x, FX32))
    assert sorted(got) == [0, 1, 2] and all(p is not None for p in got.values())
    assert [res[r].info["planned"] for r in ROLES] == [False] * 3
    assert [res[r].info["expanded_unused"] for r in ROLES] == [0, 0, 0]


def test_ready_checks_the_input_shape():
    """The client's plan refuses an input of another shape (and the others refuse any input)."""
    from types import SimpleNamespace

    ip = SimpleNamespace(owner=1, shape=(1, 784))
    be = SimpleNamespace(_input_plan=ip, _rot=0, _held=set(), _z_ahead={}, ops=None, eng=SimpleNamespace(me=1))
    be.ops = SimpleNamespace(op=0, ctr=0, _ahead={}, _sent_ahead=set())
    plan = online_plan.OnlinePlan(be, [], (0, 0, 0, set()), None, np.uint64(0xFFFFFFFF))
    assert plan.ready(np.zeros((1, 784), np.uint64))
    assert not plan.ready(np.zeros((2, 784), np.uint64))
    assert not plan.ready(np.zeros((784,), np.uint64))
    assert not plan.ready(None)
    be.eng.me = 0
    assert plan.ready(None) and not plan.ready(np.zeros((1, 784), np.uint64))
    plan.used = True
    assert not plan.ready(None)


def test_a_spec_other_than_the_dry_runs_is_not_compiled(monkeypatch):
    """A job whose live spec differs from the one the plan dry run validated and recorded
    (``StampOps._spec_memo``) is not compiled: the unplanned path validates it as before."""
    real = online_plan.compile_plan

    def compile_plan(backend, graph, env):
        memo = backend.ops._spec_memo
        key = sorted(memo)[0]
        spec = dict(memo[key][0])
        spec["steps"] = list(spec["steps"]) + [{"op": "trunc"}]
        memo[key] = [spec] + list(memo[key][1:])
        plan = real(backend, graph, env)
        assert plan is None and backend.plan_why
        memo[key][0] = spec                   # (the record stays: online, the live spec is unequal,
        return plan                           # so ``_facts`` validates it again, as before)
    monkeypatch.setattr(protocol, "compile_plan", compile_plan)
    g = load_model(build_workload("W3"))
    x = workload_input("W3", 1)
    res, _ = _run(g, x, {"stamp_ltee": "inprocess"})
    assert np.array_equal(res["p1"].output_ring, run_fixed(g, x, FX32))
    assert [res[r].info["planned"] for r in ROLES] == [False] * 3


def test_no_plan_when_malicious_or_without_the_warm_run(monkeypatch):
    calls = []
    real = online_plan.compile_plan
    monkeypatch.setattr(protocol, "compile_plan", lambda *a: calls.append(1) or real(*a))
    g = load_model(build_workload("W3"))
    x = workload_input("W3", 1)
    ref = run_fixed(g, x, FX32)
    res, _ = _run(g, x, {"stamp_ltee": "inprocess"}, security="malicious")
    assert np.array_equal(res["p1"].output_ring, ref)
    assert [res[r].info["planned"] for r in ROLES] == [False] * 3 and calls == []
    res, _ = _run(g, x, {"stamp_warm_online": False})
    assert np.array_equal(res["p1"].output_ring, ref)
    assert [res[r].info["planned"] for r in ROLES] == [False] * 3 and calls == []


def test_option_values():
    g = load_model(build_workload("W3"))
    x = workload_input("W3", 1)
    with pytest.raises(ProtocolError, match="stamp_online_plan"):
        _run(g, x, {"stamp_online_plan": "yes"})


def test_client_encoding_equals_the_quantizer():
    """``protocol.encode_input`` gives ``cfg.encode`` bit for bit (random and edge values: ties
    at one half, the range's ends, signs, zeros), and refuses what it refuses, with its error."""
    from secinfer.arith.fixed import FX64, FixedPointRangeError
    from secinfer.arith.public import public_rng

    gen = public_rng("tests/stamp-encode", 5)
    for cfg in (FX32, FX64):
        s, top = cfg.scale, cfg.max_abs
        edge = np.array([0.0, -0.0, 0.5 / s, -0.5 / s, 1.5 / s, -1.5 / s, top - 1.0, -top + 1.0, -top + 0.5,
                         np.nextafter(top, 0), 3.0, -7.25])
        for x in (edge, gen.normal(size=(1, 784)) * 4, gen.uniform(-top, top, (3, 5, 7)), edge.reshape(3, 4)):
            want = cfg.encode(x)
            got = protocol.encode_input(cfg, x)
            assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
        for bad in (np.array([1.0, np.nan]), np.array([np.inf]), np.array([-np.inf, 0.0]), np.array([top]),
                    np.array([0.0, -top * 2])):
            with pytest.raises(FixedPointRangeError) as e1:
                cfg.encode(bad)
            with pytest.raises(FixedPointRangeError) as e2:
                protocol.encode_input(cfg, bad)
            assert str(e1.value) == str(e2.value)
