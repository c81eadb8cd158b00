"""Frame codec: bytes only, no pickle.

A frame is

    magic "SINF" | version u16 | flags u16 | header_len u32 | header | payload

with the header (little-endian)

    session_id 16B | sender (u8 len + utf8) | tag (u16 len + utf8) | seq u64 |
    phase u8 | depth u32 | n_arrays u16 | per array: dtype code u8, ndim u8, ndim x u64

and the payload the arrays' raw C-order little-endian bytes, concatenated. Decoding checks
the size cap first, then every length against what is actually present, so a truncated,
corrupted or oversized frame is a ``FrameError`` and never a crash or a huge allocation.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from secinfer.errors import FrameError, MessageTooLargeError

MAGIC = b"SINF"
VERSION = 1
DEFAULT_MAX_FRAME = 1 << 31  # 2 GiB; sessions usually set a tighter cap
_PREFIX = struct.Struct("<4sHHI")

DTYPES: dict[int, np.dtype] = {
    1: np.dtype("uint8"), 2: np.dtype("uint16"), 3: np.dtype("uint32"), 4: np.dtype("uint64"),
    5: np.dtype("int8"), 6: np.dtype("int16"), 7: np.dtype("int32"), 8: np.dtype("int64"),
    9: np.dtype("float32"), 10: np.dtype("float64"), 11: np.dtype("complex128"), 12: np.dtype("bool"),
}
_CODES = {dt: code for code, dt in DTYPES.items()}
PHASES = ("setup", "offline", "online")
_MAX_NDIM = 8


@dataclass(frozen=True)
class Header:
    session_id: bytes
    sender: str
    tag: str
    seq: int
    phase: str
    depth: int


def payload_nbytes(arrays) -> int:
    return sum(int(np.asarray(a).nbytes) for a in arrays)


def encode_frame(header: Header, arrays, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    if len(header.session_id) != 16:
        raise FrameError("session id must be 16 bytes")
    sender = header.sender.encode()
    tag = header.tag.encode()
    if len(sender) > 255 or len(tag) > 65535:
        raise FrameError("sender or tag name too long")
    parts = [header.session_id, struct.pack("<B", len(sender)), sender,
             struct.pack("<H", len(tag)), tag,
             struct.pack("<QBIH", header.seq, PHASES.index(header.phase), header.depth, len(arrays))]
    bodies = []
    for a in arrays:
        a = np.asarray(a)
        dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
        code = _CODES.get(np.dtype(dt.str.replace(">", "<")))
        if code is None:
            raise FrameError(f"dtype {a.dtype} cannot be sent")
        if a.ndim > _MAX_NDIM:
            raise FrameError(f"arrays of more than {_MAX_NDIM} dimensions cannot be sent")
        parts.append(struct.pack("<BB", code, a.ndim))
        parts.append(struct.pack(f"<{a.ndim}Q", *a.shape))
        bodies.append(np.ascontiguousarray(a, dtype=DTYPES[code]).tobytes())
    head = b"".join(parts)
    total = _PREFIX.size + len(head) + sum(len(b) for b in bodies)
    if total > max_frame:
        raise MessageTooLargeError(f"frame of {total} bytes exceeds the cap of {max_frame} bytes")
    return b"".join([_PREFIX.pack(MAGIC, VERSION, 0, len(head)), head, *bodies])


class _Reader:
    def __init__(self, buf: memoryview, start: int, end: int) -> None:
        self.buf, self.pos, self.end = buf, start, end

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > self.end:
            raise FrameError("truncated frame header")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        s = struct.Struct(fmt)
        return s.unpack(self.take(s.size))


def decode_frame(data: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> tuple[Header, list[np.ndarray]]:
    if len(data) > max_frame:
        raise MessageTooLargeError(f"frame of {len(data)} bytes exceeds the cap of {max_frame} bytes")
    if len(data) < _PREFIX.size:
        raise FrameError(f"frame of {len(data)} bytes is shorter than the fixed prefix")
    magic, version, _flags, head_len = _PREFIX.unpack_from(data, 0)
    if magic != MAGIC:
        raise FrameError("bad frame magic (not a secinfer frame)")
    if version != VERSION:
        raise FrameError(f"protocol version {version} not supported (this build speaks {VERSION})")
    view = memoryview(data)
    end_head = _PREFIX.size + head_len
    if end_head > len(data):
        raise FrameError("truncated frame header")
    r = _Reader(view, _PREFIX.size, end_head)
    try:
        session_id = bytes(r.take(16))
        (ls,) = r.unpack("<B")
        sender = bytes(r.take(ls)).decode()
        (lt,) = r.unpack("<H")
        tag = bytes(r.take(lt)).decode()
        seq, phase_i, depth, n_arrays = r.unpack("<QBIH")
    except UnicodeDecodeError:
        raise FrameError("frame header holds invalid UTF-8") from None
    if phase_i >= len(PHASES):
        raise FrameError(f"unknown phase code {phase_i}")
    specs = []
    pos = end_head
    for _ in range(n_arrays):
        code, ndim = r.unpack("<BB")
        if code not in DTYPES:
            raise FrameError(f"unknown dtype code {code}")
        if ndim > _MAX_NDIM:
            raise FrameError(f"array with {ndim} dimensions")
        shape = r.unpack(f"<{ndim}Q")
        n = 1
        for d in shape:
            n *= d
            if n * DTYPES[code].itemsize > len(data):
                raise FrameError("array shape larger than the frame")
        nbytes = n * DTYPES[code].itemsize
        specs.append((DTYPES[code], shape, pos, nbytes))
        pos += nbytes
    if r.pos != end_head:
        raise FrameError("frame header length mismatch")
    if pos != len(data):
        raise FrameError(f"frame payload is {len(data) - end_head} bytes, header announces {pos - end_head}")
    arrays = [np.frombuffer(data, dtype=dt, count=nb // dt.itemsize, offset=off).reshape(shape).copy()
              for dt, shape, off, nb in specs]
    return Header(session_id, sender, tag, seq, PHASES[phase_i], depth), arrays
