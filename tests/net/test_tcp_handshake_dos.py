"""Issue #22 item 4: an unauthenticated connection can neither block nor fail a session.
Handshakes are served concurrently, each with its own deadline for the whole exchange."""

import socket
import threading
import time

import numpy as np
import pytest

from secinfer.net import tcp_handshake, tcp_transport
from secinfer.net.tcp_transport import TcpEndpoint
from transport_helpers import ANY_F, all_endpoints, loopback_cluster  # tests/net helper

pytestmark = pytest.mark.timeout(90)


def _slowloris(host, port, stop, log):
    """SITCP magic, a role length of 200, then one byte every 2 s (each byte well within a
    per-read timeout, the whole handshake never)."""
    while not stop.is_set():
        try:
            s = socket.create_connection((host, port), timeout=1)
            break
        except OSError:
            time.sleep(0.02)
    else:
        return
    try:
        s.sendall(tcp_transport.MAGIC + bytes([200]))
        log.append("connected")
        while not stop.wait(2.0):
            s.sendall(b"x")
    except OSError:
        log.append("dropped")
    finally:
        s.close()


def _garbage(host, port, stop):
    while not stop.is_set():
        try:
            with socket.create_connection((host, port), timeout=1) as s:
                s.sendall(b"GET / HTTP/1.0\r\n\r\n" + bytes(range(256)))
        except OSError:
            pass
        stop.wait(0.05)


def test_a_slowloris_and_garbage_connections_neither_block_nor_fail_the_session(tmp_path, monkeypatch):
    monkeypatch.setattr(tcp_handshake, "HANDSHAKE_TIMEOUT", 3.0)
    c = loopback_cluster(tmp_path, "tcp", roles=("p0", "p1", "p2"), connect_timeout=20.0)
    p0 = c.party("p0")
    stop = threading.Event()
    log: list = []
    attackers = [threading.Thread(target=_slowloris, args=(p0.host, p0.port, stop, log), daemon=True)
                 for _ in range(3)]
    attackers.append(threading.Thread(target=_garbage, args=(p0.host, p0.port, stop), daemon=True))
    for t in attackers:
        t.start()
    try:
        # the slow connections reach p0's listener before the real parties start
        deadline = time.monotonic() + 5
        while log.count("connected") < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        t0 = time.monotonic()
        eps = all_endpoints(TcpEndpoint, c)
        took = time.monotonic() - t0
        try:
            eps["p1"].send("p0", "x", np.ones(3))
            assert np.array_equal(eps["p0"].recv("p1", "x", ANY_F, timeout=5)[0], np.ones(3))
        finally:
            for e in eps.values():
                e.close(flush=False)
        assert took < 3.0, f"the session took {took:.1f}s to connect"
    finally:
        stop.set()
        for t in attackers:
            t.join(5)
