"""``Endpoint.recv_first``: the frame of whichever of several peers comes first, on every
transport (in-memory, tcp on both record layers, zmq): both arrival orders, the other
peer's frame left in order for a later ``recv``, the fast receive taken on tcp, and
``recv``'s typed errors for a dead peer, a wrong tag, a spec the frame breaks, a frame
out of order and a timeout, whichever peer causes them."""

import threading
import time

import numpy as np
import pytest

from secinfer.errors import FrameError, PeerDeadError, TimeoutError_
from secinfer.net import native_link
from secinfer.net.channel import ArraySpec, LocalEndpoint
from secinfer.net.codec import Header, encode_frame
from secinfer.net.tcp_transport import TcpEndpoint
from transport_helpers import three_endpoints  # tests/net helper

pytestmark = [pytest.mark.timeout(60)]
NATIVE = pytest.mark.skipif(not native_link.available(), reason="native library not built")
U64 = ArraySpec(np.uint64, (None,))
KINDS = ["local", pytest.param("tcp-native", marks=NATIVE), "tcp-python", "zmq"]


@pytest.fixture(params=KINDS)
def trio(request, tmp_path):
    with three_endpoints(request.param, tmp_path) as (eps, hub):
        yield eps, hub


def _warm(eps, tag="t", n=3):
    """A frame of ``tag`` from b and from c, received in full first (tcp: the templates)."""
    for p in ("b", "c"):
        eps[p].send("a", tag, np.zeros(n, np.uint64))
        eps["a"].recv(p, tag, U64)


@pytest.mark.parametrize("first", ["b", "c"])
def test_the_first_frame_to_arrive_is_returned_and_the_other_kept_in_order(trio, first):
    """The receiver waits on both; ``first`` sends, later the other sends twice."""
    eps, _ = trio
    _warm(eps)
    second = "c" if first == "b" else "b"
    a = eps["a"]

    def senders():
        time.sleep(0.1)
        eps[first].send("a", "t", np.full(3, 1, np.uint64))
        time.sleep(0.3)
        eps[second].send("a", "t", np.full(3, 2, np.uint64))
        eps[second].send("a", "t", np.full(3, 3, np.uint64))

    t = threading.Thread(target=senders)
    t.start()
    try:
        peer, (x,) = a.recv_first({"b": ("t", U64), "c": ("t", U64)})
        assert peer == first and x.tolist() == [1, 1, 1]
        peer, (x,) = a.recv_first({second: ("t", U64)})
        assert peer == second and x.tolist() == [2, 2, 2]
        assert a.recv(second, "t", U64)[0].tolist() == [3, 3, 3]
    finally:
        t.join(10)
    assert a._seq_in == {"b": 2 if first == "b" else 3, "c": 2 if first == "c" else 3}
    assert a.meter.counters[("setup", "recv", second, "t")].messages == 3
    if isinstance(a, TcpEndpoint):   # (the frames after the first of each peer: the template check)
        assert all(a._in[p].fast >= 1 or a._in[p].checked is not None for p in ("b", "c"))


@pytest.mark.parametrize("first", ["b", "c"])
def test_of_frames_already_there_the_earlier_is_returned(trio, first):
    """Both frames there before the call: the one that came first (in-memory: its arrival
    number; tcp: the sender's stamp on one host). zmq's PULL socket fair-queues its peers, so
    there the order among frames waiting together is the socket's (not tested)."""
    eps, _ = trio
    a = eps["a"]
    if not isinstance(a, (TcpEndpoint, LocalEndpoint)):
        pytest.skip("zmq: a PULL socket fair-queues frames that wait together")
    _warm(eps)
    second = "c" if first == "b" else "b"
    eps[first].send("a", "t", np.full(3, 1, np.uint64))
    time.sleep(0.05)
    eps[second].send("a", "t", np.full(3, 2, np.uint64))
    time.sleep(0.2)
    peer, (x,) = a.recv_first({"b": ("t", U64), "c": ("t", U64)})
    assert peer == first and x.tolist() == [1, 1, 1]
    assert a.recv(second, "t", U64)[0].tolist() == [2, 2, 2]


def test_a_wrong_tag_from_the_first_peer_is_out_of_step(trio):
    eps, _ = trio
    _warm(eps)
    eps["c"].send("a", "other", np.full(3, 1, np.uint64))
    with pytest.raises(FrameError, match="out of step"):
        eps["a"].recv_first({"b": ("t", U64), "c": ("t", U64)})


def test_a_frame_the_spec_refuses_raises_for_that_peer(trio):
    eps, _ = trio
    _warm(eps)
    eps["b"].send("a", "t", np.full(5, 1, np.uint64))
    with pytest.raises(FrameError, match=r"a <- b \[t\]"):
        eps["a"].recv_first({"b": ("t", ArraySpec(np.uint64, (3,))), "c": ("t", U64)})


def test_a_replayed_frame_is_refused(trio):
    eps, hub = trio
    if hub is None:
        pytest.skip("the socket transports' records refuse a replay before the frame (tests/net/test_tcp_fast.py)")
    _warm(eps)
    old = encode_frame(Header(eps["c"].session_id, "c", "t", 0, "setup", 0), [np.zeros(3, np.uint64)])
    eps["c"]._transmit("a", old)   # (seq 0 again, in the in-memory hub)
    with pytest.raises(FrameError, match="out-of-order"):
        eps["a"].recv_first({"b": ("t", U64), "c": ("t", U64)})


def test_a_dead_peer_is_named(trio):
    eps, hub = trio
    _warm(eps)
    if hub is not None:
        hub.kill("c")
    else:
        eps["c"].close(flush=False)
    with pytest.raises(PeerDeadError, match="c"):
        eps["a"].recv_first({"b": ("t", U64), "c": ("t", U64)}, timeout=10)


def test_nothing_before_the_deadline_times_out(trio):
    eps, _ = trio
    _warm(eps)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError_):
        eps["a"].recv_first({"b": ("t", U64), "c": ("t", U64)}, timeout=0.3)
    assert time.monotonic() - t0 < 5


def test_bad_requests_are_refused(trio):
    eps, _ = trio
    with pytest.raises(FrameError, match="not a peer"):
        eps["a"].recv_first({"zz": ("t", U64)})
    with pytest.raises(ValueError):
        eps["a"].recv_first({})
