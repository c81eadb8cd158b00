"""``Endpoint.send_many``: the same arrays to several peers, on every transport (in-memory,
tcp on both record layers, zmq). The receivers get exactly what one ``send`` per peer gives
them (arrays, order among a link's frames, seqs), the sender's meter and stats count the
same, the tcp Python layer's joint path is taken for small frames (both records sealed
before the first write), large and multi-array frames and a repeated peer fall back to one
``send`` per peer, and a frame over the cap is refused before anything is booked."""

import numpy as np
import pytest

from secinfer.errors import MessageTooLargeError
from secinfer.net import native_link
from secinfer.net.channel import ArraySpec, Endpoint
from secinfer.net.tcp_transport import TcpEndpoint
from transport_helpers import all_endpoints, loopback_cluster, three_endpoints  # tests/net helper

pytestmark = [pytest.mark.timeout(60)]
NATIVE = pytest.mark.skipif(not native_link.available(), reason="native library not built")
U64 = ArraySpec(np.uint64, (None,))
KINDS = ["local", pytest.param("tcp-native", marks=NATIVE), "tcp-python", "zmq"]


@pytest.fixture(params=KINDS)
def trio(request, tmp_path):
    with three_endpoints(request.param, tmp_path) as (eps, _hub):
        yield eps, request.param


def _counts(ep):
    return {k: (c.payload, c.wire, c.messages) for k, c in ep.meter.counters.items() if k[1] == "sent"}


@pytest.mark.parametrize("n", [1, 784, 300_000])   # 300,000 x 8 B: a large frame (one send per peer)
def test_send_many_equals_one_send_per_peer(trio, n, monkeypatch):
    eps, kind = trio
    a, b, c = eps["a"], eps["b"], eps["c"]
    x = np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    one_by_one = []    # the calls that fell back to one send per peer (``Endpoint.send_many``)
    if kind == "tcp-python":
        orig = Endpoint.send_many
        monkeypatch.setattr(Endpoint, "send_many", lambda ep, *args: (one_by_one.append(args[1]), orig(ep, *args))[1])
    for rnd in range(3):   # (the first frames of the tag build the templates; later ones use them)
        a.send("b", "pre", np.full(2, rnd, np.uint64))          # another tag in between, same link
        a.send_many(("c", "b"), "q", x + np.uint64(rnd))
        a.send("c", "post", np.full(3, rnd, np.uint64))
        assert np.array_equal(b.recv("a", "pre", U64)[0], np.full(2, rnd, np.uint64))
        for p in (b, c):
            assert np.array_equal(p.recv("a", "q", U64)[0], x + np.uint64(rnd))
        assert np.array_equal(c.recv("a", "post", U64)[0], np.full(3, rnd, np.uint64))
    sent = _counts(a)
    # what the same calls with one send per peer count (payload, wire bytes, messages)
    for p in ("b", "c"):
        pay, wire, msgs = sent[("setup", "sent", p, "q")]
        assert msgs == 3 and pay == 3 * x.nbytes and wire > pay
    assert sent[("setup", "sent", "b", "q")] == sent[("setup", "sent", "c", "q")]
    if kind == "tcp-python":
        # the joint path for the small frames, one send per peer for the large
        assert len(one_by_one) == (3 if n == 300_000 else 0)
    if kind != "local":
        assert a.stats["frames_sent"] >= 12


def test_send_many_with_several_arrays_or_a_repeated_peer_sends_one_by_one(trio):
    eps, _ = trio
    a = eps["a"]
    a.send_many(("b", "c"), "two", np.ones(2, np.uint64), np.zeros(3, np.uint64))
    a.send_many(("b", "b"), "rep", np.full(1, 7, np.uint64))
    for p in ("b", "c"):
        y, z = eps[p].recv("a", "two", U64, U64)
        assert np.array_equal(y, np.ones(2, np.uint64)) and np.array_equal(z, np.zeros(3, np.uint64))
    assert [int(eps["b"].recv("a", "rep", U64)[0][0]) for _ in range(2)] == [7, 7]


def test_send_many_over_the_cap_is_refused_before_anything_is_booked(tmp_path):
    eps = all_endpoints(TcpEndpoint, loopback_cluster(tmp_path, "tcp", roles=("a", "b", "c")), native=False,
                        max_frame=4096)
    try:
        a = eps["a"]
        a.send_many(("b", "c"), "q", np.zeros(8, np.uint64))            # (the tag's templates)
        before = (dict(a._seq_out), _counts(a))
        with pytest.raises(MessageTooLargeError):
            a.send_many(("b", "c"), "q", np.zeros(1000, np.uint64))     # 8,000 B > 4,096
        assert (dict(a._seq_out), _counts(a)) == before
        a.send_many(("b", "c"), "q", np.ones(8, np.uint64))
        for p in ("b", "c"):
            assert np.array_equal(eps[p].recv("a", "q", U64)[0], np.zeros(8, np.uint64))
            assert np.array_equal(eps[p].recv("a", "q", U64)[0], np.ones(8, np.uint64))
    finally:
        for e in eps.values():
            e.close(flush=False)
