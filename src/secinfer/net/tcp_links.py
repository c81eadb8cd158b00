"""The tcp transport's record layer and its per-link threads (``tcp_transport``).

Records. ``length u32 | stamp f64 | kind u8 | AES-GCM(plaintext)``; kind D (data; bit 0x80
set when the frame continues in the next record: frames are cut into records of at most
``RECORD`` bytes), S (the size of the frame whose data records follow: u64; sent before a
frame of several records, so that the receiver decrypts each record straight into the
frame's own buffer), H (heartbeat), B (bye). The stamp is the sender's send time for the
latency model (``secinfer.net.shaping``), authenticated with the record. AEAD: AES-256-GCM
with nonce = the stream's record counter (so no record can be replayed, dropped or
reordered without the next one failing) and the record header as associated data.

``OutLink``: our stream to one peer, with its writer thread (paced frames, heartbeats).
``InStream``: a peer's stream to us (parsed by ``tcp_transport``'s readers).

Either may run on the native record layer (``native_link``: the same records sealed and
opened in Go, a small frame sent and a frame received in one call each); the control
around the records (locks, pacing, heartbeats, liveness, close) is this module's and
``tcp_transport``'s in both cases.
"""

from __future__ import annotations

import collections
import fcntl
import select
import socket
import struct
import termios
import threading
import time
from typing import Callable

import numpy as np
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from secinfer.errors import FrameError, InboxFullError, MessageTooLargeError, NetworkError, PeerDeadError
from secinfer.net import native_link
from secinfer.net.native_link import (EV_BYE, EV_CHECKED, EV_EOF, EV_FRAME, EV_FRAME_ERR, EV_NEED, EV_NONE,
                                      EV_OS_ERR, EV_OTHER, EV_OVERSIZED, SCRATCH)
from secinfer.net.peers import sleep_until
from secinfer.net.shaping import TokenBucket

RECORD = 1 << 24                        # the largest record a receiver accepts (plaintext bytes)
SEND_RECORD = 1 << 20                   # the largest we send: the receiver decrypts one while the next travels
SMALL = 1 << 16                         # frame parts below this are joined into one record, larger ones
                                        # are encrypted where they lie (the caller's arrays)
RX_BUFFER = 1 << 18                     # receive buffer per stream: records up to this size are parsed in place
HDR = struct.Struct("<IdB")             # ciphertext length, stamp, kind
K_DATA, K_HB, K_BYE, K_SIZE, MORE = 0x44, 0x48, 0x42, 0x53, 0x80
TAG = 16
RECORD_OVERHEAD = HDR.size + TAG        # a record's bytes besides its plaintext
_SOON = object()
_CLOSED = object()                      # in an inbox: the peer said bye (after its last frame)
_NONCE = struct.Struct("<4xQ")
_DONTWAIT = int(socket.MSG_DONTWAIT)


def nonce(counter: int) -> bytes:
    return _NONCE.pack(counter)


