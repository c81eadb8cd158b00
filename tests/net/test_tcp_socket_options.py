"""Issue #23 (the 27-42 ms stalls of small sends): every data stream of the tcp transport
has Nagle's algorithm off (TCP_NODELAY) on both of its ends, on both record layers, from
the handshake on and still after traffic; a small frame therefore never waits in our
host for the acknowledgement of the previous one. (Why the stalls were not Nagle's:
docs/runtime.md, "Small sends that take
20-40 ms".)"""

import socket

import numpy as np
import pytest

from secinfer.net import native_link
from secinfer.net.channel import ArraySpec
from secinfer.net.tcp_transport import TcpEndpoint
from transport_helpers import all_endpoints, loopback_cluster  # tests/net helper

pytestmark = pytest.mark.timeout(60)
ANY_U = ArraySpec(np.uint64, (None,))
LAYERS = [pytest.param(False, id="python"),
          pytest.param(True, id="native", marks=pytest.mark.skipif(not native_link.available(),
                                                                   reason="native library not built"))]


def _nodelay(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def _ends(eps: dict):
    """(description, sender's socket, receiver's socket) of every directed stream, each
    pair checked to be the two ends of one connection."""
    for a, ep in eps.items():
        for b, link in ep._out.items():
            inbound = eps[b]._in[a].sock
            assert link.sock.getsockname() == inbound.getpeername(), (a, b)
            assert link.sock.getpeername() == inbound.getsockname(), (a, b)
            yield f"{a}->{b}", link.sock, inbound


@pytest.mark.parametrize("native", LAYERS)
def test_every_stream_has_nagle_off_on_both_ends_before_and_after_traffic(tmp_path, native):
    c = loopback_cluster(tmp_path, "tcp", ("a", "b", "c"))
    eps = all_endpoints(TcpEndpoint, c, native=native)
    try:
        assert all(ep.native is native for ep in eps.values())
        assert len(list(_ends(eps))) == 6
        for name, out, inbound in _ends(eps):
            assert _nodelay(out) and _nodelay(inbound), name
        # back-to-back small frames on every stream, then a reply: the options stay
        x = np.arange(40, dtype=np.uint64)
        for a, ep in eps.items():
            for b in ep.peers:
                for i in range(20):
                    ep.send(b, f"m{i}", x)
        for b, ep in eps.items():
            for a in ep.peers:
                for i in range(20):
                    assert np.array_equal(ep.recv(a, f"m{i}", ANY_U, timeout=10)[0], x)
        for name, out, inbound in _ends(eps):
            assert _nodelay(out) and _nodelay(inbound), name
    finally:
        for ep in eps.values():
            ep.close(flush=False)
