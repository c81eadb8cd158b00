"""The socket transport: one OS process per party, pyzmq with CURVE (authenticated + encrypted).

Topology. Every party binds one PULL socket on its own port (CURVE server) and connects
two PUSH sockets to every peer (CURVE clients, pinned to that peer's public key): a data
connection (frames, then "bye", strictly ordered) and a control connection (heartbeats,
acknowledgements), so heartbeats never wait behind a large frame. Only
keys listed in the cluster file get in: a ZAP handler (ZeroMQ's authentication hook,
implemented here) accepts a CURVE client key iff it is a peer's and tags the connection
with that peer's role as ZMQ "User-Id"; every received message is attributed to the
peer its *authenticated key* belongs to, never to a name the message claims. Unknown
keys are refused and recorded, so a peer that cannot get in is reported by name.

Threads. One background I/O thread owns every socket. The protocol thread hands frames
to it through an in-process PAIR socket (no copy for large frames). The I/O thread:

* answers ZAP requests;
* receives frames and appends them to per-peer inboxes with their release time (a frame
  over the cap becomes a ``MessageTooLargeError`` in order; more than ``max_inbox`` bytes
  waiting from one peer cut it off with ``InboxFullError``; libzmq's ``maxmsgsize`` is
  set to cap + slack, a frame above that drops the connection and the reconnection is
  reported as a ``FrameError``, since frames may have been lost);
* sends the paced frames whose time has come (the protocol thread reserves a link's
  token bucket and sends a frame that may leave at once itself); every data frame carries
  its send time and the receiver releases it one-way latency later (``secinfer.net.shaping``);
* sends a heartbeat to every peer every ``heartbeat_interval`` seconds; a peer silent
  for ``peer_timeout`` seconds is dead and pending and future receives from it raise
  ``PeerDeadError``; so is a peer whose connection dropped (libzmq monitor event) and
  that stayed silent for two heartbeat intervals since (a process that exited).

Hello/heartbeat. Each heartbeat carries the session id, the sender's role and the roles
it has heard from. ``connect()`` returns once every peer has been heard *and* has heard
us (a full mesh), or raises ``PeerUnreachableError`` / ``AuthenticationError`` naming
the missing peers after the connect timeout. A peer with another session id (different
cluster file or session nonce) is refused with ``AuthenticationError``.

Close. ``close()`` sends "bye" on every link behind the data already queued and waits
(bounded) until each live peer acknowledges it, so a last message is never lost to
linger 0; then it stops the thread and closes every socket with linger 0. A received
"bye" makes further receives from that peer raise ``PeerDeadError`` (once its queued
frames are consumed), so a failing party's peers stop at once instead of waiting for
the heartbeat timeout.
"""

from __future__ import annotations

import collections
import itertools
import math
import struct
import threading
import time

import zmq
import zmq.backend
from zmq.utils import z85
from zmq.utils.monitor import recv_monitor_message

from secinfer.crypto.identity import Identity
from secinfer.errors import (AuthenticationError, ConfigError, FrameError, InboxFullError, MessageTooLargeError, NetworkError,
                             PeerDeadError, PeerUnreachableError, TimeoutError_)
from secinfer.net.peers import (PeerInfo, SocketEndpoint, context_mismatch,  # PeerInfo re-exported
                                sleep_until as _sleep_until)
from secinfer.net.shaping import TokenBucket

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_DOMAIN = b"secinfer"
HARD_CAP_SLACK = 1 << 20

K_HELLO, K_DATA, K_BYE, K_ACK = b"H", b"D", b"B", b"A"
_STAMP = struct.Struct("<d")  # a data frame's send time (time.monotonic()), for the latency model
C_DATA, C_CLOSE, C_QUIT, C_WAKE = b"D", b"C", b"Q", b"W"
# while the protocol thread reads the PULL socket itself, the I/O thread looks again this often
RX_RETRY = 0.005
# plain ints: pyzmq's enum constants cost a few microseconds per use on the receive path
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)
_NOBLOCK, _NOBLOCK_MORE = int(zmq.NOBLOCK), int(zmq.NOBLOCK) | int(zmq.SNDMORE)
_CLOSED = object()
_ids = itertools.count()
# pyzmq's compiled Socket.send, below its Python wrapper (where the backend is its base class)
_send = zmq.backend.Socket.send if issubclass(zmq.Socket, zmq.backend.Socket) else zmq.Socket.send