class OutLink:
    """Our stream to one peer. ``lock`` is the wire: whoever writes records holds it (the
    protocol thread for a frame that may leave at once, else the link's writer thread,
    which also sends the heartbeats), so the record counter follows the byte order. ``cv``
    guards the queue of paced frames; nobody holds it while writing.

    What it needs of its endpoint: ``me``, ``stop`` (set when the endpoint closes),
    ``heard()`` (when the peer last sent us a byte; None before its stream exists),
    the endpoint's timeouts and ``on_sent(n)`` (counts a data frame of n bytes)."""

    def __init__(self, sock, key: bytes, profile, *, me: str, peer: str, stop: threading.Event,
                 heard: Callable[[], float | None], heartbeat_interval: float, peer_timeout: float,
                 recv_timeout: float, on_sent: Callable[[int], None], native: bool = False) -> None:
        self.sock = sock
        self.aead = AESGCM(key)
        # the native sealer holds the record counter when there is one (``counter`` unused)
        self.sealer = native_link.Sealer(sock.fileno(), key) if native else None
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
        self.out: bytearray | None = None     # ciphertext of a large record (send_frame), reused
        # bytes written into the socket so far, counted from the handshake's bytes the peer's
        # host has not acknowledged yet (its "ready": a peer killed at once never acknowledges
        # it, and it is no frame of ours to lose)
        self.written = outq(sock)[0]
        self.data_written = 0             # ... when the last byte of a data frame went in
        self.tmpls: dict = {}             # tag -> its last frame template (tcp_fast)
        self.tmpls_all: dict = {}         # (tag, dtype, shape) -> frame template, or False
        self.me, self.peer, self.stop, self.heard, self.on_sent = me, peer, stop, heard, on_sent
        self.heartbeat_interval, self.peer_timeout, self.recv_timeout = heartbeat_interval, peer_timeout, recv_timeout

    def records(self, frame, kind: int, stamp: float) -> list:
        """Encrypt ``frame`` as records (caller holds ``lock``: the record counter follows
        the order in which records reach the socket)."""
        view = memoryview(frame)
        if self.sealer is not None:
            n = len(view)
            return [self.sealer.seal(kind | (MORE if start + RECORD < n else 0), stamp, view[start:start + RECORD])
                    for start in range(0, max(n, 1), RECORD)]
        out = []
        n = len(view)
        start = 0
        while True:
            end = min(n, start + RECORD)
            k = kind | (MORE if end < n else 0)
            hdr = HDR.pack(end - start + TAG, stamp, k)
            out.append(hdr)
            out.append(self.aead.encrypt(nonce(self.counter), view[start:end], hdr))
            self.counter += 1
            start = end
            if start >= n:
                return out

    def send_frame(self, parts: list, size: int, stamp: float) -> None:
        """Encrypt and write the frame made of ``parts`` (``codec.encode_parts``) as data
        records, straight from the parts' memory (caller holds ``lock``): small parts are
        joined into one record, a large part is cut into records of ``SEND_RECORD`` bytes
        encrypted into this link's reusable buffer (no copy of the frame, no allocation per
        record). One system call per record; a small frame is one record, one call."""
        sealer = self.sealer
        if size <= SMALL and sealer is not None:
            pt = parts[0] if len(parts) == 1 else b"".join(parts)
            k = sealer.send_small(stamp, pt) if self.error is None and not self.stop.is_set() else -2
            if k != size + RECORD_OVERHEAD:
                self.small_rest(k, size, pt, stamp)
                return
            self.moved = time.monotonic()
            self.written += k
            self.data_written = self.written
            return
        if size <= SMALL:
            pt = parts[0] if len(parts) == 1 else b"".join(parts)
            hdr = HDR.pack(size + TAG, stamp, K_DATA)
            counter = self.counter
            self.counter = counter + 1
            rec = hdr + self.aead.encrypt(_NONCE.pack(counter), pt, hdr)
            if self.error is None and not self.stop.is_set():
                try:                          # (the common case: sent at once, one call)
                    k = self.sock.send(rec, _DONTWAIT)
                except OSError:               # full (write waits) or failed (write names why)
                    k = 0
                if k:
                    self.moved = time.monotonic()
                    self.written += k
                    self.data_written = self.written
                    if k == len(rec):
                        return
                    rec = memoryview(rec)[k:]
            self._write_all([rec])
            return
        chunks: list = []                     # (record plaintexts in order, each <= SEND_RECORD)
        small: list = []
        held = 0

        def cut(buf) -> None:
            view = memoryview(buf)
            for start in range(0, len(view), SEND_RECORD):
                chunks.append(view[start:start + SEND_RECORD])

        for p in parts:
            if len(p) < SMALL:                # small parts travel together (joined: a copy)
                small.append(p)
                held += len(p)
                if held >= SEND_RECORD:
                    cut(b"".join(small))
                    small, held = [], 0
                continue
            if small:
                cut(b"".join(small))
                small, held = [], 0
            cut(p)                            # a large part: encrypted where it lies
        if small:
            cut(b"".join(small))
        last = len(chunks) - 1
        first: list = []
        if sealer is not None:                # sealed into the sealer's buffer, one record at a time
            if last:
                first = [sealer.seal(K_SIZE, stamp, size.to_bytes(8, "little"))]
            for i, pt in enumerate(chunks):
                n = sealer.seal_into(K_DATA | (MORE if i < last else 0), stamp, pt, sealer.out_addr)
                self.write([*first, sealer.out[:n]])
                first = []
            return
        if self.out is None:
            self.out = bytearray(SEND_RECORD + TAG)
        out = memoryview(self.out)
        if last:                              # several records: their total first
            hdr = HDR.pack(8 + TAG, stamp, K_SIZE)
            first = [hdr + self.aead.encrypt(_NONCE.pack(self.counter), size.to_bytes(8, "little"), hdr)]
            self.counter += 1
        for i, pt in enumerate(chunks):
            n = len(pt)
            hdr = HDR.pack(n + TAG, stamp, K_DATA | (MORE if i < last else 0))
            ct = out[:n + TAG]
            self.aead.encrypt_into(_NONCE.pack(self.counter), pt, hdr, ct)
            self.counter += 1
            self.write([*first, hdr, ct])
            first = []

    def took_small(self, k: int, size: int, pt, stamp: float, heartbeat_interval: float) -> None:
        """After ``Sealer.send_small``/``send_t`` returned ``k`` for a small frame of ``size``
        bytes sent at ``stamp`` (caller holds ``lock``): the link's counters when the socket
        took the whole record, else the rest written the long way (``small_rest``; ``pt``: the
        frame's bytes when ``k`` = -2); the next heartbeat is due an interval after."""
        if k == size + RECORD_OVERHEAD:
            self.written += k
            self.data_written = self.written
            self.moved = stamp
            self.next_hb = stamp + heartbeat_interval
        else:
            self.small_rest(k, size, pt, stamp)
            self.next_hb = self.moved + heartbeat_interval

    def small_rest(self, k: int, size: int, pt, stamp: float) -> None:
        """After ``Sealer.send_small`` (or instead of it: ``k`` = -2) returned ``k`` for a
        small frame of ``size`` bytes: the rest of its record, written the long way (the
        socket is full, failed, or the endpoint is closing); -1: the sealer is freed."""
        if k == -1:
            raise NetworkError(f"{self.me}: endpoint is closed")
        sealer = self.sealer
        m = size + RECORD_OVERHEAD
        if k == -2:                       # (not offered: sealed here, the write names the failure)
            k = 0
            sealer.seal_into(K_DATA, stamp, pt, sealer.out_addr)
        elif k:
            self.moved = time.monotonic()
            self.written += k
            self.data_written = self.written
        self._write_all([sealer.out[k:m]])

    def write(self, bufs: list, data: bool = True) -> None:
        """Write every buffer (caller holds ``lock``). Never reads: the reader thread
        (or a waiting protocol thread) drains our peers' streams meanwhile, so a full socket
        only means that the peer does not read. The peer is dead when nothing moved for
        ``peer_timeout`` and it sent nothing (not even a heartbeat) for as long; a live peer
        that reads nothing for ``recv_timeout`` is given up too. ``data``: False for a
        heartbeat or the bye (bytes ``undelivered`` does not count)."""
        if len(bufs) == 1 and self.error is None and not self.stop.is_set():
            buf = bufs[0]                     # (the common case: one small record, sent at once)
            try:
                k = self.sock.send(buf, _DONTWAIT)
            except OSError:                   # full (the loop below waits) or failed (it names why)
                k = 0
            if k:
                self.moved = time.monotonic()
                self.written += k
                if data:
                    self.data_written = self.written
                if k == len(buf):
                    return
                bufs = [memoryview(buf)[k:]]
        self._write_all(bufs, data)

    def _write_all(self, bufs: list, data: bool = True) -> None:
        sock = self.sock
        views = [memoryview(b) for b in bufs if len(b)]
        since = time.monotonic()
        try:
            while views:
                if self.error is not None:
                    raise self.error
                if self.stop.is_set():
                    raise NetworkError(f"{self.me}: endpoint is closed")
                try:
                    sent = sock.sendmsg(views, (), socket.MSG_DONTWAIT)   # all buffers, one call
                except BlockingIOError:
                    sent = 0
                if sent:
                    self.written += sent
                    if data:                  # (a frame written only in part is data too)
                        self.data_written = self.written
                    while sent:
                        k = min(sent, len(views[0]))
                        sent -= k
                        views[0] = views[0][k:]
                        if not len(views[0]):
                            views.pop(0)
                    since = self.moved = time.monotonic()
                    continue
                select.select([], [sock], [], min(0.5, self.heartbeat_interval))
                now = time.monotonic()
                heard = self.heard()
                if heard is None:
                    heard = since
                if now - max(heard, since) > self.peer_timeout:
                    raise OSError(f"it has read nothing and sent nothing (no heartbeat) for {now - since:.1f}s "
                                  f"(peer timeout {self.peer_timeout:g}s, option --peer-timeout)")
                if now - since > max(self.recv_timeout, self.peer_timeout):
                    raise OSError(f"it has read nothing for {now - since:.1f}s although it is alive")
        except OSError as e:
            err = PeerDeadError(f"{self.me}: cannot send to {self.peer}: {e}")
            self.error = err
            with self.cv:
                self.cv.notify_all()
            raise err from None

    def undelivered(self) -> int:
        """Bytes of data frames not yet acknowledged by the peer's host (heartbeats and the
        bye after the last frame do not count: nothing is lost with them); -1 if some are
        and the connection failed."""
        n, failed = outq(self.sock)
        n = max(0, n - (self.written - self.data_written))   # (the send queue holds the last bytes written)
        return -1 if n and failed else n

    def start_writer(self) -> None:
        if self.writer is None:
            self.writer = threading.Thread(target=self._writer_loop, daemon=True,
                                           name=f"secinfer-tcp-write-{self.me}-{self.peer}")
            self.writer.start()

    def _writer_loop(self) -> None:
        """The link's own thread: sends its paced frames at their time and a heartbeat whenever
        the link was quiet for ``heartbeat_interval`` (also while this party computes or while
        frames wait for their time). It never takes a lock that the readers need."""
        hb = self.heartbeat_interval
        while True:
            with self.cv:
                while True:
                    if self.error is not None or self.stop.is_set():
                        return
                    now = time.monotonic()
                    if self.queue and self.queue[0][0] <= now:
                        ready, frame = self.queue[0]
                        break
                    if now >= self.next_hb and not self.closing:
                        frame = None
                        break
                    if self.queue and self.queue[0][0] - now < 0.002:
                        frame = _SOON          # due within 2 ms: wait for it precisely, below
                        break
                    wake = self.next_hb if not self.closing else now + hb
                    if self.queue:
                        wake = min(wake, self.queue[0][0])
                    self.cv.wait(max(0.0, min(wake - now, hb)))
            if frame is _SOON:
                sleep_until(self.queue[0][0] if self.queue else time.monotonic())
                continue
            if frame is None:
                if self.lock.acquire(blocking=False):   # else a send is in progress: bytes are moving
                    try:
                        self.write(self.records(b"", K_HB, time.monotonic()), data=False)
                    except NetworkError:     # dead peer (recorded in self.error) or closed endpoint
                        return
                    finally:
                        self.lock.release()
                self.next_hb = time.monotonic() + hb
                continue
            try:
                with self.lock:
                    self.send_frame([frame], len(frame), ready)
                    self.next_hb = time.monotonic() + hb
            except NetworkError:
                with self.cv:
                    self.dropped += len(self.queue)
                    self.queue.clear()
                    self.cv.notify_all()
                return
            self.on_sent(len(frame))
            with self.cv:
                self.queue.popleft()
                self.cv.notify_all()


