"""The tcp transport's native record layer (``native/go/reclayer``), bound with ctypes.

Same records as ``tcp_links`` (the format is described there), sealed and opened in Go
(crypto/aes + GCM with AES-NI) and read with system calls made in Go with the GIL
released: a small frame is one call (seal + non-blocking send) and a receive is one call
(wait, read, open, until the next frame). Everything above the records (inboxes, limits,
liveness, pacing, close) stays in ``tcp_transport`` / ``tcp_links``, for both layers.

``available()`` is False when the native library was not built (or predates this layer):
the transport then uses the Python record layer, which speaks the same format, so the
two interoperate (one party native, one not).
"""

from __future__ import annotations

import ctypes as C
import threading
from pathlib import Path

EV_NONE, EV_FRAME, EV_NEED, EV_BYE, EV_OVERSIZED, EV_EOF, EV_OTHER, EV_CHECKED = 0, 1, 2, 3, 4, 5, 6, 7
EV_FRAME_ERR, EV_OS_ERR, EV_BAD_HANDLE = -1, -2, -3
BAD_TEMPLATE = -3        # rl_send_t: no such template
ABI = 4                  # the version of the exports this binding speaks (reclayer.go, abiVersion)
SCRATCH = 1 << 16        # frames up to this size are received into a reused buffer, then copied
_ERRLEN = 512

# = secinfer.native.build.LIB_PATH (not imported: its module costs a party ~40 ms of imports)
LIB_PATH = Path(__file__).resolve().parent.parent / "native" / "_lib" / "libsecinferhe.so"
_lib = None
_tried = False
_lock = threading.Lock()
u64, i64, vp = C.c_uint64, C.c_int64, C.c_void_p


def _load():
    if _tried:
        return _lib
    with _lock:
        if not _tried:
            _declare()
    return _lib


def _declare() -> None:
    global _tried
    try:
        _bind()
    finally:
        _tried = True


def _bind() -> None:
    global _lib
    try:
        if not LIB_PATH.exists():
            return
        lib = C.CDLL(str(LIB_PATH))
        if not hasattr(lib, "rl_abi"):       # (a library built before this layer)
            return
        lib.rl_abi.restype = C.c_int
        if lib.rl_abi() != ABI:              # (built from other sources than these)
            return
    except OSError:
        return
    lib.rl_new.argtypes = [C.c_int, C.c_char_p, u64, i64, C.POINTER(u64)]
    lib.rl_new.restype = C.c_int
    lib.rl_free.argtypes = [u64]
    lib.rl_free.restype = None
    lib.rl_counter.argtypes = [u64]
    lib.rl_counter.restype = i64
    lib.rl_outbuf.argtypes = [u64, C.POINTER(i64)]
    lib.rl_outbuf.restype = vp
    lib.rl_seal.argtypes = [u64, C.c_int, C.c_double, vp, i64, vp]
    lib.rl_seal.restype = i64
    lib.rl_send_small.argtypes = [u64, C.c_double, vp, i64]
    lib.rl_send_small.restype = i64
    lib.rl_recv.argtypes = [u64, i64, vp, i64, vp, C.c_int, vp, vp, vp, C.c_int]
    lib.rl_recv.restype = C.c_int
    lib.rl_bind.argtypes = [u64, vp, i64, vp, vp, vp, C.c_int]
    lib.rl_bind.restype = C.c_int
    lib.rl_next.argtypes = [u64, i64, vp, i64]
    lib.rl_next.restype = C.c_int
    # frame templates (frames.go): a small frame of one array built and sent, or received
    # and its header checked, in one call
    lib.rl_tmpl.argtypes = [u64, C.c_int, vp, i64, vp, i64, i64, C.c_int]
    lib.rl_tmpl.restype = C.c_int
    lib.rl_send_t.argtypes = [u64, C.c_double, C.c_int, u64, u64, vp]
    lib.rl_send_t.restype = i64
    lib.rl_others.argtypes = [u64, vp, C.c_int]
    lib.rl_others.restype = C.c_int
    lib.rl_next_t.argtypes = [u64, i64, C.c_int, u64]
    lib.rl_next_t.restype = C.c_int
    # busy-poll before blocking (recv.go): budget, yield, and the statistics
    lib.rl_spin.argtypes = [u64, i64, C.c_int, C.POINTER(i64), C.POINTER(i64)]
    lib.rl_spin.restype = C.c_int
    _lib = lib


def available() -> bool:
    return _load() is not None


def _address(buf) -> int:
    """The address of a buffer's first byte (bytes, bytearray, memoryview, numpy array)."""
    import numpy as np
    return np.frombuffer(buf, np.uint8).ctypes.data if len(buf) else 0


class _Stream:
    def __init__(self, fd: int, key: bytes, counter: int, max_frame: int) -> None:
        lib = _load()
        if lib is None:
            raise RuntimeError("the native record layer is not available")
        self._lib = lib
        h = u64(0)
        if lib.rl_new(fd, bytes(key), counter, max_frame, C.byref(h)) != 0:
            raise ValueError("native record layer: bad key")
        self.h = h.value

    @property
    def counter(self) -> int:
        return int(self._lib.rl_counter(self.h))

    def free(self) -> None:
        h, self.h = self.h, 0
        if h:
            self._lib.rl_free(h)


