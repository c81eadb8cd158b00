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

Handshake (per stream; initiator I = the connecting party, responder R; each knows the
other's X25519 static public key from the cluster file; the pattern is Noise's KK):

    I -> R   "SITCP/2" | len | I's role | E_I | tag(session id) | len | context
    R -> I   status | E_R | AEAD_{k_RI}(0, "confirm")         (status 0; else only the status)
    I -> R   AEAD_{k_IR}(0, "ready")                          (the first record of the stream)

    ikm = DH(e_I, S_R) | DH(s_I, S_R) | DH(e_I, E_R) | DH(s_I, E_R)
    h = SHA-256("secinfer-tcp/1" | session id | I | R | E_I | E_R | context)
    k_IR | k_RI = HKDF-SHA256(ikm, salt = h, info = "secinfer-tcp/1 keys", 64 bytes)

E_I: a fresh X25519 key; tag(session id) = SHA-256("secinfer-tcp/1 session" | session
id)[:16]; context = what the parties must agree on besides the session (protocol, security
level, fixed-point configuration). The status byte names a mismatch before any key is
used, so that the initiator reports it at once: 1 = R's cluster file has no such role, 2 =
another session (cluster file or nonce), 3 = another context (followed by R's context),
4 = a stream from that role already exists. These answers are unauthenticated (a
man in the middle can always cut the connection anyway); the responder only records
what it refused, so an unauthenticated connection can never fail a session.

R's confirm needs s_R (first two terms), I's first record needs s_I (second and fourth
terms); a key compromise of R alone does not let anyone impersonate I (the fourth term
needs e_R or s_I); the ephemeral-ephemeral term gives forward secrecy; a peer of another
session (other session id) derives other keys and fails the confirm. AEAD: AES-256-GCM,
nonce = the stream's record counter (so no record can be replayed, dropped or reordered
without the next one failing), the record header as associated data.

Records. ``length u32 | stamp f64 | kind u8 | AES-GCM(plaintext)``; kind D (data; bit 0x80
set when the frame continues in the next record: frames are cut into records of at most
``RECORD`` bytes), H (heartbeat), B (bye). The stamp is the sender's send time for the
latency model (``secinfer.net.shaping``), authenticated with the record.

Liveness. A background thread sends a heartbeat on every stream each
``heartbeat_interval``; a receiver waiting for a peer that sends nothing (no byte) for
``peer_timeout`` declares it dead (a frozen process); a closed stream without a bye
(the process exited or was killed) is reported at once. Close sends bye on every stream,
after the frames already queued.

Frames above ``max_frame`` become a ``MessageTooLargeError`` in order (the stream goes
on); more than ``max_inbox`` bytes received and not consumed cut the peer off
(``InboxFullError``); a record that fails authentication cuts the peer off
(``FrameError``).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import select
import socket
import struct
import termios
import threading
import time

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from zmq.utils import z85

from secinfer.crypto.identity import Identity
from secinfer.errors import (AuthenticationError, ConfigError, FrameError, InboxFullError, MessageTooLargeError, NetworkError,
                             PeerDeadError, PeerUnreachableError, TimeoutError_)
from secinfer.net.peers import (SPIN_BEFORE_RELEASE, PeerInfo, SocketEndpoint, context_mismatch,
                                sleep_until as _sleep_until)
from secinfer.net.shaping import TokenBucket

MAGIC = b"SITCP/2"
PROTO = b"secinfer-tcp/1"
RECORD = 1 << 24                        # plaintext bytes per record (AES-GCM per call stays small)
RX_BUFFER = 1 << 18                     # receive buffer per stream: records up to this size are parsed in place
_HDR = struct.Struct("<IdB")            # ciphertext length, stamp, kind
K_DATA, K_HB, K_BYE, MORE = 0x44, 0x48, 0x42, 0x80
_TAG = 16
HANDSHAKE_TIMEOUT = 5.0
# after the protocol thread stopped reading the streams itself, the reader thread takes
# over this much later (a protocol receiving often then rarely has to wait for it)
RX_RETRY = 0.005
MAX_PENDING_HANDSHAKES = 32
CONNECT_RETRY = 0.01                    # seconds between attempts to reach a peer that does not listen yet
ST_OK, ST_UNKNOWN, ST_SESSION, ST_CONTEXT, ST_DUPLICATE = 0, 1, 2, 3, 4   # the responder's first byte             # unauthenticated connections answered at once
_CLOSED = object()
_SOON = object()