class InStream:
    """A peer's stream to us: read by whichever thread holds the endpoint's read lock."""

    def __init__(self, sock, key: bytes, native_max_frame: int | None = None) -> None:
        """``native_max_frame``: read on the native record layer, with this frame cap."""
        self.sock = sock
        self.aead = AESGCM(key)
        self.native = None if native_max_frame is None else native_link.Opener(sock.fileno(), key, native_max_frame)
        self.counter = 1
        self.buf = bytearray(RX_BUFFER)   # received bytes not yet parsed: buf[:fill]
        self.view = memoryview(self.buf)
        self.fill = 0
        self.hdr = b""                    # a record too large for buf: its header,
        self.body = None                  # its body being filled (bytearray or a view of big), and how far
        self.big: bytearray | None = None # the reused buffer of records up to SEND_RECORD bytes
        self.got = 0
        self.parts: list = []             # plaintext of the frame being assembled (records without a size)
        self.frame = None                 # or the frame's own buffer (numpy uint8), after a size record
        self.size = 0
        self.oversized = False
        self.last = time.monotonic()      # when a byte last arrived
        self.eof = False
        self.checked = None               # next_native: (phase code, depth) of a frame checked in Go
        self.tin: dict = {}               # tag -> (template id, codec layout entry) registered in Go
        self.others_ok = False            # the native layer was told the other peers' streams (next_native)
        self.fast = 0                     # frames the Python layer's fast receive took (tcp_fast._py_next)
        self.spin_hits = 0                # Python layer: waits a busy-poll ended (bytes came), and
        self.spin_misses = 0              # busy-polls that ran out (tcp_fast._py_next);
        self.spin_run = 0                 # budgets run out in a row, waits left that block at once
        self.spin_skip = 0
        self.spin_on = False              # native layer: the Go stream has the budget set (online phase)


