"""The tcp transport's handshake: how one stream is opened and keyed (``tcp_transport``).

Per stream; initiator I = the connecting party, responder R; each knows the other's
X25519 static public key from the cluster file; the pattern is Noise's KK:

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
session (other session id) derives other keys and fails the confirm. The "ready" record
is record 0 of the I -> R stream (``tcp_links``: nonce = record counter, header as
associated data).
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from typing import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from secinfer.crypto import z85

from secinfer.errors import AuthenticationError, ConfigError, NetworkError, PeerUnreachableError
from secinfer.net.peers import context_mismatch
from secinfer.net.tcp_links import HDR, K_DATA, TAG, nonce

MAGIC = b"SITCP/2"
PROTO = b"secinfer-tcp/1"
HANDSHAKE_TIMEOUT = 5.0                 # for a whole handshake (read at call time: tests lower it)
MAX_PENDING_HANDSHAKES = 32             # unauthenticated connections answered at once
ST_OK, ST_UNKNOWN, ST_SESSION, ST_CONTEXT, ST_DUPLICATE = 0, 1, 2, 3, 4   # the responder's first byte


def split_url(url: str) -> tuple[str, int]:
    """tcp://host:port or tcp://[v6]:port -> (host, port)."""
    if not url.startswith("tcp://"):
        raise NetworkError(f"the tcp transport needs tcp:// addresses, got {url!r}")
    host, _, port = url[len("tcp://"):].rpartition(":")
    host = host.strip("[]")
    return ("0.0.0.0" if host == "*" else host), int(port)


def session_tag(session_id: bytes) -> bytes:
    """What the first handshake message shows of the session id (a mismatch is named at once)."""
    return hashlib.sha256(PROTO + b" session " + session_id).digest()[:16]


def raw_key(z: bytes) -> bytes:
    return z85.decode(z)


def handshake_keys(session_id: bytes, initiator: str, responder: str, e_i: bytes, e_r: bytes,
                   dh: tuple[bytes, bytes, bytes, bytes], context: bytes = b"") -> tuple[bytes, bytes, bytes]:
    """(k_IR, k_RI, transcript hash) from the four X25519 results (see the module docstring)."""
    h = hashlib.sha256(PROTO + session_id + initiator.encode() + b"\x00" + responder.encode() + b"\x00"
                       + e_i + e_r + context).digest()
    okm = HKDF(algorithm=hashes.SHA256(), length=64, salt=h, info=PROTO + b" keys").derive(b"".join(dh))
    return okm[:32], okm[32:], h


def recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
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


def keepalive(sock: socket.socket, peer_timeout: float) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    # (no TCP_USER_TIMEOUT: a receiver busy computing legitimately leaves data unread for long)
    for name, val in (("TCP_KEEPIDLE", 1), ("TCP_KEEPINTVL", 1), ("TCP_KEEPCNT", max(2, int(peer_timeout)))):
        opt = getattr(socket, name, None)
        if opt is not None:
            sock.setsockopt(socket.IPPROTO_TCP, opt, val)


def _dh(priv: X25519PrivateKey, pub: bytes) -> bytes:
    return priv.exchange(X25519PublicKey.from_public_bytes(pub))


class Keys:
    """What a party brings to every handshake: its role, static secret, the peers' static
    public keys (raw), the session id and the context string."""

    def __init__(self, me: str, secret_z85: bytes, statics_z85: dict, session_id: bytes, context: str,
                 peer_timeout: float) -> None:
        self.me = me
        self.secret = X25519PrivateKey.from_private_bytes(raw_key(secret_z85))
        self.statics = {role: raw_key(k) for role, k in statics_z85.items()}
        self.session_id = session_id
        self.context = context
        self.peer_timeout = peer_timeout


