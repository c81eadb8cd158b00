"""The client side of serving: ``ServeClient`` (control sockets kept across queries) and
``query`` (one session); see ``secinfer.runtime.serve`` and docs/runtime.md "Serving".

Per query (every step to all servers at once, answers collected after)::

    open {n_c, rows}  ->  {port_S, r_S, conf, prep (the leader: a prepared item's id or null)}
    (the client binds its own session endpoint)
    go {n_c, ports, contribs, prep}  ->  {session_id}   (each server binds its endpoint first)
    start {n_c}  ->  {}                                   (now every party listens: connect)

Before ``open`` (so a refused query spends no session, port or prepared item) the client
checks its query against the model owner's public range certificate (``certificate``,
asked once per ``ServeClient``; ``secinfer.ir.range_cert``): a sample outside it is refused
with ``FixedPointRangeError`` naming the feature, value and bound, unless
``allow_out_of_range`` (a ``FixedPointOverflowWarning``: the answer may be wrong). The
owner's ``open`` answer names the certificate's digest; a client holding another one asks
again and checks again before the session starts.

If a server refuses ``go``, the client sends ``cancel {n_c}`` to those that accepted it
(they end the session at once, counted as expired) and retries as a new session.

``start`` is a barrier: no party dials a peer that is not listening yet (a refused dial
is retried by the transport only after a pause). Each request carries a request id the
server echoes, so an answer that arrives after its request timed out is dropped instead
of being read as the answer to a later request on the same socket.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import numpy as np

from secinfer.errors import ConfigError, NetworkError, TimeoutError_
from secinfer.runtime import range_check as _range_check

RangeWarning = _range_check.RangeWarning   # (moved there; still importable from here)


@dataclass
class QueryResult:
    output: np.ndarray
    output_ring: np.ndarray | None
    session_id: str
    protocol: str
    security: str
    latency_s: dict
    info: dict


class _ConnectFailed(Exception):
    """The session could not be set up (before the protocol sent anything): retried."""


class ServeClient:
    """A client of running ``secinfer serve`` parties. One thread at a time per client
    (its control sockets are zmq sockets); make one per thread for concurrent queries."""

    def __init__(self, cluster_path, party_id: str = "client", *, keys_dir=None, protocol: str | None = None,
                 network: str | None = None, control_timeout: float = 10.0, recv_timeout: float | None = None) -> None:
        import zmq

        from secinfer.net.shaping import parse_profile
        from secinfer.runtime.cluster import load_cluster

        self.cluster = load_cluster(cluster_path)
        self.party_id = party_id
        self.me = self.cluster.party(party_id)
        self.identity = self.cluster.load_secret(party_id, keys_dir)
        self.servers = [p for p in self.cluster.parties.values() if p.id != party_id]
        self.protocol = protocol
        self.profile = parse_profile(network) if network and network != "none" else None
        self.control_timeout = control_timeout
        self.recv_timeout = recv_timeout
        self._ctx = zmq.Context()
        self._socks: dict = {}
        self._rid = 0
        self._cert = None          # (RangeCertificate, digest), asked once (``certificate``)

    # -- control --
    def _sock(self, pid: str):
        from secinfer.runtime.serve import _control_socket

        s = self._socks.get(pid)
        if s is None:
            e = self.cluster.party(pid)
            s = self._socks[pid] = _control_socket(self._ctx, self.identity, e.public_key, e.connect_url())
        return s

    def _ask_all(self, msgs: dict) -> dict:
        """Send ``msgs[pid]`` to every server at once; their answers (refusals raise)."""
        import zmq

        from secinfer.runtime.serve import ServeError, _decode, _encode

        rids = {}
        for pid, m in msgs.items():
            self._rid += 1
            rids[pid] = self._rid
            self._sock(pid).send(_encode(dict(m, rid=self._rid)))
        deadline = time.monotonic() + self.control_timeout
        out, refused = {}, []
        for pid, m in msgs.items():
            s = self._sock(pid)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not s.poll(int(left * 1000), zmq.POLLIN):
                    # the socket may still deliver this answer later: start it afresh
                    self._socks.pop(pid).close(0)
                    raise TimeoutError_(
                        f"server {pid} did not answer the control request {m.get('op')!r} within "
                        f"{self.control_timeout:g}s (is `secinfer serve` running there, and is this the client's key?)")
                rep = _decode(s.recv(), pid)
                if rep.get("rid") == rids[pid]:
                    break          # else: a late answer to an earlier request, dropped
            if not rep.get("ok"):
                refused.append(f"server {pid} refused {m.get('op')!r}: {rep.get('error', 'no reason given')}")
            out[pid] = rep
        if refused:
            e = ServeError("; ".join(refused))
            e.accepted = [pid for pid, r in out.items() if r.get("ok")]
            raise e
        return out

    def close(self) -> None:
        for s in self._socks.values():
            s.close(0)
        self._socks.clear()
        self._ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def status(self, server_id: str, live: bool = False) -> dict:
        """``live``: also the per-session state the server holds now (``Server.live_state``)."""
        return self._ask_all({server_id: {"op": "status", "live": live}})[server_id]["status"]

    # -- the range certificate --
    def certificate(self, refresh: bool = False):
        """The model owner's public range certificate (``secinfer.ir.range_cert.RangeCertificate``),
        asked of every server at once (only the model owner holds one) and kept."""
        from secinfer.ir.range_cert import RangeCertificate
        from secinfer.runtime.serve import ServeError, certificate_digest

        if self._cert is None or refresh:
            reps = self._ask_all({p.id: {"op": "certificate"} for p in self.servers})
            held = {pid: r["certificate"] for pid, r in reps.items() if r.get("certificate") is not None}
            if len(held) != 1:
                raise ServeError("no server published a range certificate (a server older than this client?)"
                                 if not held else f"more than one server published a range certificate: {sorted(held)}")
            raw = next(iter(held.values()))
            self._cert = (RangeCertificate.from_json(raw), certificate_digest(raw))
        return self._cert[0]

    def check_range(self, x, allow_out_of_range: bool = False) -> str:
        """Check the query against the certificate before anything is sent: "certified";
        "guarded" (outside, but inside the regions in which the protocol's in-protocol range
        guard covers the rest: the session runs with it and ends with FixedPointRangeError
        naming the layer if a sum leaves the ring); "overridden" (``allow_out_of_range``:
        warns); else FixedPointRangeError. A NaN or infinite value is refused always."""
        from secinfer.runtime.range_check import check_against

        x = np.asarray(x, dtype=np.float64)
        if not np.all(np.isfinite(x)):   # (before asking for the certificate)
            return check_against(None, x)
        return check_against(self.certificate(), x, allow_out_of_range, stacklevel=4)

    # -- queries --
    def query(self, x, *, endpoint_wrapper=None, retries: int = 2, allow_out_of_range: bool = False) -> QueryResult:
        """One session; returns the output. ``endpoint_wrapper(ep)`` (tests: fault injection)
        wraps the session endpoint the protocol runs on. A session that cannot be set up
        (a session port taken between its choice and its bind, a prepared item gone) fails
        before any protocol message and is retried as a new session (fresh nonce, ports and
        material) up to ``retries`` times.

        ``allow_out_of_range``: send a query outside the model owner's range certificate
        anyway (``check_range``; a ``RangeWarning``, the answer may be wrong)."""
        use_prep = True
        for attempt in range(retries + 1):
            try:
                return self._once(x, endpoint_wrapper, use_prep, allow_out_of_range)
            except _ConnectFailed as e:
                if "prepared item" in str(e.__cause__):
                    use_prep = False   # a server lost its items (e.g. restarted): run the offline phase in-session
                if attempt == retries:
                    raise e.__cause__ from None
        raise AssertionError("unreachable")

    def _cancel(self, nonce_c: bytes, accepted: list) -> None:
        """Release sessions the servers opened or bound for us (counted as expired there)."""
        if accepted:
            try:
                self._ask_all({pid: {"op": "cancel", "nonce": nonce_c.hex()} for pid in accepted})
            except Exception:  # noqa: BLE001 - best effort; they expire after connect_timeout
                pass

    def _once(self, x, endpoint_wrapper, use_prep: bool = True, allow_out_of_range: bool = False) -> QueryResult:
        from secinfer.arith.fixed import get_config
        from secinfer.crypto.prg import PRG
        from secinfer.protocols import registry
        from secinfer.protocols.base import PartyJob
        from secinfer.runtime.party import endpoint_class
        from secinfer.runtime.serve import (NONCE_BYTES, ServeError, _hex, derived_cluster, session_nonce,
                                            session_port)

        t0 = time.perf_counter()
        x = np.asarray(x, dtype=np.float64)
        cluster, party_id = self.cluster, self.party_id
        range_state = self.check_range(x, allow_out_of_range)    # before open: nothing spent on a refusal
        nonce_c = secrets.token_bytes(NONCE_BYTES)
        rows = int(x.shape[0]) if x.ndim > 1 else 1   # the batch size the protocols announce (images: N of NCHW)
        replies = self._ask_all({p.id: {"op": "open", "nonce": nonce_c.hex(), "rows": rows, "prep_ok": use_prep,
                                        "range_guard": range_state == "guarded"} for p in self.servers})
        first = next(iter(replies.values()))
        conf = {k: first.get(k) for k in ("protocol", "security", "fixed", "options")}
        for pid, r in replies.items():
            if {k: r.get(k) for k in conf} != conf:
                raise ServeError(f"servers disagree on what they serve: {pid} says "
                                 f"{ {k: r.get(k) for k in conf} }, another {conf}")
        if self.protocol is not None and conf["protocol"] != self.protocol:
            self._cancel(nonce_c, list(replies))
            raise ServeError(f"the servers serve {conf['protocol']!r}, not {self.protocol!r}")
        digests = {r.get("cert") for r in replies.values() if r.get("cert") is not None}
        if digests != {self._cert[1]}:   # the owner's certificate changed since we asked: ask and check again
            self._cancel(nonce_c, list(replies))
            self._cert = None
            raise _ConnectFailed() from ServeError("the model owner's range certificate changed (retry as a new session)")
        spec = registry.get(conf["protocol"])
        if self.me.role != spec.input_role:
            raise ConfigError(f"party {party_id} plays {self.me.role!r}; only the input role "
                              f"{spec.input_role!r} can query")
        cluster.check_roles(spec.roles)
        ports = {pid: int(r["port"]) for pid, r in replies.items()}
        ports[party_id] = session_port(cluster, party_id)
        contribs = {pid: _hex(r, "contrib", NONCE_BYTES, pid) for pid, r in replies.items()}
        preps = [_hex(r, "prep", NONCE_BYTES, pid) for pid, r in replies.items() if r.get("prep") is not None]
        if len(preps) > 1:
            raise ServeError("more than one server offered a prepared item")
        prep = preps[0] if preps else None
        if prep is not None and spec.run_prepared is None:
            raise ServeError(f"a server offered a prepared item, but {spec.name} cannot run on one")
        derived = derived_cluster(cluster, ports)
        sid = derived.session_id(session_nonce(nonce_c, contribs, prep))
        kw = {} if self.recv_timeout is None else {"recv_timeout": self.recv_timeout}
        try:     # listening before go: the servers may dial us as soon as they start
            ep = endpoint_class(derived.transport).from_cluster(derived, party_id, self.identity, sid,
                                                                network=self.profile, connect=False, **kw)
        except NetworkError as e:
            raise _ConnectFailed() from e
        ok = False
        try:
            go = {"op": "go", "nonce": nonce_c.hex(), "ports": ports,
                  "contribs": {k: v.hex() for k, v in contribs.items()}, "prep": prep.hex() if prep else None}
            try:
                sids = {pid: r["session_id"] for pid, r in self._ask_all({p.id: go for p in self.servers}).items()}
            except ServeError as e:
                self._cancel(nonce_c, getattr(e, "accepted", []))
                if "retry as a new session" in str(e) or "used already" in str(e):
                    raise _ConnectFailed() from e
                raise
            if any(v != sid.hex() for v in sids.values()):
                raise ServeError("the servers derived another session id than ours")
            self._ask_all({p.id: {"op": "start", "nonce": nonce_c.hex()} for p in self.servers})
            t_ctl = time.perf_counter()
            try:
                ep.connect()
            except NetworkError as e:
                raise _ConnectFailed() from e
            run_ep = endpoint_wrapper(ep) if endpoint_wrapper is not None else ep
            job = PartyJob(role=self.me.role, security=conf["security"], fixed=get_config(conf["fixed"]),
                           prg=PRG.fresh(f"query/{self.me.role}"), model=None, input=x,
                           options=dict(conf["options"] or {}, **({"range_guard": True} if range_state == "guarded"
                                                                   else {})))
            res = spec.run_prepared(self.me.role, run_ep, job, None) if prep else \
                spec.run_party(self.me.role, run_ep, job)
            if res is None or res.output is None:
                raise ServeError(f"protocol {conf['protocol']!r} returned no output to the client")
            ok = True
        finally:
            try:
                ep.close() if ok else ep.close(timeout=getattr(ep, "peer_timeout", 3.0) + 1.0)
            except NetworkError:
                if ok:
                    raise
        t1 = time.perf_counter()
        return QueryResult(np.asarray(res.output), None if res.output_ring is None else np.asarray(res.output_ring),
                           sid.hex(), conf["protocol"], conf["security"],
                           {"control": t_ctl - t0, "session": t1 - t_ctl, "total": t1 - t0, **{
                               ph: ep.meter.seconds[ph] for ph in ("setup", "offline", "online")}},
                           dict(res.info or {}, prep=prep.hex() if prep else None, range=range_state))


def query(cluster_path, x, party_id: str = "client", *, keys_dir=None, protocol: str | None = None,
          network: str | None = None, control_timeout: float = 10.0, recv_timeout: float | None = None,
          endpoint_wrapper=None, retries: int = 2, allow_out_of_range: bool = False) -> QueryResult:
    """One client session against running ``secinfer serve`` parties (a one-query
    ``ServeClient``; ``ServeClient.query`` for the rest of the arguments)."""
    with ServeClient(cluster_path, party_id, keys_dir=keys_dir, protocol=protocol, network=network,
                     control_timeout=control_timeout, recv_timeout=recv_timeout) as c:
        return c.query(x, endpoint_wrapper=endpoint_wrapper, retries=retries, allow_out_of_range=allow_out_of_range)


def server_status(cluster_path, server_id: str, party_id: str = "client", *, keys_dir=None,
                  timeout: float = 5.0, live: bool = False) -> dict:
    """The counters of a running server (asked with the client's key); ``live``: with the
    per-session state it holds now (``Server.live_state``)."""
    with ServeClient(cluster_path, party_id, keys_dir=keys_dir, control_timeout=timeout) as c:
        return c.status(server_id, live=live)