def read_native(ep, peer: str, c: "InStream", soft: int | None = None, wait: float = 0.0, others: tuple = ()) -> int:
    """``TcpEndpoint._read`` of ``ep`` on the native record layer: events until nothing complete is left
    (``EV_NONE``) or, with ``wait`` (seconds; the protocol thread waiting for this
    peer), until the first frame or failure: the call then waits for bytes, reads and
    decrypts in Go with the GIL released. ``others``: descriptors that end the wait when
    readable (``EV_OTHER``). Returns the last event."""
    nat = c.native
    info = nat.info
    wait_us = int(wait * 1e6) + 1 if wait > 0 else 0
    ev = EV_NONE
    if others:
        nat.set_others(others)
    while not c.eof:
        if soft is not None and not info[3] and (ep._queued[peer] >= soft or ep._fg):
            # (the reader thread: enough waits here, or the protocol thread takes over;
            # as in _read, what was read from the socket is parsed first)
            return ev
        if others:
            ev = nat.call(nat.h, wait_us, nat.scratch_addr if c.frame is None else c.frame.ctypes.data,
                          SCRATCH if c.frame is None else c.frame.size, nat.others, len(others), *nat.args)
        else:       # (rl_next: the memory bound once, four arguments)
            ev = nat.next(nat.h, wait_us, None, 0) if c.frame is None else \
                nat.next(nat.h, wait_us, c.frame.ctypes.data, c.frame.size)
        now = time.monotonic()
        if info[2]:
            c.last = now
        if ev == EV_FRAME:
            n = info[0]
            if info[1]:
                item: object = c.frame[:n]
                c.frame = None
            else:
                item = nat.scratch[:n]    # (a copy: the frame's own buffer)
            stats = ep.stats
            stats["frames_recv"] += 1
            stats["bytes_recv"] += n
            queued = ep._queued[peer] + n
            if queued > ep.max_inbox:
                ep._cut(peer, InboxFullError(
                    f"{ep.me} <- {peer}: {peer} sent more than the inbox limit of {ep.max_inbox} bytes "
                    f"before they were consumed; peer cut off (raise max_inbox if a protocol step really queues "
                    f"that much)"))
                return ev
            ep._queued[peer] = queued
            stamp = nat.stamp
            ep._inbox[peer].append((ep._release_at(peer, now, stamp) if ep._latency[peer] else now, item, stamp))
            if wait_us and not info[3]:
                return ev     # (the frame waited for; nothing more read meanwhile)
            wait_us = 0
        elif ev == EV_NONE or ev == EV_OTHER:
            return ev
        elif native_event(ep, peer, c, ev):
            return ev
        else:
            wait_us = 0
    return ev


