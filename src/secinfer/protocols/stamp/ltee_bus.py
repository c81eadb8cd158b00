"""The LTEE's public constants, stream helpers and bus framing [STAMP 3.3, Protocols 1-3],
shared by the device firmware (``ltee_device``) and its host side (``ltee``, ``nonlinear``).

Nothing here holds a secret: the framing is the length-prefixed secinfer frame on the
device's stdin/stdout pipe; ``expand`` and ``prf_elements`` compute from keys their
callers hold.
"""

from __future__ import annotations

import hashlib
import os
import select
import struct
import time

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secinfer.crypto.prg import PRF
from secinfer.errors import FrameError
from secinfer.net.codec import Header, decode_frame, encode_frame, encode_parts

BUS_SESSION = b"stamp-ltee-bus\x00\x00"
MAX_BUS_FRAME = 1 << 31
CERT_DOMAIN = b"secinfer/stamp/ltee-identity/v1"
DH_DOMAIN = b"secinfer/stamp/ltee-dh/v1"
OUT_MAC_DOMAIN = b"secinfer/stamp/ltee-output-mac/v1"
STREAMS = ("k0", "k1", "k2", "s")
# counter slots of one operation: one per job; up to three products of one input finish in
# one operation, each split in three batch parts [STAMP 4.2] (``StampBackend._run_many``)
SLOTS = 9
MANT_BITS = 52   # mantissa of exp() carried as a 52-bit fraction [STAMP 3.1, Protocol 6]
EXP_BITS = 32    # exponent masked in Z_2^32 [STAMP Protocol 6 step 1]
# seed requests ``cmd_batch`` and ``cmd_prefetch`` may carry (uint8 results; new ones go last)
BATCHABLE = ("mask", "inmask", "zshare", "pad", "outmask")
# online requests one announcement (``ltee_device.cmd_expect``) may carry; a host with more
# announces the first ones (the device then stops busy-polling after as many requests)
EXPECT_MAX = 4096
# the largest busy-poll budget (us) of a wait on the bus: the host's option
# ``stamp_bus_spin_us`` and what the device accepts in ``cmd_ready``
MAX_BUS_SPIN_US = 100_000


def cert_message(identity_pub: bytes) -> bytes:
    return CERT_DOMAIN + identity_pub


def dh_message(session: bytes, me: int, peer: int, eph_pub: bytes) -> bytes:
    return DH_DOMAIN + session + bytes([me, peer]) + eph_pub


def label_prefix(label: str) -> bytes:
    """The first half of ``crypto.prg.PRF``'s CTR start block for ``label`` (its second half
    is the block counter); tests compare what is computed from it with ``PRF`` itself."""
    return hashlib.sha256(b"secinfer-prg-label\x00" + label.encode()).digest()[:8]


# the CTR start block of PRF(seed).keystream("expand", 0, .)
_EXPAND_IV = label_prefix("expand") + bytes(8)


def expand(seed: bytes, n: int) -> np.ndarray:
    """n 64-bit words of AES-CTR keystream under a 128-bit stream seed: exactly
    ``PRF(seed).keystream("expand", 0, 8 n)``, with the label's prefix computed once and the
    keystream written straight into the array's buffer (no copy)."""
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    buf = bytearray(8 * n + 15)
    Cipher(algorithms.AES(bytes(seed)), modes.CTR(_EXPAND_IV)).encryptor().update_into(bytes(8 * n), buf)
    return np.frombuffer(buf, dtype=np.uint64, count=n)


def zero_component(seeds: dict, comp: int, n: int, mask: np.uint64) -> np.ndarray:
    """Component comp of a zero-sharing from the stream seeds of comp and comp+1 [STAMP Protocol 3]."""
    return (expand(seeds[comp], n) - expand(seeds[(comp + 1) % 3], n)) & mask


def seeds_array(seeds: dict) -> np.ndarray:
    """(3, 16) uint8: the released stream seeds, zero rows for the withheld ones."""
    out = np.zeros((3, 16), dtype=np.uint8)
    for c, sd in seeds.items():
        out[c] = np.frombuffer(sd, dtype=np.uint8)
    return out