def respond(conn: socket.socket, keys: Keys, taken: Callable[[str], bool],
            answered: Callable[[str], None]) -> tuple[str, bytes]:
    """Answer one connection's handshake (responder). Returns (the peer's role, k_IR);
    ``taken(role)``: a stream from that role exists already; ``answered(role)`` is told of
    each role we answered with a session or context mismatch. Any failure is an
    ``AuthenticationError`` (or the socket's ``OSError``/``ValueError``)."""
    deadline = time.monotonic() + HANDSHAKE_TIMEOUT     # for the whole handshake, not per read
    if recv_exact(conn, len(MAGIC), deadline) != MAGIC:
        raise AuthenticationError("not a secinfer tcp stream")
    n = recv_exact(conn, 1, deadline)[0]
    role = recv_exact(conn, n, deadline).decode(errors="replace")
    e_i = recv_exact(conn, 32, deadline)
    sid = recv_exact(conn, 16, deadline)
    ctx = recv_exact(conn, recv_exact(conn, 1, deadline)[0], deadline)
    # (not yet authenticated: a refusal is recorded and answered, never fatal to us)
    if role not in keys.statics:
        conn.sendall(bytes([ST_UNKNOWN]))
        raise AuthenticationError(f"claims role {role!r}, which is not a peer of this session")
    if sid != session_tag(keys.session_id):
        conn.sendall(bytes([ST_SESSION]))
        answered(role)
        raise AuthenticationError(f"stream claiming {role!r} belongs to another session (cluster file or "
                                  "session nonce differ)")
    mine = keys.context.encode()
    if ctx != mine:
        conn.sendall(bytes([ST_CONTEXT, len(mine)]) + mine)
        answered(role)
        raise AuthenticationError(context_mismatch(keys.me, role, keys.context, ctx.decode(errors="replace")))
    if taken(role):
        conn.sendall(bytes([ST_DUPLICATE]))
        raise AuthenticationError(f"a second stream claiming {role!r}")
    eph = X25519PrivateKey.generate()
    e_r = eph.public_key().public_bytes_raw()
    s_i = keys.statics[role]
    dh = (_dh(keys.secret, e_i), _dh(keys.secret, s_i), _dh(eph, e_i), _dh(eph, s_i))
    k_ir, k_ri, h = handshake_keys(keys.session_id, role, keys.me, e_i, e_r, dh, ctx)
    conn.sendall(bytes([ST_OK]) + e_r + AESGCM(k_ri).encrypt(nonce(0), b"confirm", h))
    hdr = recv_exact(conn, HDR.size, deadline)
    length, _stamp, kind = HDR.unpack(hdr)
    if kind != K_DATA or length != len(b"ready") + TAG:
        raise AuthenticationError(f"stream claiming {role!r}: bad first record (wrong key or another session?)")
    try:
        if AESGCM(k_ir).decrypt(nonce(0), recv_exact(conn, length, deadline), hdr) != b"ready":
            raise InvalidTag
    except InvalidTag:
        raise AuthenticationError(f"stream claiming {role!r} failed authentication: its key is not the "
                                  "cluster file's, or it belongs to another session") from None
    keepalive(conn, keys.peer_timeout)
    return role, k_ir


CONNECT_RETRY = 0.01   # seconds between attempts to reach a peer that does not listen yet


def initiate(keys: Keys, peer: str, url: str, deadline: float, stop: threading.Event) -> tuple[socket.socket, bytes]:
    """Connect to ``peer`` at ``url`` (retrying until ``deadline``) and run the handshake
    (initiator). Returns (the connected socket, k_IR)."""
    host, port = split_url(url)
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=min(2.0, max(0.05, deadline - time.monotonic())))
            break
        except OSError as e:
            if time.monotonic() >= deadline or stop.is_set():
                raise PeerUnreachableError(f"no connection to {peer} ({url}): {e}") from None
            time.sleep(CONNECT_RETRY)
    try:
        sock.settimeout(HANDSHAKE_TIMEOUT)
        eph = X25519PrivateKey.generate()
        e_i = eph.public_key().public_bytes_raw()
        me, ctx = keys.me.encode(), keys.context.encode()
        sock.sendall(MAGIC + bytes([len(me)]) + me + e_i + session_tag(keys.session_id) + bytes([len(ctx)]) + ctx)
        end = time.monotonic() + HANDSHAKE_TIMEOUT
        try:
            status = recv_exact(sock, 1, end)[0]
            if status == ST_CONTEXT:
                theirs = recv_exact(sock, recv_exact(sock, 1, end)[0], end).decode(errors="replace")
                raise ConfigError(context_mismatch(keys.me, peer, keys.context, theirs))
            if status == ST_SESSION:
                raise AuthenticationError(
                    f"{keys.me}: session mismatch: {peer} ({url}) runs another session: its "
                    "cluster file or session nonce (--session) differs from ours; every party needs the "
                    "same cluster file and nonce")
            if status == ST_UNKNOWN:
                raise AuthenticationError(f"{peer} does not know us: its cluster file has no party {keys.me!r} "
                                          "(is it the same cluster file?)")
            if status != ST_OK:
                raise AuthenticationError(f"{peer} refused the handshake (status {status}: another stream "
                                          f"already claims {keys.me!r}?)")
            reply = recv_exact(sock, 32 + len(b"confirm") + TAG, end)
        except (TimeoutError, socket.timeout):
            raise PeerUnreachableError(f"{peer} ({url}) accepted the connection but did not "
                                       f"answer the handshake within {HANDSHAKE_TIMEOUT:g}s (not a secinfer "
                                       "party, or hung)") from None
        except (ConnectionError, OSError):
            raise AuthenticationError(f"{peer} closed the handshake (not a secinfer party of this version, "
                                      "or it refused us)") from None
        e_r, confirm = reply[:32], reply[32:]
        s_r = keys.statics[peer]
        dh = (_dh(eph, s_r), _dh(keys.secret, s_r), _dh(eph, e_r), _dh(keys.secret, e_r))
        k_ir, k_ri, h = handshake_keys(keys.session_id, keys.me, peer, e_i, e_r, dh, ctx)
        try:
            ok = AESGCM(k_ri).decrypt(nonce(0), confirm, h) == b"confirm"
        except InvalidTag:
            ok = False
        if not ok:
            raise AuthenticationError(f"{peer} failed the handshake: its key is not the one in our "
                                      "cluster file (or it is an impostor)")
        hdr = HDR.pack(len(b"ready") + TAG, time.monotonic(), K_DATA)
        sock.sendall(hdr + AESGCM(k_ir).encrypt(nonce(0), b"ready", hdr))
        keepalive(sock, keys.peer_timeout)
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return sock, k_ir