def next_native(ep, peer: str, c: "InStream", deadline: float, tid: int = -1, seq: int = 0):
    """The protocol thread's receive from ``peer`` on the native layer, when nothing is
    queued, no frame is half received and no latency is modelled: waits in Go (GIL
    released) for the next frame and returns it (a ``bytearray`` of its own) without
    queueing it. With a frame template ``tid`` (``Opener.template``) and the ``seq``
    expected, a small frame whose header matches it is checked in Go: ``c.checked`` is
    then (phase code, depth) from its header, else None. While it waits, the other peers'
    streams are read whenever they become readable (``ep._read``: their frames are
    queued, so that no peer's sends wait for this party). None if something else came
    first (a bye, an oversized frame's error, a failure: queued or in ``ep._fatal`` by
    ``native_event``; a large frame: ``c.frame`` then holds its buffer and ``read_native``
    goes on), the peer went silent for ``peer_timeout`` (named by ``ep._poll``) or the
    deadline passed."""
    nat = c.native
    h, info = nat.h, nat.info
    hb = ep.heartbeat_interval
    others = ()
    if len(ep._in) > 1:
        others = tuple(o.sock.fileno() for p, o in ep._in.items() if p != peer and not o.eof)
    nat.set_others(others)
    c.others_ok = True
    since = now = time.monotonic()
    while now < deadline and not c.eof:
        if now - (c.last if c.last > since else since) > ep.peer_timeout:
            ep._poll([peer], deadline, since)   # (names the dead peer)
            return None
        left = deadline - now
        ev = nat.next_t(h, int((left if left < hb else hb) * 1e6) + 1, tid, seq)
        now = time.monotonic()
        if info[2]:
            c.last = now
        if ev == EV_CHECKED or ev == EV_FRAME:   # (in scratch: no buffer was adopted, c.frame is None)
            return frame_event(ep, peer, c, ev)
        if ev == EV_OTHER:        # another peer's stream is readable: read it, then wait on
            socks = [o.sock for p, o in ep._in.items() if p != peer and not o.eof]
            for sk in (select.select(socks, [], [], 0)[0] if socks else ()):
                p = ep._by_fd.get(sk.fileno())
                if p is not None:
                    ep._read(p)
            others = tuple(o.sock.fileno() for p, o in ep._in.items() if p != peer and not o.eof)
            nat.set_others(others)
            continue
        if ev != EV_NONE:
            native_event(ep, peer, c, ev)
            return None
    return None