def _nonce(counter: int) -> bytes:
    return b"\x00\x00\x00\x00" + counter.to_bytes(8, "little")


def _split_url(url: str) -> tuple[str, int]:
    """tcp://host:port or tcp://[v6]:port -> (host, port)."""
    if not url.startswith("tcp://"):
        raise NetworkError(f"the tcp transport needs tcp:// addresses, got {url!r}")
    host, _, port = url[len("tcp://"):].rpartition(":")
    host = host.strip("[]")
    return ("0.0.0.0" if host == "*" else host), int(port)


def session_tag(session_id: bytes) -> bytes:
    """What the first handshake message shows of the session id (a mismatch is named at once)."""
    return hashlib.sha256(PROTO + b" session " + session_id).digest()[:16]


def _raw_key(z: bytes) -> bytes:
    return z85.decode(z)


def handshake_keys(session_id: bytes, initiator: str, responder: str, e_i: bytes, e_r: bytes,
                   dh: tuple[bytes, bytes, bytes, bytes], context: bytes = b"") -> tuple[bytes, bytes, bytes]:
    """(k_IR, k_RI, transcript hash) from the four X25519 results (see the module docstring)."""
    h = hashlib.sha256(PROTO + session_id + initiator.encode() + b"\x00" + responder.encode() + b"\x00"
                       + e_i + e_r + context).digest()
    okm = HKDF(algorithm=hashes.SHA256(), length=64, salt=h, info=PROTO + b" keys").derive(b"".join(dh))
    return okm[:32], okm[32:], h


def _recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """``n`` bytes; with ``deadline`` (``time.monotonic()``), ``socket.timeout`` once it has
    passed, however the bytes trickle in."""
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout(f"handshake not completed within {HANDSHAKE_TIMEOUT:g}s")
            sock.settimeout(left)
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed during the handshake")
        buf += chunk
    return bytes(buf)


def _keepalive(sock: socket.socket, peer_timeout: float) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    # (no TCP_USER_TIMEOUT: a receiver busy computing legitimately leaves data unread for long)
    for name, val in (("TCP_KEEPIDLE", 1), ("TCP_KEEPINTVL", 1), ("TCP_KEEPCNT", max(2, int(peer_timeout)))):
        opt = getattr(socket, name, None)
        if opt is not None:
            sock.setsockopt(socket.IPPROTO_TCP, opt, val)


class _Out:
    """Our stream to one peer. ``lock`` is the wire: whoever writes records holds it (the
    protocol thread for a frame that may leave at once, else the link's writer thread,
    which also sends the heartbeats), so the record counter follows the byte order. ``cv``
    guards the queue of paced frames; nobody holds it while writing."""

    def __init__(self, sock, key: bytes, profile) -> None:
        self.sock = sock
        self.aead = AESGCM(key)
        self.counter = 1                  # record 0 was the handshake's "ready"
        self.lock = threading.Lock()
        self.cv = threading.Condition(threading.Lock())
        self.bucket = TokenBucket(profile.bandwidth)
        self.paced = profile.bandwidth is not None
        self.queue: collections.deque = collections.deque()   # (ready time, frame) not yet written
        self.error: Exception | None = None
        self.next_hb = 0.0                # when the link's next heartbeat is due
        self.moved = time.monotonic()     # when bytes last went into the socket
        self.closing = False              # bye sent: no more heartbeats
        self.dropped = 0                  # paced frames never written (the link failed)
        self.writer: threading.Thread | None = None


