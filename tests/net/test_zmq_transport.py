"""The CURVE socket transport: real sockets on loopback, parties as threads or processes
(what both transports must do alike is in ``test_transports_common.py``)."""

import os
import signal
import threading
import time

import numpy as np
import pytest
import zmq

from secinfer.crypto.identity import Identity
from secinfer.errors import AuthenticationError, FrameError, MessageTooLargeError, PeerDeadError
from secinfer.net.zmq_transport import ZmqEndpoint
from secinfer.runtime.cluster import load_cluster
from transport_helpers import (ANY_F, ANY_U, all_endpoints, idle_peer, impostor_attempt,  # tests/net helper
                               loopback_cluster, pair_fixture, seconds_to_detect_killed_peer)

pytestmark = pytest.mark.timeout(60)


def _cluster(tmp_path, roles=("a", "b"), **settings):
    return loopback_cluster(tmp_path, "zmq", roles, **settings)


def _endpoints(c, nonce="n", per_party=None, **kw):
    return all_endpoints(ZmqEndpoint, c, nonce, per_party, **kw)


pair = pair_fixture(ZmqEndpoint, "zmq")


def test_unknown_key_is_refused(tmp_path):
    c = _cluster(tmp_path)
    pub, sec = zmq.curve_keypair()  # an impostor claiming to be b with a key not in the file
    err, box = impostor_attempt(ZmqEndpoint, c, Identity("b", pub, sec))
    msg = str(err)
    assert "b" in msg and ("unknown key" in msg or "handshake" in msg)
    assert "imp" not in box  # the impostor never completed the mesh either


def test_other_session_is_refused(tmp_path):
    c = _cluster(tmp_path)
    with pytest.raises(AuthenticationError, match="another session"):
        _mixed_sessions(c)


