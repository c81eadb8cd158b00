"""What the two socket transports (``tcp_transport``, ``zmq_transport``) share: a peer's
address, key and link profiles, the endpoint arguments a cluster file gives, and the
timed delivery of frames at their release time."""

from __future__ import annotations

import time
from dataclasses import dataclass

from secinfer.errors import AuthenticationError
from secinfer.net.shaping import NONE, LinkProfile

MIN_INBOX = 1 << 30   # default per-peer inbox bound: max(1 GiB, 2 x the frame cap)
# the protocol thread sleeps until this long before a frame's release time, then spins, so
# that a timed wake-up's lateness (tens of microseconds on a VM) is not added to every hop
SPIN_BEFORE_RELEASE = 30e-6


@dataclass(frozen=True)
class PeerInfo:
    role: str
    url: str                           # tcp://host:port it listens on
    public_key: bytes                  # z85
    out_profile: LinkProfile = NONE    # me -> peer
    in_profile: LinkProfile = NONE     # peer -> me


def endpoint_args(cluster, party_id: str, identity, session_id: bytes, network, kw: dict) -> tuple:
    """(role, identity, bind url, peers, session id) of ``party_id`` in a
    ``secinfer.runtime.cluster.Cluster``; fills ``kw`` with the cluster's timeouts and cap."""
    me = cluster.party(party_id)
    if identity.public != me.public_key:
        raise AuthenticationError(f"{party_id}: our secret key does not match the cluster file's public key")
    peers = [PeerInfo(p.role, p.connect_url(), p.public_key,
                      cluster.profile(party_id, p.id, network), cluster.profile(p.id, party_id, network))
             for p in cluster.parties.values() if p.id != party_id]
    kw.setdefault("connect_timeout", cluster.connect_timeout)
    kw.setdefault("heartbeat_interval", cluster.heartbeat_interval)
    kw.setdefault("peer_timeout", cluster.peer_timeout)
    if cluster.max_frame is not None:
        kw.setdefault("max_frame", cluster.max_frame)
    return me.role, identity, me.bind_url(), peers, session_id


def sleep_until(t: float) -> None:
    """Return at ``t`` (``time.monotonic()``): sleep until shortly before, then spin."""
    left = t - time.monotonic()
    if left > SPIN_BEFORE_RELEASE:
        time.sleep(left - SPIN_BEFORE_RELEASE)
    while time.monotonic() < t:
        pass


def is_loopback(url: str) -> bool:
    host = url.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")
