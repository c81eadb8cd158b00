"""What the two socket transports (``tcp_transport``, ``zmq_transport``) share: a peer's
address, key and link profiles, the endpoint arguments a cluster file gives, the state
both set up alike (``SocketEndpoint``), and the timed delivery of frames at their release
time."""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

from secinfer.errors import AuthenticationError, NetworkError, PeerDeadError
from secinfer.net.channel import DEFAULT_RECV_TIMEOUT, Endpoint
from secinfer.net.codec import DEFAULT_MAX_FRAME
from secinfer.net.shaping import NONE, LinkProfile, fine_timer_slack

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


def context_mismatch(me: str, peer: str, ours: str, theirs: str) -> str:
    return (f"{me}: {peer} runs {theirs!r} and we run {ours!r} (protocol/security/fixed-point): every party "
            "must be started with the same protocol, security level and fixed-point configuration")


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


class SocketEndpoint(Endpoint):
    """An ``Endpoint`` on real sockets: the arguments, limits, per-peer inboxes, counters and
    latency model both transports share. Subclasses open their sockets after this."""

    def __init__(self, me: str, identity, peers: list[PeerInfo], session_id: bytes, *,
                 max_frame: int = DEFAULT_MAX_FRAME, recv_timeout: float = DEFAULT_RECV_TIMEOUT,
                 connect_timeout: float = 30.0, heartbeat_interval: float = 0.5, peer_timeout: float = 10.0,
                 max_inbox: int | None = None, context: str = "") -> None:
        super().__init__(me, [p.role for p in peers], session_id, max_frame=max_frame, recv_timeout=recv_timeout)
        if len(session_id) != 16:
            raise NetworkError("session id must be 16 bytes")
        self.identity = identity
        # what every party must agree on besides the session (protocol, security level,
        # fixed-point configuration): compared in the handshake, a mismatch named at once
        self.context = str(context)[:200]
        self.info = {p.role: p for p in peers}
        self.connect_timeout = connect_timeout
        self.heartbeat_interval = heartbeat_interval
        self.peer_timeout = peer_timeout
        # bytes a peer may have waiting here (received, not yet consumed by the protocol):
        # beyond that the peer is cut off with InboxFullError instead of exhausting memory
        self.max_inbox = max(MIN_INBOX, 2 * max_frame) if max_inbox is None else int(max_inbox)
        if self.max_inbox < 1:
            raise NetworkError(f"max_inbox must be positive, got {max_inbox}")
        self._queued = {p: 0 for p in self.peers}
        self._inbox: dict[str, collections.deque] = {p: collections.deque() for p in self.peers}
        self._fatal: dict[str, Exception] = {}
        self._bye_from: set[str] = set()
        self._bye_reason: dict[str, str] = {}   # why a peer left (empty: it finished)
        self._refused: list[str] = []
        self.stats = {"frames_sent": 0, "bytes_sent": 0, "frames_recv": 0, "bytes_recv": 0}
        self._closed = False
        # on a loopback link both ends read the same CLOCK_MONOTONIC: the one-way latency is
        # counted from the sender's send time, so the real transport time is part of it
        self._same_clock = {p: is_loopback(i.url) for p, i in self.info.items()}
        self._latency = {p: i.in_profile.latency for p, i in self.info.items()}
        if any(not (i.in_profile.is_null and i.out_profile.is_null) for i in self.info.values()):
            fine_timer_slack()  # this (protocol) thread waits for release times; threads it starts inherit it

    @classmethod
    def from_cluster(cls, cluster, party_id: str, identity, session_id: bytes,
                     network: LinkProfile | None = None, **kw):
        """Build the endpoint of ``party_id`` from a ``secinfer.runtime.cluster.Cluster``."""
        return cls(*endpoint_args(cluster, party_id, identity, session_id, network, kw), **kw)

    def _closed_error(self, peer: str) -> PeerDeadError:
        """The error of a receive from ``peer`` after its bye: why it left (its bye says),
        led by any other peer that vanished without a bye (the likely first cause: a killed
        client makes the dealer fail and leave, and the server must blame the client)."""
        reason = self._bye_reason.get(peer, "")
        gone = [str(e) for p, e in self._fatal.items() if p != peer and isinstance(e, PeerDeadError)]
        gone += [f"{self.me}: peer {p} is dead: {why}" for p, why in getattr(self, "_dead", {}).items()
                 if p != peer and p not in self._fatal]
        left = (f"peer {peer} failed and closed the session ({reason})" if reason
                else f"peer {peer} closed the session (it finished)")
        if gone:
            return PeerDeadError("; ".join(gone) + f"; then {left}")
        return PeerDeadError(f"{self.me}: {left}")

    def _send_after_bye(self, peer: str) -> PeerDeadError:
        """The error of a send to ``peer`` after its bye, with why it left (its bye says):
        a failed peer's own cause, not only that it left."""
        reason = self._bye_reason.get(peer, "")
        why = f" (it failed: {reason})" if reason else ""
        return PeerDeadError(f"{self.me}: cannot send to {peer}: it has closed the session{why}")

    def _release_at(self, peer: str, arrival: float, stamp: float) -> float:
        """When a frame that arrived at ``arrival`` reaches the protocol: ``latency`` after it
        was sent (same host: the sender's stamp; the real loopback time counts towards the
        modelled latency) but never before it arrived nor later than ``arrival + latency``
        (so a peer's stamp cannot hold its frames back, and a foreign clock is harmless)."""
        lat = self._latency[peer]
        if lat == 0.0:
            return arrival
        if self._same_clock[peer]:
            t = stamp + lat
            return arrival if t < arrival else min(t, arrival + lat)
        return arrival + lat


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
