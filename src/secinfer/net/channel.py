"""The byte channel every protocol talks through: ``Endpoint``.

Protocol code sees only this interface:

    ep.send(peer, tag, *arrays)
    a, b = ep.recv(peer, tag, ArraySpec(np.uint64, (n,)), ArraySpec(np.uint8, (n,)))
    peer, (a,) = ep.recv_first({"p1": (tag, spec), "p2": (tag, spec)})   # whichever comes first
    with ep.phase("offline"): ...
    ep.abort(check, suspect)        # tell every peer, then raise ProtocolAbort

Messages between two parties are strictly ordered; ``recv`` expects the *next* frame from
that peer to carry exactly ``tag`` and arrays matching the specs, otherwise FrameError.
A received ``__abort__`` frame raises ``PeerAbortedError``.

Transports subclass ``Endpoint`` and implement ``_transmit`` / ``_receive`` / ``close``:
``LocalHub`` (threads in one process, for unit tests) lives here; the socket transport
(pyzmq CURVE, one OS process per party) is in ``secinfer.net.zmq_transport``.
"""

from __future__ import annotations

import abc
import contextlib
import itertools
import queue
import threading
import time
import numpy as np

from secinfer.errors import FrameError, PeerAbortedError, PeerDeadError, ProtocolAbort, TimeoutError_
from secinfer.net.codec import (DEFAULT_MAX_FRAME, DTYPES, PHASES, Header, decode_frame, decode_known, encode_frame,
                                encode_one, encode_parts, encoded_names)
from secinfer.net.meter import Meter
from secinfer.spec import ArraySpec  # noqa: F401 - re-exported: protocols import it from here

ABORT_TAG = "__abort__"
# the numpy dtype a spec's dtype names (a numpy type, a name, a Python type or the dtype
# itself), for the codec's dtypes: a received array's dtype is one of these objects
_NP_DTYPES: dict = {k: dt for dt in DTYPES.values() for k in (dt, dt.type, dt.name)}
_NP_DTYPES.update({bool: np.dtype(bool), int: np.dtype(int), float: np.dtype(float), complex: np.dtype(complex)})
DEFAULT_RECV_TIMEOUT = 120.0


