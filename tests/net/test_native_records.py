"""Issue #23 item 1: the tcp transport's native record layer (``native_link``, Go) against
the Python one (``tcp_links``/``tcp_transport``): the same records give the same frames,
events and errors; a native party and a Python party talk to each other; the record
counters of both ends stay in step. (The rest of tests/net runs on the native layer by
default, and with ``SECINFER_TCP_NATIVE=0`` on the Python one.)"""

import socket
import struct
import threading
import time

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secinfer.errors import FrameError, MessageTooLargeError, PeerDeadError
from secinfer.net import native_link, tcp_links
from secinfer.net.channel import ArraySpec
from secinfer.net.tcp_links import HDR, K_BYE, K_DATA, K_HB, K_SIZE, MORE, RX_BUFFER, InStream, nonce, read_native
from secinfer.net.tcp_transport import TcpEndpoint
from transport_helpers import all_endpoints, loopback_cluster  # tests/net helper

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not native_link.available(), reason="native library not built")]
ANY_U8 = ArraySpec(np.uint8, (None,), max_elems=1 << 30)
KEY = bytes(range(32))
FAST = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    c = loopback_cluster(tmp_path_factory.mktemp("native"), "tcp")
    ep = TcpEndpoint.from_cluster(c, "a", c.load_secret("a"), c.session_id("n"), connect=False,
                                  max_frame=4096)
    yield ep
    ep.close(flush=False)


def _outcome(ep):
    """What a stream gave: its inbox (frames as bytes, errors as their type and message) and
    the error that cut it (a closed stream without bye is no outcome of the records)."""
    items = []
    for _release, item, stamp in ep._inbox["b"]:
        if item is tcp_links._CLOSED:
            items.append(("bye", ep._bye_reason.get("b")))
        elif isinstance(item, Exception):
            items.append((type(item).__name__, str(item)))
        else:
            items.append(("frame", bytes(memoryview(item)), stamp))
    err = ep._fatal.get("b")
    if isinstance(err, PeerDeadError) and "without a bye" in str(err):
        err = None
    return items, (None if err is None else (type(err).__name__, str(err)))


def _reset(ep):
    ep._fatal.pop("b", None)
    ep._inbox["b"].clear()
    ep._queued["b"] = 0
    ep._bye_from.discard("b")
    ep._bye_reason.pop("b", None)
    ep.stats.update(frames_recv=0, bytes_recv=0)


def _python(ep, data: bytes):
    a, b = socket.socketpair()
    try:
        c = InStream(a, KEY)
        ep._in["b"] = c
        _reset(ep)
        for i in range(0, len(data), RX_BUFFER):   # (records here are smaller than the buffer)
            chunk = data[i:i + RX_BUFFER]
            c.buf[c.fill:c.fill + len(chunk)] = chunk
            c.fill += len(chunk)
            ep._parse("b", c)
        return _outcome(ep), dict(ep.stats)
    finally:
        ep._in.pop("b", None)
        a.close()
        b.close()


def _native(ep, data: bytes):
    a, b = socket.socketpair()
    a.setblocking(False)
    c = InStream(a, KEY, ep.max_frame)
    try:
        ep._in["b"] = c
        ep._by_fd[a.fileno()] = "b"
        _reset(ep)
        writer = threading.Thread(target=lambda: (b.sendall(data), b.shutdown(socket.SHUT_WR)))
        writer.start()
        while not c.eof:
            read_native(ep, "b", c, None, 0.2)
        writer.join()
        return _outcome(ep), dict(ep.stats)
    finally:
        if c.native is not None:
            c.native.free()
        ep._in.pop("b", None)
        a.close()
        b.close()


def _records(records) -> bytes:
    aead, out = AESGCM(KEY), bytearray()
    for i, (kind, pt) in enumerate(records, start=1):
        hdr = HDR.pack(len(pt) + 16, 1000.0 + i, kind)
        out += hdr + aead.encrypt(nonce(i), pt, hdr)
    return bytes(out)


KINDS = st.sampled_from([K_DATA, K_DATA | MORE, K_HB, K_BYE, K_SIZE, 0x00, 0xFF])


@FAST
@given(st.lists(st.tuples(KINDS, st.binary(max_size=300)), max_size=8))
def test_authentic_records_give_the_same_events_on_both_layers(endpoint, records):
    data = _records(records)
    assert _native(endpoint, data) == _python(endpoint, data)