def prf_elements(prf: PRF, label: str, ctr: int, n: int) -> np.ndarray:
    """F_k(ctr), ..., F_k(ctr + n - 1): one 64-bit element per counter value [STAMP Protocol 2]."""
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    skip = ctr % 2
    raw = prf.keystream(label, ctr // 2, 8 * (n + skip))
    return np.frombuffer(raw, dtype=np.uint64)[skip:skip + n].copy()


def _read_exact(stream, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def write_frame(stream, tag: str, arrays, seq: int, sender: str) -> None:
    """A frame on a file object (the robustness tests' raw device bus; ``BusPipe`` is the bus)."""
    frame = encode_frame(Header(BUS_SESSION, sender, tag, seq, "online", 0), arrays, MAX_BUS_FRAME)
    stream.write(struct.pack("<Q", len(frame)))
    stream.write(frame)
    stream.flush()


def read_frame(stream):
    (n,) = struct.unpack("<Q", _read_exact(stream, 8))
    if n > MAX_BUS_FRAME:
        raise FrameError("bus frame too large")
    return decode_frame(_read_exact(stream, n), MAX_BUS_FRAME)


class BusTimeout(Exception):
    """No whole frame came on the bus within the wait's deadline."""


_LEN = struct.Struct("<Q")
_yield = os.sched_yield
_PHASE = ("offline", "online")
_CHUNK = 1 << 16


class BusPipe:
    """One end of the bus on raw pipe descriptors (both ends use it): a length-prefixed
    secinfer frame per request or answer, written with ``os.writev`` and read with
    ``os.read`` on a non-blocking descriptor -- no buffered file objects.

    ``recv(spin)``: a wait that finds nothing first reads again for ``spin`` seconds,
    yielding the processor between the reads (``os.sched_yield``), and only then blocks in
    ``select``: an answer that comes within the budget costs no sleep and no wake-up
    [docs: runtime.md, "Busy-polling"; stamp.md, "Eighth pass"]. After k budgets in a row
    ran out, the next 2^k - 1 waits (at most 63) block at once; a budget that ends with
    bytes resets that. The encoder's and decoder's layout caches are kept per end (the bus
    repeats its headers); every frame is still checked in full by ``decode_frame``."""

    def __init__(self, rfd: int, wfd: int, sender: str) -> None:
        os.set_blocking(rfd, False)
        self.rfd, self.wfd, self.sender = rfd, wfd, sender
        self._buf = bytearray()
        self._enc: dict = {}
        self._dec: dict = {}
        self.spin_hits = self.spin_misses = 0
        self._run = self._skip = 0

    def send(self, tag: str, arrays, seq: int, online: bool = False) -> None:
        parts, total, _ = encode_parts(Header(BUS_SESSION, self.sender, tag, seq, _PHASE[online], 0), arrays,
                                       MAX_BUS_FRAME, self._enc)
        bufs = [_LEN.pack(total), *parts]
        left = 8 + total
        wfd = self.wfd
        while True:
            n = os.writev(wfd, bufs)
            left -= n
            if not left:
                return
            while n:                  # (a large frame: the pipe took part of it)
                b = bufs[0]
                if n >= len(b):
                    n -= len(b)
                    bufs.pop(0)
                else:
                    bufs[0] = memoryview(b)[n:]
                    n = 0

    def recv(self, spin: float = 0.0, timeout: float | None = None, alive=None):
        """The next frame (header, arrays). ``spin``: the busy-poll budget in seconds for
        this wait (0: block at once); ``timeout``: ``BusTimeout`` when no whole frame came
        in that many seconds; ``alive``: a check called every half second of a blocked wait
        (it raises to end the wait). ``EOFError`` when the other end closed the pipe."""
        buf = self._buf
        deadline = None if timeout is None else time.monotonic() + timeout
        need = 8
        while True:
            if len(buf) >= need:
                if need == 8:
                    (n,) = _LEN.unpack_from(buf, 0)
                    if n > MAX_BUS_FRAME:
                        raise FrameError("bus frame too large")
                    need = 8 + n
                    if len(buf) >= need:
                        continue
                else:
                    frame = buf[8:need]
                    del buf[:need]
                    return decode_frame(frame, MAX_BUS_FRAME, None, self._dec)
            try:
                chunk = os.read(self.rfd, max(_CHUNK, need - len(buf)))
            except BlockingIOError:
                chunk = self._wait(spin, deadline, alive)
                spin = 0.0
            if not chunk:
                raise EOFError
            buf += chunk

    def _wait(self, spin: float, deadline, alive) -> bytes:
        rfd = self.rfd
        if spin:
            if self._skip:
                self._skip -= 1
            else:
                end = time.monotonic() + spin
                while True:
                    _yield()
                    try:
                        chunk = os.read(rfd, _CHUNK)
                        self.spin_hits += 1
                        self._run = 0
                        return chunk
                    except BlockingIOError:
                        if time.monotonic() >= end:
                            break
                self.spin_misses += 1
                self._run = min(self._run + 1, 6)
                self._skip = (1 << self._run) - 1
        while True:
            left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            if left <= 0:
                raise BusTimeout
            if select.select([rfd], [], [], left)[0]:
                try:
                    return os.read(rfd, _CHUNK)
                except BlockingIOError:
                    continue
            if alive is not None:
                alive()