_HANDSHAKE_EVENTS = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "the peer refused our key",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "CURVE handshake protocol error (wrong server key?)",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "CURVE handshake failed (wrong server key?)",
}


def _try_send(sock, parts, copy: bool = False) -> bool:
    """Never block the I/O thread: a PUSH with no live connection refuses (zmq.Again).
    ``copy``: small frames are cheaper to copy than to wrap zero-copy."""
    try:
        # send_multipart's enum flag arithmetic costs microseconds per part: plain ints, and
        # pyzmq's own send (the Python wrapper only adds routing ids and groups, unused here)
        for part in parts[:-1]:
            _send(sock, part, _NOBLOCK_MORE, copy)   # the rest of a started message is never refused
        _send(sock, parts[-1], _NOBLOCK, copy)
        return True
    except zmq.Again:
        return False


class ZmqEndpoint(SocketEndpoint):
    """An ``Endpoint`` over CURVE-secured ZeroMQ sockets (see the module docstring)."""

    def __init__(self, me: str, identity: Identity, bind_url: str, peers: list[PeerInfo], session_id: bytes, *,
                 connect: bool = True, **limits) -> None:
        """``limits``: max_frame, recv_timeout, connect_timeout, heartbeat_interval,
        peer_timeout, max_inbox (``SocketEndpoint``, which holds their defaults)."""
        super().__init__(me, identity, peers, session_id, **limits)
        self.bind_url = bind_url
        self.hard_cap = self.max_frame + max(HARD_CAP_SLACK, self.max_frame // 8)
        self._by_key = {p.public_key: p.role for p in peers}
        self._cv = threading.Condition()
        self._last_seen: dict[str, float] = {}
        self._heard_us: set[str] = set()
        self._dead: dict[str, str] = {}
        self._bye_at: dict[str, float] = {}
        self._lost_at: dict[str, float] = {}  # when a connection to the peer dropped
        self._acked: set[str] = set()
        self._sent_to: dict[str, bool] = {}     # peers we sent a data frame to
        self._fatal_seen: dict[str, float] = {}
        self._auth_count: dict[str, int] = collections.Counter()
        self._handshake_errors: dict[str, str] = {}
        self._io_error: BaseException | None = None
        self._hello_now = False
        self._send_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        # per link: guards the data socket (used by both threads) and the count of frames
        # handed to the I/O thread but not yet sent (the fast path must not overtake them)
        self._link_lock = {p: threading.Lock() for p in self.peers}
        self._pending = {p: 0 for p in self.peers}
        self._paced = {p: i.out_profile.bandwidth is not None for p, i in self.info.items()}
        self._buckets = {p: TokenBucket(i.out_profile.bandwidth) for p, i in self.info.items()}
        self._push: dict | None = None
        # the PULL socket: read by the I/O thread, or by the protocol thread itself while it
        # waits in a receive (no hand-off between threads on the critical path); whoever holds
        # _rx_lock reads it (a ZeroMQ socket may move between threads behind a lock)
        self._pull = None
        self._rx_lock = threading.Lock()
        self._rx_want = False           # the protocol thread waits for the socket: the I/O thread lets go
        self._rx_left = 0.0             # when the protocol thread last stopped reading it
        self._ack_due: list[str] = []   # "bye"s received by the protocol thread, acknowledged by the I/O thread
        # three libzmq I/O threads (data out, control out, everything in): a huge frame being
        # encrypted or decrypted never holds up the heartbeats on the control connections
        self._ctx = zmq.Context(io_threads=3)
        self._cmd_url = f"inproc://secinfer-cmd-{next(_ids)}"
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._io_main, name=f"secinfer-io-{me}", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._io_error is not None:
            err = self._io_error
            self._ctx.term()
            raise err
        self._cmd = self._ctx.socket(zmq.PAIR)
        self._cmd.linger = 0
        self._cmd.sndhwm = 0
        self._cmd.connect(self._cmd_url)
        if connect:
            try:
                self.connect()
            except BaseException:
                self.close(timeout=1.0)  # peers we did hear learn at once that we are gone
                raise

    # ---- connection set-up ------------------------------------------------------------
    def connect(self, timeout: float | None = None) -> None:
        """Wait until every peer has been heard and has heard us (full mesh)."""
        t = self.connect_timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        with self._cv:
            while True:
                self._raise_io_error()
                for p in self.peers:
                    if p in self._fatal:
                        # a mismatch seen in the peer's hello: raise once it has heard ours too
                        # (so it names the mismatch as well), or after two seconds
                        mismatch = isinstance(self._fatal[p], (ConfigError, AuthenticationError))
                        first = self._fatal_seen.setdefault(p, time.monotonic())
                        if not mismatch or p in self._heard_us or time.monotonic() - first > 2.0:
                            raise self._fatal[p]
                    if p in self._dead:
                        raise PeerDeadError(f"{self.me}: peer {p} died during connection set-up: {self._dead[p]}")
                    if p in self._bye_from and time.monotonic() - self._bye_at[p] > 0.5:
                        raise PeerDeadError(f"{self.me}: peer {p} left during connection set-up")
                missing = [p for p in self.peers if p not in self._last_seen or p not in self._heard_us]
                if not missing:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(min(left, 0.2))
            raise self._unreachable_error(missing, t)

    def _unreachable_error(self, missing: list[str], t: float) -> Exception:
        unheard = [p for p in missing if p not in self._last_seen]
        deaf = [p for p in missing if p in self._last_seen and p not in self._heard_us]
        parts = []
        if unheard:
            parts.append("no message from " + ", ".join(f"{p} ({self.info[p].url})" for p in unheard))
        if deaf:
            parts.append("our messages do not reach " + ", ".join(deaf)
                         + " (does its cluster file list our public key?)")
        hs = [f"{p}: {self._handshake_errors[p]}" for p in missing if p in self._handshake_errors]
        if hs:
            parts.append("handshake failures: " + "; ".join(hs))
        if self._refused:
            parts.append("refused connection(s) from unknown key(s): " + "; ".join(self._refused[:5]))
        msg = f"{self.me}: could not connect to {', '.join(missing)} within {t:.1f}s: " + "; ".join(parts)
        if self._refused or hs or deaf:
            return AuthenticationError(msg)
        return PeerUnreachableError(msg)

    def _raise_io_error(self) -> None:
        if self._io_error is not None:
            raise NetworkError(f"{self.me}: transport thread failed: {self._io_error!r}") from self._io_error

    # ---- Endpoint hooks -----------------------------------------------------------------
    def _transmit(self, peer: str, frame: bytes) -> None:
        if self._closed:
            raise NetworkError(f"{self.me}: endpoint is closed")
        with self._cv:
            self._raise_io_error()
            if peer in self._fatal:
                raise self._fatal[peer]
            if peer in self._dead:
                raise PeerDeadError(f"{self.me}: cannot send to {peer}: peer is dead ({self._dead[peer]})")
            if peer in self._bye_from:
                raise self._send_after_bye(peer)
        self._sent_to[peer] = True
        lock = self._link_lock[peer]
        with lock:
            now = time.monotonic()
            # the link's token bucket says when the frame may leave (now, unless paced and in debt)
            ready = self._buckets[peer].reserve(len(frame), now) if self._paced[peer] else now
            stamp = _STAMP.pack(ready)
            # fast path (may leave now, nothing queued or in flight to the I/O thread): the
            # protocol thread writes to the data socket itself, under the link's lock
            if ready <= now and self._pending[peer] == 0 and self._push is not None:
                if _try_send(self._push[peer], [K_DATA, frame, stamp], len(frame) < 65536):
                    self._count_sent(len(frame))
                    return
            self._pending[peer] += 1
        with self._send_lock:
            self._cmd.send_multipart([C_DATA, peer.encode(), stamp, frame], copy=len(frame) < 65536)

    def _count_sent(self, n: int) -> None:
        with self._stats_lock:  # both threads send, on different links
            self.stats["frames_sent"] += 1
            self.stats["bytes_sent"] += n

    def _receive(self, peer: str, deadline: float) -> bytes:
        if self._closed:
            raise NetworkError(f"{self.me}: endpoint is closed")
        q = self._inbox[peer]
        while True:
            with self._cv:
                self._raise_io_error()
                now = time.monotonic()
                release = None
                if q:
                    release, item = q[0]
                    if item is _CLOSED:
                        raise self._closed_error(peer)
                    if release <= now:
                        q.popleft()
                        if isinstance(item, Exception):
                            raise item
                        self._queued[peer] -= len(item)
                        return item
                else:
                    if peer in self._fatal:
                        raise self._fatal[peer]
                    if peer in self._dead:
                        raise PeerDeadError(f"{self.me}: peer {peer} is dead: {self._dead[peer]}")
                if now >= deadline:
                    raise TimeoutError_(f"{self.me}: no message from {peer} before the deadline")
            if release is not None:
                # the frame is here but not yet due: sleep, then spin the last microseconds
                _sleep_until(min(release, deadline))
                continue
            self._wait_for_frames(q, deadline)

    def _wait_any(self, peers: list, deadline: float) -> str:
        """The first of ``peers`` whose next frame is due (or that has failed: its receive
        raises); waits like ``_receive``: reads the socket itself, sleeps until a release."""
        qs = [self._inbox[p] for p in peers]
        while True:
            release = None
            with self._cv:
                self._raise_io_error()
                now = time.monotonic()
                first = None
                for p, q in zip(peers, qs):
                    if q:
                        t, item = q[0]
                        if not isinstance(item, (bytes, memoryview)):
                            return p
                        if t <= now:   # (of several due frames, the one released first)
                            if first is None or t < first[0]:
                                first = (t, p)
                            continue
                        release = t if release is None else min(release, t)
                    elif p in self._fatal or p in self._dead:
                        return p
                if first is not None:
                    return first[1]
                if now >= deadline:
                    return peers[0]   # its receive raises the timeout
            if release is not None:
                _sleep_until(min(release, deadline))
                continue
            self._wait_for_frames(qs, deadline)

    def _wait_for_frames(self, q, deadline: float) -> None:
        """Nothing from the peer yet: read the PULL socket in this thread (every message goes
        through ``_on_message`` as in the I/O thread, so heartbeats, byes and other peers'
        frames are handled alike). Only one thread polls the socket at a time: the I/O thread
        holds ``_rx_lock`` while it does and lets go when woken with ``_rx_want`` set; after
        the receive it takes the socket back within ``RX_RETRY``."""
        lock = self._rx_lock
        self._rx_want = True
        try:
            if not lock.acquire(blocking=False):
                with self._send_lock:
                    self._cmd.send(C_WAKE)       # interrupt the I/O thread's poll
                if not lock.acquire(timeout=max(0.0, min(deadline - time.monotonic(), 0.5))):
                    return
            try:
                pull = self._pull
                if pull is None:                 # the I/O thread has stopped
                    with self._cv:
                        if not (any(q) if isinstance(q, list) else q):
                            self._cv.wait(max(0.0, min(deadline - time.monotonic(), 0.05)))
                    return
                if not self._drain(pull):
                    wait = min(deadline - time.monotonic(), 0.05)
                    if wait > 0 and zmq.zmq_poll([(pull, _POLLIN)], max(1, math.ceil(wait * 1000))):
                        self._drain(pull)
            finally:
                self._rx_left = time.monotonic()
                lock.release()
        finally:
            self._rx_want = False

    def _drain(self, pull) -> int:
        """Read every message waiting on the PULL socket (caller holds ``_rx_lock``)."""
        n = 0
        while n < 1000 and pull.get(_EVENTS) & _POLLIN:   # (no zmq.Again exception per call)
            try:
                parts = [pull.recv(_NOBLOCK, copy=False)]
            except zmq.Again:
                break
            while parts[-1].more:   # (recv_multipart asks RCVMORE through pyzmq's enums: microseconds a part)
                parts.append(pull.recv(_NOBLOCK, copy=False))   # (the rest of a message is there at once)
            n += 1
            self._on_message(parts)
        if self._ack_due and threading.current_thread() is not self._thread:
            with self._send_lock:   # the I/O thread owns the control sockets: it sends the acks
                self._cmd.send(C_WAKE)
        return n

    def close(self, flush: bool = True, timeout: float | None = None, reason: str = "") -> None:
        """Say bye behind every frame already queued and, if ``flush``, wait until every
        live peer has acknowledged it (so it has received every frame before it). The wait
        has no fixed bound: it lasts as long as the peer is alive (its heartbeats arrive;
        a peer silent for ``peer_timeout`` is dead) or until ``timeout`` if given. Then stop
        the thread and close every socket with linger 0. Raises ``PeerDeadError`` (after
        closing) when a peer that has not said bye itself did not acknowledge: frames sent
        to it may have been lost. ``reason``: why we leave (empty: we finished), told to
        the peers in the bye."""
        if self._closed:
            return
        self._closed = True
        alive = self._thread.is_alive()
        unacked: list[str] = []
        if flush and alive:
            with self._send_lock:
                self._cmd.send_multipart([C_CLOSE, reason.encode()[:1000]])
            deadline = None if timeout is None else time.monotonic() + timeout
            with self._cv:
                while True:
                    pending = [p for p in self.peers if p in self._last_seen and p not in self._acked
                               and p not in self._bye_from and p not in self._dead and p not in self._fatal]
                    left = 1.0 if deadline is None else deadline - time.monotonic()
                    if not pending or left <= 0 or self._io_error is not None:
                        break
                    self._cv.wait(min(left, 0.2))
                unacked = [p for p in self.peers if p in self._last_seen and p not in self._acked
                           and p not in self._bye_from and self._sent_to.get(p)]
                why = {p: self._dead.get(p) or (str(self._fatal[p]) if p in self._fatal else "no acknowledgement "
                                                "within the close timeout") for p in unacked}
        if alive:
            with self._send_lock:
                try:
                    self._cmd.send_multipart([C_QUIT])
                except zmq.ZMQError:
                    pass
            self._thread.join(5.0)
        self._cmd.close(linger=0)
        if not self._thread.is_alive():
            self._ctx.term()
        if unacked:
            raise PeerDeadError(f"{self.me}: frames sent to " + "; ".join(
                f"{p} may not have been delivered (it did not acknowledge our bye: {why[p]})" for p in unacked))

    # ---- the I/O thread -------------------------------------------------------------------
    def _io_main(self) -> None:
        socks: list = []
        try:
            zap = self._ctx.socket(zmq.REP)
            socks.append(zap)
            zap.linger = 0
            zap.bind(ZAP_ENDPOINT)
            cmd = self._ctx.socket(zmq.PAIR)
            socks.append(cmd)
            cmd.linger = 0
            cmd.rcvhwm = 0
            cmd.bind(self._cmd_url)
            pull = self._ctx.socket(zmq.PULL)
            socks.append(pull)
            pull.linger = 0
            pull.rcvhwm = 0
            pull.curve_server = True
            pull.curve_publickey = self.identity.public
            pull.curve_secretkey = self.identity.secret
            pull.zap_domain = ZAP_DOMAIN
            pull.maxmsgsize = self.hard_cap
            # its own libzmq I/O thread: decrypting a peer's huge frame (seconds on a loaded
            # host) never holds up our heartbeats (control connections: thread 2)
            pull.affinity = 4
            if self.bind_url.startswith("tcp://[") or self.bind_url.count(":") > 2:
                pull.ipv6 = True
            try:
                pull.bind(self.bind_url)
            except zmq.ZMQError as e:
                raise NetworkError(f"{self.me}: cannot listen on {self.bind_url}: {e}") from None
            push: dict[str, zmq.Socket] = {}   # data frames and "bye", in order
            ctl: dict[str, zmq.Socket] = {}    # heartbeats and acks, never queued behind data
            monitors: dict[zmq.Socket, str] = {}
            for p, info in self.info.items():
                for table, affinity in ((push, 1), (ctl, 2)):
                    s = self._ctx.socket(zmq.PUSH)
                    socks.append(s)
                    s.affinity = affinity  # separate libzmq I/O threads: encrypting data never delays heartbeats
                    s.linger = 0
                    s.sndhwm = 0
                    s.reconnect_ivl = 100
                    s.reconnect_ivl_max = 1000
                    s.curve_serverkey = info.public_key
                    s.curve_publickey = self.identity.public
                    s.curve_secretkey = self.identity.secret
                    if info.url.startswith("tcp://["):
                        s.ipv6 = True
                    mon = s.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                               | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_DISCONNECTED)
                    socks.append(mon)
                    monitors[mon] = p
                    s.connect(info.url)
                    table[p] = s
        except BaseException as e:  # noqa: BLE001 - reported to the constructor
            self._io_error = e if isinstance(e, NetworkError) else NetworkError(f"{self.me}: {e}")
            for s in socks:
                s.close(linger=0)
            self._started.set()
            return
        self._push = push
        self._pull = pull
        self._started.set()
        try:
            self._io_loop(zap, cmd, pull, push, ctl, monitors)
        except BaseException as e:  # noqa: BLE001 - surfaced to the protocol thread
            with self._cv:
                self._io_error = e
                self._cv.notify_all()
        finally:
            for lk in (*self._link_lock.values(), self._rx_lock):
                lk.acquire()
            self._push = self._pull = None  # the protocol thread must not touch the sockets any more
            for lk in (*self._link_lock.values(), self._rx_lock):
                lk.release()
            for s in [*push.values(), *ctl.values()]:
                try:
                    s.disable_monitor()
                except zmq.ZMQError:
                    pass
            for s in socks:
                s.close(linger=0)

    def _hello(self) -> bytes:
        heard = ",".join(sorted(self._last_seen))
        return self.session_id + f"{self.me}|{heard}|{self.context}".encode()

    def _io_loop(self, zap, cmd, pull, push, ctl, monitors) -> None:
        poller = zmq.Poller()
        for s in (zap, cmd, pull, *monitors):
            poller.register(s, zmq.POLLIN)
        # the same without the PULL socket: used while the protocol thread reads it itself
        # (it holds _rx_lock), looking again every RX_RETRY seconds
        poller_rx = zmq.Poller()
        for s in (zap, cmd, *monitors):
            poller_rx.register(s, zmq.POLLIN)
        outq: dict[str, collections.deque] = {p: collections.deque() for p in self.info}
        next_hb = 0.0
        closing = False
        prev = time.monotonic()
        while True:
            now = time.monotonic()
            if now - prev > 2 * self.heartbeat_interval:  # the loop wakes at least once per interval
                self._credit_stall(now - prev - self.heartbeat_interval)  # we were not listening
            prev = now
            if now >= next_hb or self._hello_now:
                self._hello_now = False
                hello = self._hello()
                for s in ctl.values():
                    _try_send(s, [K_HELLO, hello])  # dropped when the link is down
                self._check_liveness(now)
                next_hb = now + self.heartbeat_interval
            wake = next_hb
            for p, q in outq.items():  # paced frames whose time has come
                blocked = False
                if q and q[0][0] <= now:
                    with self._link_lock[p]:
                        while q and q[0][0] <= now:
                            if not _try_send(push[p], q[0][1]):
                                blocked = True  # no connection right now: retry shortly, keep the order
                                break
                            _, parts = q.popleft()
                            if parts[0] == K_DATA:
                                self._pending[p] -= 1
                                self._count_sent(len(parts[1]))
                if q:
                    wake = min(wake, now + 0.02 if blocked else q[0][0])
            if self._ack_due:
                self._send_acks(ctl)
            # poll the PULL socket only while owning it (the protocol thread may be reading it);
            # take it back only after the protocol thread left it alone for RX_RETRY, so that
            # a protocol receiving often rarely has to wake this thread to get it
            own = (not self._rx_want and now - self._rx_left >= RX_RETRY
                   and self._rx_lock.acquire(blocking=False))
            if not own:
                wake = min(wake, now + RX_RETRY)
            timeout_ms = max(0, math.ceil((wake - time.monotonic()) * 1000))
            try:
                ready = (poller if own else poller_rx).poll(timeout_ms)
                if own and any(sock is pull for sock, _ev in ready):
                    self._drain(pull)
            finally:
                if own:
                    self._rx_lock.release()
            if self._ack_due:
                self._send_acks(ctl)
            for sock, _ev in ready:
                if sock is pull:
                    continue
                elif sock is zap:
                    self._on_zap(zap)
                elif sock is cmd:
                    msg = cmd.recv_multipart(copy=False)
                    kind = msg[0].bytes
                    if kind == C_QUIT:
                        return
                    if kind == C_WAKE:
                        continue  # the protocol thread wants the PULL socket, or acks are due
                    if kind == C_DATA:
                        peer = msg[1].bytes.decode()
                        stamp, frame = msg[2].bytes, msg[3]
                        parts = [K_DATA, frame, stamp]
                    elif kind == C_CLOSE and not closing:
                        closing = True
                        why = msg[1].bytes if len(msg) > 1 else b""
                        for p in push:
                            with self._link_lock[p]:
                                outq[p].append((0.0, [K_BYE, why]))  # behind the data already queued
                        continue
                    else:
                        continue
                    t_now = time.monotonic()
                    ready = _STAMP.unpack(stamp)[0]
                    with self._link_lock[peer]:
                        if ready <= t_now and not outq[peer] and _try_send(push[peer], parts):
                            self._pending[peer] -= 1
                            self._count_sent(len(frame))
                            continue
                        if outq[peer]:
                            ready = max(ready, outq[peer][-1][0])
                        outq[peer].append((ready, parts))
                else:
                    self._on_monitor(sock, monitors[sock])

    def _credit_stall(self, gap: float) -> None:
        with self._cv:
            for p in self._last_seen:
                self._last_seen[p] += gap

    def _check_liveness(self, now: float) -> None:
        changed = False
        with self._cv:
            for p, seen in self._last_seen.items():
                if p in self._dead or p in self._bye_from:
                    continue
                lost = self._lost_at.get(p)
                if lost is not None and seen > lost:
                    del self._lost_at[p]  # it came back (reconnected): a network blip, not a death
                    lost = None
                if now - seen > self.peer_timeout:
                    self._dead[p] = (f"no message or heartbeat for {now - seen:.1f}s (peer timeout {self.peer_timeout:g}s; "
                                     "raise it with --peer-timeout if a party stalls for longer in one call)")
                    changed = True
                elif lost is not None and now - lost > max(2 * self.heartbeat_interval, 0.5):
                    # its TCP connections closed and it has been silent since: the process is gone
                    self._dead[p] = (f"connection lost {now - lost:.1f}s ago and no heartbeat since "
                                     "(process exited or host unreachable)")
                    changed = True
            if changed:
                self._cv.notify_all()

    def _on_zap(self, zap) -> None:
        req = zap.recv_multipart()
        # [ZAP RFC 27] version, request id, domain, address, identity, mechanism, credentials...
        if len(req) < 6:
            return
        version, request_id, _domain, address, _ident, mechanism = req[:6]
        creds = req[6:]
        role = None
        if mechanism == b"CURVE" and creds and len(creds[0]) == 32:
            key = z85.encode(creds[0])
            role = self._by_key.get(key)
            if role is None:
                with self._cv:
                    self._refused.append(f"{address.decode(errors='replace')} key {key.decode()[:10]}...")
                    self._cv.notify_all()
        if role is None:
            zap.send_multipart([version, request_id, b"400", b"unknown key", b"", b""])
            return
        with self._cv:
            # each peer opens exactly two connections (data, control); ZAP does not say which,
            # so any further authentication means one of them was reset and re-established
            self._auth_count[role] += 1
            if self._auth_count[role] > 2 and role in self._last_seen and role not in self._bye_from:
                err = FrameError(
                    f"{self.me}: the connection from {role} was reset and re-established mid-session, so frames "
                    f"may have been lost (a frame above the transport's hard cap of {self.hard_cap} bytes, "
                    f"or a network failure)")
                self._inbox[role].append((0.0, err))
                self._fatal.setdefault(role, err)
                self._cv.notify_all()
        zap.send_multipart([version, request_id, b"200", b"OK", role.encode(), b""])

    def _on_monitor(self, mon, peer: str) -> None:
        try:
            ev = recv_monitor_message(mon)
        except zmq.ZMQError:
            return
        if ev.get("event") == zmq.EVENT_DISCONNECTED:
            with self._cv:
                if peer in self._last_seen and peer not in self._bye_from:
                    self._lost_at.setdefault(peer, time.monotonic())
            return
        why = _HANDSHAKE_EVENTS.get(ev.get("event"))
        if why:
            with self._cv:
                self._handshake_errors[peer] = why
                self._cv.notify_all()

    def _send_acks(self, ctl) -> None:
        with self._cv:
            due, self._ack_due = self._ack_due, []
        for p in due:
            _try_send(ctl[p], [K_ACK])

    def _on_message(self, parts) -> None:
        """One received message (either thread, holding ``_rx_lock``)."""
        now = time.monotonic()
        peer = parts[0].get("User-Id")
        if peer not in self._inbox:
            return  # cannot happen: ZAP admits peers only
        kind = parts[0].bytes
        with self._cv:
            if peer not in self._last_seen:
                self._hello_now = True  # tell everyone at once that we hear this peer
            self._last_seen[peer] = now
            if kind == K_DATA and len(parts) == 3 and len(parts[2]) == _STAMP.size:
                n = len(parts[1])
                self.stats["frames_recv"] += 1
                self.stats["bytes_recv"] += n
                if peer in self._fatal:
                    return  # cut off (inbox overflow, reset connection): nothing more is kept
                if n > self.max_frame:
                    item: object = MessageTooLargeError(
                        f"{self.me} <- {peer}: frame of {n} bytes exceeds the cap of {self.max_frame} bytes")
                elif self._queued[peer] + n > self.max_inbox:
                    item = InboxFullError(
                        f"{self.me} <- {peer}: {peer} sent more than the inbox limit of {self.max_inbox} bytes "
                        f"before they were consumed ({self._queued[peer]} queued + a frame of {n}); "
                        f"peer cut off (raise max_inbox if a protocol step really queues that much)")
                    self._fatal[peer] = item
                else:
                    item = parts[1].buffer  # no copy: the frame owns the memory, decode copies out
                    self._queued[peer] += n
                self._inbox[peer].append((self._release_time(peer, now, parts[2].bytes), item))
            elif kind == K_HELLO and len(parts) == 2:
                self._on_hello(peer, parts[1].bytes)
            elif kind == K_BYE:
                if peer not in self._bye_from:
                    self._bye_reason[peer] = parts[1].bytes[:1000].decode(errors="replace") if len(parts) > 1 else ""
                    self._bye_from.add(peer)
                    self._bye_at[peer] = now
                    self._inbox[peer].append((0.0, _CLOSED))
                self._ack_due.append(peer)
            elif kind == K_ACK:
                self._acked.add(peer)
            else:
                self._inbox[peer].append((0.0, FrameError(f"{self.me} <- {peer}: malformed transport message")))
            self._cv.notify_all()

    def _release_time(self, peer: str, arrival: float, stamp: bytes) -> float:
        """``SocketEndpoint._release_at`` for a frame's packed send stamp (unpacked only when
        the link has a latency)."""
        if not self._latency[peer]:
            return arrival
        return self._release_at(peer, arrival, _STAMP.unpack(stamp)[0])

    def _on_hello(self, peer: str, body: bytes) -> None:
        sid, rest = body[:16], body[16:]
        claimed, _, tail = rest.decode(errors="replace").partition("|")
        heard, _, ctx = tail.partition("|")
        if sid != self.session_id:
            self._fatal.setdefault(peer, AuthenticationError(
                f"{self.me}: peer {peer} is in another session (session id {sid.hex()} vs ours "
                f"{self.session_id.hex()}): session mismatch; every party must use the same cluster file and "
                "session nonce (--session)"))
        elif ctx != self.context:
            self._fatal.setdefault(peer, ConfigError(context_mismatch(self.me, peer, self.context, ctx)))
        if claimed != peer:
            self._fatal.setdefault(peer, AuthenticationError(
                f"{self.me}: the key of {peer} announces itself as {claimed!r}"))
        elif self.me in heard.split(","):
            self._heard_us.add(peer)   # (also on a mismatch: connect() waits for it, so both sides learn it)
