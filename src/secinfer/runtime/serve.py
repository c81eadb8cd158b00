"""Serving: model-side parties that stay up and answer many client sessions.

``secinfer serve --cluster cluster.toml --id ROLE --protocol P --model M`` runs one
model-side party (every role of the cluster except the protocol's input role) as a
long-lived ``Server``; ``secinfer query --cluster ... --id client --input x.npy`` (or
``query(...)`` below) runs one client session against them. Every session runs the
protocol's unchanged ``spec.run_party(role, endpoint, job)`` on a fresh endpoint.

Control exchange (per session, client-driven; docs/runtime.md "Serving")::

    client -> every server S   open {nonce_c}             (nonce_c: 16 fresh bytes, client's)
    S -> client                {port_S, r_S, protocol, security, fixed, options}
    client -> every server S   go {nonce_c, ports, contribs = {S: r_S}}
    S -> client                {ok}

It runs over CurveZMQ on each server's cluster port: a ROUTER socket with the server's
cluster key, whose ZAP handler admits only the public key the cluster file lists for
the input role (so only the client can open sessions; an unknown key never reaches
this code). Every server refuses a ``nonce_c`` it has seen (replay) and adds its own
fresh ``r_S``, so a session's nonce is fresh for each server even if a client repeats
itself. The session then uses a *derived cluster*: the same parties, keys and hosts,
the ports agreed above (one fresh listening port per party and session), the session
name ``<name>/serve``; its session id is ``derived.session_id(nonce_c | r_S...)`` as in
``secinfer.runtime.cluster``, so it binds the ports and every contribution, and the
transport's mutual authentication (tcp: Noise KK with the session id in the transcript;
zmq: CURVE) is used unchanged: parties that disagree on anything cannot connect.

Per session a server draws a fresh PRG seed (from ``MaterialPool``), builds a fresh
endpoint (fresh transport keys) and a fresh ``PartyJob``; the model graph is the only
object shared between sessions, copied per session. Sessions run in threads of the one
server process; a session that fails (its client died, sent garbage, aborted) ends
alone and is counted; the server goes on.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable


from secinfer.errors import ConfigError, NetworkError, PeerAbortedError, ProtocolAbort, SecinferError, TimeoutError_

MAX_CONTROL = 1 << 16          # bytes of one control message
NONCE_BYTES = 16
SEEN_NONCES = 1 << 16          # replay window (older nonces are forgotten; r_S keeps sessions fresh anyway)
SERVE_SUFFIX = "/serve"


class ServeError(SecinferError):
    """A serving control exchange failed (refused, malformed, timed out)."""


# ---- helpers shared by both sides ------------------------------------------------------------
def _encode(msg: dict) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode()


def _decode(raw: bytes, who: str) -> dict:
    if len(raw) > MAX_CONTROL:
        raise ServeError(f"control message from {who} is {len(raw)} bytes (limit {MAX_CONTROL})")
    try:
        msg = json.loads(raw.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ServeError(f"control message from {who} is not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise ServeError(f"control message from {who} is not a JSON object")
    return msg


def _hex(msg: dict, key: str, n: int, who: str) -> bytes:
    v = msg.get(key)
    try:
        b = bytes.fromhex(v) if isinstance(v, str) else None
    except ValueError:
        b = None
    if b is None or len(b) != n:
        raise ServeError(f"{who}: field {key!r} must be {n} bytes in hex")
    return b


def heap_trimmer():
    """glibc's ``malloc_trim(0)`` as a callable, or None (another C library).

    Why: a stamp soak (1,000 queries) showed a server's RSS rising in a sawtooth, ~3 MB per
    100 queries. Measured in the server process (docs/runtime.md "Serving"): the live Python
    objects (tracemalloc, gc counts), the C heap in use (``mallinfo2``), threads and file
    descriptors stay flat from query 30 on; what grows is free memory that glibc keeps in
    the arenas of the session threads (fragmentation, not a leak). Trimming after each
    session hands those free pages back to the OS."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