class Endpoint(abc.ABC):
    """One party's view of the network."""

    def __init__(self, me: str, peers, session_id: bytes, *, max_frame: int = DEFAULT_MAX_FRAME,
                 recv_timeout: float = DEFAULT_RECV_TIMEOUT) -> None:
        self.me = me
        self.peers = tuple(p for p in peers if p != me)
        self.session_id = session_id
        self.max_frame = max_frame
        self.recv_timeout = recv_timeout
        self.meter = Meter(me)
        self._phase = "setup"
        self._seq_out: dict[str, int] = {p: 0 for p in self.peers}
        self._seq_in: dict[str, int] = {p: 0 for p in self.peers}
        self._aborted: ProtocolAbort | None = None
        self.last_step: tuple | None = None   # (direction, peer, tag) of the last message
        self._names: dict = {}                # encoded header names and layouts (codec.encode_parts)
        self._layouts: dict = {}              # received array layouts already checked (codec.decode_frame)
        self.failed_phase: str | None = None

    # ---- phases ------------------------------------------------------------------------
    @property
    def current_phase(self) -> str:
        return self._phase

    @contextlib.contextmanager
    def phase(self, name: str):
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}")
        prev, self._phase = self._phase, name
        t0 = time.perf_counter()
        self.meter.enter(name, time.time())
        try:
            yield self
        except BaseException:
            if self.failed_phase is None:
                self.failed_phase = name   # (the innermost phase a failure left: for the party's log)
            raise
        finally:
            self.meter.seconds[name] += time.perf_counter() - t0
            self.meter.leave(name, time.time())
            self._phase = prev

    def mark(self, name: str) -> None:
        """Record a named instant (``time.monotonic()``) in the meter (benchmark timing)."""
        self.meter.mark(name, time.monotonic())

    def restart_rounds(self) -> None:
        """Count rounds afresh (every party calls it at the same point, e.g. before each of
        several queries run over one endpoint): the meter then shows one run's rounds."""
        for ph in PHASES:
            if ph != "setup":
                self.meter.depth[ph] = 0

    # ---- messaging ---------------------------------------------------------------------
    def _check_peer(self, peer: str) -> None:
        if peer not in self._seq_out:
            raise FrameError(f"{self.me}: {peer!r} is not a peer of this session")

    def send(self, peer: str, tag: str, *arrays: np.ndarray) -> None:
        seq = self._seq_out.get(peer)
        if seq is None:
            self._check_peer(peer)
        if self._aborted is not None:
            raise self._aborted
        ph = self._phase
        meter = self.meter
        if len(arrays) == 1:   # (the common case: the header's fixed parts looked up, not rebuilt)
            parts, size, payload = encode_one(self._names, self.session_id, self.me, tag, seq, ph, meter.depth[ph],
                                              arrays[0], self.max_frame)
        else:
            hdr = Header(self.session_id, self.me, tag, seq, ph, meter.depth[ph])
            parts, size, payload = encode_parts(hdr, arrays, self.max_frame, self._names)
        self._seq_out[peer] = seq + 1
        self.last_step = ("sent", peer, tag)   # (read by a party's log thread)
        c = meter.counters[(ph, "sent", peer, tag)]   # (Meter.record, inline)
        c.payload += payload
        c.wire += size
        c.messages += 1
        self._transmit_parts(peer, parts, size)

    def send_to_all(self, tag: str, *arrays: np.ndarray) -> None:
        for p in self.peers:
            self.send(p, tag, *arrays)

    def send_many(self, peers, tag: str, *arrays: np.ndarray) -> None:
        """``send(p, tag, *arrays)`` for each of ``peers`` in order: the same frames, seqs
        and meter counts. A transport may make every frame before the first leaves, so that
        they leave close together (tcp, Python record layer: ``FastPaths.send_many``)."""
        for p in peers:
            self.send(p, tag, *arrays)

    def recv(self, peer: str, tag: str, *specs: ArraySpec, timeout: float | None = None) -> list[np.ndarray]:
        expected = self._seq_in.get(peer)
        if expected is None:
            self._check_peer(peer)
        if self._aborted is not None:
            raise self._aborted
        deadline = time.monotonic() + (self.recv_timeout if timeout is None else timeout)
        return self._accept(peer, tag, specs, self._receive(peer, deadline), expected)

    def _accept(self, peer: str, tag: str, specs: tuple, frame, expected: int, known: tuple | None = None,
                wire: int = 0) -> list[np.ndarray]:
        """``recv``'s work on the received ``frame``: decode and check it against ``tag``, the
        ``expected`` seq and ``specs``, count it. ``known``: (seq, phase, depth, arrays) of a
        frame whose header the transport checked against one checked here in full before
        (``codec.decode_known``'s conditions, seq included), ``wire`` its bytes."""
        if known is None:
            names = self._names.get((self.session_id, peer, tag))
            if names is None:
                names = encoded_names(self.session_id, peer, tag, self._names)
            known = decode_known(frame, self.max_frame, names, self._layouts) \
                if type(frame) is bytearray and tag != ABORT_TAG else None
            wire = len(frame)
        if known is not None:
            # a header checked in full before, but for seq, phase and depth: its names are the
            # expected ones (our session, the peer, the tag)
            seq, hphase, hdepth, arrays = known
        else:
            # (frames that carry exactly the names we expect skip decoding them: codec.decode_frame)
            hdr, arrays = decode_frame(frame, self.max_frame, (names, peer, tag), self._layouts)
            if hdr.session_id != self.session_id:
                raise FrameError(f"{self.me} <- {peer} [{tag}]: frame from another session")
            if hdr.sender != peer:
                raise FrameError(f"{self.me} <- {peer} [{tag}]: frame claims sender {hdr.sender!r}")
            if hdr.tag == ABORT_TAG:
                detail = bytes(arrays[0]).decode(errors="replace") if arrays else ""
                self._aborted = PeerAbortedError("peer-abort", peer, detail)
                raise self._aborted
            seq, hphase, hdepth = hdr.seq, hdr.phase, hdr.depth
        if seq != expected:
            raise FrameError(f"{self.me} <- {peer} [{tag}]: out-of-order frame (seq {seq}, expected {expected})")
        self._seq_in[peer] = expected + 1
        self.last_step = ("recv", peer, tag)
        if known is None and hdr.tag != tag:
            raise FrameError(f"{self.me} <- {peer} [{tag}]: protocol out of step, received tag {hdr.tag!r}")
        if len(arrays) != len(specs):
            raise FrameError(f"{self.me} <- {peer} [{tag}]: expected {len(specs)} arrays, got {len(arrays)}")
        payload = 0
        for i, (a, s) in enumerate(zip(arrays, specs)):
            # ArraySpec.check's conditions, inline; check itself names what is wrong
            sh, ash = s.shape, a.shape
            if len(sh) == 1 and len(ash) == 1:
                ok = sh[0] is None or sh[0] == ash[0]
            else:
                ok = len(sh) == len(ash) and all(x is None or x == y for x, y in zip(sh, ash))
            ad, sd = a.dtype, s.dtype
            if ok and ad is not sd:
                try:
                    ok = _NP_DTYPES.get(sd) is ad
                except TypeError:   # (an unhashable dtype-like: check decides)
                    ok = False
            if not ok or a.size > s.max_elems:
                s.check(a, f"{self.me} <- {peer} [{tag}] array {i}")
            payload += a.nbytes
        ph = self._phase
        meter = self.meter
        depth = meter.depth
        d = hdepth + 1 if hphase == ph else 1
        if d > depth[ph]:
            depth[ph] = d
        c = meter.counters[(ph, "recv", peer, tag)]   # (Meter.record, inline)
        c.payload += payload
        c.wire += wire
        c.messages += 1
        return arrays

    def recv_each(self, requests: dict, timeout: float | None = None):
        """Receive one frame from each of several peers in the order they become available:
        ``requests`` maps peer -> (tag, *specs); yields (peer, arrays) as ``recv`` would return
        them, so a receiver works on early frames while later ones travel. Every request is
        served exactly once; errors are those of ``recv``."""
        for peer in requests:
            self._check_peer(peer)
        deadline = time.monotonic() + (self.recv_timeout if timeout is None else timeout)
        left = list(requests)
        while left:
            peer = left[0] if len(left) == 1 else self._wait_any(left, deadline)
            left.remove(peer)
            tag, *specs = requests[peer]
            yield peer, self.recv(peer, tag, *specs, timeout=max(0.0, deadline - time.monotonic()))

    def recv_first(self, requests: dict, timeout: float | None = None) -> tuple:
        """The frame of whichever of several peers comes first: ``requests`` maps peer ->
        (tag, *specs); returns (peer, arrays) as ``recv`` would return that peer's frame, and
        leaves the others' frames for later receives (each peer's frames stay in order).
        Every frame is checked as by ``recv`` (sender, session, seq, tag, specs), through the
        transport's own receive (tcp: its fast path); a dead, aborting or garbage-sending
        peer raises ``recv``'s typed errors, whichever peer it is; nothing at all before the
        deadline: ``recv``'s timeout of the first peer named."""
        if not requests:
            raise ValueError("recv_first needs at least one peer")
        for peer in requests:
            self._check_peer(peer)
        if self._aborted is not None:
            raise self._aborted
        deadline = time.monotonic() + (self.recv_timeout if timeout is None else timeout)
        peer = next(iter(requests)) if len(requests) == 1 else self._wait_any(list(requests), deadline)
        tag, *specs = requests[peer]
        return peer, self.recv(peer, tag, *specs, timeout=max(0.0, deadline - time.monotonic()))

    def _wait_any(self, peers: list, deadline: float) -> str:
        """A peer of ``peers`` whose next frame (or failure) is due; transports override it."""
        return peers[0]

    def expect_send(self, peer: str, tag: str, dtype, shape) -> None:  # noqa: B027 - a hint
        """A hint, typically from an offline phase: a frame of one array of ``dtype`` and
        ``shape`` will be sent to ``peer`` under ``tag``. A transport with frame templates
        (tcp) builds now what the first such send would build; others ignore it. Nothing is
        sent and nothing counted; the send itself is unchanged (any other frame too)."""

    def expect_recv(self, peer: str, tag: str, dtype, shape) -> None:  # noqa: B027 - a hint
        """``expect_send``'s receiving end: a frame of one array of ``dtype`` and ``shape``
        will come from ``peer`` under ``tag``."""

    def recv_one(self, peer: str, tag: str, spec: ArraySpec, timeout: float | None = None) -> np.ndarray:
        return self.recv(peer, tag, spec, timeout=timeout)[0]

    def abort(self, check: str, suspect: str | None = None, detail: str = "") -> ProtocolAbort:
        """Announce an abort to every peer (best effort) and return the exception to raise."""
        err = ProtocolAbort(check, suspect, detail)
        msg = np.frombuffer(str(err).encode()[:4000], dtype=np.uint8)
        for p in self.peers:
            with contextlib.suppress(Exception):
                hdr = Header(self.session_id, self.me, ABORT_TAG, self._seq_out[p], self._phase, 0)
                self._transmit(p, encode_frame(hdr, [msg], self.max_frame))
        self._aborted = err
        return err

    def require(self, ok, check: str, suspect: str | None = None, detail: str = "") -> None:
        """A malicious-security check: unless ``ok``, announce the abort to every peer and
        raise ``ProtocolAbort(check, suspect, detail)``. Protocols declare each ``check``
        name in their ``ProtocolSpec.checks``."""
        if not ok:
            raise self.abort(check, suspect, detail)

    # ---- transport hooks ---------------------------------------------------------------
    @abc.abstractmethod
    def _transmit(self, peer: str, frame: bytes) -> None: ...

    def _transmit_parts(self, peer: str, parts: list, size: int) -> None:
        """Send the frame made of ``parts`` (``codec.encode_parts``: some are views of the
        caller's arrays, valid until this returns); a transport that can send them without
        joining them first overrides it."""
        self._transmit(peer, parts[0] if len(parts) == 1 else b"".join(parts))

    @abc.abstractmethod
    def _receive(self, peer: str, deadline: float) -> bytes: ...

    def close(self) -> None:  # noqa: B027 - optional for transports
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LocalHub:
    """In-process network of queues: one ``LocalEndpoint`` per party (tests, simulation)."""

    def __init__(self, parties, session_id: bytes = b"\x00" * 16, **kw) -> None:
        self.parties = tuple(parties)
        self._queues = {(a, b): queue.Queue() for a in self.parties for b in self.parties if a != b}
        self._dead: set[str] = set()
        self._lock = threading.Lock()
        self._arrivals = itertools.count()   # (frames carry their arrival number: recv_first's order)
        self.endpoints = {p: LocalEndpoint(self, p, session_id, **kw) for p in self.parties}

    def __getitem__(self, party: str) -> "LocalEndpoint":
        return self.endpoints[party]

    def kill(self, party: str) -> None:
        with self._lock:
            self._dead.add(party)


