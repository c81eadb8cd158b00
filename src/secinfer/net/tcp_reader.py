"""The tcp transport's receive side, record by record (a mixin of ``TcpEndpoint``): reading
a peer's stream and parsing its records, in Python (``_parse``, ``_record``) or through the
native record layer (``tcp_links.read_native``), into the per-peer inboxes. Split from
``tcp_transport`` for size; the state it uses is the endpoint's (``_in``, ``_inbox``,
``_queued``, ``_fatal``, ``_bye_from``, ``stats``, limits) and ``_cut``."""

from __future__ import annotations

import time

import numpy as np
from cryptography.exceptions import InvalidTag

from secinfer.errors import FrameError, InboxFullError, MessageTooLargeError, PeerDeadError
from secinfer.net.tcp_links import (HDR, K_BYE, K_DATA, K_HB, K_SIZE, MORE, RECORD, SEND_RECORD, SMALL, TAG, _CLOSED,
                                    _NONCE, InStream, read_native)


class StreamReader:
    """``_read`` / ``_parse`` / ``_open`` / ``_record`` of ``TcpEndpoint``."""

    def _read(self, peer: str, soft: int | None = None) -> None:
        """Read what is waiting on ``peer``'s stream (non-blocking) and queue whole frames.
        Small records are parsed out of one receive buffer (one system call for many); a
        record larger than it is read straight into its own buffer (a data record of a
        sized frame: into the frame itself, its header read alone first). With ``soft`` (the
        reader thread), stop once that many bytes from the peer wait unconsumed."""
        c = self._in[peer]
        if c.native is not None:
            read_native(self, peer, c, soft)
            return
        while not c.eof:
            if soft is not None and (self._queued[peer] >= soft or self._fg):
                return      # (the reader thread: enough waits here, or the protocol thread takes over)
            big = c.body is not None
            if big:
                view = memoryview(c.body)[c.got:]
            elif c.frame is not None and c.fill < HDR.size:
                # inside a frame of several records: the next record's header alone, so
                # that its body is then read straight into the frame (_parse), not via buf
                view = c.view[c.fill:HDR.size]
            else:
                view = c.view[c.fill:]
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

    def _parse(self, peer: str, c: "InStream") -> None:
        buf, pos, end = c.buf, 0, c.fill
        while end - pos >= HDR.size and not c.eof:
            length = HDR.unpack_from(buf, pos)[0]
            if length < TAG or length > RECORD + TAG:
                self._cut(peer, FrameError(f"{self.me} <- {peer}: malformed record (length {length})"))
                return
            if end - pos - HDR.size >= length:
                b0 = pos + HDR.size
                self._record(peer, c, c.view[pos:b0], c.view[b0:b0 + length])   # (in place)
                pos = b0 + length
            elif HDR.size + length > len(buf):     # larger than the buffer: a buffer of its own
                c.hdr = bytes(buf[pos:pos + HDR.size])
                part = c.view[pos + HDR.size:end]
                if c.frame is not None and c.size + length <= len(c.frame) \
                        and buf[pos + HDR.size - 1] & ~MORE == K_DATA:
                    # a record of a sized frame: its ciphertext lands where its plaintext
                    # belongs and is decrypted in place (``_record``; no copy)
                    c.body = memoryview(c.frame)[c.size:c.size + length]
                elif length <= SEND_RECORD + TAG:    # (the size we send: one buffer, reused)
                    if c.big is None:
                        c.big = bytearray(SEND_RECORD + TAG)
                    c.body = memoryview(c.big)[:length]
                else:
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

    def _open(self, peer: str, c: "InStream", hdr: bytes, body, pt) -> bool:
        """Decrypt one record into ``pt`` and advance the stream's counter; a record failing
        authentication (corrupted, replayed or forged) is never used: the peer is cut off."""
        try:
            c.aead.decrypt_into(_NONCE.pack(c.counter), body, hdr, pt)
        except InvalidTag:
            self._cut(peer, FrameError(f"{self.me} <- {peer}: a record failed authentication "
                                       "(corrupted, replayed or forged); peer cut off"))
            return False
        c.counter += 1
        return True

    def _record(self, peer: str, c: "InStream", hdr: bytes, body) -> None:
        _length, stamp, kind = HDR.unpack(hdr)
        n = len(body) - TAG
        frame = c.frame
        if kind == K_DATA and frame is None and not c.size and not c.parts and not c.oversized:
            # a whole frame in one record (every small frame): decrypted into its own buffer
            pt = np.empty(n, np.uint8) if n > SMALL else bytearray(n)
            if not self._open(peer, c, hdr, body, pt):
                return
            self._deliver(peer, n, n > self.max_frame, pt, stamp)
            return
        base = kind & ~MORE
        if base == K_DATA and frame is not None:    # a sized frame: decrypted where it belongs
            if c.size + n > len(frame) - TAG:
                self._cut(peer, FrameError(f"{self.me} <- {peer}: a frame longer than its size record"))
                return
            pt = frame[c.size:c.size + n]
        else:   # (the frame's own buffer: its arrays may share it; a large one is not zeroed first)
            pt = np.empty(n, np.uint8) if n > SMALL else bytearray(n)
        if not self._open(peer, c, hdr, body, pt):
            return
        if base == K_HB:
            return
        if base == K_BYE:
            self._bye_reason[peer] = bytes(pt[:1000]).decode(errors="replace")
            self._bye_from.add(peer)
            self._inbox[peer].append((0.0, _CLOSED, 0.0))
            return
        if base == K_SIZE:
            if n != 8 or c.size or c.parts or frame is not None or c.oversized:
                self._cut(peer, FrameError(f"{self.me} <- {peer}: a misplaced size record"))
                return
            total = int.from_bytes(pt, "little")
            if total > self.max_frame:
                c.oversized = True              # (its records are counted, then refused in order)
            else:
                # (room for the last record's tag: records are received in place, see _parse)
                c.frame = np.empty(total + TAG, np.uint8)
            return
        if base != K_DATA:
            self._cut(peer, FrameError(f"{self.me} <- {peer}: unknown record kind {kind}"))
            return
        c.size += n
        if frame is not None:
            if kind & MORE:
                return
            if c.size != len(frame) - TAG:
                self._cut(peer, FrameError(f"{self.me} <- {peer}: a frame shorter than its size record"))
                return
            c.frame = None
            c.parts = [frame[:c.size]]
        else:
            if c.size > self.max_frame:
                c.oversized, c.parts = True, []
            elif not c.oversized:
                c.parts.append(pt)
            if kind & MORE:
                return
        size, parts, oversized = c.size, c.parts, c.oversized
        c.size, c.parts, c.oversized = 0, [], False
        self._deliver(peer, size, oversized,
                      None if oversized else parts[0] if len(parts) == 1 else bytearray().join(parts), stamp)

    def _deliver(self, peer: str, size: int, too_large: bool, item, stamp) -> None:
        """A whole frame received: counted, then queued for the protocol (or, too large, its
        typed error in its place; past the inbox limit, the peer is cut off)."""
        stats = self.stats
        stats["frames_recv"] += 1
        stats["bytes_recv"] += size
        if too_large:
            item = MessageTooLargeError(
                f"{self.me} <- {peer}: frame of {size} bytes exceeds the cap of {self.max_frame} bytes")
        elif self._queued[peer] + size > self.max_inbox:
            self._cut(peer, InboxFullError(
                f"{self.me} <- {peer}: {peer} sent more than the inbox limit of {self.max_inbox} bytes "
                f"before they were consumed; peer cut off (raise max_inbox if a protocol step really queues that much)"))
            return
        else:
            self._queued[peer] += size
        now = time.monotonic()
        self._inbox[peer].append((self._release_at(peer, now, stamp) if self._latency[peer] else now, item, stamp))
