"""The graph's last product fused with the output opening (``StampBackend.product_output``,
``StampOps.output``, ``ltee_device.cmd_output``): exactness, costs against the
declarations, the malicious checks, and the LTEE's release policy for the output."""

from types import SimpleNamespace

import numpy as np
import pytest

from secinfer.arith.fixed import FX32
from secinfer.errors import ProtocolAbort
from secinfer.ir import fixed_ops
from secinfer.ir.graph import Node
from secinfer.protocols.stamp import costmodel
from secinfer.protocols.stamp.backend import StampBackend
from secinfer.protocols.stamp.ltee import LteeRefused, spec_bytes
from stamp_harness import dealer_pairs, run3
from test_stamp_kernels import _rand

GEMM = Node("g", "Gemm", ["x", "w"], ["y"], {})
X, W, B = _rand((6, 8), 41), _rand((8, 3), 42, 0.5), _rand((3,), 43, 0.5)
REF = fixed_ops.gemm(X, W, B, FX32)
N_IN, N_OUT = 6 * 3 + 3, 6 * 3          # the product's elements and the bias


def _body(prepare=True, before=None):
    """product_output of X W + B to p1; returns (output or None, online bytes sent, this
    party's rounds, bus bytes of the output step) measured after ``prepare``."""
    xs, ws, bs = dealer_pairs(X, 1), dealer_pairs(W, 2), dealer_pairs(B, 3)

    def body(i, eng, ops):
        be = StampBackend(eng, ops, output_receiver=1)
        if eng.malicious and prepare:   # sigma = W - B opened once, as in the protocol's offline phase
            be.prepare(SimpleNamespace(nodes=[GEMM], weight_info={"w": None}), {"w": ws[i]})
        if before is not None:
            before(i, eng, ops)
        m, link = eng.ep.meter, ops.link
        b0, r0, bus0, t0 = m.total("online"), m.rounds("online"), link.meter.total, ops.triple_bus
        y = be.product_output(GEMM, xs[i], ws[i], bs[i], REF.shape)
        bus = link.meter.total - bus0 - (ops.triple_bus - t0)    # the output step's, not the triple's
        return y, m.total("online") - b0, m.rounds("online") - r0, bus
    return body


def _no_output(res, receiver_check=None):
    """p1 ends with ProtocolAbort and no output; the others return nothing or abort."""
    assert isinstance(res[1], ProtocolAbort), f"p1 got {res[1]!r}"
    if receiver_check is not None:
        assert res[1].check == receiver_check, res[1].check
    for i in (0, 2):
        assert isinstance(res[i], ProtocolAbort) or res[i][0] is None


@pytest.mark.parametrize("mal", [False, True])
def test_fused_output_is_exact_and_costs_what_is_declared(mal):
    res, _ = run3(_body(), malicious=mal)
    for r in res.values():
        assert not isinstance(r, Exception), r
    sec = "malicious" if mal else "semi-honest"
    assert np.array_equal(res[1][0], REF)
    assert res[0][0] is None and res[2][0] is None
    sent = sum(res[i][1] for i in range(3))
    rounds = max(res[i][2] for i in range(3))
    out = costmodel.declared_output(N_IN, sec)
    if mal:   # verified re-share (rho of x opened; sigma offline), delta check, output step
        assert sent == (costmodel.declared_verified_product(X.size, N_OUT)["bytes"]
                        + costmodel.DELTA_CHECK_BYTES + out["bytes"])
        assert rounds == 3
    else:     # straight from the local product: one round for the whole last layer
        assert sent == out["bytes"] and rounds == out["rounds"] == 1
    # the receiver's LTEE does all of it (no batch split); header and seed overhead < 600 B a party
    dbus = costmodel.declared_output_bus(N_IN, N_OUT, sec)
    for i in range(3):
        assert dbus[i] <= res[i][3] <= dbus[i] + 600, (i, dbus[i], res[i][3])


# ---- malicious: a deviation towards p1's LTEE makes p1 abort with no output ---------------
@pytest.mark.parametrize("adversary,tag", [(0, "stamp/out'"), (2, "stamp/out'/h")])
def test_altered_copy_or_hash_towards_the_receiver(adversary, tag):
    """On the wire: p0 alters c = z_0 + m + z_1 after its LTEE's MAC (both p2's hash and
    the MAC disagree), or p2 alters its hash of z_0 + m."""
    res, _ = run3(_body(), malicious=True, adversary=adversary, send_tag=tag)
    _no_output(res)
    assert res[1].check in ("output-consistency", "ltee-output-mac")


@pytest.mark.covers_check("stamp", "output-consistency")
def test_consistently_altered_copy_is_caught_by_the_hash():
    """p0 alters z_0 + m before its LTEE MACs c (so its MAC holds): only p2's hash of
    z_0 + m tells, and p1's host aborts before its LTEE truncates anything."""
    def before(i, eng, ops):
        if i == 0:
            honest = ops._mask
            ops._mask = lambda seed, n, mask: (honest(seed, n, mask) + np.uint64(1)) & mask
    res, _ = run3(_body(before=before), malicious=True)
    _no_output(res, "output-consistency")


