"""The LTEE emulation in its host's process (option ``stamp_ltee`` = "inprocess",
``ltee_inproc.InProcessLink``; docs/protocols/stamp.md "Tenth pass"): the same outputs, the
same network messages and the same bus meters as the default process emulation, semi-honest
and malicious; the device's refusals are the same typed ``LteeRefused``; a representative
subset of the adversarial tests also in this mode."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import stamp_harness
import test_stamp_adversarial as adv
import test_stamp_ltee as lt
import test_stamp_output as outp
from secinfer.arith.fixed import FX32
from secinfer.bench.peers_suite import build_workload, workload_input
from secinfer.errors import ConfigError
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model
from secinfer.protocols.stamp import ltee_device
from secinfer.protocols.stamp.ltee import LteeLink, LteeRefused
from secinfer.protocols.stamp.ltee_inproc import InProcessLink, open_link
from test_stamp_models import run_model

ROLES = ("p0", "p1", "p2")
MODES = ("process", "inprocess")


def _model(kind: str):
    """A small W3-like MLP (two ReLUs) or W4-like CNN (Conv, ReLU, MaxPool, Flatten, Gemm)."""
    rng = np.random.default_rng(11)

    def init(nm, shape, s):
        return numpy_helper.from_array(rng.normal(0, s, shape).astype(np.float32), nm)
    if kind == "mlp":
        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 24])
        dims, nodes, inits, prev = [24, 12, 12, 5], [], [], "input"
        for i in range(3):
            inits += [init(f"w{i}", (dims[i], dims[i + 1]), 1 / np.sqrt(dims[i])), init(f"b{i}", (dims[i + 1],), 0.05)]
            y = "output" if i == 2 else f"g{i}"
            nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [y], name=f"fc{i}"))
            if i < 2:
                nodes.append(helper.make_node("Relu", [y], [f"h{i}"], name=f"relu{i}"))
                prev = f"h{i}"
        shape_in = (24,)
    else:
        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])
        inits = [init("cw", (3, 1, 3, 3), 0.3), init("cb", (3,), 0.05), init("fw", (27, 5), 0.2), init("fb", (5,), 0.05)]
        nodes = [helper.make_node("Conv", ["input", "cw", "cb"], ["c"], name="conv", kernel_shape=[3, 3]),
                 helper.make_node("Relu", ["c"], ["r"], name="relu"),
                 helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
                 helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),
                 helper.make_node("Gemm", ["f", "fw", "fb"], ["output"], name="fc")]
        shape_in = (1, 8, 8)
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 5])
    m = helper.make_model(helper.make_graph(nodes, kind, [x], [out], inits), opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return load_model(m), np.random.default_rng(5).normal(0, 1, (2, *shape_in))


def _views(res):
    """What must not depend on the mode: every party's messages (phase, direction, peer,
    tag -> payload bytes, messages), rounds, and its bus meter (bytes each way, transactions,
    per kind of request)."""
    out = {}
    for r in ROLES:
        info = res[r].info
        m = info["meter"]
        out[r] = ({k: (v[0], v[2]) for k, v in m["by_tag"].items()},
                  {ph: m["phases"][ph]["rounds"] for ph in ("setup", "offline", "online")},
                  {k: info["bus"][k] for k in ("to_device", "from_device", "online_bytes", "online_transactions",
                                               "preprocessing_bytes", "by_kind")},
                  {k: info["device_ops"][k] for k in ("int_ops", "float_ops", "exp_ops", "aes_bytes")})
    return out


def _both(graph, x, security, options=None):
    ref = run_fixed(graph.with_batch(len(x)), x, FX32)
    res = {m: run_model(graph, x, security, options={**(options or {}), "stamp_ltee": m}) for m in MODES}
    for m in MODES:
        assert np.array_equal(res[m]["p1"].output_ring, ref), m
        assert {res[m][r].info["ltee_mode"] for r in ROLES} == {m}
    assert _views(res["process"]) == _views(res["inprocess"])
    return res


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_both_modes_same_output_messages_and_bus(kind, security):
    g, x = _model(kind)
    _both(g, x, security)


@pytest.mark.parametrize("wl", ["W3", "W4"])
def test_peers_workloads_batch1_both_modes(wl):
    g = load_model(build_workload(wl))
    res = _both(g, workload_input(wl, 1), "semi-honest")
    # no pipe: the in-process bus never waits, so it never busy-polls
    assert all(res["inprocess"][r].info["bus"]["spin_hits"] + res["inprocess"][r].info["bus"]["spin_misses"] == 0
               for r in ROLES)


def test_frames_and_copies_carry_the_same():
    """``frames=False`` (array copies instead of the frame codec, measured in the docs) gives
    the device and the host the same arrays; the answers are copies either way."""
    links = [InProcessLink("p0", frames=f) for f in (True, False)]
    try:
        for link in links:
            link.ready()
        (a,), (b,) = (link.call("identity") for link in links)
        assert a.dtype == b.dtype == np.uint8 and a.shape == b.shape == (32,)
        for link in links:
            (s1,) = link.call("stats")
            s1[0] = 12345                       # the host's copy, not the device's counters
            (s2,) = link.call("stats")
            assert s2[0] != 12345
            assert link.meter.transactions == 4
    finally:
        for link in links:
            link.close()


@pytest.mark.parametrize("mode", MODES)
def test_bad_requests_are_typed_refusals(mode):
    link = open_link("p0", {"stamp_ltee": mode})
    try:
        for cmd, arrays, code in (("no-such-command", [], "bad-request"),
                                  ("provision", [np.zeros(3, np.uint8), np.zeros(32, np.uint8)], "bad-request"),
                                  ("mask", [np.zeros(8, np.int64)], "not-initialised"),
                                  ("ready", [np.array([-5], np.int64)], "bad-request")):
            with pytest.raises(LteeRefused) as e:
                link.call(cmd, *arrays)
            assert e.value.code == code, (cmd, e.value.code)
        (s,) = link.call("stats")            # the device is still up
        assert s.shape == (5,)
    finally:
        link.close()


@pytest.mark.parametrize("opts", [{"stamp_ltee": "thread"}, {"stamp_ltee": None}, {"stamp_ltee": 1}])
def test_bad_mode_is_a_config_error_naming_the_option(opts):
    with pytest.raises(ConfigError, match="stamp_ltee"):
        open_link("p0", opts)


def test_default_is_the_process_emulation():
    link = open_link("p0", {})
    try:
        assert type(link) is LteeLink and link.mode == "process"
    finally:
        link.close()


def test_a_device_failure_ends_the_in_process_device(monkeypatch):
    """What would end the device's process (an error ``serve`` does not turn into a refusal)
    ends the in-process device: ``LteeRefused("dead")``, then and afterwards."""
    link = InProcessLink("p0")

    def boom(dev, arrays):
        raise MemoryError("out of memory")
    monkeypatch.setitem(ltee_device.COMMANDS, "stats", boom)
    with pytest.raises(LteeRefused) as e:
        link.call("stats")
    assert e.value.code == "dead"
    monkeypatch.undo()
    with pytest.raises(LteeRefused) as e:
        link.call("identity")
    assert e.value.code == "dead"


@pytest.mark.parametrize("frames", [True, False])
def test_answers_and_requests_share_no_memory_with_the_device(frames):
    """The host's arrays and the device's are never the same memory: altering an answer
    (the identity key) or a request after the call changes nothing inside the device."""
    link = InProcessLink("p0", frames=frames)
    try:
        (pub,) = link.call("identity")
        first = pub.copy()
        if pub.flags.writeable:
            pub[:] = 0
        (again,) = link.call("identity")
        assert np.array_equal(again, first) and again.any()
        budget = np.array([250], dtype=np.int64)
        link.call("ready", budget)
        budget[0] = 10 ** 9
        (s,) = link.call("stats")
        assert s.shape == (5,)
    finally:
        link.close()


# ---- the adversarial and refusal tests, in the in-process mode (the process mode runs them in
# their own files) ------------------------------------------------------------------------------
@pytest.fixture
def inproc(monkeypatch):
    """``stamp_harness.run3``'s parties get in-process LTEEs."""
    monkeypatch.setattr(stamp_harness, "LteeLink", InProcessLink)


