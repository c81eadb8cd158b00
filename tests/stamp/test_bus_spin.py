"""The host <-> LTEE bus (``ltee_bus.BusPipe``) and its busy-poll in the online phase
(option ``stamp_bus_spin_us``, ``LteeLink.set_online``; docs/protocols/stamp.md "Eighth
pass"): outputs are the same with and without it, only online requests spin (both ends,
bounded per wait), a device that stops answering fails with a typed error within seconds."""

import os
import signal
import time

import numpy as np
import pytest

from secinfer.arith.fixed import FX32
from secinfer.bench.peers_suite import build_workload, workload_input
from secinfer.errors import ConfigError
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model
from secinfer.protocols.stamp.ltee import LteeLink, LteeRefused

from test_stamp_models import run_model

ROLES = ("p0", "p1", "p2")


def _dev_cpu(link) -> float:
    f = open(f"/proc/{link._proc.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("spin", [0, 500])
def test_w3_batch1_exact_with_and_without_spin(spin):
    g = load_model(build_workload("W3"))
    x = workload_input("W3", 1)
    ref = run_fixed(g.with_batch(1), x, FX32)
    res = run_model(g, x, "semi-honest", options={"stamp_bus_spin_us": spin})
    assert np.array_equal(res["p1"].output_ring, ref)
    polls = {r: res[r].info["bus"]["spin_hits"] + res[r].info["bus"]["spin_misses"] for r in ROLES}
    if spin:   # p0 evaluates online, p1 runs the output step: they waited on their LTEE spinning
        # (an answer already there when the host first reads costs no wait: hence the sum)
        assert polls["p0"] + polls["p1"] > 0
    else:
        assert sum(polls.values()) == 0


def test_spin_only_online_and_bounded():
    link = LteeLink("p0", spin_us=2000)
    try:
        link.ready()
        for _ in range(20):            # not online: no busy-poll at either end
            link.call("stats")
        assert link.spin_hits == link.spin_misses == 0
        link.set_online(True)
        for _ in range(20):
            link.call("stats")
        assert link.spin_hits > 0      # the answers came within the budget
        # the device spins at most one budget after the last online request: it idles now
        time.sleep(0.05)
        c0 = _dev_cpu(link)
        time.sleep(0.6)
        assert _dev_cpu(link) - c0 < 0.05
        link.set_online(False)
        link.call("stats")
        c0 = _dev_cpu(link)
        time.sleep(0.6)
        assert _dev_cpu(link) - c0 < 0.05
        hits = link.spin_hits
        link.call("stats")
        assert link.spin_hits == hits
    finally:
        link.close()


def test_spin_off_never_polls():
    link = LteeLink("p0", spin_us=0)
    try:
        link.ready()
        link.set_online(True)
        for _ in range(10):
            link.call("stats")
        assert link.spin_hits == link.spin_misses == 0
    finally:
        link.close()


@pytest.mark.parametrize("spin", [0, 1000])
def test_a_device_that_never_answers_fails_typed(spin):
    link = LteeLink("p0", spin_us=spin)
    try:
        link.ready()      # (the device's start-up under the default timeout: seconds on a loaded host)
        link.timeout_s = 1.0
        link.set_online(True)
        os.kill(link._proc.pid, signal.SIGSTOP)
        t = time.monotonic()
        with pytest.raises(LteeRefused) as e:
            link.call("stats")
        assert e.value.code == "timeout" and time.monotonic() - t < 5
    finally:
        os.kill(link._proc.pid, signal.SIGCONT)
        link.close()


def test_a_device_that_dies_fails_typed():
    link = LteeLink("p0", spin_us=1000)
    try:
        link.ready()
        link.set_online(True)
        link._proc.kill()
        link._proc.wait()
        with pytest.raises(LteeRefused) as e:
            link.call("stats")
        assert e.value.code == "dead"
    finally:
        link.close()


@pytest.mark.parametrize("opts", [{"stamp_bus_spin_us": -1}, {"stamp_bus_spin_us": 10 ** 7},
                                  {"stamp_bus_spin_us": "x"}, {"stamp_bus_timeout_s": 0}])
def test_bad_options_are_config_errors(opts):
    with pytest.raises(ConfigError):
        LteeLink.from_options("p0", opts)


@pytest.mark.parametrize("ship", [True, False])
def test_specs_shipped_before_the_query(ship):
    """The online requests' operation specs go to the LTEE with the prefetch (option
    ``stamp_ship_specs``): parsed there before the query, outputs unchanged, the online bus
    bytes unchanged."""
    g = load_model(build_workload("W3"))
    x = workload_input("W3", 1)
    ref = run_fixed(g.with_batch(1), x, FX32)
    res = run_model(g, x, "semi-honest", options={"stamp_ship_specs": ship})
    assert np.array_equal(res["p1"].output_ring, ref)
    kinds = {r: res[r].info["bus"]["by_kind"] for r in ROLES}
    # p0 evaluates both ReLU steps online, p1 runs the output step, p2 nothing online
    assert ("specs" in kinds["p0"] and "specs" in kinds["p1"]) is ship
    assert "specs" not in kinds["p2"]
    assert [res[r].info["bus"]["online_bytes"] for r in ROLES][0] > 0


def test_spec_cache_is_the_parse():
    from secinfer.protocols.rep3 import kernels
    from secinfer.protocols.stamp import ltee_device
    from secinfer.protocols.stamp.ltee import spec_bytes
    from secinfer.protocols.stamp.ltee_counters import Refused
    dev = ltee_device.Device()
    spec = {"shape": [1, 4], "params": [[4]], "steps": [{"op": "trunc"}, {"op": "bias", "axis": -1, "param": 0}]}
    raw = spec_bytes(spec)
    assert dev.cmd_specs([raw]) == []
    hit = ltee_device._parse_spec(kernels, raw.copy(), dev.specs)
    assert hit == spec and hit is dev.specs[raw.tobytes()]
    for bad in (np.frombuffer(b"{not json", np.uint8), spec_bytes({"shape": [1, 4]}),
                spec_bytes({"shape": [1, 4], "steps": [{"op": "node", "node": {"op": "Gemm"}}]}),
                np.zeros((2, 3), np.uint8), np.zeros(4, np.int64)):
        with pytest.raises(Refused):
            dev.cmd_specs([raw, bad])
    assert len(dev.specs) == 1     # a refused spec is never kept
    with pytest.raises(Refused):
        dev.cmd_specs([raw] * (ltee_device.SPEC_CACHE + 1))


def test_spec_warm_up_changes_nothing_the_device_keeps():
    """``cmd_specs`` runs each chain once on zeros (``Device._warm``): no counter, no
    operation count, no AES output moves; a chain that does not run on zeros is skipped."""
    from secinfer.arith.fixed import FixedPointConfig
    from secinfer.protocols.stamp import ltee_device
    from secinfer.protocols.stamp.ltee import spec_bytes
    dev = ltee_device.Device()
    dev.cfg = FixedPointConfig("device", 32, 13)
    relu = {"shape": [1, 8], "out_shape": [1, 8], "params": [[8]],
            "steps": [{"op": "trunc"}, {"op": "bias", "axis": -1, "param": 0},
                      {"op": "node", "params": [], "node": {"attrs": {}, "inputs": ["g"], "name": "r", "op": "Relu",
                                                            "outputs": ["h"]}}]}
    soft = {"shape": [1, 10], "steps": [{"op": "softmax"}]}
    ctr = dict(dev.ctr)
    assert dev.cmd_specs([spec_bytes(relu), spec_bytes(soft)]) == []
    assert (dev.cnt.int_ops, dev.cnt.float_ops, dev.cnt.exp_ops, dev.aes_bytes) == (0, 0, 0, 0)
    assert dev.ctr == ctr and dev.op_last == -1 and not dev.used and len(dev.specs) == 2