def _alter_mac(sender):
    def before(i, eng, ops):
        if i != sender:
            return
        inner = eng.ep._ep

        def send(peer, tag, *arrays):
            if tag in ("stamp/out'", "stamp/out'/h"):
                arrays = list(arrays)
                arrays[-1] = arrays[-1].copy()
                arrays[-1][0] ^= 1
            return inner.send(peer, tag, *arrays)
        eng.ep.send = send
    return before


@pytest.mark.covers_check("stamp", "ltee-output-mac")
@pytest.mark.parametrize("sender", [0, 2])
def test_altered_mac_towards_the_receiver(sender):
    """A MAC that does not match: p1's LTEE refuses to release the output."""
    res, _ = run3(_body(before=_alter_mac(sender)), malicious=True)
    _no_output(res, "ltee-output-mac")


class _ShiftingLink:
    """p1's host adds 2^12 to one vector it passes to its LTEE's output step (it would
    learn round-to-nearest instead of the floor, i.e. a bit below the truncation)."""

    def __init__(self, link, index: int) -> None:
        self._link, self._index = link, index

    def call(self, cmd, *arrays, kind=None):
        if cmd == "output":
            arrays = list(arrays)
            a = arrays[self._index].copy()
            a[0] += a.dtype.type(1 << 12)
            arrays[self._index] = a
        return self._link.call(cmd, *arrays, kind=kind)

    def __getattr__(self, name):
        return getattr(self._link, name)


@pytest.mark.parametrize("index", [2, 3])
def test_receiver_cannot_shift_what_its_ltee_truncates(index):
    """A corrupt p1 alters c (index 2) or its own component z_2 (index 3) on the way to
    its LTEE: the MACs of p0's and p2's LTEEs no longer hold, and the LTEE refuses."""
    def before(i, eng, ops):
        if i == 1:
            ops.link = _ShiftingLink(ops.link, index)
    res, _ = run3(_body(before=before), malicious=True)
    _no_output(res, "ltee-output-mac")


def test_receiver_error_in_the_last_product_is_caught_before_the_output():
    """A corrupt p1 puts 2^12 into its re-shared component of the last product (kept
    consistent): the delta check runs before p0 and p2 send anything towards p1's LTEE, so
    they abort and p1 gets no output (else its LTEE would truncate y + 2^12)."""
    def before(i, eng, ops):
        if i == 1:
            honest = eng.zero3
            eng.zero3 = lambda shape: eng.ring.add(honest(shape), np.uint64(1 << 12))
    res, _ = run3(_body(before=before), malicious=True)
    assert not isinstance(res[1], tuple) or res[1][0] is None
    for i in (0, 2):
        assert isinstance(res[i], ProtocolAbort), res[i]
    assert "multiplication-check" in {res[i].check for i in (0, 2)}


# ---- the LTEE's release policy for the output step --------------------------------------
def test_output_release_policy():
    spec = {"shape": [2, 3], "out_shape": [2, 3], "params": [], "steps": [{"op": "trunc"}]}
    relu = {"op": "node", "node": Node("r", "Relu", [], [], {}).to_json(), "params": []}

    def meta(op, *extra):
        return np.array([op, 90, 90 * op, 0, *extra], dtype=np.int64)   # 9 slots of 10

    def refused(link, *args):
        try:
            link.call(*args)
        except LteeRefused as r:
            return r.code
        return "served"

    def body(i, eng, ops):
        link, x = ops.link, np.zeros(6, np.uint32)
        if i == 1:
            return [refused(link, "outmask", meta(1, 0, 6)),                                  # never to p1
                    refused(link, "output", meta(2, 0), spec_bytes(dict(spec, steps=spec["steps"] + [relu])), x),
                    refused(link, "outmac", meta(3, 6), x),                                     # semi-honest session
                    refused(link, "output", meta(4, 0), spec_bytes(spec), x),                   # first: served
                    refused(link, "output", meta(5, 0), spec_bytes(spec), x)]                   # second: refused
        return [refused(link, "output", meta(1, 0), spec_bytes(spec), x),                     # not the output party
                refused(link, "outmask", meta(2, 1, 6))]                                        # malicious masks
    res, _ = run3(body)
    assert res[1] == ["policy", "policy", "policy", "served", "policy"]
    assert res[0] == res[2] == ["policy", "policy"]


def test_malicious_session_refuses_the_unauthenticated_output():
    spec = {"shape": [2, 3], "out_shape": [2, 3], "params": [], "steps": [{"op": "trunc"}]}

    def body(i, eng, ops):
        if i != 1:
            return None
        try:
            ops.link.call("output", np.array([1, 90, 0, 0, 0], np.int64), spec_bytes(spec), np.zeros(6, np.uint32))
        except LteeRefused as r:
            return r.code
        return "served"
    res, _ = run3(body, malicious=True)
    assert res[1] == "policy"
