"""The LTEE emulation: Protocol 1, counters, release policy, certificates."""

import hashlib

import numpy as np
import pytest

from secinfer.errors import ProtocolAbort
from secinfer.protocols.stamp.ltee import LteeRefused
from secinfer.protocols.stamp.ltee_device import expand
from stamp_harness import run3


def _mask_meta(op, n_op, ctr, sub, j, hat, n):
    return np.array([op, n_op, ctr, sub, j, hat, n, 0], dtype=np.int64)


@pytest.mark.slow
def test_protocol1_gives_consistent_keys_and_separate_processes():
    def body(i, eng, ops):
        # GenMask of stream 0: parties 0 and 2 hold component 0 and must get the same masks
        got = None
        if i in (0, 2):
            (seed,) = ops.link.call("mask", _mask_meta(1, 90, 0, 0, 0, 0, 10))
            got = expand(bytes(seed), 10) & np.uint64(0xFFFFFFFF)
        return got, ops.link._proc.pid
    res, _ = run3(body)
    assert np.array_equal(res[0][0], res[2][0])
    assert res[0][0].max() < 2 ** 32 and len(set(res[0][0].tolist())) == 10
    pids = {res[i][1] for i in range(3)}
    assert len(pids) == 3   # one OS process per LTEE


def test_stale_and_replayed_counters_are_refused():
    def body(i, eng, ops):
        if i != 0:
            return None
        link = ops.link
        link.call("mask", _mask_meta(1, 90, 0, 0, 0, 0, 10))
        errs = []
        for meta in (_mask_meta(1, 90, 0, 0, 0, 0, 10),     # same request again (replay)
                     _mask_meta(0, 90, 0, 0, 0, 0, 10),     # an older operation
                     _mask_meta(2, 90, 5, 0, 0, 0, 10),     # a counter below the device's
                     _mask_meta(1, 90, 7, 1, 0, 0, 10)):    # counter differs from the op's
            with pytest.raises(LteeRefused) as ei:
                link.call("mask", meta)
            errs.append(ei.value.code)
        # a fresh operation with a fresh counter is served
        (m,) = link.call("mask", _mask_meta(3, 90, 90, 0, 0, 0, 10))
        # batched seed requests (``LteeLink.call_many``, one bus transaction) are answered
        # as if sent alone; a replayed or unheld request inside a batch refuses it
        tx0 = link.meter.transactions
        (a,), (b,) = link.call_many([("mask", _mask_meta(4, 90, 180, 0, 0, 0, 10), "mask"),
                                     ("mask", _mask_meta(4, 90, 180, 1, 0, 0, 10), "mask")])
        batch = (link.meter.transactions - tx0, a.tobytes() != b.tobytes() != m.tobytes(), a.size)
        for reqs in ([("mask", _mask_meta(5, 90, 270, 1, 0, 0, 10), "mask"),
                      ("mask", _mask_meta(4, 90, 180, 0, 0, 0, 10), "mask")],      # an older operation inside
                     [("mask", _mask_meta(6, 90, 360, 0, 0, 0, 10), "mask"),
                      ("mask", _mask_meta(6, 90, 360, 1, 2, 0, 10), "mask")]):    # p0 lacks component 2
            with pytest.raises(LteeRefused) as ei:
                link.call_many(reqs)
            errs.append(ei.value.code)
        return errs, m.size, batch
    res, _ = run3(body)
    errs, size, batch = res[0]
    assert errs == ["stale-counter"] * 5 + ["policy"]
    assert size == 16   # a 128-bit stream seed
    assert batch == (1, True, 16)


@pytest.mark.slow
def test_release_policy():
    def body(i, eng, ops):
        if i != 1:
            return None
        out = []
        # party 1 does not hold component 0: GenMask(0) is refused to its host
        with pytest.raises(LteeRefused) as ei:
            ops.link.call("mask", _mask_meta(1, 90, 0, 0, 0, 0, 10))
        out.append(ei.value.code)
        # the evaluator never receives its own input mask
        with pytest.raises(LteeRefused) as ei:
            ops.link.call("inmask", np.array([2, 90, 0, 0, 1, 10], dtype=np.int64))
        out.append(ei.value.code)
        return out
    res, _ = run3(body)
    assert res[1] == ["policy", "policy"]


@pytest.mark.slow
@pytest.mark.covers_check("stamp", "ltee-certificate")
def test_bad_certificate_rejected_at_setup():
    rogue = hashlib.sha256(b"rogue manufacturer").hexdigest()
    res, _ = run3(lambda i, eng, ops: "ran", options={2: {"ltee_ca_seed": rogue}})
    for i in (0, 1):
        assert isinstance(res[i], ProtocolAbort)
        assert res[i].check in ("ltee-certificate", "peer-abort")
    assert any(isinstance(res[i], ProtocolAbort) and res[i].check == "ltee-certificate" for i in (0, 1))
    assert all(r != "ran" for r in res.values())


@pytest.mark.covers_check("stamp", "ltee-stale-counter")
def test_a_replayed_device_request_aborts_its_host():
    """A host that asks its LTEE for the same masks twice (a replay) is refused and aborts."""
    def body(i, eng, ops):
        if i != 0:
            return None
        meta = _mask_meta(1, 90, 0, 0, 0, 0, 10)
        ops._dev("mask", meta, kind="mask")
        ops._dev("mask", meta, kind="mask")
        return "served twice"
    res, _ = run3(body)
    assert isinstance(res[0], ProtocolAbort) and res[0].check == "ltee-stale-counter"


@pytest.mark.covers_check("stamp", "ltee-key-exchange")
def test_altered_wrapped_key_aborts_at_setup():
    """p0 alters the wrapped pairwise key it sends p2 [STAMP Protocol 1 step 3]: p2's LTEE
    refuses it and p2 aborts."""
    res, _ = run3(lambda i, eng, ops: "ran", adversary=0, send_tag="stamp/init/wrap")
    assert isinstance(res[2], ProtocolAbort) and res[2].check == "ltee-key-exchange"