class Sealer(_Stream):
    """Our stream to a peer: seals records (and sends a small one at once)."""

    def __init__(self, fd: int, key: bytes, counter: int = 1) -> None:
        super().__init__(fd, key, counter, 0)
        cap = i64(0)
        p = self._lib.rl_outbuf(self.h, C.byref(cap))
        self.out = memoryview((C.c_ubyte * cap.value).from_address(p)).cast("B")   # (lives until free)
        self.out_addr = p
        self._send_small = self._lib.rl_send_small
        self._seal = self._lib.rl_seal
        # (h, stamp, template, seq, phase code << 32 | depth, the template's payload size of bytes)
        self.send_t = self._lib.rl_send_t

    def template(self, pre: bytes, post: bytes, nbytes: int, narrays: int, tid: int = -1) -> int:
        """Register (or, ``tid`` >= 0, replace) a frame template for ``send_t``: the
        header bytes before seq (``pre``) and after the array count (``post``) of frames of
        ``nbytes`` payload bytes. Its id, or -1 (too many, or too large for one record)."""
        return self._lib.rl_tmpl(self.h, tid, pre, len(pre), post, len(post), nbytes, narrays)

    def free(self) -> None:
        self.out = None
        super().free()

    def send_small(self, stamp: float, pt: bytes) -> int:
        """Seal ``pt`` (at most 1 MiB) as one data record into ``out`` and offer it to the
        socket once (never waits): the bytes the socket took (the record is len(pt) + 29
        bytes; 0: none, the socket is full or failed), -1 if the stream was freed."""
        if type(pt) is not bytes:
            pt = bytes(pt)
        return self._send_small(self.h, stamp, pt, len(pt))

    def seal_into(self, kind: int, stamp: float, pt, dst_addr: int) -> int:
        """Seal one record of ``pt`` at ``dst_addr`` (room for len(pt) + 29 bytes); its length."""
        n = self._seal(self.h, kind, stamp, _address(pt) if type(pt) is not bytes else pt, len(pt), dst_addr)
        if n < 0:
            raise ValueError("native record layer: record too large or stream freed")
        return n

    def seal(self, kind: int, stamp: float, pt) -> bytes:
        """One record (header and ciphertext) as bytes."""
        out = bytearray(len(pt) + 29)
        addr = C.addressof((C.c_char * len(out)).from_buffer(out))
        n = self.seal_into(kind, stamp, pt, addr)
        return bytes(out[:n])


class Opener(_Stream):
    """A peer's stream to us: reads and opens records into events (``recv``)."""

    def __init__(self, fd: int, key: bytes, max_frame: int, counter: int = 1) -> None:
        super().__init__(fd, key, counter, max_frame)
        self.scratch = bytearray(SCRATCH)
        self.scratch_addr = C.addressof((C.c_char * SCRATCH).from_buffer(self.scratch))
        self._info = (i64 * 8)()   # (rl_recv uses 4; rl_next_t's checked frames 6)
        self._stamp = C.c_double(0.0)
        self._err = C.create_string_buffer(_ERRLEN)
        # rl_recv's last four arguments, and the function itself (callers on the hot path
        # call ``call(h, wait_us, dst, cap, others, len(others), *args)`` as ``recv`` does)
        self.args = (C.addressof(self._info), C.addressof(self._stamp), C.addressof(self._err), _ERRLEN)
        self.call = self._lib.rl_recv
        # the same memory, given once: ``next(h, wait_us, dst or None, cap)`` is rl_recv without
        # other descriptors, with four arguments (the protocol thread's wait for one peer)
        self._lib.rl_bind(self.h, self.scratch_addr, SCRATCH, *self.args)
        self.next = self._lib.rl_next
        # ``next_t(h, wait_us, template, expected seq)``: rl_next into scratch, woken by the
        # ``others`` set last (set_others), checking a small frame against a template
        self.next_t = self._lib.rl_next_t
        self.others = None
        self._others_key: tuple = ()

    def spin(self, us: int = -1, yield_cpu: bool = False) -> tuple[int, int]:
        """Set the busy-poll budget (``us`` microseconds; 0: none; < 0: unchanged): a wait
        for bytes first reads again without blocking for that long (yielding the processor
        between reads with ``yield_cpu``). Returns (waits the spin ended, spins that ran out)."""
        hits, misses = i64(0), i64(0)
        if self.h:
            self._lib.rl_spin(self.h, us, int(yield_cpu), C.byref(hits), C.byref(misses))
        return hits.value, misses.value

    def set_others(self, others: tuple) -> None:
        if others != self._others_key:
            self._others_key = others
            self.others = (C.c_int32 * len(others))(*others) if others else None
            self._lib.rl_others(self.h, self.others, len(others))

    def template(self, pre: bytes, post: bytes, nbytes: int, narrays: int, tid: int = -1) -> int:
        """Register (or replace) a template ``next_t`` checks frames against: the header
        bytes of a frame checked in full (codec.decode_frame) before seq and after the
        array count. Its id, or -1."""
        return self._lib.rl_tmpl(self.h, tid, pre, len(pre), post, len(post), nbytes, narrays)

    def recv(self, wait_us: int, frame=None, others: tuple = ()) -> int:
        """One event (``EV_*``), waiting at most ``wait_us`` for bytes (0: never waits).
        ``frame``: the buffer an ``EV_NEED`` asked for (kept by the caller until the
        frame's event). ``others``: descriptors whose readability ends a wait (EV_OTHER).
        Then ``info`` holds (value, in frame buffer, bytes read, bytes read not yet parsed),
        ``stamp`` the record's stamp and ``error`` a failure's message."""
        self.set_others(others)
        if frame is None:
            dst, cap = self.scratch_addr, SCRATCH
        else:
            dst, cap = frame.ctypes.data, frame.size
        return self.call(self.h, wait_us, dst, cap, self.others if others else None, len(others), *self.args)

    @property
    def info(self):
        return self._info

    @property
    def stamp(self) -> float:
        return self._stamp.value

    @property
    def error(self) -> str:
        return self._err.value.decode("utf-8", "replace")
