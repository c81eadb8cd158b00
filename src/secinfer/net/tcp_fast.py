"""The tcp transport's fast path for the commonest message: a small frame of one array
(issue #23 item 1: a hop's Python per message), on the native record layer.

Sending. The first frame of a (tag, dtype, shape) is encoded by the codec as ever; its
header's fixed bytes (everything but seq, phase and depth) become a template in Go
(``Sealer.template``). Every later frame of the same kind is one Python->Go call
(``rl_send_t``): the header is built from the template, the frame sealed in place as one
data record (AES-256-GCM) and offered to the socket. The bytes on the wire are exactly the
codec's (tests/net/test_tcp_fast.py compares them), so a receiver of either record layer
reads them as before.

Receiving. A frame of a tag decoded and checked in full by the codec (``decode_frame``)
leaves its header's fixed bytes as the tag's template in Go (``Opener.template``). The next
receive of that tag is one call (``rl_next_t``): wait, read, open the record, and compare
the frame with the template and the seq expected; when every byte but seq, phase and depth
is the template's, the seq is the expected one and the phase code known (``decode_known``'s
conditions), Python gets the phase and depth and builds the array from the layout checked
before. Any other frame (another tag or layout, a wrong seq, an abort) comes back as bytes
and goes through ``Endpoint.recv``'s full decode, which raises the same typed error as
without this path. What stays in Python per message: the peer's state checks, the array
view, the spec check, seq, rounds and the meter.

The Python record layer (``SECINFER_TCP_NATIVE=0``, the launcher's small runs) gets the
same two shortcuts in Python (``_py_send``, ``_py_recv``). Sending: the tag's header parts
(the codec's, kept per link as above) make the frame, sealed as one data record with
``AESGCM`` and offered to the socket, without ``Endpoint.send``'s chain of calls. Receiving:
when nothing is queued or half read, the peer's socket is read here; a read that is exactly
one whole small data record is opened into the frame's own buffer and checked by ``_accept``
against the tag's template (``codec.decode_known``: every header byte but seq, phase and
depth equal to one decoded in full before), without the inbox; anything else (several
records, part of one, a heartbeat, an oversized frame) is parsed as ever
(``StreamReader._parse``) and taken by ``Endpoint.recv``'s general path, which raises the
same typed errors.

Frames of several arrays, large frames and paced or latency-modelled links take
``Endpoint``'s general path.
"""

from __future__ import annotations

import os
import select
import time

import numpy as np
from cryptography.exceptions import InvalidTag

from secinfer.errors import FrameError, MessageTooLargeError, NetworkError, PeerDeadError
from secinfer.net.channel import _NP_DTYPES, Endpoint
from secinfer.net.codec import _PHASE_CODE, _TAIL, PHASES, Header, decode_frame, encode_parts, encoded_names
from secinfer.net.meter import Counter
from secinfer.net.native_link import BAD_TEMPLATE, EV_CHECKED, EV_FRAME, EV_NONE, EV_OTHER
from secinfer.net.tcp_links import (_DONTWAIT, _NONCE, HDR, K_DATA, SMALL, TAG, frame_event,
                                    native_event, next_native)

_HDR_SIZE = HDR.size
_HDR_UNPACK = HDR.unpack_from
_MAX_TEMPLATES = 4096    # per link and direction (the Go side's limit too)
_monotonic = time.monotonic
_yield = os.sched_yield


def _small(dtype, shape) -> bool:
    """An array of ``dtype`` and ``shape`` makes a small frame (the only ones with templates)."""
    n = np.dtype(dtype).itemsize
    for d in shape:
        n *= int(d)
    return 0 <= n and n + 4096 <= SMALL


def _spec_takes(s, arr: tuple) -> bool:
    """``ArraySpec.check``'s conditions, inline, for the array of a checked layout ``arr``
    (dtype, shape, count, bytes): True when ``s`` surely takes it (else ``check`` decides,
    and names what is wrong)."""
    dt, shape, count, _nb = arr
    sh = s.shape
    if len(sh) == 1 and len(shape) == 1:
        ok = sh[0] is None or sh[0] == shape[0]
    else:
        ok = len(sh) == len(shape) and all(x is None or x == y for x, y in zip(sh, shape))
    sd = s.dtype
    if ok and dt is not sd:
        try:
            ok = _NP_DTYPES.get(sd) is dt
        except TypeError:   # (an unhashable dtype-like: check decides)
            ok = False
    return ok and count <= s.max_elems