def test_stale_counters_and_batches_refused_in_process(inproc):
    lt.test_stale_and_replayed_counters_are_refused()


@pytest.mark.covers_check("stamp", "ltee-stale-counter")
def test_replayed_request_aborts_in_process(inproc):
    lt.test_a_replayed_device_request_aborts_its_host()


@pytest.mark.covers_check("stamp", "ltee-key-exchange")
def test_altered_wrapped_key_in_process(inproc):
    lt.test_altered_wrapped_key_aborts_at_setup()


@pytest.mark.covers_check("stamp", "relu-step5")
def test_altered_value_passed_to_device_in_process(inproc):
    adv.test_altered_value_passed_to_device(1)


@pytest.mark.covers_check("stamp", "relu-step2")
def test_altered_step2_value_in_process(inproc):
    adv.test_altered_step2_value(0)


@pytest.mark.covers_check("stamp", "multiplication-check")
def test_tampered_multiplication_in_process(inproc):
    adv.test_tampered_multiplication()


@pytest.mark.covers_check("stamp", "ltee-policy")
def test_whole_input_mask_policy_in_process(inproc):
    adv.test_only_the_owner_device_releases_a_whole_input_mask()


@pytest.mark.covers_check("stamp", "ltee-seed")
def test_withheld_seed_in_process(inproc):
    adv.test_a_withheld_seed_aborts()