def frame_event(ep, peer: str, c: "InStream", ev: int):
    """``next_native``'s whole frame in the scratch buffer (``EV_FRAME``, or ``EV_CHECKED``:
    ``c.checked`` = (phase code, depth)): a copy of its own, or None if the peer was cut off
    for it. Bytes read with it are parsed into the inbox, behind it."""
    nat = c.native
    info = nat._info
    n = info[0]
    if info[2]:
        c.last = time.monotonic()
    c.checked = (info[4], info[5]) if ev == EV_CHECKED else None
    stats = ep.stats
    stats["frames_recv"] += 1
    stats["bytes_recv"] += n
    if n > ep.max_inbox:  # (as read_native: a frame alone over the inbox limit)
        ep._cut(peer, InboxFullError(
            f"{ep.me} <- {peer}: {peer} sent more than the inbox limit of {ep.max_inbox} bytes "
            f"before they were consumed; peer cut off (raise max_inbox if a protocol step really queues "
            f"that much)"))
        return None
    item = nat.scratch[:n]
    if info[3]:
        # more was read with it: parsed now into the inbox, behind this frame, and counted
        # against its limit on top of this frame, as when read_native queued them all (a
        # flood is cut off alike)
        ep._queued[peer] += n
        try:
            read_native(ep, peer, c, None)
        finally:
            ep._queued[peer] -= n
    return item


def native_event(ep, peer: str, c: "InStream", ev: int) -> bool:
    """What ``read_native`` and ``next_native`` do with an event other than a frame or
    nothing: a large frame's buffer, a bye, an oversized frame's error (queued in order),
    the end of the stream or a failure (the peer cut off). True when the stream is done."""
    nat = c.native
    info = nat.info
    if ev == EV_NEED:   # a large frame: received into a buffer of its own
        c.frame = np.empty(info[0], np.uint8)
        return False
    if ev == EV_BYE:
        ep._bye_reason[peer] = bytes(nat.scratch[:min(info[0], 1000)]).decode(errors="replace")
        ep._bye_from.add(peer)
        ep._inbox[peer].append((0.0, _CLOSED, 0.0))
        return False
    if ev == EV_OVERSIZED:
        ep.stats["frames_recv"] += 1
        ep.stats["bytes_recv"] += info[0]
        ep._inbox[peer].append((time.monotonic(), MessageTooLargeError(
            f"{ep.me} <- {peer}: frame of {info[0]} bytes exceeds the cap of {ep.max_frame} bytes"),
            nat.stamp))
        return False
    if ev == EV_EOF:
        if peer not in ep._bye_from:
            ep._cut(peer, PeerDeadError(f"{ep.me}: peer {peer} closed its connection without a bye "
                                        "(process exited or was killed)"))
        c.eof = True
    elif ev == EV_FRAME_ERR:
        ep._cut(peer, FrameError(f"{ep.me} <- {peer}: {nat.error}"))
    elif ev == EV_OS_ERR:
        ep._cut(peer, PeerDeadError(f"{ep.me}: connection to {peer} lost: {nat.error}"))
    else:
        ep._cut(peer, NetworkError(f"{ep.me} <- {peer}: native record layer failed (event {ev})"))
    return True


_TCP_CLOSE = 7                           # Linux tcp_info.tcpi_state of a reset (or fully closed) connection


def unsent(sock: socket.socket) -> int:
    """Bytes in ``sock``'s send queue not yet acknowledged by the peer (Linux SIOCOUTQ);
    -1 if some are and the connection failed; 0 where the platform cannot say. (Failed:
    the connection's state, which stays; not ``SO_ERROR``, which a failed write or an
    earlier look clears.)"""
    n, failed = outq(sock)
    return -1 if n and failed else n


def outq(sock: socket.socket) -> tuple[int, bool]:
    """(bytes in ``sock``'s send queue not yet acknowledged, whether the connection failed
    while some are); (0, False) where the platform cannot say."""
    try:
        buf = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\x00\x00\x00\x00")
        n = struct.unpack("<i", buf)[0]
        failed = bool(n) and bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                                  or sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == _TCP_CLOSE)
        return n, failed
    except OSError:
        return 0, False