@FAST
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=4), st.data())
def test_sized_and_chained_frames_and_their_lies_match(endpoint, sizes, draw):
    """Size records (true, lying, above the cap) and chains of records without one."""
    recs = []
    for n in sizes:
        body = bytes(range(256)) * (n // 256) + bytes(n % 256)
        if draw.draw(st.booleans()):
            told = n + draw.draw(st.sampled_from([0, 0, 1, -1, 5000]))
            recs.append((K_SIZE, max(told, 0).to_bytes(8, "little")))
        cut = draw.draw(st.integers(0, len(body)))
        recs += [(K_DATA | MORE, body[:cut]), (K_DATA, body[cut:])]
    data = _records(recs)
    assert _native(endpoint, data) == _python(endpoint, data)


@FAST
@given(st.binary(max_size=1500), st.integers(0, 1499), st.integers(1, 255))
def test_tampered_streams_fail_alike(endpoint, pt, where, flip):
    data = bytearray(_records([(K_DATA, pt), (K_HB, b""), (K_DATA, pt[::-1])]))
    data[where % len(data)] ^= flip
    assert _native(endpoint, bytes(data)) == _python(endpoint, bytes(data))


def test_a_replayed_record_fails_on_the_native_layer(endpoint):
    one = _records([(K_DATA, b"x" * 40)])
    (items, err), _ = _native(endpoint, one + one)
    assert len(items) == 1 and err[0] == "FrameError" and "failed authentication" in err[1]


@pytest.mark.parametrize("a_native,b_native", [(True, False), (False, True), (True, True)])
def test_a_native_party_and_a_python_party_interoperate(tmp_path, a_native, b_native):
    c = loopback_cluster(tmp_path, "tcp", heartbeat_interval=0.05)
    eps = all_endpoints(TcpEndpoint, c, per_party={"a": {"native": a_native}, "b": {"native": b_native}})
    a, b = eps["a"], eps["b"]
    try:
        assert (a._out["b"].sealer is not None) == a_native and (b._in["a"].native is not None) == b_native
        rng = np.random.default_rng(7)
        sizes = [0, 1, 100, (1 << 16) - 80, (1 << 16) + 1, 300_000, (1 << 20) + 5, 3 << 20]
        for n in sizes:
            x = rng.integers(0, 256, n, dtype=np.uint8)
            a.send("b", "t", x)
            (y,) = b.recv("a", "t", ANY_U8)
            assert np.array_equal(x, y)
            b.send("a", "r", y[::-1].copy())
            (z,) = a.recv("b", "r", ANY_U8)
            assert np.array_equal(z, x[::-1])
        time.sleep(0.2)                            # heartbeats cross both ways meanwhile
        a.send("b", "last", np.arange(10, dtype=np.uint8))
        assert b.recv("a", "last", ANY_U8)[0].tolist() == list(range(10))
        if a_native and b_native:                  # both ends count the same records
            assert a._out["b"].sealer.counter == b._in["a"].native.counter
            assert b._out["a"].sealer.counter == a._in["b"].native.counter
        a.close()
        with pytest.raises(PeerDeadError, match="closed the session"):
            b.recv("a", "more", ANY_U8, timeout=5)
    finally:
        for e in eps.values():
            e.close(flush=False)


def test_an_oversized_frame_is_refused_in_order_on_the_native_layer(tmp_path):
    c = loopback_cluster(tmp_path, "tcp")
    eps = all_endpoints(TcpEndpoint, c, per_party={"b": {"max_frame": 1 << 20, "native": True}})
    a, b = eps["a"], eps["b"]
    try:
        assert b._in["a"].native is not None
        a.send("b", "big", np.zeros(3 << 20, np.uint8))
        a.send("b", "small", np.ones(5, np.uint8))
        with pytest.raises(MessageTooLargeError, match="exceeds the cap"):
            b.recv("a", "big", ANY_U8)
        b._seq_in["a"] += 1                       # the refused frame counted as consumed
        assert b.recv("a", "small", ANY_U8)[0].tolist() == [1] * 5
    finally:
        for e in eps.values():
            e.close(flush=False)


def test_python_layer_when_asked(tmp_path):
    c = loopback_cluster(tmp_path, "tcp")
    eps = all_endpoints(TcpEndpoint, c, native=False)
    try:
        assert all(not e.native and e._out[p].sealer is None and e._in[p].native is None
                   for e in eps.values() for p in e.peers)
    finally:
        for e in eps.values():
            e.close(flush=False)


def test_the_library_path_is_the_builds():
    from secinfer.native.build import LIB_PATH
    assert native_link.LIB_PATH == LIB_PATH


def test_sealed_records_open_with_the_python_aead():
    """The Go sealer writes the records the Python layer writes (an independent AES-GCM)."""
    a, b = socket.socketpair()
    try:
        s = native_link.Sealer(a.fileno(), KEY, counter=5)
        rec = s.seal(K_DATA | MORE, 12.5, b"hello")
        hdr = rec[:HDR.size]
        assert HDR.unpack(hdr) == (5 + 16, 12.5, K_DATA | MORE)
        assert AESGCM(KEY).decrypt(nonce(5), rec[HDR.size:], hdr) == b"hello"
        assert s.counter == 6
        s.free()
    finally:
        a.close()
        b.close()
    assert struct.calcsize("<IdB") == HDR.size


def test_large_records_arriving_in_pieces_between_calls(endpoint, monkeypatch):
    """Records larger than the receive buffer, read by non-blocking calls while they arrive
    in pieces (each call returns mid-record and the next one goes on): a sized frame of two
    records, a frame in one large record (its own buffer, asked for), then a small one."""
    monkeypatch.setattr(endpoint, "max_frame", 1 << 22)
    rng = np.random.default_rng(3)
    big = rng.integers(0, 256, 700_000, dtype=np.uint8).tobytes()
    single = rng.integers(0, 256, 500_000, dtype=np.uint8).tobytes()
    data = _records([(K_SIZE, len(big).to_bytes(8, "little")), (K_DATA | MORE, big[:300_000]),
                     (K_DATA, big[300_000:]), (K_DATA, single), (K_DATA, b"tail")])
    a, b = socket.socketpair()
    a.setblocking(False)
    c = InStream(a, KEY, 1 << 22)
    try:
        endpoint._in["b"] = c
        _reset(endpoint)

        def trickle():
            for i in range(0, len(data), 50_000):
                b.sendall(data[i:i + 50_000])
                time.sleep(0.002)
            b.shutdown(socket.SHUT_WR)

        writer = threading.Thread(target=trickle)
        writer.start()
        calls = 0
        while not c.eof:
            calls += 1
            if read_native(endpoint, "b", c) == native_link.EV_NONE:
                time.sleep(0.001)
        writer.join()
        items, err = _outcome(endpoint)
        assert err is None and calls > 10
        assert [x[1] for x in items] == [big, single, b"tail"]
    finally:
        c.native.free()
        endpoint._in.pop("b", None)
        a.close()
        b.close()