def _mixed_sessions(c):
    out, errs = {}, []

    def mk(pid, nonce):
        try:
            out[pid] = ZmqEndpoint.from_cluster(c, pid, c.load_secret(pid), c.session_id(nonce), connect_timeout=3)
        except Exception as e:  # noqa: BLE001
            errs.append(e)

    ts = [threading.Thread(target=mk, args=("a", "n1")), threading.Thread(target=mk, args=("b", "n2"))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for e in out.values():
        e.close(flush=False)
    raise errs[0]


def test_corrupted_frames_give_frame_error(pair):
    a, b = pair
    a._transmit("b", b"this is not a secinfer frame at all")
    with pytest.raises(FrameError, match="magic|shorter"):
        b.recv("a", "x", ANY_F, timeout=5)
    a.send("b", "x", np.ones(4))
    good = b._receive("a", time.monotonic() + 5)
    a._transmit("b", good[:-3])  # truncated payload
    with pytest.raises(FrameError, match="payload"):
        b.recv("a", "x", ANY_F, timeout=5)
    bad = bytearray(good)
    bad[4] ^= 0xFF  # version field
    a._transmit("b", bytes(bad))
    with pytest.raises(FrameError, match="version"):
        b.recv("a", "x", ANY_F, timeout=5)


def test_oversized_frame_is_refused_by_the_receiver(tmp_path):
    c = _cluster(tmp_path)
    eps = _endpoints(c, per_party={"b": {"max_frame": 64 * 1024}})
    a, b = eps["a"], eps["b"]
    try:
        a.send("b", "big", np.zeros(200_000 // 8, dtype=np.uint64))  # a's cap is larger
        with pytest.raises(MessageTooLargeError, match="exceeds the cap"):
            b.recv("a", "big", ANY_U, timeout=10)
        with pytest.raises(MessageTooLargeError):  # and the sender refuses what it cannot send
            b.send("a", "big", np.zeros(100_000, dtype=np.uint64))
    finally:
        for e in eps.values():
            e.close(flush=False)


def test_frame_above_the_hard_cap_resets_and_is_reported(tmp_path):
    c = _cluster(tmp_path)
    eps = _endpoints(c, per_party={"b": {"max_frame": 16 * 1024}})
    a, b = eps["a"], eps["b"]
    try:
        assert b.hard_cap < 4 * 1024 * 1024
        a.send("b", "huge", np.zeros(4 * 1024 * 1024 // 8, dtype=np.uint64))
        with pytest.raises(FrameError, match="reset|exceeds"):
            b.recv("a", "huge", ANY_U, timeout=20)
    finally:
        for e in eps.values():
            e.close(flush=False)


def test_closed_peer_fails_receives_at_once(pair):
    a, b = pair
    b.send("a", "last", np.ones(3))
    b.close()
    (v,) = a.recv("b", "last", ANY_F, timeout=5)  # what was sent before the close arrives
    assert np.array_equal(v, np.ones(3))
    t0 = time.monotonic()
    with pytest.raises(PeerDeadError, match="b closed the session"):
        a.recv("b", "more", ANY_F, timeout=30)
    assert time.monotonic() - t0 < 15  # generous; the receive timeout is 30 s
    with pytest.raises(PeerDeadError):
        a.send("b", "x", np.ones(1))


def test_a_waiting_receiver_reads_the_socket_itself_and_acknowledges_a_bye(pair):
    """The protocol thread waiting in a receive reads the socket itself (direct receive):
    frames of other peers and heartbeats are filed alike, a "bye" that it reads ends the
    receive at once and is still acknowledged (by the I/O thread), so the closing side's
    close() does not wait for its timeout."""
    a, b = pair
    got: dict = {}

    def wait_in_recv():
        try:
            a.recv("b", "never", ANY_F, timeout=20)
        except Exception as e:  # noqa: BLE001 - examined below
            got["err"] = e
        got["t"] = time.monotonic()

    t = threading.Thread(target=wait_in_recv)
    t.start()
    deadline = time.monotonic() + 5
    while not a._rx_want and time.monotonic() < deadline:   # a's protocol side holds the socket
        time.sleep(0.001)
    assert a._rx_want
    t0 = time.monotonic()
    b.close(timeout=4.0)
    closed = time.monotonic() - t0
    t.join(10)
    assert isinstance(got.get("err"), PeerDeadError) and got["t"] - t0 < 3
    assert "b" in a._bye_from
    assert closed < 3.0   # the ack came (the bounded wait would have taken 4 s)


def test_killed_peer_process_is_detected(tmp_path):
    c = _cluster(tmp_path, heartbeat_interval=0.25, peer_timeout=1.5)
    # generous; the receive timeout is 60 s
    assert seconds_to_detect_killed_peer(ZmqEndpoint, c, "peer b is dead: connection lost") < 20


def test_close_does_not_hang_and_is_idempotent(pair):
    a, b = pair
    t0 = time.monotonic()
    a.close()
    a.close()
    b.close(flush=False)
    assert time.monotonic() - t0 < 10
    assert not a._thread.is_alive() and not b._thread.is_alive()


# ---- shaping on real traffic: lower bounds only (no upper bounds, nothing flaky) ----------
def test_bandwidth_paces_a_large_transfer(tmp_path):
    c = _cluster(tmp_path, network="bw=100")
    eps = _endpoints(c)
    a, b = eps["a"], eps["b"]
    try:
        t0 = time.perf_counter()
        for _ in range(10):
            a.send("b", "chunk", np.zeros(1_000_000 // 8, dtype=np.uint64))
        for _ in range(10):
            b.recv("a", "chunk", ANY_U)
        assert time.perf_counter() - t0 >= 0.09  # 10 MB at 100 MB/s, minus one 64 KiB burst
    finally:
        for e in eps.values():
            e.close(flush=False)


def test_link_profiles_are_assigned_per_directed_link(tmp_path):
    from secinfer.runtime.cluster import dump_cluster

    c = _cluster(tmp_path, roles=("a", "b", "c"), network="lan")
    c.links[frozenset(("a", "b"))] = __import__("secinfer.net.shaping", fromlist=["x"]).parse_profile("bw=5,lat=30")
    c.path.write_text(dump_cluster(c))
    c = load_cluster(c.path)
    eps = _endpoints(c)
    try:
        a = eps["a"]
        assert a.info["b"].out_profile.latency == pytest.approx(0.030)
        assert a.info["b"].in_profile.bandwidth == pytest.approx(5e6)
        assert a.info["c"].out_profile.name == "lan"
        t0 = time.perf_counter()
        a.send("b", "x", np.ones(1))
        eps["b"].recv("a", "x", ANY_F)
        assert time.perf_counter() - t0 >= 0.030 * 0.95
    finally:
        for e in eps.values():
            e.close(flush=False)


def test_frozen_peer_is_detected_by_missing_heartbeats(tmp_path):
    """SIGSTOP keeps the peer's TCP connections open: only the heartbeat timeout can tell."""
    c = _cluster(tmp_path, heartbeat_interval=0.25, peer_timeout=1.5)
    with idle_peer(ZmqEndpoint, c) as (a, proc):
        os.killpg(proc.pid, signal.SIGSTOP)
        with pytest.raises(PeerDeadError, match="peer b is dead: no message or heartbeat for"):
            a.recv("b", "pong", ANY_F, timeout=60)


# ---- inbox bound and latency accounting -----------------------------------------------------
def test_a_peer_flooding_the_inbox_is_cut_off(tmp_path):
    from secinfer.errors import InboxFullError

    c = _cluster(tmp_path)
    eps = _endpoints(c, per_party={"b": {"max_inbox": 64 * 1024}})
    a, b = eps["a"], eps["b"]
    try:
        assert a.max_inbox >= 1 << 30  # generous default
        chunk = np.zeros(16 * 1024 // 8, dtype=np.uint64)
        for _ in range(8):             # b consumes nothing meanwhile
            a.send("b", "flood", chunk)
        deadline = time.monotonic() + 10
        while "a" not in b._fatal and time.monotonic() < deadline:
            time.sleep(0.01)
        got = 0
        with pytest.raises(InboxFullError, match=r"a sent more than the inbox limit of 65536 bytes"):
            for _ in range(8):
                b.recv("a", "flood", ANY_U, timeout=10)
                got += 1
        assert got == 3                # what fitted is delivered in order, then the error
        assert b._queued["a"] == 0
        with pytest.raises(InboxFullError):  # the peer stays cut off
            b.send("a", "x", np.ones(1))
    finally:
        for e in eps.values():
            e.close(flush=False)


def test_consumed_frames_free_the_inbox(tmp_path):
    c = _cluster(tmp_path)
    eps = _endpoints(c, per_party={"b": {"max_inbox": 64 * 1024}})
    a, b = eps["a"], eps["b"]
    try:
        chunk = np.zeros(16 * 1024 // 8, dtype=np.uint64)
        for _ in range(20):            # 320 KiB in total, never more than 2 frames waiting
            a.send("b", "x", chunk)
            b.recv("a", "x", ANY_U, timeout=10)
        assert b._queued["a"] == 0 and "a" not in b._fatal
    finally:
        for e in eps.values():
            e.close(flush=False)


def test_release_time_counts_the_latency_from_the_senders_stamp(tmp_path):
    import struct

    c = _cluster(tmp_path, network="lat=20")
    eps = _endpoints(c)
    a = eps["a"]
    try:
        st = lambda t: struct.pack("<d", t)  # noqa: E731
        assert a._same_clock["b"]              # loopback: one CLOCK_MONOTONIC
        # sent 5 ms before it arrived: released 20 ms after it was sent
        assert a._release_time("b", 100.0, st(99.995)) == pytest.approx(100.015)
        # a stamp from the future (or a foreign clock) holds nothing back beyond arrival + latency
        assert a._release_time("b", 100.0, st(500.0)) == pytest.approx(100.020)
        # a frame older than the latency is released on arrival
        assert a._release_time("b", 100.0, st(1.0)) == pytest.approx(100.0)
        a._same_clock["b"] = False             # another host: arrival + latency
        assert a._release_time("b", 100.0, st(99.995)) == pytest.approx(100.020)
    finally:
        for e in eps.values():
            e.close(flush=False)
