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

Frames of several arrays, large frames, paced or latency-modelled links and the Python
record layer take ``Endpoint``'s general path.
"""

from __future__ import annotations

import time

import numpy as np

from secinfer.errors import MessageTooLargeError, NetworkError
from secinfer.net.channel import _NP_DTYPES, Endpoint
from secinfer.net.codec import _PHASE_CODE, _TAIL, PHASES, Header, encode_parts
from secinfer.net.native_link import BAD_TEMPLATE, EV_CHECKED, EV_FRAME, EV_NONE, EV_OTHER
from secinfer.net.tcp_links import RECORD_OVERHEAD, SMALL, frame_event, native_event, next_native

_MAX_TEMPLATES = 4096    # per link and direction (the Go side's limit too)
_monotonic = time.monotonic


class FastPaths:
    """``send`` and ``recv`` of ``TcpEndpoint`` (a mixin before ``Endpoint`` in its bases)."""

    _fast_out: dict      # peer -> OutLink with a native sealer and no pacing (set by connect)

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
        # (Endpoint.send's bookkeeping, in its order: seq, last step, meter, then the wire)
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
            if k == total + RECORD_OVERHEAD:
                link.written += k
                link.data_written = link.written
                link.moved = now
                link.next_hb = now + self.heartbeat_interval
            else:
                if k == BAD_TEMPLATE:   # (never: the template was registered on this link)
                    raise NetworkError(f"{self.me}: native record layer refused frame template {tid}")
                # the socket took part or none of it (the rest is written the long way), or
                # the link failed or closes (-2: sealed from these bytes, the write names why)
                link.small_rest(k, total, pre + _TAIL.pack(seq, _PHASE_CODE[ph], depth, 1) + post + body
                                if k == -2 else None, now)
                link.next_hb = link.moved + self.heartbeat_interval
        stats = self.stats
        if self._paced_any:   # (a writer thread counts the paced frames of another link meanwhile)
            with self._stats_lock:
                stats["frames_sent"] += 1
                stats["bytes_sent"] += total
        else:
            stats["frames_sent"] += 1
            stats["bytes_sent"] += total

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
                    with link.lock:
                        tid = link.sealer.template(pre, post, nbytes, 1) if link.sealer.h else -1
                    if tid >= 0:
                        ent = (a.dtype, a.shape, tid, nbytes, total, pre, post)
                link.tmpls_all[key] = ent
        if ent:
            link.tmpls[tag] = ent
        return ent

    def recv(self, peer: str, tag: str, *specs, timeout: float | None = None) -> list[np.ndarray]:
        c = self._in.get(peer)
        if c is None or c.native is None or len(specs) != 1 or self._aborted is not None or self._closed \
                or self._latency[peer]:
            return Endpoint.recv(self, peer, tag, *specs, timeout=timeout)
        expected = self._seq_in[peer]
        now = _monotonic()
        deadline = now + (self.recv_timeout if timeout is None else timeout)
        t = c.tin.get(tag)
        item = None
        chk = None
        self._fg = True                      # (as _receive: the protocol thread reads the streams)
        try:
            with self._rlock:
                try:
                    if not self._inbox[peer] and peer not in self._fatal and c.frame is None and not c.eof:
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
            return self._accept(peer, tag, specs, self._receive(peer, deadline), expected)
        if chk is None:
            arrays = self._accept(peer, tag, specs, item, expected)
            # decoded in full: the layout the codec kept for this peer and tag becomes the template
            fast = self._layouts.get(self._names.get((self.session_id, peer, tag)))
            if fast is not None and (t is None or t[1] is not fast):
                with self._rlock:   # (the stream is freed under it)
                    tid = c.native.template(fast[0], fast[1], fast[6], fast[4], -1 if t is None else t[0]) \
                        if c.native.h else -1
                if tid >= 0:
                    c.tin[tag] = [tid, fast, None]   # (and the last spec that passed with it)
            return arrays
        # the header was checked in Go against t's, which the codec checked in full before
        # (``_accept`` with decode_known's result, inline for one array)
        lay = t[1]
        (dt, shape, count, nb), = lay[5]
        a = np.frombuffer(item, dt, count, lay[3])
        if len(shape) != 1:
            a = a.reshape(shape)
        if not a.flags.aligned:
            a = a.copy()
        self._seq_in[peer] = expected + 1
        self.last_step = ("recv", peer, tag)
        s = specs[0]
        if s is not t[2]:   # (a spec met before by this exact layout passed: specs are frozen)
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
            if not ok or count > s.max_elems:
                s.check(a, f"{self.me} <- {peer} [{tag}] array 0")
            t[2] = s
        ph = self._phase
        meter = self.meter
        depth = meter.depth
        d = chk[1] + 1 if PHASES[chk[0]] == ph else 1
        if d > depth[ph]:
            depth[ph] = d
        m = meter.counters[(ph, "recv", peer, tag)]
        m.payload += nb
        m.wire += len(item)
        m.messages += 1
        return [a]