def _seal(link, pt: bytes, total: int) -> bytes:
    """The record of plaintext ``pt`` (a frame of ``total`` bytes) on ``link``'s Python record
    layer, its lock held: header, then AES-GCM under the link's next counter."""
    hdr = HDR.pack(total + TAG, _monotonic(), K_DATA)
    counter = link.counter
    link.counter = counter + 1
    return hdr + link.aead.encrypt(_NONCE.pack(counter), pt, hdr)


class FastPaths:
    """``send`` and ``recv`` of ``TcpEndpoint`` (a mixin before ``Endpoint`` in its bases)."""

    _fast_out: dict      # peer -> OutLink without pacing (set by connect; native or Python record layer)

    def send(self, peer: str, tag: str, *arrays: np.ndarray) -> None:
        link = self._fast_out.get(peer)
        if link is None or len(arrays) != 1 or self._aborted is not None or type(arrays[0]) is not np.ndarray:
            return Endpoint.send(self, peer, tag, *arrays)
        a = arrays[0]
        ent = link.tmpls.get(tag)   # (the tag's last template: most tags always carry one layout)
        if ent is None or ent[0] is not a.dtype or ent[1] != a.shape:
            ent = self._out_template(link, tag, a)
            if not ent:
                return Endpoint.send(self, peer, tag, *arrays)
        _dt, _shape, tid, nbytes, total, pre, post = ent
        if total > self.max_frame:
            raise MessageTooLargeError(f"frame of {total} bytes exceeds the cap of {self.max_frame} bytes")
        if tid < 0:
            return self._py_send(link, peer, tag, a, nbytes, total, pre, post)
        # (Endpoint.send's bookkeeping, in its order: seq, last step, meter, then the wire)
        seq, ph, depth = self._book_sent(peer, tag, nbytes, total)
        body = a.tobytes()
        if self._closed or peer in self._fatal or link.error is not None or peer in self._bye_from:
            # (the error _transmit_parts raises, from the frame as the codec makes it)
            return self._transmit_parts(peer, [pre + _TAIL.pack(seq, _PHASE_CODE[ph], depth, 1) + post + body],
                                        total)
        sealer = link.sealer
        with link.lock:
            now = _monotonic()
            k = sealer.send_t(sealer.h, now, tid, seq, _PHASE_CODE[ph] << 32 | depth, body) \
                if link.error is None and not self._stop.is_set() else -2
            if k == BAD_TEMPLATE:   # (never: the template was registered on this link)
                raise NetworkError(f"{self.me}: native record layer refused frame template {tid}")
            # when the socket took part or none of it, the rest is written the long way; when
            # the link failed or closes (-2), sealed from these bytes (the write names why)
            link.took_small(k, total, pre + _TAIL.pack(seq, _PHASE_CODE[ph], depth, 1) + post + body
                            if k == -2 else None, now, self.heartbeat_interval)
        stats = self.stats
        if self._paced_any:   # (a writer thread counts the paced frames of another link meanwhile)
            with self._stats_lock:
                stats["frames_sent"] += 1
                stats["bytes_sent"] += total
        else:
            stats["frames_sent"] += 1
            stats["bytes_sent"] += total

    def _book_sent(self, peer: str, tag: str, nbytes: int, total: int) -> tuple:
        """``Endpoint.send``'s bookkeeping, in its order (seq, last step, meter) for one
        small frame: (its seq, the phase, the phase's depth)."""
        seq = self._seq_out[peer]
        ph = self._phase
        meter = self.meter
        depth = meter.depth[ph]
        self._seq_out[peer] = seq + 1
        self.last_step = ("sent", peer, tag)
        c = meter.counters[(ph, "sent", peer, tag)]
        c.payload += nbytes
        c.wire += total
        c.messages += 1
        return seq, ph, depth

    def expect_send(self, peer: str, tag: str, dtype, shape) -> None:
        """The send template of ``tag`` for one array of ``dtype`` and ``shape`` to ``peer``,
        built now (``_out_template``, exactly what the first such send builds): the first
        real send of it is then templated too. Nothing is sent or counted; a frame the
        general path would refuse is left to the send, which raises what it raises."""
        link = self._fast_out.get(peer)
        if link is None or self._aborted is not None or self._closed or not _small(dtype, shape):
            return
        a = np.empty(tuple(shape), dtype)
        ent = link.tmpls.get(tag)
        if ent is None or ent[0] is not a.dtype or ent[1] != a.shape:
            try:
                self._out_template(link, tag, a)
            except (FrameError, MessageTooLargeError):
                pass

    def expect_recv(self, peer: str, tag: str, dtype, shape) -> None:
        """The receive template of ``tag`` from ``peer`` for one array of ``dtype`` and
        ``shape``, built now: the frame the peer's codec makes of such an array (``encode_parts``,
        the peer as sender) is decoded and checked in full here (``decode_frame``), which
        leaves its header as the tag's checked layout, as a first real frame would; on the
        native layer it becomes the tag's Go template, as in ``recv``. The first real frame
        is then compared with it (seq, phase and depth apart) and any difference sends it
        through the full decode, with the same typed errors. Nothing is counted."""
        c = self._in.get(peer)
        if c is None or self._aborted is not None or self._closed or self._latency[peer] or not _small(dtype, shape):
            return
        try:
            parts, _size, _nb = encode_parts(Header(self.session_id, peer, tag, 0, "setup", 0),
                                             (np.zeros(tuple(shape), dtype),), self.max_frame, None)
        except (FrameError, MessageTooLargeError):
            return   # (the real frame meets the same refusal, in full, at its receive)
        names = self._names.get((self.session_id, peer, tag))
        if names is None:
            names = encoded_names(self.session_id, peer, tag, self._names)
        decode_frame(bytearray(b"".join([bytes(p) for p in parts])), self.max_frame, (names, peer, tag),
                     self._layouts)
        if c.native is not None:
            self._in_template(c, tag, names)

    def _in_template(self, c, tag: str, names) -> None:
        """The layout the codec checked in full for ``names`` (this peer's ``tag``) becomes the
        tag's receive template in Go on the native stream ``c`` (unless it already is)."""
        fast = self._layouts.get(names)
        t = c.tin.get(tag)
        if fast is not None and (t is None or t[1] is not fast):
            with self._rlock:   # (the stream is freed under it)
                tid = c.native.template(fast[0], fast[1], fast[6], fast[4], -1 if t is None else t[0]) \
                    if c.native.h else -1
            if tid >= 0:
                c.tin[tag] = [tid, fast, None]   # (and the last spec that passed with it)

    def _out_template(self, link, tag: str, a: np.ndarray):
        """The template of frames of ``tag`` carrying arrays like ``a`` on ``link`` (now the
        tag's current one): (dtype, shape, id, payload bytes, frame bytes, header before
        seq, header after the array count), or False (such frames take the general path)."""
        key = (tag, a.dtype, a.shape)
        ent = link.tmpls_all.get(key)
        if ent is None:
            ent = False
            if a.nbytes + 4096 <= SMALL and len(link.tmpls_all) < _MAX_TEMPLATES:
                # the codec works the header out (and raises what it raises) and keeps its parts
                encode_parts(Header(self.session_id, self.me, tag, 0, "setup", 0), (a,), self.max_frame, self._names)
                lay = self._names.get((self._names.get((self.session_id, self.me, tag)), a.dtype, a.shape))
                if lay is not None and lay[3] <= SMALL:
                    pre, post, nbytes, total = lay
                    if link.sealer is None:
                        tid = -1        # (the Python record layer: the header parts are the template)
                    else:
                        with link.lock:
                            tid = link.sealer.template(pre, post, nbytes, 1) if link.sealer.h else -2
                    if tid >= -1:
                        ent = (a.dtype, a.shape, tid, nbytes, total, pre, post)
                link.tmpls_all[key] = ent
        if ent:
            link.tmpls[tag] = ent
        return ent

    def _py_send(self, link, peer: str, tag: str, a: np.ndarray, nbytes: int, total: int, pre: bytes,
                 post: bytes) -> None:
        """``send``'s frame on the Python record layer: ``Endpoint.send``, ``_transmit_parts``
        and ``OutLink.send_frame`` for one small array, inline (same bytes, same bookkeeping
        in the same order, same errors)."""
        seq, ph, depth = self._book_sent(peer, tag, nbytes, total)
        pt = pre + _TAIL.pack(seq, _PHASE_CODE[ph], depth, 1) + post + a.tobytes()
        if self._closed or peer in self._fatal or link.error is not None or peer in self._bye_from:
            return self._transmit_parts(peer, [pt], total)   # (raises what it raises)
        with link.lock:
            self._write_sealed(link, _seal(link, pt, total))
        self._count_one(total)

    def _write_sealed(self, link, rec: bytes) -> None:
        """Write one sealed record on ``link`` (its lock held): at once in the common case,
        else ``_write_all`` waits for room (or names why it failed)."""
        k = 0
        if not self._stop.is_set():
            try:                        # (the common case: sent at once, one call)
                k = link.sock.send(rec, _DONTWAIT)
            except OSError:             # full (_write_all waits) or failed (it names why)
                k = 0
        if k:
            link.moved = _monotonic()
            link.written += k
            link.data_written = link.written
        if k != len(rec):
            link._write_all([memoryview(rec)[k:]])
        link.next_hb = link.moved + self.heartbeat_interval

    def send_many(self, peers, tag: str, *arrays: np.ndarray) -> None:
        """``send`` of the same small array to each of ``peers`` (distinct, in order) on the
        Python record layer: every frame is booked and sealed before the first write, then
        the writes follow one another, so the frames leave a system call apart instead of
        one whole send apart (issue #23: a client's masked query to both evaluators; the
        second evaluator's copy left 80-170 us after the first). Each link's lock is held
        from its record's counter to its write (a heartbeat cannot come between them) and
        released after its write; only the protocol thread holds more than one. The bytes,
        seqs, meter counts and stats are ``send``'s; anything else (the native record
        layer, a paced, failed or closing link, several arrays, a large frame) is sent by
        ``send``, one peer after the other."""
        peers = tuple(peers)
        ents = []
        if len(arrays) == 1 and type(arrays[0]) is np.ndarray and self._aborted is None and not self._closed \
                and len(set(peers)) == len(peers) > 1:
            a = arrays[0]
            for p in peers:
                link = self._fast_out.get(p)
                if link is None or link.sealer is not None or p in self._fatal or link.error is not None \
                        or p in self._bye_from:
                    break
                ent = link.tmpls.get(tag)
                if ent is None or ent[0] is not a.dtype or ent[1] != a.shape:
                    ent = self._out_template(link, tag, a)
                if not ent or ent[2] >= 0:
                    break
                if ent[4] > self.max_frame:
                    raise MessageTooLargeError(f"frame of {ent[4]} bytes exceeds the cap of {self.max_frame} bytes")
                ents.append((p, link, ent))
        if len(ents) != len(peers) or not ents:
            return Endpoint.send_many(self, peers, tag, *arrays)
        body = a.tobytes()
        recs = []
        try:
            for p, link, ent in ents:
                _dt, _shape, _tid, nbytes, total, pre, post = ent
                seq, ph, depth = self._book_sent(p, tag, nbytes, total)
                pt = pre + _TAIL.pack(seq, _PHASE_CODE[ph], depth, 1) + post + body
                link.lock.acquire()
                recs.append((link, total, None))
                recs[-1] = (link, total, _seal(link, pt, total))
            for i, (link, total, rec) in enumerate(recs):
                try:
                    self._write_sealed(link, rec)
                finally:
                    recs[i] = (None, total, None)
                    link.lock.release()
                self._count_one(total)
        finally:
            for link, _total, _rec in recs:   # (only after a failure: the links not yet written)
                if link is not None:
                    link.lock.release()

    def _count_one(self, total: int) -> None:
        stats = self.stats
        if self._paced_any:   # (_count_sent, inline: a writer thread counts the paced frames of another link)
            with self._stats_lock:
                stats["frames_sent"] += 1
                stats["bytes_sent"] += total
        else:
            stats["frames_sent"] += 1
            stats["bytes_sent"] += total

    def _py_recv(self, peer: str, tag: str, specs: tuple, timeout: float | None, c) -> list[np.ndarray]:
        """``recv`` on the Python record layer: the peer's next frame read here when nothing
        waits in its inbox or half read in its buffer (``_py_next``), else the general path."""
        expected = self._seq_in[peer]
        deadline = _monotonic() + (self.recv_timeout if timeout is None else timeout)
        # before any wait: the tag's layout checked in full before (its template) and whether
        # the spec takes it (``_take`` and ``_known`` then do neither after the read)
        names = self._names.get((self.session_id, peer, tag))
        fast = self._layouts.get(names) if names is not None else None
        t = prep = None
        if fast is not None and fast[4] == 1:
            t = c.tin.get(tag)
            if t is None or t[1] is not fast:
                t = c.tin[tag] = [-1, fast, None]   # (no Go template: the layout and last spec)
            s = specs[0]
            if s is not t[2] and _spec_takes(s, fast[5][0]):
                t[2] = s
            # and the meter's entry for the frame (``_known`` adds it after the read, unless
            # there by then: nothing is counted here)
            key = (self._phase, "recv", peer, tag)
            prep = (key, self.meter.counters.get(key) or Counter())
        item = None
        self._fg = True                      # (as _receive: the protocol thread reads the streams)
        try:
            with self._rlock:
                try:
                    q = self._inbox[peer]
                    if q:
                        item = self._pop_small(peer, q)
                    elif peer not in self._fatal and not c.eof and not c.fill \
                            and c.body is None and c.frame is None and not c.size and not c.parts \
                            and not c.oversized:
                        item = self._py_next(peer, c, deadline)
                finally:
                    self._fg_left = _monotonic()
        finally:
            self._fg = False
        if item is None:   # something else first (several records, part of one, a failure, ...)
            item = self._receive(peer, deadline)
        return self._take(peer, tag, specs, item, expected, c, t, prep)

    def _pop_small(self, peer: str, q):
        """The frame at the head of ``peer``'s inbox ``q`` (caller holds the read lock), taken
        as ``_receive`` takes it, when it is a whole frame read before; else None."""
        if type(q[0][1]) is bytearray:
            item = q.popleft()[1]
            self._queued[peer] -= len(item)
            return item
        return None

    def _take(self, peer: str, tag: str, specs: tuple, item, expected: int, c, t0: list | None = None,
              prep: tuple | None = None) -> list[np.ndarray]:
        """A whole frame of ``peer`` received without a template check in the record layer
        (read here on the Python layer, or taken from the inbox where a read queued it:
        several records in one read, one record in several reads, the reader thread, the
        wait for another peer): compared with the tag's template, the header the codec
        checked in full before (``decode_known``'s conditions, seq included) and then taken
        by ``_known``; anything else by ``_accept`` (full decode, same typed errors). ``t0``:
        the tag's receive entry looked up before the wait (its layout one checked in full),
        ``prep`` the meter's key and counter (``_known``)."""
        if type(item) is bytearray:
            if t0 is not None:
                names = None
                fast = t0[1]
            else:
                names = self._names.get((self.session_id, peer, tag))
                fast = self._layouts.get(names) if names is not None else None
            if fast is not None and fast[4] == 1 and len(item) == fast[3] + fast[6] and item.startswith(fast[0]) \
                    and item.startswith(fast[1], fast[2]):
                seq, phase_i, depth, n = _TAIL.unpack_from(item, fast[2] - _TAIL.size)
                if seq == expected and phase_i < 3 and n == 1:
                    t = c.tin.get(tag) if t0 is None else t0
                    if t is None or t[1] is not fast:
                        if c.native is None:
                            t = c.tin[tag] = [-1, fast, None]   # (no Go template: the layout and last spec)
                        else:   # (the tag's Go template, as after a full decode)
                            self._in_template(c, tag, names)
                            t = c.tin.get(tag)
                            if t is None or t[1] is not fast:
                                t = [-1, fast, None]
                    c.fast += 1
                    return self._known(peer, tag, specs, item, expected, t, phase_i, depth, prep)
        return self._accept(peer, tag, specs, item, expected)

    def _py_next(self, peer: str, c, deadline: float):
        """Wait for bytes from ``peer`` (reading the other peers' streams whenever they become
        readable, as ``_poll`` does) and read them into the stream's buffer. Exactly one whole
        small data record: opened into a ``bytearray`` of its own and returned (the frame, not
        queued). Anything else is parsed as ``_read`` parses it and None returned once a frame,
        a failure or a partial record is there (the general path goes on from it); a
        heartbeat alone: waits on. None too at the deadline or after ``peer_timeout`` of
        silence (the general path names them)."""
        sock = c.sock
        view = c.view
        hb = self.heartbeat_interval
        socks = None
        since = _monotonic()
        spin = self._spin_s if self._phase == "online" else 0.0
        while True:
            try:
                try:
                    n = sock.recv_into(view)
                except BlockingIOError:
                    if not spin:
                        raise
                    if c.spin_skip:      # (after budgets ran out in a row: blocks at once, as in Go)
                        c.spin_skip -= 1
                        spin = 0.0
                        raise
                    # busy-poll (``spin_us``), once per wait, before select puts this thread
                    # to sleep: an answer that comes within it costs no wake-up
                    end = _monotonic() + spin
                    if end > deadline:
                        end = deadline
                    spin = 0.0
                    yld = self.spin_yield
                    while True:
                        if yld:
                            _yield()
                        try:
                            n = sock.recv_into(view)
                            break
                        except BlockingIOError:
                            if _monotonic() >= end:
                                c.spin_misses += 1
                                c.spin_run = min(c.spin_run + 1, 6)
                                c.spin_skip = (1 << c.spin_run) - 1
                                raise
                    c.spin_hits += 1
                    c.spin_run = 0
            except BlockingIOError:
                now = _monotonic()
                if now >= deadline or now - (c.last if c.last > since else since) > self.peer_timeout:
                    return None
                if socks is None:
                    socks = [o.sock for o in self._in.values() if not o.eof]
                left = deadline - now
                for s in select.select(socks, [], [], left if left < hb else hb)[0]:
                    if s is not sock:
                        p = self._by_fd.get(s.fileno())
                        if p is not None:
                            self._read(p)
                            socks = None
                continue
            except OSError as e:
                self._cut(peer, PeerDeadError(f"{self.me}: connection to {peer} lost: {e}"))
                return None
            if not n:
                if peer not in self._bye_from:
                    self._cut(peer, PeerDeadError(f"{self.me}: peer {peer} closed its connection without a bye "
                                                  "(process exited or was killed)"))
                c.eof = True
                return None
            c.last = _monotonic()
            if n > _HDR_SIZE:
                length, _stamp, kind = _HDR_UNPACK(c.buf)
                size = length - TAG
                if kind == K_DATA and n == _HDR_SIZE + length and 0 <= size <= SMALL and size <= self.max_frame \
                        and size <= self.max_inbox:
                    pt = bytearray(size)
                    try:
                        c.aead.decrypt_into(_NONCE.pack(c.counter), view[_HDR_SIZE:n], view[:_HDR_SIZE], pt)
                    except InvalidTag:
                        self._cut(peer, FrameError(f"{self.me} <- {peer}: a record failed authentication "
                                                   "(corrupted, replayed or forged); peer cut off"))
                        return None
                    c.counter += 1
                    stats = self.stats
                    stats["frames_recv"] += 1
                    stats["bytes_recv"] += size
                    return pt
            c.fill = n
            self._parse(peer, c)
            if self._inbox[peer] or peer in self._fatal or c.eof or c.fill or c.body is not None \
                    or c.frame is not None or c.size or c.parts or c.oversized:
                return None
            since = c.last

    def recv(self, peer: str, tag: str, *specs, timeout: float | None = None) -> list[np.ndarray]:
        c = self._in.get(peer)
        if c is None or len(specs) != 1 or self._aborted is not None or self._closed or self._latency[peer]:
            return Endpoint.recv(self, peer, tag, *specs, timeout=timeout)
        if c.native is None:
            return self._py_recv(peer, tag, specs, timeout, c)
        expected = self._seq_in[peer]
        now = _monotonic()
        deadline = now + (self.recv_timeout if timeout is None else timeout)
        t = c.tin.get(tag)
        if t is not None and specs[0] is not t[2] and len(t[1][5]) == 1 and _spec_takes(specs[0], t[1][5][0]):
            t[2] = specs[0]   # (the spec checked before the wait, against the template's layout)
        item = None
        chk = None
        self._fg = True                      # (as _receive: the protocol thread reads the streams)
        try:
            with self._rlock:
                try:
                    if self._spin_s and c.spin_on is not (self._phase == "online"):
                        # busy-poll in the online phase only (the Go stream keeps the setting)
                        c.spin_on = self._phase == "online"
                        c.native.spin(int(self.spin_us) if c.spin_on else 0, self.spin_yield)
                    q = self._inbox[peer]
                    if q:
                        item = self._pop_small(peer, q)
                        if item is not None:
                            q = None
                    elif peer not in self._fatal and c.frame is None and not c.eof:
                        if t is not None and c.others_ok:
                            # the common case in one call: wait (at most a heartbeat interval),
                            # read, open, check the header against the tag's template
                            nat = c.native
                            left = deadline - now
                            hb = self.heartbeat_interval
                            ev = nat.next_t(nat.h, int((left if left < hb else hb) * 1e6) + 1, t[0], expected)
                            if ev == EV_CHECKED or ev == EV_FRAME:
                                item = frame_event(self, peer, c, ev)
                                chk = c.checked
                            elif ev == EV_NONE or ev == EV_OTHER:   # (next_native waits on and reads the others)
                                item = next_native(self, peer, c, deadline, t[0], expected)
                                chk = c.checked
                            else:
                                native_event(self, peer, c, ev)
                        else:
                            item = next_native(self, peer, c, deadline, -1 if t is None else t[0], expected)
                            chk = c.checked
                finally:
                    self._fg_left = _monotonic()
        finally:
            self._fg = False
        if item is None:   # something else first (queued frames, a bye, a failure, a large frame)
            return self._take(peer, tag, specs, self._receive(peer, deadline), expected, c)
        if q is None:      # (taken from the inbox: read with another frame or by the reader thread)
            return self._take(peer, tag, specs, item, expected, c)
        if chk is None:
            arrays = self._accept(peer, tag, specs, item, expected)
            # decoded in full: the layout the codec kept for this peer and tag becomes the template
            self._in_template(c, tag, self._names.get((self.session_id, peer, tag)))
            return arrays
        # the header was checked in Go against t's, which the codec checked in full before
        return self._known(peer, tag, specs, item, expected, t, chk[0], chk[1])

    def _known(self, peer: str, tag: str, specs: tuple, item: bytearray, expected: int, t: list, phase_i: int,
               depth_in: int, prep: tuple | None = None) -> list[np.ndarray]:
        """``_accept`` of a frame of one array whose header equals, but for seq, phase and
        depth, the one ``t[1]`` that the codec checked in full before, and whose seq is
        ``expected`` (decode_known's result, inline): the array, the spec check (``t[2]``:
        the last spec that passed with this layout), seq, rounds and meter. ``prep``: the
        meter's key for the frame and a counter made before the wait, used unless the key
        has one by now (the phase cannot change meanwhile: this thread waited)."""
        lay = t[1]
        (dt, shape, count, nb), = lay[5]
        a = np.frombuffer(item, dt, count, lay[3]) if len(shape) == 1 else np.ndarray(shape, dt, item, lay[3])
        if not a.flags.aligned:
            a = a.copy()
        self._seq_in[peer] = expected + 1
        self.last_step = ("recv", peer, tag)
        s = specs[0]
        if s is not t[2]:   # (a spec met before by this exact layout passed: specs are frozen)
            if not _spec_takes(s, lay[5][0]):
                s.check(a, f"{self.me} <- {peer} [{tag}] array 0")
            t[2] = s
        ph = self._phase
        meter = self.meter
        depth = meter.depth
        d = depth_in + 1 if PHASES[phase_i] == ph else 1
        if d > depth[ph]:
            depth[ph] = d
        m = meter.counters[(ph, "recv", peer, tag)] if prep is None else meter.counters.setdefault(*prep)
        m.payload += nb
        m.wire += len(item)
        m.messages += 1
        return [a]