class _In:
    """A peer's stream to us: read only by the protocol thread."""

    def __init__(self, sock, key: bytes) -> None:
        self.sock = sock
        self.aead = AESGCM(key)
        self.counter = 1
        self.buf = bytearray(RX_BUFFER)   # received bytes not yet parsed: buf[:fill]
        self.view = memoryview(self.buf)
        self.fill = 0
        self.hdr = b""                    # a record too large for buf: its header,
        self.body: bytearray | None = None  # its body being filled, and how far
        self.got = 0
        self.parts: list = []             # plaintext of the frame being assembled
        self.size = 0
        self.oversized = False
        self.last = time.monotonic()      # when a byte last arrived
        self.eof = False


class TcpEndpoint(SocketEndpoint):
    """An ``Endpoint`` over direct, mutually authenticated, encrypted TCP streams."""

    def __init__(self, me: str, identity: Identity, bind_url: str, peers: list[PeerInfo], session_id: bytes, *,
                 connect: bool = True, **limits) -> None:
        """``limits``: max_frame, recv_timeout, connect_timeout, heartbeat_interval,
        peer_timeout, max_inbox (``SocketEndpoint``, which holds their defaults)."""
        super().__init__(me, identity, peers, session_id, **limits)
        self._secret = X25519PrivateKey.from_private_bytes(_raw_key(identity.secret))
        self._statics = {p.role: _raw_key(p.public_key) for p in peers}
        self._out: dict[str, _Out] = {}
        self._in: dict[str, _In] = {}
        self._by_fd: dict[int, str] = {}
        self._state = threading.Condition()   # guards _in / _refused during set-up
        self._answered: set[str] = set()      # roles told of a session or context mismatch
        self._stop = threading.Event()
        host, port = _split_url(bind_url)
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
    def _dh(self, pub: bytes, priv: X25519PrivateKey | None = None) -> bytes:
        return (priv or self._secret).exchange(X25519PublicKey.from_public_bytes(pub))

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
            self._respond_handshake(conn)
        except AuthenticationError:
            raise
        except (OSError, ValueError) as e:   # closed, timed out, reset; a low-order X25519 key
            raise AuthenticationError(f"handshake failed: {e}") from None

    def _respond_handshake(self, conn: socket.socket) -> None:
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT     # for the whole handshake, not per read
        if _recv_exact(conn, len(MAGIC), deadline) != MAGIC:
            raise AuthenticationError("not a secinfer tcp stream")
        n = _recv_exact(conn, 1, deadline)[0]
        role = _recv_exact(conn, n, deadline).decode(errors="replace")
        e_i = _recv_exact(conn, 32, deadline)
        sid = _recv_exact(conn, 16, deadline)
        ctx = _recv_exact(conn, _recv_exact(conn, 1, deadline)[0], deadline)
        # (not yet authenticated: a refusal is recorded and answered, never fatal to us)
        if role not in self._statics:
            conn.sendall(bytes([ST_UNKNOWN]))
            raise AuthenticationError(f"claims role {role!r}, which is not a peer of this session")
        if sid != session_tag(self.session_id):
            conn.sendall(bytes([ST_SESSION]))
            self._answer(role)
            raise AuthenticationError(f"stream claiming {role!r} belongs to another session (cluster file or "
                                      "session nonce differ)")
        mine = self.context.encode()
        if ctx != mine:
            conn.sendall(bytes([ST_CONTEXT, len(mine)]) + mine)
            self._answer(role)
            raise AuthenticationError(context_mismatch(self.me, role, self.context, ctx.decode(errors="replace")))
        if role in self._in:
            conn.sendall(bytes([ST_DUPLICATE]))
            raise AuthenticationError(f"a second stream claiming {role!r}")
        eph = X25519PrivateKey.generate()
        e_r = eph.public_key().public_bytes_raw()
        s_i = self._statics[role]
        dh = (self._dh(e_i), self._dh(s_i), self._dh(e_i, eph), self._dh(s_i, eph))
        k_ir, k_ri, h = handshake_keys(self.session_id, role, self.me, e_i, e_r, dh, ctx)
        conn.sendall(bytes([ST_OK]) + e_r + AESGCM(k_ri).encrypt(_nonce(0), b"confirm", h))
        hdr = _recv_exact(conn, _HDR.size, deadline)
        length, _stamp, kind = _HDR.unpack(hdr)
        if kind != K_DATA or length != len(b"ready") + _TAG:
            raise AuthenticationError(f"stream claiming {role!r}: bad first record (wrong key or another session?)")
        try:
            if AESGCM(k_ir).decrypt(_nonce(0), _recv_exact(conn, length, deadline), hdr) != b"ready":
                raise InvalidTag
        except InvalidTag:
            raise AuthenticationError(f"stream claiming {role!r} failed authentication: its key is not the "
                                      "cluster file's, or it belongs to another session") from None
        _keepalive(conn, self.peer_timeout)
        conn.setblocking(False)
        with self._state:
            if role in self._in or self._stop.is_set():
                raise AuthenticationError(f"a second stream claiming {role!r}")
            self._in[role] = _In(conn, k_ir)
            self._by_fd[conn.fileno()] = role
            self._state.notify_all()

    def _answer(self, role: str) -> None:
        with self._state:
            self._answered.add(role)
            self._state.notify_all()

    def _initiate(self, peer: str, deadline: float) -> None:
        host, port = _split_url(self.info[peer].url)
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=min(2.0, max(0.05, deadline - time.monotonic())))
                break
            except OSError as e:
                if time.monotonic() >= deadline or self._stop.is_set():
                    raise PeerUnreachableError(f"no connection to {peer} ({self.info[peer].url}): {e}") from None
                time.sleep(CONNECT_RETRY)
        try:
            sock.settimeout(HANDSHAKE_TIMEOUT)
            eph = X25519PrivateKey.generate()
            e_i = eph.public_key().public_bytes_raw()
            me, ctx = self.me.encode(), self.context.encode()
            sock.sendall(MAGIC + bytes([len(me)]) + me + e_i + session_tag(self.session_id) + bytes([len(ctx)]) + ctx)
            end = time.monotonic() + HANDSHAKE_TIMEOUT
            try:
                status = _recv_exact(sock, 1, end)[0]
                if status == ST_CONTEXT:
                    theirs = _recv_exact(sock, _recv_exact(sock, 1, end)[0], end).decode(errors="replace")
                    raise ConfigError(context_mismatch(self.me, peer, self.context, theirs))
                if status == ST_SESSION:
                    raise AuthenticationError(
                        f"{self.me}: session mismatch: {peer} ({self.info[peer].url}) runs another session: its "
                        "cluster file or session nonce (--session) differs from ours; every party needs the "
                        "same cluster file and nonce")
                if status == ST_UNKNOWN:
                    raise AuthenticationError(f"{peer} does not know us: its cluster file has no party {self.me!r} "
                                              "(is it the same cluster file?)")
                if status != ST_OK:
                    raise AuthenticationError(f"{peer} refused the handshake (status {status}: another stream "
                                              f"already claims {self.me!r}?)")
                reply = _recv_exact(sock, 32 + len(b"confirm") + _TAG, end)
            except (TimeoutError, socket.timeout):
                raise PeerUnreachableError(f"{peer} ({self.info[peer].url}) accepted the connection but did not "
                                           f"answer the handshake within {HANDSHAKE_TIMEOUT:g}s (not a secinfer "
                                           "party, or hung)") from None
            except (ConnectionError, OSError):
                raise AuthenticationError(f"{peer} closed the handshake (not a secinfer party of this version, "
                                          "or it refused us)") from None
            e_r, confirm = reply[:32], reply[32:]
            s_r = self._statics[peer]
            dh = (self._dh(s_r, eph), self._dh(s_r), self._dh(e_r, eph), self._dh(e_r))
            k_ir, k_ri, h = handshake_keys(self.session_id, self.me, peer, e_i, e_r, dh, ctx)
            try:
                ok = AESGCM(k_ri).decrypt(_nonce(0), confirm, h) == b"confirm"
            except InvalidTag:
                ok = False
            if not ok:
                raise AuthenticationError(f"{peer} failed the handshake: its key is not the one in our "
                                          "cluster file (or it is an impostor)")
            hdr = _HDR.pack(len(b"ready") + _TAG, time.monotonic(), K_DATA)
            sock.sendall(hdr + AESGCM(k_ir).encrypt(_nonce(0), b"ready", hdr))
            _keepalive(sock, self.peer_timeout)
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        self._out[peer] = _Out(sock, k_ir, self.info[peer].out_profile)

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
        for peer, link in self._out.items():
            if link.writer is None:
                link.writer = threading.Thread(target=self._writer_loop, args=(peer, link), daemon=True,
                                               name=f"secinfer-tcp-write-{self.me}-{peer}")
                link.writer.start()
        if not self._reader.is_alive():
            self._reader.start()

    # ---- sending ------------------------------------------------------------------------
    def _records(self, link: _Out, frame, kind: int, stamp: float) -> list:
        """Encrypt ``frame`` as records (caller holds the link's wire lock: the record
        counter follows the order in which records reach the socket)."""
        view = memoryview(frame)
        out = []
        n = len(view)
        start = 0
        while True:
            end = min(n, start + RECORD)
            k = kind | (MORE if end < n else 0)
            hdr = _HDR.pack(end - start + _TAG, stamp, k)
            out.append(hdr)
            out.append(link.aead.encrypt(_nonce(link.counter), view[start:end], hdr))
            link.counter += 1
            start = end
            if start >= n:
                return out

    def _write(self, peer: str, link: _Out, bufs: list) -> None:
        """Write every buffer (caller holds ``link.lock``). Never reads: the reader thread
        (or a waiting protocol thread) drains our peers' streams meanwhile, so a full socket
        only means that the peer does not read. The peer is dead when nothing moved for
        ``peer_timeout`` and it sent nothing (not even a heartbeat) for as long; a live peer
        that reads nothing for ``recv_timeout`` is given up too."""
        sock = link.sock
        views = [memoryview(b) for b in bufs if len(b)]
        since = time.monotonic()
        try:
            while views:
                if link.error is not None:
                    raise link.error
                if self._stop.is_set():
                    raise NetworkError(f"{self.me}: endpoint is closed")
                try:
                    sent = sock.sendmsg(views, (), socket.MSG_DONTWAIT)   # all buffers, one call
                except BlockingIOError:
                    sent = 0
                if sent:
                    while sent:
                        k = min(sent, len(views[0]))
                        sent -= k
                        views[0] = views[0][k:]
                        if not len(views[0]):
                            views.pop(0)
                    since = link.moved = time.monotonic()
                    continue
                select.select([], [sock], [], min(0.5, self.heartbeat_interval))
                now = time.monotonic()
                c = self._in.get(peer)
                heard = c.last if c is not None else since
                if now - max(heard, since) > self.peer_timeout:
                    raise OSError(f"it has read nothing and sent nothing (no heartbeat) for {now - since:.1f}s "
                                  f"(peer timeout {self.peer_timeout:g}s, option --peer-timeout)")
                if now - since > max(self.recv_timeout, self.peer_timeout):
                    raise OSError(f"it has read nothing for {now - since:.1f}s although it is alive")
        except OSError as e:
            err = PeerDeadError(f"{self.me}: cannot send to {peer}: {e}")
            link.error = err
            with link.cv:
                link.cv.notify_all()
            raise err from None

    def _count_sent(self, n: int) -> None:
        with self._stats_lock:   # protocol and writer threads send, on different links
            self.stats["frames_sent"] += 1
            self.stats["bytes_sent"] += n

    def _transmit(self, peer: str, frame: bytes) -> None:
        if self._closed:
            raise NetworkError(f"{self.me}: endpoint is closed")
        if peer in self._fatal:
            raise self._fatal[peer]
        link = self._out[peer]
        if link.error is not None:
            raise link.error
        if peer in self._bye_from:
            raise PeerDeadError(f"{self.me}: cannot send to {peer}: it has closed the session")
        with link.cv:
            now = time.monotonic()
            ready = link.bucket.reserve(len(frame), now) if link.paced else now
            if ready > now or link.queue:
                # paced: the link's writer thread sends it at its time (links are independent wires)
                link.queue.append((ready, frame))
                link.cv.notify_all()
                return
            link.lock.acquire()   # (under cv: no queued frame can overtake this one)
        # may leave now and nothing is queued: this thread writes it (no thread hand-off)
        try:
            self._write(peer, link, self._records(link, frame, K_DATA, now))
            link.next_hb = time.monotonic() + self.heartbeat_interval
        finally:
            link.lock.release()
        self._count_sent(len(frame))

    def _writer_loop(self, peer: str, link: _Out) -> None:
        """A link's own thread: sends its paced frames at their time and a heartbeat whenever
        the link was quiet for ``heartbeat_interval`` (also while this party computes or while
        frames wait for their time). It never takes a lock that the readers need."""
        hb = self.heartbeat_interval
        while True:
            with link.cv:
                while True:
                    if link.error is not None or self._stop.is_set():
                        return
                    now = time.monotonic()
                    if link.queue and link.queue[0][0] <= now:
                        ready, frame = link.queue[0]
                        break
                    if now >= link.next_hb and not link.closing:
                        frame = None
                        break
                    if link.queue and link.queue[0][0] - now < 0.002:
                        frame = _SOON          # due within 2 ms: wait for it precisely, below
                        break
                    wake = link.next_hb if not link.closing else now + hb
                    if link.queue:
                        wake = min(wake, link.queue[0][0])
                    link.cv.wait(max(0.0, min(wake - now, hb)))
            if frame is _SOON:
                _sleep_until(link.queue[0][0] if link.queue else time.monotonic())
                continue
            if frame is None:
                if link.lock.acquire(blocking=False):   # else a send is in progress: bytes are moving
                    try:
                        self._write(peer, link, self._records(link, b"", K_HB, time.monotonic()))
                    except NetworkError:     # dead peer (recorded in link.error) or closed endpoint
                        return
                    finally:
                        link.lock.release()
                link.next_hb = time.monotonic() + hb
                continue
            try:
                with link.lock:
                    self._write(peer, link, self._records(link, frame, K_DATA, ready))
                    link.next_hb = time.monotonic() + hb
            except NetworkError:
                with link.cv:
                    link.dropped += len(link.queue)
                    link.queue.clear()
                    link.cv.notify_all()
                return
            self._count_sent(len(frame))
            with link.cv:
                link.queue.popleft()
                link.cv.notify_all()

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

    def _read(self, peer: str, soft: int | None = None) -> None:
        """Read what is waiting on ``peer``'s stream (non-blocking) and queue whole frames.
        Small records are parsed out of one receive buffer (one system call for many); a
        record larger than it is read straight into its own buffer. With ``soft`` (the
        reader thread), stop once that many bytes from the peer wait unconsumed."""
        c = self._in[peer]
        while not c.eof:
            if soft is not None and (self._queued[peer] >= soft or self._fg):
                return      # (the reader thread: enough waits here, or the protocol thread takes over)
            big = c.body is not None
            view = memoryview(c.body)[c.got:] if big else c.view[c.fill:]
            want = len(view)
            try:
                n = c.sock.recv_into(view)
            except BlockingIOError:
                return
            except OSError as e:
                self._cut(peer, PeerDeadError(f"{self.me}: connection to {peer} lost: {e}"))
                return
            if not n:
                if peer not in self._bye_from:
                    self._cut(peer, PeerDeadError(f"{self.me}: peer {peer} closed its connection without a bye "
                                                  "(process exited or was killed)"))
                c.eof = True
                return
            c.last = time.monotonic()
            if big:
                c.got += n
                if c.got == len(c.body):
                    body, c.body = c.body, None
                    self._record(peer, c, c.hdr, body)
            else:
                c.fill += n
                self._parse(peer, c)
            if n < want:
                return          # the socket is drained (no extra call just to learn that)

    def _parse(self, peer: str, c: "_In") -> None:
        buf, pos, end = c.buf, 0, c.fill
        while end - pos >= _HDR.size and not c.eof:
            length = _HDR.unpack_from(buf, pos)[0]
            if length < _TAG or length > RECORD + _TAG:
                self._cut(peer, FrameError(f"{self.me} <- {peer}: malformed record (length {length})"))
                return
            if end - pos - _HDR.size >= length:
                b0 = pos + _HDR.size
                self._record(peer, c, bytes(buf[pos:b0]), bytes(buf[b0:b0 + length]))
                pos = b0 + length
            elif _HDR.size + length > len(buf):     # larger than the buffer: its own buffer
                c.hdr = bytes(buf[pos:pos + _HDR.size])
                part = buf[pos + _HDR.size:end]
                c.body = bytearray(length)
                c.body[:len(part)] = part
                c.got = len(part)
                pos = end
            else:
                break
        if pos:
            rest = end - pos
            buf[:rest] = buf[pos:end]
            c.fill = rest

    def _record(self, peer: str, c: "_In", hdr: bytes, body) -> None:
        _length, stamp, kind = _HDR.unpack(hdr)
        try:
            pt = c.aead.decrypt(_nonce(c.counter), body, hdr)
        except InvalidTag:
            self._cut(peer, FrameError(f"{self.me} <- {peer}: a record failed authentication "
                                       "(corrupted, replayed or forged); peer cut off"))
            return
        c.counter += 1
        base = kind & ~MORE
        if base == K_HB:
            return
        if base == K_BYE:
            self._bye_reason[peer] = pt[:1000].decode(errors="replace")
            self._bye_from.add(peer)
            self._inbox[peer].append((0.0, _CLOSED, 0.0))
            return
        if base != K_DATA:
            self._cut(peer, FrameError(f"{self.me} <- {peer}: unknown record kind {kind}"))
            return
        c.size += len(pt)
        if c.size > self.max_frame:
            c.oversized, c.parts = True, []
        elif not c.oversized:
            c.parts.append(pt)
        if kind & MORE:
            return
        size, parts, oversized = c.size, c.parts, c.oversized
        c.size, c.parts, c.oversized = 0, [], False
        self.stats["frames_recv"] += 1
        self.stats["bytes_recv"] += size
        if oversized:
            item: object = MessageTooLargeError(
                f"{self.me} <- {peer}: frame of {size} bytes exceeds the cap of {self.max_frame} bytes")
        elif self._queued[peer] + size > self.max_inbox:
            self._cut(peer, InboxFullError(
                f"{self.me} <- {peer}: {peer} sent more than the inbox limit of {self.max_inbox} bytes "
                f"before they were consumed; peer cut off (raise max_inbox if a protocol step really queues that much)"))
            return
        else:
            item = parts[0] if len(parts) == 1 else b"".join(parts)
            self._queued[peer] += size
        self._inbox[peer].append((self._release_at(peer, time.monotonic(), stamp), item, stamp))

    def _cut(self, peer: str, err: Exception) -> None:
        c = self._in.get(peer)
        if peer not in self._fatal:
            self._fatal[peer] = err
        if c is not None and not c.eof:
            c.eof = True
            self._by_fd.pop(c.sock.fileno(), None)
            c.sock.close()

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
                self._cut(p, PeerDeadError(f"{self.me}: peer {p} is dead: no message or heartbeat for "
                                           f"{now - max(c.last, since):.1f}s (peer timeout {self.peer_timeout:g}s; "
                                           "raise it with --peer-timeout if a peer computes or stalls for longer)"))
                return
        socks = [c.sock for c in self._in.values() if not c.eof]
        wait = max(0.0, min(deadline - now, self.heartbeat_interval))
        r = select.select(socks, [], [], wait)[0] if socks else (time.sleep(wait) or [])
        for s in r:
            p = self._by_fd.get(s.fileno())
            if p is not None:
                self._read(p)

    def _receive(self, peer: str, deadline: float) -> bytes:
        if self._closed:
            raise NetworkError(f"{self.me}: endpoint is closed")
        with self._reading():
            self._wait_locked([peer], deadline)   # reads every stream meanwhile, releases on time
            ok, err = self._due(peer, time.monotonic())
            if not ok:
                raise TimeoutError_(f"{self.me}: no message from {peer} before the deadline")
            if err is not None:
                raise err
            item = self._inbox[peer].popleft()[1]
            if isinstance(item, Exception):
                raise item
            self._queued[peer] -= len(item)
            return item

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
        for p in peers:
            self._read(p)
        while True:
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
        every byte (the kernel's send queue is empty). There is no fixed bound: the wait goes
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
        links = {p: link for p, link in self._out.items() if link.error is None}
        for p, link in self._out.items():
            if link.error is not None and (link.dropped or _unsent(link.sock)):
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
        # delivered = acknowledged by the peer's host (nothing left in our send queue)
        self._wait_acknowledged({p: link for p, link in links.items() if p not in lost}, lost, over)
        for p, link in links.items():        # then bye (its own loss loses no frame)
            if p in lost:
                continue
            with link.lock:
                try:
                    self._write(p, link, self._records(link, reason, K_BYE, time.monotonic()))
                except (PeerDeadError, NetworkError):
                    pass
                link.closing = True
        bye_end = time.monotonic() + min(1.0, self.peer_timeout)
        self._wait_acknowledged({p: link for p, link in links.items() if p not in lost}, {},
                                lambda: over() or time.monotonic() >= bye_end)
        for p in list(lost):
            if p in self._bye_from:          # it finished: it needs nothing more from us
                del lost[p]
        return lost

    def _wait_acknowledged(self, pending: dict, lost: dict, over) -> None:
        """Wait until every link of ``pending`` has its send queue acknowledged, recording in
        ``lost`` those that cannot: the connection failed, the peer is gone (its stream to us
        ended without a bye) or nothing moved and the peer was silent for ``peer_timeout``."""
        last = {p: (_unsent(link.sock), time.monotonic()) for p, link in pending.items()}
        while pending:
            now = time.monotonic()
            for p, link in list(pending.items()):
                n = _unsent(link.sock)
                c = self._in.get(p)
                if n == 0 or p in self._bye_from:
                    del pending[p]
                    continue
                if n < 0 or (c is not None and c.eof):
                    lost[p] = f"{n if n > 0 else 'some'} bytes not acknowledged and its connection is gone"
                elif now - max(last[p][1], c.last if c is not None else 0.0) > self.peer_timeout:
                    lost[p] = (f"{n} bytes not acknowledged: it has read nothing and sent nothing for "
                               f"{now - last[p][1]:.1f}s (peer timeout {self.peer_timeout:g}s)")
                elif over():
                    lost[p] = f"{n} bytes not acknowledged within the close timeout"
                else:
                    if n < last[p][0]:
                        last[p] = (n, now)
                    continue
                del pending[p]
            if pending:
                time.sleep(0.005)

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
        self._listener.close()
        self._acceptor.join(1.0)
        self._wake_r.close()
        self._wake_w.close()


def _unsent(sock: socket.socket) -> int:
    """Bytes in ``sock``'s send queue not yet acknowledged by the peer (Linux SIOCOUTQ);
    -1 if some are and the connection failed; 0 where the platform cannot say."""
    try:
        buf = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\x00\x00\x00\x00")
        n = struct.unpack("<i", buf)[0]
        if n and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            return -1
        return n
    except OSError:
        return 0
