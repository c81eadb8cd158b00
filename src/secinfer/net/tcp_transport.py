"""The direct TCP transport: one OS process per party, one encrypted TCP stream per direction.

Why a second transport. On the 2-core VMs this project measures on, every ZeroMQ hop
crosses three threads (the sender's libzmq I/O thread, the receiver's, then the
protocol thread); each hand-off is a wake-up of an idle vCPU. Measured 2026-11-24 with a
784-float ping-pong: our ZeroMQ endpoint 0.39 ms round trip busy, 0.54 ms with 2 ms
pauses; bare pyzmq with CURVE 0.17 ms; a bare TCP socket 0.02 / 0.06 ms. Here the
protocol thread writes its frames to the socket itself and, when it waits for a frame,
reads the socket itself: one wake-up per hop. Same ``Endpoint`` interface, same keys and
cluster files as ``zmq_transport`` (select it with ``transport = "tcp"``).

Topology. Every party listens on its own port; for every ordered pair (a, b), a connects
to b and that stream carries a's frames to b (b never writes data on it).

The pieces: ``tcp_handshake`` opens and keys each stream (Noise KK over X25519, the
session id and context bound into the keys; a mismatch named at once); ``tcp_links``
holds the record format (AES-256-GCM, nonce = record counter, header authenticated) and
the per-link writer threads; this module is the ``Endpoint``: connecting, sending,
receiving (reader thread or the protocol thread itself) and closing; ``tcp_reader``
parses the records of the peers' streams; ``tcp_fast`` is the endpoint's ``send`` and
``recv`` for a small frame of one array on the native layer (one Go call each, frame
templates), which hands every other case to ``Endpoint``'s general path.

Liveness. A background thread sends a heartbeat on every stream each
``heartbeat_interval``; a receiver waiting for a peer that sends nothing (no byte) for
``peer_timeout`` declares it dead (a frozen process); a closed stream without a bye
(the process exited or was killed) is reported at once. Close sends bye on every stream,
after the frames already queued.

Record layer. By default the records are sealed, sent, received and opened by the native
record layer (``native_link``, Go: a small frame is one call to send, a receive one call
that waits, reads and decrypts with the GIL released), else by the Python one
(``tcp_links``); both speak the same records with the same checks, so parties of either
kind interoperate. ``native=False`` (or ``SECINFER_TCP_NATIVE=0`` in the environment, for
whole runs) selects the Python layer; without a built native library it is used anyway.
Pacing, heartbeats, liveness and close are the same Python code on both. A small frame of
one array takes ``tcp_fast``'s shortcuts on either layer.

Frames above ``max_frame`` become a ``MessageTooLargeError`` in order (the stream goes
on); more than ``max_inbox`` bytes received and not consumed cut the peer off
(``InboxFullError``); a record that fails authentication cuts the peer off
(``FrameError``).
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import socket
import threading
import time

import numpy as np

from secinfer.crypto.identity import Identity
from secinfer.errors import (AuthenticationError, ConfigError, NetworkError, PeerDeadError, PeerUnreachableError,
                             TimeoutError_)
from secinfer.net import native_link, tcp_handshake
from secinfer.net.native_link import EV_OTHER
from secinfer.net.peers import SPIN_BEFORE_RELEASE, PeerInfo, SocketEndpoint, sleep_until as _sleep_until
from secinfer.net.tcp_handshake import MAGIC, MAX_PENDING_HANDSHAKES, handshake_keys, session_tag  # noqa: F401 - re-exported
from secinfer.net.tcp_links import (HDR, K_BYE, K_DATA, K_HB, K_SIZE, MORE, RECORD, RX_BUFFER, SEND_RECORD,  # noqa: F401
                                    RECORD_OVERHEAD, SMALL, TAG, _CLOSED, _NONCE, InStream, OutLink, next_native, nonce, read_native,
                                    unsent)
from secinfer.net.tcp_fast import FastPaths
from secinfer.net.tcp_reader import StreamReader

# after the protocol thread stopped reading the streams itself, the reader thread takes
# over this much later (a protocol receiving often then rarely has to wait for it)
RX_RETRY = 0.005
# busy-poll before blocking (docs/runtime.md "Busy-polling"): in the online phase, a protocol
# thread's wait for a frame first reads again without blocking for this many microseconds,
# yielding its processor between the reads (``spin_us``, ``spin_yield``; SECINFER_TCP_SPIN_US,
# SECINFER_TCP_SPIN_YIELD in the environment; 0 turns it off)
DEFAULT_SPIN_US = 200.0
DEFAULT_SPIN_YIELD = True
_FRAMES = (bytearray, np.ndarray)   # what a received frame is (else a failure or _CLOSED, in order)


class TcpEndpoint(FastPaths, StreamReader, SocketEndpoint):
    """An ``Endpoint`` over direct, mutually authenticated, encrypted TCP streams."""

    def __init__(self, me: str, identity: Identity, bind_url: str, peers: list[PeerInfo], session_id: bytes, *,
                 connect: bool = True, native: bool | None = None, spin_us: float | None = None,
                 spin_yield: bool | None = None, **limits) -> None:
        """``limits``: max_frame, recv_timeout, connect_timeout, heartbeat_interval,
        peer_timeout, max_inbox (``SocketEndpoint``, which holds their defaults).
        ``native``: the record layer (None: native when the library is built, unless the
        environment says ``SECINFER_TCP_NATIVE=0``). ``spin_us``, ``spin_yield``: the
        online phase's busy-poll before a receive blocks (None: ``SECINFER_TCP_SPIN_US`` /
        ``SECINFER_TCP_SPIN_YIELD`` in the environment, else ``DEFAULT_SPIN_US`` and
        ``DEFAULT_SPIN_YIELD``; 0 us: never)."""
        super().__init__(me, identity, peers, session_id, **limits)
        if native is None:
            native = os.environ.get("SECINFER_TCP_NATIVE", "1") != "0"
        self.native = bool(native) and native_link.available()
        if spin_us is None:
            spin_us = float(os.environ.get("SECINFER_TCP_SPIN_US", DEFAULT_SPIN_US))
        if spin_yield is None:
            spin_yield = os.environ.get("SECINFER_TCP_SPIN_YIELD", "1" if DEFAULT_SPIN_YIELD else "0") != "0"
        self.spin_us = max(0.0, float(spin_us))
        self.spin_yield = bool(spin_yield)
        self._spin_s = self.spin_us * 1e-6
        self._keys = tcp_handshake.Keys(me, identity.secret, {p.role: p.public_key for p in peers}, session_id,
                                        self.context, self.peer_timeout)
        self._out: dict[str, OutLink] = {}
        self._fast_out: dict[str, OutLink] = {}   # links for tcp_fast's send (no pacing)
        self._paced_any = False
        self._in: dict[str, InStream] = {}
        self._by_fd: dict[int, str] = {}
        self._state = threading.Condition()   # guards _in / _refused during set-up
        self._answered: set[str] = set()      # roles told of a session or context mismatch
        self._stop = threading.Event()
        host, port = tcp_handshake.split_url(bind_url)
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(fam, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind((host, port))
        except OSError as e:
            self._listener.close()
            raise NetworkError(f"{me}: cannot listen on {bind_url}: {e}") from None
        self._listener.listen(16)
        self._listener.settimeout(0.2)
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"secinfer-tcp-accept-{me}", daemon=True)
        self._acceptor.start()
        self._rlock = threading.Lock()     # held by whichever thread reads the streams
        self._fg = False                   # the protocol thread wants / holds _rlock
        self._fg_left = 0.0                # when it last let go of it
        self._stats_lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._reader = threading.Thread(target=self._reader_loop, name=f"secinfer-tcp-read-{me}", daemon=True)
        if connect:
            try:
                self.connect()
            except BaseException:
                self.close(timeout=1.0)
                raise

    # ---- set-up -------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        """Accept until every peer's stream is in. Each connection is answered in its own
        thread with a deadline for the whole handshake, so a connection that is slow, silent
        or speaks garbage (before any authentication) neither delays nor fails the real
        peers' handshakes. Beyond ``MAX_PENDING_HANDSHAKES`` unfinished handshakes the
        oldest is dropped (a real peer's takes milliseconds, so it is never the oldest)."""
        pending: collections.deque = collections.deque()
        while not self._stop.is_set() and len(self._in) < len(self.peers):
            try:
                conn, addr = self._listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            with self._state:
                while pending and pending[0].fileno() < 0:
                    pending.popleft()
                if len(pending) >= MAX_PENDING_HANDSHAKES:
                    old = pending.popleft()
                    with contextlib.suppress(OSError):
                        old.shutdown(socket.SHUT_RDWR)
                pending.append(conn)
            threading.Thread(target=self._serve_handshake, args=(conn, addr), daemon=True,
                             name=f"secinfer-tcp-hs-{self.me}").start()

    def _serve_handshake(self, conn: socket.socket, addr) -> None:
        try:
            self._respond(conn, addr)
        except Exception as e:  # noqa: BLE001 - recorded (connect() names them), never fatal
            conn.close()
            with self._state:
                self._refused.append(f"{addr[0]}:{addr[1]}: {e}")
                del self._refused[:-20]
                self._state.notify_all()

    def _respond(self, conn: socket.socket, addr) -> None:
        """Answer one connection's handshake; any failure is an ``AuthenticationError``."""
        try:
            role, k_ir = tcp_handshake.respond(conn, self._keys, lambda r: r in self._in, self._answer)
        except AuthenticationError:
            raise
        except (OSError, ValueError) as e:   # closed, timed out, reset; a low-order X25519 key
            raise AuthenticationError(f"handshake failed: {e}") from None
        conn.setblocking(False)
        with self._state:
            if role in self._in or self._stop.is_set():
                raise AuthenticationError(f"a second stream claiming {role!r}")
            self._in[role] = InStream(conn, k_ir, self.max_frame if self.native else None)
            self._by_fd[conn.fileno()] = role
            self._state.notify_all()

    def _answer(self, role: str) -> None:
        with self._state:
            self._answered.add(role)
            self._state.notify_all()

    def _initiate(self, peer: str, deadline: float) -> None:
        sock, k_ir = tcp_handshake.initiate(self._keys, peer, self.info[peer].url, deadline, self._stop)
        self._out[peer] = OutLink(sock, k_ir, self.info[peer].out_profile, me=self.me, peer=peer, stop=self._stop,
                                  heard=lambda: self._heard(peer), heartbeat_interval=self.heartbeat_interval,
                                  peer_timeout=self.peer_timeout, recv_timeout=self.recv_timeout,
                                  on_sent=self._count_sent, native=self.native)

    def _heard(self, peer: str) -> float | None:
        c = self._in.get(peer)
        return c.last if c is not None else None

    def connect(self, timeout: float | None = None) -> None:
        """Open our stream to every peer and wait for every peer's stream to us."""
        t = self.connect_timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        t0 = time.monotonic()
        errs: dict[str, Exception] = {}

        unexpected: list[BaseException] = []

        def initiate(p: str) -> None:
            try:
                self._initiate(p, deadline)
            except (PeerUnreachableError, AuthenticationError, ConfigError) as e:
                errs[p] = e
            except OSError as e:
                errs[p] = PeerUnreachableError(f"{p}: {e}")
            except BaseException as e:  # noqa: BLE001 - raised below, in the calling thread
                unexpected.append(e)

        # every peer at once (one waiting for a slow peer does not hold up the others)
        todo = [p for p in self.peers if p not in self._out]
        helpers = [threading.Thread(target=initiate, args=(p,), daemon=True, name=f"secinfer-tcp-connect-{self.me}")
                   for p in todo[1:]]
        for t in helpers:
            t.start()
        if todo:
            initiate(todo[0])
        for t in helpers:
            t.join()
        if unexpected:
            raise unexpected[0]
        errs = {p: errs[p] for p in todo if p in errs}   # (in the peers' order, as before)
        mismatch = [p for p, e in errs.items() if isinstance(e, ConfigError) or "session mismatch" in str(e)]
        with self._state:
            while len(self._in) < len(self.peers) and time.monotonic() < deadline and not errs:
                self._state.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            # a mismatch: keep answering handshakes a moment, so that the peer hears it from us too
            linger = time.monotonic() + 2.0
            while mismatch and not set(mismatch) <= self._answered and time.monotonic() < linger:
                self._state.wait(0.05)
            missing_in = [p for p in self.peers if p not in self._in]
            refused = list(self._refused)
        for e in errs.values():
            if isinstance(e, ConfigError):
                raise e
        if errs or missing_in:
            parts = [str(e) for e in errs.values()]
            if missing_in and not errs:
                parts.append("no stream from " + ", ".join(f"{p} ({self.info[p].url})" for p in missing_in))
            if refused:
                parts.append("refused: " + "; ".join(refused[:5]))
            msg = f"{self.me}: could not connect (after {time.monotonic() - t0:.1f}s): " + "; ".join(parts)
            auth = refused or any(isinstance(e, AuthenticationError) for e in errs.values())
            raise AuthenticationError(msg) if auth else PeerUnreachableError(msg)
        for link in self._out.values():
            link.start_writer()
        self._fast_out = {p: link for p, link in self._out.items() if not link.paced}
        self._paced_any = any(link.paced for link in self._out.values())
        if not self._reader.is_alive():
            self._reader.start()


    # ---- sending ------------------------------------------------------------------------
    def _count_sent(self, n: int) -> None:
        with self._stats_lock:   # protocol and writer threads send, on different links
            self.stats["frames_sent"] += 1
            self.stats["bytes_sent"] += n

    def _transmit(self, peer: str, frame: bytes) -> None:
        self._transmit_parts(peer, [frame], len(frame))

    def _transmit_parts(self, peer: str, parts: list, size: int) -> None:
        if self._closed:
            raise NetworkError(f"{self.me}: endpoint is closed")
        if peer in self._fatal:
            raise self._fatal[peer]
        link = self._out[peer]
        if link.error is not None:
            raise link.error
        if peer in self._bye_from:
            raise self._send_after_bye(peer)
        if link.paced:
            with link.cv:
                now = time.monotonic()
                ready = link.bucket.reserve(size, now)
                if ready > now or link.queue:
                    # paced: the link's writer thread sends it at its time (links are independent
                    # wires); the frame is copied now, as the caller's arrays may change
                    link.queue.append((ready, b"".join(parts)))
                    link.cv.notify_all()
                    return
                link.lock.acquire()   # (under cv: no queued frame can overtake this one)
        else:                         # (nothing is ever queued on a link without pacing)
            sealer = link.sealer
            if sealer is not None and size <= SMALL:
                # the common case on the native layer, inline: a small frame sealed and sent in one
                # call (Sealer.send_small; the frame is bytes, as encode_parts makes it)
                pt = parts[0] if len(parts) == 1 else b"".join(parts)
                if type(pt) is not bytes:
                    pt = bytes(pt)
                with link.lock:
                    now = time.monotonic()
                    k = sealer._send_small(sealer.h, now, pt, size) \
                        if link.error is None and not self._stop.is_set() else -2
                    link.took_small(k, size, pt, now, self.heartbeat_interval)
                with self._stats_lock:   # (_count_sent, inline)
                    stats = self.stats
                    stats["frames_sent"] += 1
                    stats["bytes_sent"] += size
                return
            now = time.monotonic()
            link.lock.acquire()
        # may leave now and nothing is queued: this thread writes it (no thread hand-off)
        try:
            link.send_frame(parts, size, now)
            link.next_hb = link.moved + self.heartbeat_interval   # (moved: when the last bytes left)
        finally:
            link.lock.release()
        self._count_sent(size)

    # ---- receiving ------------------------------------------------------------------------
    def _reader_loop(self) -> None:
        """Reads every stream while the protocol thread does not (it computes or sends), so
        that a peer's sends never wait for this party's protocol: no deadlock whatever the
        order of sends and receives, and heartbeats are always read. A peer with more than
        half the inbox limit waiting here is not read (TCP flow control) until the protocol
        consumes some. While the protocol thread waits for a frame it reads itself (no
        thread hand-off); this thread takes over ``RX_RETRY`` after it left."""
        soft = max(1, self.max_inbox // 2)
        prev = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            gap = now - prev - self.heartbeat_interval   # this loop wakes at least once per interval
            prev = now
            if gap > self.heartbeat_interval:
                # this process did not run for a while (an overloaded host): we were not
                # listening, so the silence is ours, not the peers'
                for c in list(self._in.values()):
                    c.last += gap
            if self._fg or now - self._fg_left < RX_RETRY:
                time.sleep(RX_RETRY)
                continue
            socks = [c.sock for p, c in self._in.items() if not c.eof and self._queued[p] < soft]
            try:
                r = select.select([self._wake_r, *socks], [], [], self.heartbeat_interval)[0]
            except (OSError, ValueError):   # a stream closed meanwhile
                continue
            if self._wake_r in r:
                try:
                    self._wake_r.recv(4096)
                except OSError:
                    pass
            r = [s for s in r if s is not self._wake_r]
            if not r or self._fg or not self._rlock.acquire(blocking=False):
                continue
            try:
                for s in r:
                    p = self._by_fd.get(s.fileno())
                    if p is not None:
                        self._read(p, soft)
                    if self._fg:
                        break       # the protocol thread wants the streams: it reads the rest
            finally:
                self._rlock.release()

    def _cut(self, peer: str, err: Exception) -> None:
        c = self._in.get(peer)
        if peer not in self._fatal:
            self._fatal[peer] = err
        if c is not None and not c.eof:
            c.eof = True
            self._by_fd.pop(c.sock.fileno(), None)
            c.sock.close()
            if c.native is not None:
                c.native.free()

    def _due(self, peer: str, now: float):
        """(True, item) if ``peer``'s next frame is due or its receive must fail; (False,
        release time or None)."""
        q = self._inbox[peer]
        if q:
            release, item, _stamp = q[0]
            if item is _CLOSED:
                return True, self._closed_error(peer)
            if release <= now:
                return True, None
            return False, release
        if peer in self._fatal:
            return True, self._fatal[peer]
        return False, None

    def _poll(self, peers: list, deadline: float, since: float) -> None:
        """Wait (at most until ``deadline``) for bytes on the streams of ``peers`` (reading
        every stream that has any); a peer of ``peers`` silent for ``peer_timeout`` since
        ``since`` is dead."""
        now = time.monotonic()
        for p in peers:
            c = self._in[p]
            if not c.eof and now - max(c.last, since) > self.peer_timeout:
                # what its stream holds first: its heartbeats may be waiting unread (this
                # process did not run for a while: a loaded host), and the silence is then ours
                self._read(p)
                if c.eof or p in self._fatal or time.monotonic() - max(c.last, since) <= self.peer_timeout:
                    return      # (the caller looks at what was read, or at the failure)
                self._cut(p, PeerDeadError(f"{self.me}: peer {p} is dead: no message or heartbeat for "
                                           f"{now - max(c.last, since):.1f}s (peer timeout {self.peer_timeout:g}s; "
                                           "raise it with --peer-timeout if a peer computes or stalls for longer)"))
                return
        wait = max(0.0, min(deadline - now, self.heartbeat_interval))
        if len(peers) == 1:
            c = self._in[peers[0]]
            if c.native is not None and not c.eof:
                # wait in the native layer itself (one call: wait, read, decrypt), woken
                # also by the other peers' streams, which are then read as below
                others = tuple(o.sock.fileno() for p, o in self._in.items() if p != peers[0] and not o.eof)
                if read_native(self, peers[0], c, None, wait, others) != EV_OTHER:
                    return
                wait = 0.0
        for p, c in list(self._in.items()):
            if c.native is not None and c.native.info[3] and not c.eof:
                self._read(p)   # bytes the native layer read and has not parsed: records may be whole
                wait = 0.0
        socks = [c.sock for c in self._in.values() if not c.eof]
        r = select.select(socks, [], [], wait)[0] if socks else (time.sleep(wait) or [])
        for s in r:
            p = self._by_fd.get(s.fileno())
            if p is not None:
                self._read(p)

    def _receive(self, peer: str, deadline: float) -> bytes:
        if self._closed:
            raise NetworkError(f"{self.me}: endpoint is closed")
        q = self._inbox[peer]
        self._fg = True                      # (``_reading``, inline: this runs once per frame)
        try:
            with self._rlock:
                try:
                    if not self._latency[peer]:
                        # the common case, without release times (a frame is due once here):
                        # read the streams until the peer's next frame or failure is here
                        c = self._in[peer]
                        if not q and peer not in self._fatal and c.native is not None and c.frame is None:
                            # the native layer: one call waits, reads and decrypts, and the frame
                            # comes back here without passing through the inbox
                            item = next_native(self, peer, c, deadline)
                            if item is not None:
                                return item
                        if not q and peer not in self._fatal and c.native is not None and len(self._in) == 1:
                            # two parties on the native layer, a large frame being received
                            since = now = time.monotonic()
                            while now < deadline and not c.eof:
                                if now - max(c.last, since) > self.peer_timeout:
                                    self._poll([peer], deadline, since)   # (names the dead peer)
                                    break
                                read_native(self, peer, c, None, min(deadline - now, self.heartbeat_interval))
                                if q or peer in self._fatal:
                                    break
                                now = time.monotonic()
                        if not q and peer not in self._fatal:
                            since = now = time.monotonic()
                            while now < deadline:
                                self._poll([peer], deadline, since)
                                if q or peer in self._fatal:
                                    break
                                now = time.monotonic()
                        if q and type(q[0][1]) in _FRAMES:
                            item = q.popleft()[1]
                            self._queued[peer] -= len(item)
                            return item
                    self._wait_locked([peer], deadline)   # reads every stream meanwhile, releases on time
                    ok, err = self._due(peer, time.monotonic())
                    if not ok:
                        raise TimeoutError_(f"{self.me}: no message from {peer} before the deadline")
                    if err is not None:
                        raise err
                    item = q.popleft()[1]
                    if isinstance(item, Exception):
                        raise item
                    self._queued[peer] -= len(item)
                    return item
                finally:
                    self._fg_left = time.monotonic()
        finally:
            self._fg = False

    @contextlib.contextmanager
    def _reading(self):
        """The protocol thread takes the streams over from the reader thread (which lets go
        at its next read: it reads in short, non-blocking batches)."""
        self._fg = True
        try:
            with self._rlock:
                try:
                    yield
                finally:
                    self._fg_left = time.monotonic()
        finally:
            self._fg = False

    def _wait_any(self, peers: list, deadline: float) -> str:
        with self._reading():
            return self._wait_locked(peers, deadline)

    def _wait_locked(self, peers: list, deadline: float) -> str:
        since = time.monotonic()
        while True:     # (a frame already in a socket: the first poll finds it at once)
            now = time.monotonic()
            release = None
            first = None
            for p in peers:
                ok, x = self._due(p, now)
                if ok:   # of several due frames, the one sent first (one clock on loopback)
                    q = self._inbox[p]
                    key = (q[0][2] if self._same_clock[p] else q[0][0]) if q else 0.0
                    if first is None or key < first[0]:
                        first = (key, p)
                elif x is not None:
                    release = x if release is None else min(release, x)
            if first is not None:
                return first[1]
            if now >= deadline:
                return peers[0]
            if release is not None:
                # a frame is here but not due: read on until then, then release it
                if release - now > SPIN_BEFORE_RELEASE + 1e-4:
                    self._poll(peers, min(release - SPIN_BEFORE_RELEASE, deadline), since)
                else:
                    _sleep_until(min(release, deadline))
                continue
            self._poll(peers, deadline, since)

    # ---- close --------------------------------------------------------------------------
    def close(self, flush: bool = True, timeout: float | None = None, reason: str = "") -> None:
        """Close. With ``flush`` (the default): every frame still queued for a paced link is
        sent, then a bye on every stream, and we wait until the peer's host has acknowledged
        every byte of every frame (``OutLink.undelivered``: a heartbeat never acknowledged
        loses nothing). There is no fixed bound: the wait goes
        on as long as bytes move or the peer is alive (it sends heartbeats); a peer that
        stops reading and goes silent for ``peer_timeout`` ends it, and so does ``timeout``
        if given. A frame that may not have been delivered makes ``close`` raise
        ``PeerDeadError`` (after closing everything), so a party never reports success
        for a run whose last frames were lost. A peer that has already said bye needs
        nothing more from us. ``reason``: why we leave (empty: we finished), told to the
        peers in the bye."""
        if self._closed:
            return
        self._closed = True
        deadline = None if timeout is None else time.monotonic() + timeout
        lost: dict[str, str] = {}
        if flush:
            try:
                lost = self._flush(deadline, reason.encode()[:1000])
            except BaseException:
                self._shutdown()
                raise
        self._shutdown()
        if lost:
            raise PeerDeadError(f"{self.me}: frames sent to " + "; ".join(f"{p} may not have been delivered: {why}"
                                                                          for p, why in lost.items()))

    def _flush(self, deadline: float | None, reason: bytes) -> dict:
        def over() -> bool:
            return deadline is not None and time.monotonic() >= deadline

        lost: dict[str, str] = {}
        self._ack_now()
        links = {p: link for p, link in self._out.items() if link.error is None}
        for p, link in self._out.items():
            if link.error is not None and (link.dropped or link.undelivered()):
                lost[p] = str(link.error)
        for p, link in links.items():      # the writer threads send the paced frames meanwhile
            with link.cv:
                while link.queue and link.error is None and not over():
                    link.cv.wait(0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic())))
                left = len(link.queue)
            if link.error is not None and link.dropped:
                lost[p] = str(link.error)
            elif left:
                lost[p] = f"{left} frames still queued after the close timeout"
        # delivered = acknowledged by the peer's host (no data frame left in our send queue;
        # a heartbeat the peer never acknowledged, e.g. after it vanished, loses nothing)
        self._wait_acknowledged({p: link for p, link in links.items() if p not in lost}, lost, over,
                                OutLink.undelivered)
        for p, link in links.items():        # then bye (its own loss loses no frame)
            if p in lost:
                continue
            with link.lock:
                try:
                    link.write(link.records(reason, K_BYE, time.monotonic()), data=False)
                except (PeerDeadError, NetworkError):
                    pass
                link.closing = True
        bye_end = time.monotonic() + min(1.0, self.peer_timeout)
        self._wait_acknowledged({p: link for p, link in links.items() if p not in lost}, {},
                                lambda: over() or time.monotonic() >= bye_end, lambda link: unsent(link.sock))
        if lost:
            self._drain()                    # (a bye already here but not yet read counts)
        for p in list(lost):
            if p in self._bye_from:          # it finished: it needs nothing more from us
                del lost[p]
        return lost

    def _ack_now(self) -> None:
        """Have this host acknowledge now what the peers sent us (TCP_QUICKACK sends a
        delayed ACK at once): a closing peer waits for its last frames' acknowledgement,
        which a stream that only receives would otherwise hold back up to 40 ms (Linux's
        delayed ACK), on both sides of every pair at once."""
        for c in list(self._in.values()):
            if not c.eof:
                with contextlib.suppress(OSError, AttributeError):
                    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)

    def _drain(self) -> None:
        """Read, here and now, what every peer's stream holds (without waiting), so that a
        bye which has arrived is known before a link is judged lost. The reader thread may
        not have run since it arrived (a loaded host; its hand-back delay after the protocol
        thread's last receive), and a finished peer closes its sockets right after our host
        acknowledged its bye: our next heartbeat then meets a reset."""
        with self._rlock:
            for p, c in list(self._in.items()):
                if not c.eof:
                    self._read(p)

    def _wait_acknowledged(self, pending: dict, lost: dict, over, count) -> None:
        """Wait until every link of ``pending`` has what ``count(link)`` counts (bytes not
        acknowledged; -1: some, and the connection failed) acknowledged, recording in
        ``lost`` those that cannot: the connection failed, the peer is gone (its stream to us
        ended without a bye) or nothing moved and the peer was silent for ``peer_timeout``."""
        last = {p: (count(link), time.monotonic()) for p, link in pending.items()}
        while pending:
            now = time.monotonic()
            for p, link in list(pending.items()):
                n = count(link)
                c = self._in.get(p)
                if n == 0 or p in self._bye_from:
                    del pending[p]
                    continue
                if 0 <= n < last[p][0]:
                    last[p] = (n, now)       # (bytes moved: counted before the silence is judged)
                if n < 0 or (c is not None and c.eof):
                    why = f"{n if n > 0 else 'some'} bytes not acknowledged and its connection is gone"
                elif now - max(last[p][1], c.last if c is not None else 0.0) > self.peer_timeout:
                    # its heartbeats may wait unread (this process did not run for a while: a
                    # loaded host): read them first; a peer heard from since is not silent
                    self._drain()
                    if p in self._bye_from or (c is not None and not c.eof
                                               and time.monotonic() - c.last <= self.peer_timeout):
                        continue
                    why = (f"{n} bytes not acknowledged: it has read nothing and sent nothing for "
                           f"{now - last[p][1]:.1f}s (peer timeout {self.peer_timeout:g}s)")
                elif over():
                    why = f"{n} bytes not acknowledged within the close timeout"
                else:
                    continue
                self._drain()                # a finished peer's bye may be here, unread
                if p not in self._bye_from:
                    lost[p] = why
                del pending[p]
            if pending:
                self._ack_now()              # (the peers wait for ours, too)
                time.sleep(0.001)

    def _shutdown(self) -> None:
        """Stop every thread, close every socket."""
        self._stop.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        for link in self._out.values():
            with link.cv:
                link.cv.notify_all()
            try:
                link.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        for link in self._out.values():
            if link.writer is not None and link.writer is not threading.current_thread():
                link.writer.join(2.0)
            link.sock.close()
        if self._reader.is_alive():
            self._reader.join(2.0)
        with self._rlock:
            for c in self._in.values():
                if not c.eof:
                    c.eof = True
                    c.sock.close()
                if c.native is not None:
                    c.native.free()
        for link in self._out.values():   # (their writers have stopped; a send in progress holds the lock)
            if link.sealer is not None and link.lock.acquire(timeout=1.0):
                try:
                    link.sealer.free()
                finally:
                    link.lock.release()
        with contextlib.suppress(OSError):   # wakes an accept() blocked in the acceptor thread at once
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._acceptor.join(1.0)
        self._wake_r.close()
        self._wake_w.close()