@pytest.mark.covers_check("stamp", "ltee-output-mac")
def test_altered_output_mac_in_process(inproc):
    outp.test_altered_mac_towards_the_receiver(0)


def test_output_release_policy_in_process(inproc):
    outp.test_output_release_policy()


@pytest.mark.parametrize("make", [lambda: LteeLink("p0"), lambda: InProcessLink("p0"),
                                  lambda: InProcessLink("p0", frames=True)])
def test_what_the_bus_cannot_carry_is_a_frame_error_in_every_mode(make):
    """An array no bus frame carries (an object array: references, not bytes) never reaches
    the device, whatever the mode: the codec's ``FrameError`` on the host."""
    from secinfer.errors import FrameError
    link = make()
    try:
        with pytest.raises(FrameError):
            link.call("stats", np.array([object()], dtype=object))
        (s,) = link.call("stats")
        assert s.shape == (5,)
    finally:
        link.close()


def test_bench_peers_runs_stamp_in_both_modes(monkeypatch):
    """``secinfer bench peers``: stamp's default row unchanged, the in-process LTEE a series of
    its own (row field ``ltee``), both exact."""
    from secinfer.bench import peers_suite as ps
    monkeypatch.setattr(ps, "_command_wall", lambda *a: (None, None))   # (the command's wall: not tested here)
    r = ps.run(plan=[("W1", 1)], protocols=["stamp"], reps=1)
    rows = {row.get("ltee"): row for row in r["rows"]}
    assert set(rows) == {None, "inprocess"} and all(row["protocol"] == "stamp" for row in rows.values())
    assert all(row["max_abs_err_vs_reference"] == 0.0 for row in rows.values())
    assert rows[None]["bytes_online"] == rows["inprocess"]["bytes_online"]
    assert set(r["plots"][0]["series"]) == {"stamp", "stamp (LTEE in process)"}


def test_ready_after_protocol1_makes_the_key_schedules_and_changes_nothing():
    """``cmd_ready`` after Protocol 1 makes ``_seed``'s AES key schedules and the fixed labels'
    prefixes (so the first online request does not): the seeds are ``PRF``'s, no counter or
    AES total moves."""
    from secinfer.crypto.prg import PRF
    dev = ltee_device.start()
    dev.index, dev.session = 0, bytes(16)
    for j in range(3):
        dev._keys[j] = bytes([j + 7]) * 16
        dev._prf[j] = PRF(dev._keys[j])
    before = (dict(dev.ctr), dev.aes_bytes, dev.op_last)
    ltee_device.serve(dev, "ready", [])
    assert sorted(dev._ecb) == [0, 1, 2] and "out/2" in dev._prefix and "mf" in dev._prefix
    assert (dict(dev.ctr), dev.aes_bytes, dev.op_last) == before
    for j, label, ctr in ((0, "m/0", 5), (2, "out/1", 1 << 40), (1, "fin/1", 0), (1, "act/9", 3)):
        assert dev._seed(j, label, ctr) == PRF(dev._keys[j]).keystream(label, ctr, 16)
