"""Issue #22 items 1 and 2 and issue #21 item 6, on both transports: sending never blocks
receiving (no deadlock on shaped links), heartbeats flow while a party sends or computes,
and a close delivers every frame sent before it (or fails loudly)."""

import threading
import time

import numpy as np
import pytest

from secinfer.errors import PeerDeadError
from secinfer.net.shaping import parse_profile
from secinfer.runtime.party import endpoint_class
from transport_helpers import ANY_U, all_endpoints, loopback_cluster  # tests/net helper

pytestmark = pytest.mark.timeout(120)
TRANSPORTS = pytest.mark.parametrize("transport", ["tcp", "zmq"])


def _run_parties(eps, fn, limit):
    """Run ``fn(endpoint)`` for every party in its own thread; {party: result or exception}."""
    out = {}

    def body(pid):
        try:
            out[pid] = fn(eps[pid])
        except BaseException as e:  # noqa: BLE001 - reported to the test
            out[pid] = e

    ts = {p: threading.Thread(target=body, args=(p,), daemon=True) for p in eps}
    for t in ts.values():
        t.start()
    end = time.monotonic() + limit
    for t in ts.values():
        t.join(max(0.0, end - time.monotonic()))
    hung = [p for p, t in ts.items() if t.is_alive()]
    return out, hung


@TRANSPORTS
def test_a_ring_of_large_sends_under_lan_shaping_finishes(tmp_path, transport):
    """Three parties each send 8 frames of 8 MB to the next, then receive 8 from the
    previous one, on 'lan'-shaped links: every socket on the ring fills up while every
    party is still sending. The old tcp pacing thread held the link lock while blocked on
    a full socket; the protocol threads waited on that lock and nobody read: a hang."""
    roles = ("p0", "p1", "p2")
    c = loopback_cluster(tmp_path, transport, roles=roles)
    eps = all_endpoints(endpoint_class(transport), c, network=parse_profile("lan"), recv_timeout=60)
    nxt = {r: roles[(i + 1) % 3] for i, r in enumerate(roles)}
    prv = {r: roles[(i - 1) % 3] for i, r in enumerate(roles)}
    x = np.arange(1 << 20, dtype=np.uint64)   # 8 MB

    def party(ep):
        for i in range(8):
            ep.send(nxt[ep.me], f"f{i}", x + i)
        for i in range(8):
            (y,) = ep.recv(prv[ep.me], f"f{i}", ANY_U)
            assert np.array_equal(y, x + i)
        return True

    try:
        out, hung = _run_parties(eps, party, 60)
        assert not hung, f"parties {hung} hung (deadlock)"
        assert all(v is True for v in out.values()), out
    finally:
        for e in eps.values():
            e.close(flush=False)
