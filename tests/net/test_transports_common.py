"""What both socket transports (``tcp``, the default, and ``zmq``) must do alike, run
against each: exchange and metering, a real second process, naming unreachable peers,
announced aborts, modelled latency, a close that never hangs."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from secinfer.errors import PeerAbortedError, PeerUnreachableError
from secinfer.net.channel import ArraySpec
from secinfer.runtime.party import endpoint_class
from transport_helpers import ANY_F, ANY_U, PEER_SCRIPT, all_endpoints, loopback_cluster  # tests/net helper

pytestmark = pytest.mark.timeout(60)
TRANSPORTS = pytest.mark.parametrize("transport", ["tcp", "zmq"])


def _pair(tmp_path, transport, **settings):
    eps = all_endpoints(endpoint_class(transport), loopback_cluster(tmp_path, transport, **settings))
    return eps["a"], eps["b"]


def _close(*eps):
    for e in eps:
        e.close(flush=False)


@TRANSPORTS
def test_exchange_and_metering_equal_the_bytes_sent(tmp_path, transport):
    a, b = _pair(tmp_path, transport)
    try:
        arrays = [np.arange(10, dtype=np.uint64), np.linspace(0, 1, 7), np.zeros((3, 4), dtype=np.uint8)]
        a.send("b", "t1", *arrays)
        got = b.recv("a", "t1", ArraySpec(np.uint64, (10,)), ArraySpec(np.float64, (7,)),
                     ArraySpec(np.uint8, (3, 4)))
        for x, y in zip(arrays, got):
            assert x.dtype == y.dtype and np.array_equal(x, y)
        with a.phase("online"):
            for i in range(5):
                a.send("b", "t2", np.full(100 * (i + 1), i, dtype=np.uint64))
        with b.phase("online"):
            for i in range(5):
                (v,) = b.recv("a", "t2", ANY_U)
                assert v.shape == (100 * (i + 1),) and np.all(v == i)
        payload = sum(x.nbytes for x in arrays) + sum(800 * (i + 1) for i in range(5))
        assert a.meter.total(direction="sent") == payload
        assert b.meter.total(direction="recv") == payload
        assert a.meter.total(direction="sent", kind="wire") == a.stats["bytes_sent"] == b.stats["bytes_recv"]
        assert a.stats["frames_sent"] == 6 == b.stats["frames_recv"]
        assert a.meter.total("online", "sent") == sum(800 * (i + 1) for i in range(5))
    finally:
        _close(a, b)


@TRANSPORTS
def test_two_processes_exchange(tmp_path, transport):
    c = loopback_cluster(tmp_path, transport)
    proc = subprocess.Popen([sys.executable, PEER_SCRIPT, str(c.path), "b", "nonce1", "echo", "20"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with endpoint_class(transport).from_cluster(c, "a", c.load_secret("a"), c.session_id("nonce1")) as a:
            for i in range(20):
                x = np.arange(i + 1, dtype=np.float64) * i
                a.send("b", "ping", x)
                (y,) = a.recv("b", "pong", ANY_F)
                assert np.array_equal(y, x + 1)
        assert proc.wait(20) == 0, proc.stdout.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@TRANSPORTS
def test_unreachable_peer_is_named(tmp_path, transport):
    c = loopback_cluster(tmp_path, transport, roles=("a", "b", "c"))
    t0 = time.monotonic()
    with pytest.raises(PeerUnreachableError, match=r"b \(tcp://127\.0\.0\.1:\d+\)") as ei:
        endpoint_class(transport).from_cluster(c, "a", c.load_secret("a"), c.session_id("n"), connect_timeout=1.0)
    assert "c (tcp" in str(ei.value)
    assert time.monotonic() - t0 < 10


@TRANSPORTS
def test_abort_reaches_the_peer(tmp_path, transport):
    a, b = _pair(tmp_path, transport)
    try:
        err = a.abort("mac-check", "b", "tag mismatch")
        assert err.check == "mac-check"
        with pytest.raises(PeerAbortedError, match="mac-check"):
            b.recv("a", "anything", ANY_F, timeout=5)
    finally:
        _close(a, b)


@TRANSPORTS
def test_latency_adds_per_round(tmp_path, transport):
    a, b = _pair(tmp_path, transport, network="lat=20")
    try:
        t0 = time.perf_counter()
        for _ in range(5):
            a.send("b", "ping", np.ones(1))
            b.recv("a", "ping", ANY_F)
            b.send("a", "pong", np.ones(1))
            a.recv("b", "pong", ANY_F)
        assert time.perf_counter() - t0 >= 10 * 0.020 * 0.95
    finally:
        _close(a, b)


@TRANSPORTS
def test_close_does_not_hang_and_is_idempotent(tmp_path, transport):
    a, b = _pair(tmp_path, transport)
    t0 = time.monotonic()
    a.close()
    a.close()
    b.close(flush=False)
    assert time.monotonic() - t0 < 10