class LocalEndpoint(Endpoint):
    def __init__(self, hub: LocalHub, me: str, session_id: bytes, **kw) -> None:
        super().__init__(me, hub.parties, session_id, **kw)
        self._hub = hub

    def _transmit(self, peer: str, frame: bytes) -> None:
        self._hub._queues[(self.me, peer)].put((next(self._hub._arrivals), frame))

    def _wait_any(self, peers: list, deadline: float) -> str:
        while True:
            first = None
            for p in peers:
                q = self._hub._queues[(p, self.me)]
                with q.mutex:   # (of several queued frames, the one that arrived first)
                    n = q.queue[0][0] if q.queue else None
                if n is not None and (first is None or n < first[0]):
                    first = (n, p)
                elif n is None and p in self._hub._dead:
                    return p
            if first is not None:
                return first[1]
            if time.monotonic() >= deadline:
                return peers[0]   # its receive raises the timeout
            time.sleep(0.0002)

    def _receive(self, peer: str, deadline: float) -> bytes:
        q = self._hub._queues[(peer, self.me)]
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError_(f"{self.me}: no message from {peer} before the deadline")
            try:
                return q.get(timeout=min(remaining, 0.05))[1]
            except queue.Empty:
                if peer in self._hub._dead:
                    raise PeerDeadError(f"{self.me}: peer {peer} is dead") from None


def run_local(parties: dict, *, session_id: bytes = b"\x00" * 16, timeout: float = 600.0, **kw) -> dict:
    """Run ``{party: fn(endpoint) -> result}`` on a LocalHub, one thread per party.

    Returns ``{party: result or exception}``. For tests and in-process simulation only;
    real runs put every party in its own process (``secinfer.runtime.launcher``).
    """
    hub = LocalHub(parties.keys(), session_id, **kw)
    results: dict = {}

    def runner(name, fn):
        try:
            results[name] = fn(hub[name])
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            results[name] = e
            hub.kill(name)

    threads = [threading.Thread(target=runner, args=(n, f), daemon=True) for n, f in parties.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    for n in parties:
        results.setdefault(n, TimeoutError_(f"party {n} did not finish within {timeout}s"))
    return results
