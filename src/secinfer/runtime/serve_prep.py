"""Offline material made ahead of the clients, for ``secinfer serve`` (docs/runtime.md "Serving").

When the protocol can run its offline phase without the client (``ProtocolSpec.prepare``;
astra: its servers' masks, products' preprocessing and the model owner's shares), the
model-side parties make prepared items in the background, up to ``--pool`` of them:

* the *leader* (the first model-side role in the protocol's role order) drives: it picks a
  fresh 16-byte item id and runs, over the same CurveZMQ control sockets the clients use
  (each server's ZAP handler admits the leader's key for these operations only)::

      leader -> every other model-side party S   prep-open {id}      S -> {port_S, r_S}
      leader -> every S                          prep-go {id, ports, contribs}

  then every model-side party runs ``spec.prepare`` in a *prep session*: the cluster's
  model-side parties only, the agreed ports, session name ``<name>/prep``, session id
  ``session_id("prep" | id | r_S...)`` (so the transport authenticates it like any session);
  each stores its item under the id (``PrepStore``);
* a client session takes one: the leader's answer to ``open`` names the id of its oldest
  item (removed from its store at once), the client sends it in ``go`` to every server,
  and each removes that item from its store (refusing an id it does not hold: never made,
  dropped, or taken already). The id is part of the session nonce, so the parties of one
  session agree on it or cannot connect. An item is wiped after its session.

The leader's store holds at most ``--pool`` items; the others hold at most ``--pool`` +
``--max-sessions`` (items the leader handed to sessions that never started are dropped,
oldest first). Sessions that find no item (or a batch size other than ``prep_rows``) run
the protocol's whole offline phase inside the session (a pool miss).
"""

from __future__ import annotations

import copy
import secrets
import threading
import time

from secinfer.runtime.pool import PrepStore

PREP_SUFFIX = "/prep"
ID_BYTES = 16
PREP_WORKERS = 2      # prep sessions the leader runs at once
CLAIM_WAIT = 3.0      # s a non-leader waits for an item whose prep session is finishing here


def prep_nonce(pid: bytes, contribs: dict[str, bytes]) -> bytes:
    return b"prep" + pid + b"".join(contribs[k] for k in sorted(contribs))


def prep_cluster(cluster, client_id: str, ports: dict[str, int]):
    """The cluster of one prep session: the model-side parties only, per-session ports."""
    import dataclasses

    from secinfer.runtime.serve import ServeError

    side = {pid: p for pid, p in cluster.parties.items() if pid != client_id}
    if set(ports) != set(side):
        raise ServeError(f"prep ports name {sorted(ports)}, the model side is {sorted(side)}")
    d = copy.copy(cluster)
    d.parties = {pid: dataclasses.replace(p, port=int(ports[pid])) for pid, p in side.items()}
    d.session = cluster.session + PREP_SUFFIX
    return d