def certificate_digest(cert: dict | None) -> str | None:
    """What a session's ``open`` answer names of the model owner's range certificate, so a
    client that cached an older one (the owner restarted with another model) notices."""
    if cert is None:
        return None
    import hashlib

    return hashlib.sha256(json.dumps(cert, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def session_nonce(nonce_c: bytes, contribs: dict[str, bytes], prep: bytes | None = None) -> bytes:
    """The session nonce: the client's nonce, then every server's contribution by party id,
    then the id of the prepared item the session runs on (``secinfer.runtime.serve_prep``)."""
    return nonce_c + b"".join(contribs[k] for k in sorted(contribs)) + (b"prep" + prep if prep else b"")


def session_port(cluster, party_id: str, avoid=()) -> int:
    """A free port for one session of ``party_id``, from that party's own slice of
    20000-32000 (below Linux's ephemeral range), so that parties on one host never pick
    the same port at the same time; ``avoid``: ports this process has announced already."""
    from secinfer.runtime.cluster import free_ports

    ids = sorted(cluster.parties)
    width = 12000 // len(ids)
    low = 20000 + ids.index(party_id) * width
    for _ in range(20):
        for p in free_ports(4, cluster.party(party_id).host, low, low + width):
            if p not in avoid and low <= p < low + width:
                return p
    raise ServeError(f"no free session port for {party_id} in {low}..{low + width - 1}")


def derived_cluster(cluster, ports: dict[str, int]):
    """The cluster of one served session: same parties, keys and hosts, per-session ports."""
    if set(ports) != set(cluster.parties):
        raise ServeError(f"session ports name {sorted(ports)}, the cluster has {sorted(cluster.parties)}")
    d = copy.copy(cluster)
    d.parties = {pid: dataclasses.replace(p, port=int(ports[pid])) for pid, p in cluster.parties.items()}
    d.session = cluster.session + SERVE_SUFFIX
    return d


def _control_socket(ctx, identity, server_key: bytes, url: str):
    import zmq

    s = ctx.socket(zmq.DEALER)
    s.curve_serverkey = server_key
    s.curve_publickey = identity.public
    s.curve_secretkey = identity.secret
    s.linger = 0
    s.connect(url)
    return s


def _request(sock, msg: dict, timeout: float, who: str) -> dict:
    import zmq

    sock.send(_encode(msg))
    if not sock.poll(int(timeout * 1000), zmq.POLLIN):
        raise TimeoutError_(f"server {who} did not answer the control request {msg.get('op')!r} within {timeout:g}s "
                            f"(is `secinfer serve` running there, and is this the client's key?)")
    rep = _decode(sock.recv(), who)
    if not rep.get("ok"):
        raise ServeError(f"server {who} refused {msg.get('op')!r}: {rep.get('error', 'no reason given')}")
    return rep


# ---- the server ------------------------------------------------------------------------------
@dataclass
class _Session:
    nonce_c: bytes
    port: int
    contrib: bytes
    opened: float
    state: str = "pending"             # pending -> running -> completed | failed
    thread: threading.Thread | None = None
    ep: object = None
    error: dict | None = None
    sid: str = ""
    prep: tuple | None = None          # (id, item) the leader reserved for this session
    start: threading.Event = field(default_factory=threading.Event)
    cancelled: bool = False            # the client gave the session up before start
    range_guard: bool = False          # the client asked for the protocol's range guard


@dataclass
class ServeStats:
    opened: int = 0
    completed: int = 0
    failed: int = 0
    expired: int = 0                   # opened, never started (no go in time)
    refused: int = 0                   # open/go refused (replay, busy, malformed, shutting down)
    aborted: int = 0                   # still running at shutdown after the grace period
    errors: dict = field(default_factory=dict)   # error type -> count
    last_error: dict = field(default_factory=dict)   # error type -> its latest message (bounded)


class Server:
    """One model-side party that serves sessions until ``stop()`` (or SIGTERM in the CLI)."""

    def __init__(self, cluster_path, party_id: str, protocol: str, security: str | None = None,
                 model_path=None, *, keys_dir=None, fixed: str | None = None, options: dict | None = None,
                 network: str | None = None, max_sessions: int = 16, pool: int = 8,
                 recv_timeout: float | None = None, grace: float = 30.0,
                 log: Callable[[str], None] | None = None) -> None:
        """``log``: where a line naming each failed session's error goes (the CLI: stderr)."""
        from secinfer.arith.fixed import get_config
        from secinfer.net.shaping import parse_profile
        from secinfer.protocols import registry
        from secinfer.runtime.cluster import load_cluster
        from secinfer.runtime.pool import MaterialPool, make_session_seed
        from secinfer.runtime.serve_prep import PrepCoordinator

        self.spec = spec = registry.get(protocol)
        self.protocol = protocol
        self.security = security or spec.default_security
        if self.security not in spec.securities:
            raise ConfigError(f"protocol {protocol!r} offers {', '.join(spec.securities)}; not {self.security!r}")
        self.cluster = load_cluster(cluster_path)
        self.cluster.check_roles(spec.roles)
        self.party_id = party_id
        self.entry = self.cluster.party(party_id)
        self.role = self.entry.role
        if self.role == spec.input_role:
            raise ConfigError(f"party {party_id} plays {self.role!r}, the input role: it queries, it does not serve")
        self.client = self.cluster.by_role(spec.input_role)
        self.identity = self.cluster.load_secret(party_id, keys_dir)
        self.options = dict(options or {})
        self.fixed_name = fixed or self.options.get("fixed") or spec.default_fixed
        self.cfg = get_config(self.fixed_name)
        self.profile = parse_profile(network) if network and network != "none" else None
        self.model = None
        if self.role == spec.model_role:
            if model_path is None:
                raise ConfigError(f"party {party_id} plays {self.role!r}, the model owner: it needs --model")
            from secinfer.ir.onnx_import import load_model

            from secinfer.ir.validate import check_weights

            self.model = load_model(str(model_path))
            spec.check_model(self.model, self.security)
            check_weights(self.model, self.cfg)   # NaN/infinite or unrepresentable weights: refused at start
        self.certificate = self._certify()
        if not isinstance(max_sessions, int) or max_sessions < 1:
            raise ConfigError(f"max_sessions must be a positive integer, got {max_sessions!r}")
        self.max_sessions = max_sessions
        self.recv_timeout = recv_timeout
        self.grace = grace
        self.pool = MaterialPool(make_session_seed, pool)
        self.stats = ServeStats()
        self.log = log
        self._ports: set[int] = set()            # session / prep ports this process has announced
        self._sessions: dict[bytes, _Session] = {}
        self._seen: dict[bytes, None] = {}       # insertion-ordered replay window
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.ready = threading.Event()
        self._ctx = self._sock = self._auth = None
        self.prep = PrepCoordinator(self, pool)
        self._trim = heap_trimmer()

    def _certify(self) -> dict | None:
        """The model owner's public range certificate (``secinfer.ir.range_cert``), computed
        once at start and handed to every client that asks (``certificate``): the client
        checks its query against it before it opens a session. Other roles: None."""
        if self.model is None:
            return None
        from secinfer.ir.range_cert import certify

        limits = self.spec.value_limits(self.model, self.cfg, self.options) if self.spec.value_limits else None
        return certify(self.model, self.cfg, limits, guard=self.spec.range_guard,
                       bias_in_sum=self.spec.bias_in_sum).to_json()

    @property
    def certificate_digest(self) -> str | None:
        return certificate_digest(self.certificate)

    def _alloc_port(self) -> int:
        with self._lock:
            used = set(self._ports)
        port = session_port(self.cluster, self.party_id, used)
        with self._lock:
            self._ports.add(port)
        return port

    def _free_port(self, port) -> None:
        with self._lock:
            self._ports.discard(port)

    def _control_client(self, entry):
        """A control socket to another model-side party (the leader's prep requests)."""
        return _control_socket(self._ctx, self.identity, entry.public_key, entry.connect_url())

    # -- control socket --
    def _open_control(self) -> None:
        import zmq
        from zmq.auth.thread import ThreadAuthenticator

        self._ctx = zmq.Context()
        allowed = {self.client.public_key}
        if self.prep.enabled and not self.prep.is_leader:   # the leader's prep requests
            allowed.add(self.cluster.party(self.prep.leader_id).public_key)

        class _OnlyClient:
            def callback(self, domain, key):   # noqa: D401 - pyzmq's provider interface
                return key in allowed

        self._auth = ThreadAuthenticator(self._ctx)
        self._auth.start()
        self._auth.configure_curve_callback(domain="*", credentials_provider=_OnlyClient())
        s = self._ctx.socket(zmq.ROUTER)
        s.curve_server = True
        s.curve_publickey = self.identity.public
        s.curve_secretkey = self.identity.secret
        s.linger = 0
        s.setsockopt(zmq.MAXMSGSIZE, MAX_CONTROL)
        s.bind(self.entry.bind_url())
        self._sock = s

    def stop(self) -> None:
        """Stop accepting sessions; ``serve_forever`` then drains and returns."""
        self._stop.set()

    def status(self, live: bool = False) -> dict:
        with self._lock:
            running = sum(1 for s in self._sessions.values() if s.state == "running")
            pending = sum(1 for s in self._sessions.values() if s.state == "pending")
            st = dataclasses.asdict(self.stats)
        st.update(running=running, pending=pending, pool=self.pool.stats(), prep=self.prep.stats(),
                  party=self.party_id, role=self.role, protocol=self.protocol)
        if live:
            st["live"] = self.live_state()
        return st

    def live_state(self) -> dict:
        """What per-session state this process holds now (``status`` with ``live``): the
        session table, announced ports, replay window, prep bookkeeping, session and prep
        threads, and the live objects a session makes (endpoints, jobs, PRGs, prepared
        items) counted over the garbage collector's objects. Between sessions it is the
        same after 1 session and after 1,000, apart from the replay window (bounded by
        ``SEEN_NONCES``) and the prepared items the pool holds (bounded by ``--pool``):
        tests/serve/test_serve.py checks it."""
        import gc

        from secinfer.crypto.prg import PRG
        from secinfer.net.channel import Endpoint
        from secinfer.protocols.base import PartyJob, Prep

        gc.collect()
        kinds = {"endpoints": Endpoint, "jobs": PartyJob, "prgs": PRG, "prepared_items": Prep}
        counts = dict.fromkeys(kinds, 0)
        for o in gc.get_objects():
            for k, cls in kinds.items():
                if isinstance(o, cls):
                    counts[k] += 1
        names = [t.name for t in threading.enumerate()]
        with self._lock:
            counts.update(sessions=len(self._sessions), ports=len(self._ports), seen_nonces=len(self._seen),
                          error_kinds=len(self.stats.errors) + len(self.stats.last_error))
        counts.update(self.prep.live_state())
        counts.update(session_threads=sum(n.startswith("session-") for n in names),
                      prep_threads=sum(n.startswith("prep-") for n in names), threads=len(names))
        return counts

    # -- requests --
    def _handle(self, msg: dict, who: str = "client") -> dict:
        op = msg.get("op")
        if op == "status":
            return {"ok": True, "status": self.status(live=msg.get("live") is True)}
        if who != "client":   # the prep leader: prep operations only
            if op == "prep-open":
                return self.prep.on_prep_open(msg)
            if op == "prep-go":
                return self.prep.on_prep_go(msg)
            raise ServeError(f"operation {op!r} is not open to the prep leader")
        if op == "certificate":   # public metadata, like the model's shapes (SECURITY.md)
            return {"ok": True, "role": self.role, "certificate": self.certificate, "protocol": self.protocol,
                    "security": self.security, "fixed": self.fixed_name, "options": self.options}
        if op == "open":
            return self._on_open(msg)
        if op == "go":
            return self._on_go(msg)
        if op == "start":
            return self._on_start(msg)
        if op == "cancel":
            return self._on_cancel(msg)
        raise ServeError(f"unknown control operation {op!r}")

    def _on_open(self, msg: dict) -> dict:
        nonce_c = _hex(msg, "nonce", NONCE_BYTES, "open")
        guard = msg.get("range_guard") is True   # the client's query needs the protocol's range guard
        if guard and not self.spec.range_guard:
            raise ServeError(f"{self.protocol} has no in-protocol range guard")
        with self._lock:
            if self._stop.is_set():
                raise ServeError("the server is shutting down")
            if nonce_c in self._seen:
                raise ServeError("replayed session nonce: this server has seen it already")
            live = sum(1 for s in self._sessions.values() if s.state in ("pending", "running"))
            if live >= self.max_sessions:
                raise ServeError(f"busy: {live} sessions in progress (limit {self.max_sessions})")
            self._seen[nonce_c] = None
            while len(self._seen) > SEEN_NONCES:
                self._seen.pop(next(iter(self._seen)))
        port = self._alloc_port()
        sess = _Session(nonce_c, port, secrets.token_bytes(NONCE_BYTES), time.monotonic())
        sess.range_guard = guard
        sess.prep = self.prep.reserve(msg.get("rows") if msg.get("prep_ok", True) is not False
                                      and not sess.range_guard else None)
        with self._lock:
            self._sessions[nonce_c] = sess
            self.stats.opened += 1
        return {"ok": True, "port": port, "contrib": sess.contrib.hex(), "protocol": self.protocol,
                "security": self.security, "fixed": self.fixed_name, "options": self.options,
                "prep": sess.prep[0].hex() if sess.prep else None, "cert": self.certificate_digest}

    def _on_go(self, msg: dict) -> dict:
        nonce_c = _hex(msg, "nonce", NONCE_BYTES, "go")
        with self._lock:
            sess = self._sessions.get(nonce_c)
        if sess is None or sess.state != "pending":
            raise ServeError("go for a session this server has not opened (or already started)")
        ports, contribs = msg.get("ports"), msg.get("contribs")
        if not isinstance(ports, dict) or not isinstance(contribs, dict):
            raise ServeError("go: ports and contribs must be objects")
        try:
            ports = {str(k): int(v) for k, v in ports.items()}
        except (TypeError, ValueError):
            raise ServeError("go: ports must be integers") from None
        if any(not 1 <= p <= 65535 for p in ports.values()):
            raise ServeError("go: a port is out of range")
        servers = [p.id for p in self.cluster.parties.values() if p.id != self.client.id]
        if set(contribs) != set(servers):
            raise ServeError(f"go: contributions must come from every server ({', '.join(servers)})")
        cbytes = {k: _hex(contribs, k, NONCE_BYTES, "go") for k in contribs}
        if cbytes[self.party_id] != sess.contrib or ports.get(self.party_id) != sess.port:
            raise ServeError("go: our own contribution or port is not the one we announced")
        pid = msg.get("prep")
        if pid is not None:
            pid = _hex(msg, "prep", NONCE_BYTES, "go")
        if (self.prep.is_leader or pid is None) and (sess.prep[0] if sess.prep else None) != pid:
            raise ServeError("go: the prepared item is not the one this server reserved for the session")
        from secinfer.runtime.party import endpoint_class

        derived = derived_cluster(self.cluster, ports)
        nonce = session_nonce(nonce_c, cbytes, pid)
        sid = derived.session_id(nonce)
        kw = {} if self.recv_timeout is None else {"recv_timeout": self.recv_timeout}
        try:   # listening before we answer: the client starts the session once every server listens
            ep = endpoint_class(derived.transport).from_cluster(derived, self.party_id, self.identity, sid,
                                                                network=self.profile, connect=False, **kw)
        except NetworkError as e:
            raise ServeError(f"go: {e} (retry as a new session)") from None
        if self.prep.is_leader or pid is None:
            item = sess.prep[1] if sess.prep else None
        else:
            item = self.prep.claim(pid)
            if item is None:
                ep.close(flush=False, timeout=0.5)
                raise ServeError("go: prepared item unknown here or used already")
        sess.prep = None
        seed = self.pool.take()
        sess.state = "running"
        sess.sid = sid.hex()
        sess.ep = ep
        sess.thread = threading.Thread(target=self._run_session, args=(sess, ep, seed, item),
                                       name=f"session-{sess.sid[:8]}", daemon=True)
        sess.thread.start()
        return {"ok": True, "session_id": sess.sid}

    def _on_start(self, msg: dict) -> dict:
        nonce_c = _hex(msg, "nonce", NONCE_BYTES, "start")
        with self._lock:
            sess = self._sessions.get(nonce_c)
        if sess is None or sess.state != "running":
            raise ServeError("start for a session this server has not started")
        sess.start.set()
        return {"ok": True}

    def _on_cancel(self, msg: dict) -> dict:
        """The client gives a session up before start (another server refused its go): it
        ends here without a protocol message and counts as expired, not failed."""
        nonce_c = _hex(msg, "nonce", NONCE_BYTES, "cancel")
        with self._lock:
            sess = self._sessions.get(nonce_c)
            if sess is None or sess.start.is_set():
                raise ServeError("cancel for a session this server has not opened, or already started")
            if sess.state == "pending":
                del self._sessions[nonce_c]
                self.stats.expired += 1
                self._ports.discard(sess.port)
            else:
                sess.cancelled = True
        if sess.state == "pending":
            self.prep.release(sess.prep[1] if sess.prep else None)
            sess.prep = None
        else:
            sess.start.set()
        return {"ok": True}

    def _run_session(self, sess: _Session, ep, seed, item=None) -> None:
        from secinfer.crypto.prg import PRG
        from secinfer.protocols.base import PartyJob
        from secinfer.runtime.party import error_record

        ok = False
        try:
            prg = PRG(seed.seed, f"serve/{self.role}")
            seed.wipe()
            # every party listens once the client has all go answers: it then says start
            if not sess.start.wait(self.cluster.connect_timeout):
                raise TimeoutError_(f"the client did not start session {sess.sid[:8]} within "
                                    f"{self.cluster.connect_timeout:g}s of go")
            if sess.cancelled:
                return
            ep.connect()
            job = PartyJob(role=self.role, security=self.security, fixed=self.cfg, prg=prg,
                           model=copy.deepcopy(self.model), input=None,
                           options=dict(self.options, **({"range_guard": True} if sess.range_guard else {})))
            if item is not None:
                self.spec.run_prepared(self.role, ep, job, item)
            else:
                self.spec.run_party(self.role, ep, job)
            ok = True
        except BaseException as e:  # noqa: BLE001 - a session's failure ends that session only
            if isinstance(e, ProtocolAbort) and not isinstance(e, PeerAbortedError) and ep is not None \
                    and getattr(ep, "_aborted", None) is None:
                try:
                    ep.abort(e.check, e.suspect, e.detail)
                except Exception:  # noqa: BLE001
                    pass
            sess.error = error_record(e)
        finally:
            if item is not None:
                item.wipe()
            if ep is not None:
                try:
                    ep.close() if ok else ep.close(timeout=getattr(ep, "peer_timeout", 3.0) + 1.0)
                except Exception as e:  # noqa: BLE001 - closing must not hide the outcome
                    if ok:
                        ok, sess.error = False, error_record(e)
            sess.ep = None
            self._free_port(sess.port)
            why = None   # (a failed session: its error, logged below)
            with self._lock:
                sess.state = "completed" if ok else "failed"
                if sess.cancelled:
                    sess.state = "expired"
                    self.stats.expired += 1
                elif ok:
                    self.stats.completed += 1
                else:
                    self.stats.failed += 1
                    t = (sess.error or {}).get("type", "?")
                    msg = str((sess.error or {}).get("message", ""))[:300]
                    self.stats.errors[t] = self.stats.errors.get(t, 0) + 1
                    if len(self.stats.last_error) < 32 or t in self.stats.last_error:
                        self.stats.last_error[t] = msg
                    why = f"{t}: {msg}"
                self._sessions.pop(sess.nonce_c, None)
            if why is not None and self.log is not None:   # (outside the lock)
                self.log(f"serve {self.party_id}: session {sess.nonce_c[:4].hex()} failed: {why}")
            if self._trim is not None:   # free heap pages of the session back to the OS (heap_trimmer)
                self._trim()

    def _expire(self) -> None:
        horizon = self.cluster.connect_timeout
        now = time.monotonic()
        with self._lock:
            gone = [s for s in self._sessions.values() if s.state == "pending" and now - s.opened > horizon]
            for s in gone:
                del self._sessions[s.nonce_c]
                self.stats.expired += 1
                self._ports.discard(s.port)
        for s in gone:
            self.prep.release(s.prep[1] if s.prep else None)
            s.prep = None

    # -- main loop --
    def serve_forever(self, log=None) -> dict:
        """Answer control requests until ``stop()``; then finish in-flight sessions (up to
        ``grace`` seconds), abort the rest, and return the final status."""
        import zmq

        self._open_control()
        self.prep.start()
        self.ready.set()
        client_key = self.client.public_key.decode() if isinstance(self.client.public_key, bytes) \
            else str(self.client.public_key)
        try:
            while not self._stop.is_set():
                if self._sock.poll(200, zmq.POLLIN):
                    frames = self._sock.recv_multipart(copy=False)
                    if len(frames) != 2:
                        continue
                    rid = None
                    try:
                        who = "client" if frames[1].get("User-Id") == client_key else "leader"
                        msg = _decode(frames[1].bytes, who)
                        rid = msg.get("rid") if isinstance(msg.get("rid"), int) else None
                        rep = self._handle(msg, who)
                    except Exception as e:  # noqa: BLE001 - a bad request is refused, never ends the server
                        with self._lock:
                            self.stats.refused += 1
                        rep = {"ok": False, "error": str(e) if isinstance(e, SecinferError)
                               else f"malformed request ({type(e).__name__})"}
                    rep["rid"] = rid     # the request this answers (a client drops stale answers)
                    self._sock.send_multipart([frames[0].bytes, _encode(rep)])
                self._expire()
            return self._drain(log)
        finally:
            self._stop.set()
            self.prep.close()
            self.pool.close()
            if self._sock is not None:
                self._sock.close(0)
            if self._auth is not None:
                self._auth.stop()
            if self._ctx is not None:
                self._ctx.term()

    def _drain(self, log) -> dict:
        deadline = time.monotonic() + self.grace
        while True:
            with self._lock:
                live = [s for s in self._sessions.values() if s.state == "running"]
                for k in [k for k, s in self._sessions.items() if s.state == "pending"]:
                    s = self._sessions.pop(k)
                    self.stats.expired += 1
                    self.prep.release(s.prep[1] if s.prep else None)
                    s.prep = None
            if not live or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for s in live:   # past the grace period: close their endpoints (peers hear "bye")
            s.start.set()
            ep = s.ep
            if ep is not None:
                try:
                    ep.close(flush=False, timeout=1.0)
                except Exception:  # noqa: BLE001
                    pass
        for s in live:
            if s.thread is not None:
                s.thread.join(timeout=2.0)
        with self._lock:
            self.stats.aborted += len(live)
        st = self.status()
        if log is not None:
            pr = st["prep"]
            log(f"stopped: {st['completed']} completed, {st['failed']} failed, {st['expired']} expired, "
                f"{st['aborted']} aborted at shutdown; prepared items: {pr['hits']} used, {pr['misses']} misses, "
                f"{pr['made']} made, {pr['failed']} prep sessions failed")
        return st


# ---- the client: secinfer.runtime.serve_client (re-exported here) ----------------------------------
from secinfer.runtime.serve_client import QueryResult, ServeClient, query, server_status  # noqa: E402,F401
