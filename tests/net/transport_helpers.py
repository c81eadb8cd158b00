"""Set-up shared by the transport tests: a loopback cluster and every party's endpoint."""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from secinfer.errors import AuthenticationError, PeerDeadError
from secinfer.net.channel import ArraySpec
from secinfer.net.peers import PeerInfo
from secinfer.runtime.cluster import load_cluster, write_loopback_cluster

ANY_F = ArraySpec(np.float64, (None,))
ANY_U = ArraySpec(np.uint64, (None,), max_elems=1 << 30)
PEER_SCRIPT = str(Path(__file__).with_name("zmq_peer.py"))   # a party in its own process


def loopback_cluster(tmp_path, transport: str, roles=("a", "b"), **settings):
    settings.setdefault("connect_timeout", 10.0)
    return load_cluster(write_loopback_cluster(tmp_path / "cluster", roles, transport=transport, **settings))


def all_endpoints(endpoint_cls, c, nonce="n", per_party=None, **kw):
    """Build every party's endpoint concurrently (each waits for the others)."""
    eps, errs = {}, {}
    per_party = per_party or {}

    def mk(pid):
        try:
            eps[pid] = endpoint_cls.from_cluster(c, pid, c.load_secret(pid), c.session_id(nonce),
                                                 **{**kw, **per_party.get(pid, {})})
        except Exception as e:  # noqa: BLE001 - re-raised below
            errs[pid] = e

    ts = [threading.Thread(target=mk, args=(p,)) for p in c.parties]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        for e in eps.values():
            e.close(flush=False)
        raise next(iter(errs.values()))
    return eps


@contextlib.contextmanager
def three_endpoints(kind: str, tmp_path):
    """Endpoints "a", "b", "c" of one transport kind ("local", "tcp-native", "tcp-python",
    "zmq") on loopback: (the endpoints by name, the in-memory hub or None); closed after."""
    from secinfer.net.channel import LocalHub
    from secinfer.net.tcp_transport import TcpEndpoint
    from secinfer.net.zmq_transport import ZmqEndpoint

    if kind == "local":
        hub = LocalHub(("a", "b", "c"), recv_timeout=10)
        yield hub.endpoints, hub
        return
    if kind == "zmq":
        eps = all_endpoints(ZmqEndpoint, loopback_cluster(tmp_path, "zmq", roles=("a", "b", "c")))
    else:
        eps = all_endpoints(TcpEndpoint, loopback_cluster(tmp_path, "tcp", roles=("a", "b", "c")),
                            native=kind == "tcp-native")
    try:
        yield eps, None
    finally:
        for e in eps.values():
            e.close(flush=False)


def pair_fixture(endpoint_cls, transport: str):
    """A pytest fixture: endpoints of parties "a" and "b" on a loopback cluster of
    ``transport``, closed after the test."""
    @pytest.fixture
    def pair(tmp_path):
        eps = all_endpoints(endpoint_cls, loopback_cluster(tmp_path, transport))
        yield eps["a"], eps["b"]
        for e in eps.values():
            e.close(flush=False)
    return pair


@contextlib.contextmanager
def idle_peer(endpoint_cls, c):
    """Party "b" idling in its own process (``PEER_SCRIPT``) and party "a"'s endpoint,
    once b reports ready; yields (a, b's process). b's process group is killed after."""
    proc = subprocess.Popen([sys.executable, PEER_SCRIPT, str(c.path), "b", "n", "idle"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    a = None
    try:
        a = endpoint_cls.from_cluster(c, "a", c.load_secret("a"), c.session_id("n"))
        assert proc.stdout.readline().strip() == b"ready"
        yield a, proc
    finally:
        if a is not None:   # (no flush: b may be dead, so frames sent to it may be lost)
            a.close(flush=False)
        if proc.poll() is None:         # also a stopped (SIGSTOP) process
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def seconds_to_detect_killed_peer(endpoint_cls, c, match: str) -> float:
    """Party b (its own process, ``idle_peer``) is SIGKILLed after a's first message; a's
    next receive from b must raise PeerDeadError matching ``match``: how long that took."""
    with idle_peer(endpoint_cls, c) as (a, proc):
        a.send("b", "ping", np.ones(2))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        t0 = time.monotonic()
        with pytest.raises(PeerDeadError, match=match):
            a.recv("b", "pong", ANY_F, timeout=60)
        return time.monotonic() - t0


def impostor_attempt(endpoint_cls, c, impostor):
    """An impostor with identity ``impostor`` claims to be "b" while "a" builds its
    endpoint; returns (the AuthenticationError a raised, {"imp": endpoint} or
    {"imp_err": the impostor's exception})."""
    ea = c.party("a")
    peers = [PeerInfo("a", ea.connect_url(), ea.public_key)]
    box = {}

    def run_impostor():
        try:
            box["imp"] = endpoint_cls("b", impostor, c.party("b").bind_url(), peers, c.session_id("n"),
                                      connect_timeout=2.0)
        except Exception as e:  # noqa: BLE001
            box["imp_err"] = e

    t = threading.Thread(target=run_impostor)
    t.start()
    with pytest.raises(AuthenticationError) as ei:
        endpoint_cls.from_cluster(c, "a", c.load_secret("a"), c.session_id("n"), connect_timeout=2.0)
    t.join()
    return ei.value, box