class PrepCoordinator:
    """One server's part in making and handing out prepared items (see the module doc)."""

    def __init__(self, server, capacity: int) -> None:
        self.server = server
        spec = server.spec
        self.side = [p.id for p in server.cluster.parties.values() if p.id != server.client.id]
        order = {r: i for i, r in enumerate(spec.roles)}
        self.leader_id = min(self.side, key=lambda pid: (order.get(server.cluster.party(pid).role, 99), pid))
        self.is_leader = server.party_id == self.leader_id
        self.reason = ""
        if spec.prepare is None or spec.run_prepared is None:
            self.reason = f"{spec.name} has no offline phase separable from the client"
        elif spec.prep_refusal is not None:
            self.reason = spec.prep_refusal(server.security, server.options)
        if not self.reason and capacity == 0:
            self.reason = "pool size 0"
        self.enabled = not self.reason
        self.rows = server.options.get("prep_rows", 1)
        self.capacity = capacity
        self.store = PrepStore(capacity if self.is_leader else capacity + server.max_sessions)
        self._pending: dict[bytes, tuple] = {}     # id -> (port, contrib, opened) at a non-leader
        self._making: set[bytes] = set()           # ids whose prep session runs here now
        self._inflight = 0                         # the leader's prep sessions in progress
        self.workers = PREP_WORKERS
        self._lock = threading.Lock()
        self.hits = self.misses = self.made = self.failed = self.expired = 0
        self.last_error = ""

    # -- leader --
    def start(self) -> None:
        if self.enabled and self.is_leader:
            self._threads = [threading.Thread(target=self._refill, name=f"serve-prep-{i}", daemon=True)
                             for i in range(self.workers)]
            for t in self._threads:
                t.start()

    def _refill(self) -> None:
        srv = self.server
        socks = {}
        backoff = 0.2
        try:
            for pid in self.side:
                if pid != srv.party_id:
                    e = srv.cluster.party(pid)
                    socks[pid] = srv._control_client(e)
            while not srv._stop.is_set():
                with self._lock:   # items held + items being made stay within the bound
                    room = len(self.store) + self._inflight < self.capacity
                    if room:
                        self._inflight += 1
                if not room:
                    self.store.wait_below(self.capacity, 0.1)
                    srv._stop.wait(0.02)
                    continue
                try:
                    self._make_one(socks)
                    backoff = 0.2
                except Exception as e:  # noqa: BLE001 - a failed prep session is counted, the loop goes on
                    with self._lock:
                        self.failed += 1
                        self.last_error = f"{type(e).__name__}: {e}"[:300]
                    # a socket may hold an unanswered request: start it afresh
                    for pid in list(socks):
                        socks[pid].close(0)
                        socks[pid] = srv._control_client(srv.cluster.party(pid))
                    srv._stop.wait(backoff)
                    backoff = min(5.0, backoff * 2)
                finally:
                    with self._lock:
                        self._inflight -= 1
        finally:
            for s in socks.values():
                s.close(0)

    def _make_one(self, socks) -> None:
        from secinfer.runtime.serve import _hex, _request

        srv = self.server
        pid = secrets.token_bytes(ID_BYTES)
        t = srv.cluster.connect_timeout
        replies = {q: _request(s, {"op": "prep-open", "id": pid.hex()}, t, q) for q, s in socks.items()}
        port = srv._alloc_port()
        try:
            contrib = secrets.token_bytes(ID_BYTES)
            ports = {q: int(r["port"]) for q, r in replies.items()}
            ports[srv.party_id] = port
            contribs = {q: _hex(r, "contrib", ID_BYTES, q) for q, r in replies.items()}
            contribs[srv.party_id] = contrib
            go = {"op": "prep-go", "id": pid.hex(), "ports": ports, "contribs": {k: v.hex() for k, v in contribs.items()}}
            for q, s in socks.items():
                _request(s, go, t, q)
            self._run(pid, ports, contribs)
        finally:
            srv._free_port(port)

    # -- every model-side party --
    def on_prep_open(self, msg: dict) -> dict:
        from secinfer.runtime.serve import ServeError, _hex

        if not self.enabled or self.is_leader:
            raise ServeError("this server makes no prepared items on request")
        pid = _hex(msg, "id", ID_BYTES, "prep-open")
        self._expire()
        with self._lock:
            if pid in self._pending or len(self._pending) >= 4:
                raise ServeError("prep-open: id in use, or too many prep sessions pending")
        port = self.server._alloc_port()
        contrib = secrets.token_bytes(ID_BYTES)
        with self._lock:
            self._pending[pid] = (port, contrib, time.monotonic())
        return {"ok": True, "port": port, "contrib": contrib.hex()}

    def on_prep_go(self, msg: dict) -> dict:
        from secinfer.runtime.serve import ServeError, _hex

        pid = _hex(msg, "id", ID_BYTES, "prep-go")
        with self._lock:
            pend = self._pending.pop(pid, None)
        if pend is None:
            raise ServeError("prep-go for an item this server has not opened")
        port, contrib, _ = pend
        try:
            ports = {str(k): int(v) for k, v in (msg.get("ports") or {}).items()}
            contribs = {str(k): _hex(msg["contribs"], k, ID_BYTES, "prep-go") for k in (msg.get("contribs") or {})}
        except (TypeError, ValueError, KeyError):
            self.server._free_port(port)
            raise ServeError("prep-go: malformed ports or contributions") from None
        if ports.get(self.server.party_id) != port or contribs.get(self.server.party_id) != contrib \
                or set(contribs) != set(self.side):
            self.server._free_port(port)
            raise ServeError("prep-go: our port or contribution is not the one we announced")

        with self._lock:
            self._making.add(pid)

        def run():
            try:
                self._run(pid, ports, contribs)
            except Exception as e:  # noqa: BLE001 - counted; the leader sees its own failure
                with self._lock:
                    self.failed += 1
                    self.last_error = f"{type(e).__name__}: {e}"[:300]
            finally:
                with self._lock:
                    self._making.discard(pid)
                self.server._free_port(port)
        threading.Thread(target=run, name=f"prep-{pid.hex()[:8]}", daemon=True).start()
        return {"ok": True}

    def _expire(self) -> None:
        now = time.monotonic()
        with self._lock:
            old = [k for k, v in self._pending.items() if now - v[2] > self.server.cluster.connect_timeout]
            for k in old:
                self.server._free_port(self._pending.pop(k)[0])

    def _run(self, pid: bytes, ports: dict, contribs: dict) -> None:
        """One prep session at this party: ``spec.prepare`` over the model-side parties."""
        from secinfer.crypto.prg import PRG, fresh_seed
        from secinfer.protocols.base import PartyJob
        from secinfer.runtime.party import endpoint_class

        srv = self.server
        derived = prep_cluster(srv.cluster, srv.client.id, ports)
        sid = derived.session_id(prep_nonce(pid, contribs))
        ep = endpoint_class(derived.transport).from_cluster(derived, srv.party_id, srv.identity, sid,
                                                            network=srv.profile, connect=False)
        ok = False
        try:
            ep.connect()
            job = PartyJob(role=srv.role, security=srv.security, fixed=srv.cfg,
                           prg=PRG(fresh_seed(), f"serve-prep/{srv.role}"),
                           model=copy.deepcopy(srv.model), input=None, options=dict(srv.options, prep_rows=self.rows))
            item = srv.spec.prepare(srv.role, ep, job)
            ok = True
        finally:
            ep.close() if ok else ep.close(timeout=getattr(ep, "peer_timeout", 3.0) + 1.0)
        self.store.put(pid, item)
        with self._lock:
            self.made += 1

    # -- client sessions --
    def reserve(self, rows) -> tuple | None:
        """Leader, at a client's open: (id, item) of the oldest item for ``rows``, or None."""
        if not (self.enabled and self.is_leader):
            return None
        got = self.store.take_oldest() if rows == self.rows else None
        with self._lock:
            if got is None:
                self.misses += 1
            else:
                self.hits += 1
        return got

    def claim(self, pid: bytes):
        """A non-leader, at a client's go: the item ``pid``, removed; None if not held."""
        end = time.monotonic() + CLAIM_WAIT
        while True:   # the leader may finish its prep session a moment before we finish ours
            item = self.store.take(pid)
            with self._lock:
                making = pid in self._making
            if item is not None or not making or time.monotonic() > end:
                break
            time.sleep(0.002)
        with self._lock:
            if item is None:
                self.misses += 1
            else:
                self.hits += 1
        return item

    def release(self, item) -> None:
        """An item reserved for a session that never ran: wiped, never handed out again."""
        if item is not None:
            with self._lock:
                self.expired += 1
            item.wipe()

    def close(self) -> None:
        self.store.close()
        for t in getattr(self, "_threads", ()):
            t.join(timeout=5.0)

    def live_state(self) -> dict:
        with self._lock:
            return {"prep_held": len(self.store), "prep_pending": len(self._pending), "prep_making": len(self._making),
                    "prep_inflight": self._inflight}

    def stats(self) -> dict:
        st = self.store.stats()
        with self._lock:
            st.update(enabled=self.enabled, reason=self.reason, leader=self.leader_id, rows=self.rows,
                      hits=self.hits, misses=self.misses, made=self.made, failed=self.failed, expired=self.expired,
                      last_error=self.last_error, ids=self.store.ids())
        return st
