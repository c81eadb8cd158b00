"""Set-up shared by the transport tests: a loopback cluster and every party's endpoint."""

import threading
from pathlib import Path

import numpy as np
import pytest

from secinfer.net.channel import ArraySpec
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
