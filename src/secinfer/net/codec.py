"""Frame codec: bytes only, no pickle.

A frame is

    magic "SINF" | version u16 | flags u16 | header_len u32 | header | payload

with the header (little-endian)

    session_id 16B | sender (u8 len + utf8) | tag (u16 len + utf8) | seq u64 |
    phase u8 | depth u32 | n_arrays u16 | per array: dtype code u8, ndim u8, ndim x u64

followed, when flag ``ALIGNED`` (1) is set, by up to 7 zero bytes (counted in header_len) so
that the payload starts 8-byte aligned, and the payload the arrays' raw C-order
little-endian bytes, concatenated. A receiver that owns the frame's buffer (a
``bytearray``) gets arrays that are views into it where aligned; other arrays are copies
(encoding a frame as parts lets a transport encrypt straight from the arrays). Decoding checks
the size cap first, then every length against what is actually present, so a truncated,
corrupted or oversized frame is a ``FrameError`` (``MessageTooLargeError`` for one over the
cap) and never another exception, a crash or a huge allocation (fuzzed in
tests/net/test_decoder_fuzz.py).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from secinfer.errors import FrameError, MessageTooLargeError

MAGIC = b"SINF"
VERSION = 1
DEFAULT_MAX_FRAME = 1 << 31  # 2 GiB; sessions usually set a tighter cap
_PREFIX = struct.Struct("<4sHHI")
ALIGNED = 1                  # flag: header zero-padded so that the payload starts 8-byte aligned
_PADS = [b"\x00" * k for k in range(8)]
_INLINE = 1 << 14            # arrays below this many bytes are copied into the frame's first buffer

DTYPES: dict[int, np.dtype] = {
    1: np.dtype("uint8"), 2: np.dtype("uint16"), 3: np.dtype("uint32"), 4: np.dtype("uint64"),
    5: np.dtype("int8"), 6: np.dtype("int16"), 7: np.dtype("int32"), 8: np.dtype("int64"),
    9: np.dtype("float32"), 10: np.dtype("float64"), 11: np.dtype("complex128"), 12: np.dtype("bool"),
}
_CODES = {dt: code for code, dt in DTYPES.items()}
PHASES = ("setup", "offline", "online")
_MAX_NDIM = 8
_MAX_SPAN = 1 << 62   # bytes an array's non-zero dimensions may span (numpy's sizes are signed 64-bit)


class Header(NamedTuple):   # immutable; a named tuple is cheaper to build than a frozen dataclass
    session_id: bytes
    sender: str
    tag: str
    seq: int
    phase: str
    depth: int


def payload_nbytes(arrays) -> int:
    return sum(int(np.asarray(a).nbytes) for a in arrays)


_U8, _U16 = struct.Struct("<B"), struct.Struct("<H")
_TAIL = struct.Struct("<QBIH")        # seq, phase, depth, n_arrays
_ARR = struct.Struct("<BB")           # dtype code, ndim
_DIMS = [struct.Struct(f"<{k}Q") for k in range(_MAX_NDIM + 1)]
_PHASE_CODE = {p: i for i, p in enumerate(PHASES)}
_HEAD_MIN = 16 + 1 + 2 + _TAIL.size   # a header without names and arrays


def encode_frame(header: Header, arrays, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    parts = encode_parts(header, arrays, max_frame)[0]
    return parts[0] if len(parts) == 1 else b"".join(parts)


def encoded_names(session_id: bytes, sender: str, tag: str, cache: dict | None) -> bytes:
    """The header's session id, sender and tag, encoded (kept in ``cache``, the caller's
    own dict, if given: a session repeats them)."""
    key = (session_id, sender, tag)
    head = None if cache is None else cache.get(key)
    if head is None:
        if len(session_id) != 16:
            raise FrameError("session id must be 16 bytes")
        s, t = sender.encode(), tag.encode()
        if len(s) > 255 or len(t) > 65535:
            raise FrameError("sender or tag name too long")
        head = session_id + _U8.pack(len(s)) + s + _U16.pack(len(t)) + t
        if cache is not None:
            if len(cache) >= 4096:
                cache.clear()
            cache[key] = head
    return head


def encode_parts(header: Header, arrays, max_frame: int = DEFAULT_MAX_FRAME,
                 cache: dict | None = None) -> tuple[list, int, int]:
    """The frame as buffers to be sent one after the other (their concatenation is
    ``encode_frame``'s result), its total size and its payload size (the arrays' bytes):
    the prefix and header as bytes, then each large array's own memory where it is already
    contiguous little-endian (no copy). The arrays must not change until the buffers are
    sent. ``cache``: a dict the caller keeps for the encoded names and header layouts (a
    session repeats them: the header is then two joins and one pack)."""
    names = encoded_names(header.session_id, header.sender, header.tag, cache)
    key = None
    if cache is not None:
        # the layout is kept for plain arrays only (anything else is worked out in full)
        if len(arrays) == 1:
            a = arrays[0]
            if type(a) is np.ndarray:
                key = (names, a.dtype, a.shape)
        elif all(type(a) is np.ndarray for a in arrays):
            key = (names, *[(a.dtype, a.shape) for a in arrays])
        layout = None if key is None else cache.get(key)
        if layout is not None:
            pre, post, nbytes, total = layout
            if total > max_frame:
                raise MessageTooLargeError(f"frame of {total} bytes exceeds the cap of {max_frame} bytes")
            head = pre + _TAIL.pack(header.seq, _PHASE_CODE[header.phase], header.depth, len(arrays)) + post
            if nbytes < _INLINE:   # a small frame: one buffer
                if len(arrays) == 1:
                    return [head + arrays[0].tobytes()], total, nbytes
                return [head + b"".join([a.tobytes() for a in arrays])], total, nbytes
            return [head, *_bodies(arrays)], total, nbytes
    descs = []
    bodies = []
    head_len = len(names) + _TAIL.size
    nbytes = 0
    for a in arrays:
        if type(a) is not np.ndarray:
            a = np.asarray(a)
            key = None             # (converted: the caller's objects are not what is sent)
        dt = a.dtype
        code = _CODES.get(dt)
        if code is None:   # big-endian or otherwise unusual: its little-endian equivalent
            dt = dt.newbyteorder("<") if dt.byteorder == ">" else dt
            code = _CODES.get(np.dtype(dt.str.replace(">", "<")))
            if code is None:
                raise FrameError(f"dtype {a.dtype} cannot be sent")
            a = np.ascontiguousarray(a, dtype=DTYPES[code])
            key = None
        nd = a.ndim
        if nd > _MAX_NDIM:
            raise FrameError(f"arrays of more than {_MAX_NDIM} dimensions cannot be sent")
        descs.append(_ARR.pack(code, nd))
        descs.append(_DIMS[nd].pack(*a.shape))
        head_len += _ARR.size + 8 * nd
        n = a.nbytes
        if n:
            bodies.append(a)
            nbytes += n
    pad = -(_PREFIX.size + head_len) % 8
    total = _PREFIX.size + head_len + pad + nbytes
    if total > max_frame:
        raise MessageTooLargeError(f"frame of {total} bytes exceeds the cap of {max_frame} bytes")
    pre = _PREFIX.pack(MAGIC, VERSION, ALIGNED, head_len + pad) + names
    post = b"".join(descs) + _PADS[pad]
    if key is not None:
        if len(cache) >= 4096:
            cache.clear()
        cache[key] = (pre, post, nbytes, total)
    head = pre + _TAIL.pack(header.seq, _PHASE_CODE[header.phase], header.depth, len(arrays)) + post
    if nbytes < _INLINE:     # a small frame: one buffer (copying is cheaper than views)
        return [head + b"".join([a.tobytes() for a in bodies])], total, nbytes
    return [head, *_bodies(bodies)], total, nbytes


def encode_one(cache: dict, session_id: bytes, sender: str, tag: str, seq: int, phase: str, depth: int, a,
               max_frame: int = DEFAULT_MAX_FRAME) -> tuple[list, int, int]:
    """``encode_parts`` of a frame of one array, for a sender that keeps ``cache`` (its own
    dict): the same buffers, sizes and checks, with the header's fixed parts looked up by
    (session, sender, tag, dtype, shape) once they were worked out in full."""
    if type(a) is np.ndarray:
        ent = cache.get((session_id, sender, tag, a.dtype, a.shape))
        if ent is not None:
            pre, post, nbytes, total = ent
            if total > max_frame:
                raise MessageTooLargeError(f"frame of {total} bytes exceeds the cap of {max_frame} bytes")
            head = pre + _TAIL.pack(seq, _PHASE_CODE[phase], depth, 1) + post
            if nbytes < _INLINE:
                return [head + a.tobytes()], total, nbytes
            return [head, *_bodies((a,))], total, nbytes
    out = encode_parts(Header(session_id, sender, tag, seq, phase, depth), (a,), max_frame, cache)
    if type(a) is np.ndarray:
        ent = cache.get((cache.get((session_id, sender, tag)), a.dtype, a.shape))   # (what encode_parts kept)
        if ent is not None:
            cache[(session_id, sender, tag, a.dtype, a.shape)] = ent
    return out


def _bodies(arrays) -> list:
    """The payload buffers of a large frame: small arrays as bytes, large ones as views of
    their own memory (a copy only where not contiguous)."""
    return [a.tobytes() if a.nbytes < _INLINE else
            memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8)) for a in arrays if a.nbytes]


def decode_frame(data, max_frame: int = DEFAULT_MAX_FRAME, expect: tuple | None = None,
                 cache: dict | None = None) -> tuple[Header, list[np.ndarray]]:
    """``data``: bytes or a read-only buffer (arrays are copied out), or a buffer the caller
    hands over (a ``bytearray`` or 1-d ``numpy.uint8`` array: aligned arrays are views of it).

    Shortcuts for a receiver that knows what it expects, same checks and same result:
    ``expect`` = (encoded names as ``encode_parts`` writes them, sender, tag): when the
    frame's names are exactly these bytes they are not decoded again; ``cache``: a dict the
    caller keeps, holding the array layouts already checked (keyed by their header bytes)."""
    own = type(data) is bytearray
    if own and expect is not None and cache is not None:
        known = decode_known(data, max_frame, expect[0], cache)
        if known is not None:
            seq, phase, depth, arrays = known
            return Header(expect[0][:16], expect[1], expect[2], seq, phase, depth), arrays
    if type(data) is np.ndarray:
        if data.dtype != np.uint8 or data.ndim != 1 or not data.flags.c_contiguous:
            raise FrameError("a frame buffer must be a 1-d uint8 array")
        data, own = memoryview(data), data.flags.writeable
    size = len(data)
    if size > max_frame:
        raise MessageTooLargeError(f"frame of {size} bytes exceeds the cap of {max_frame} bytes")
    if size < _PREFIX.size:
        raise FrameError(f"frame of {size} bytes is shorter than the fixed prefix")
    magic, version, flags, head_len = _PREFIX.unpack_from(data, 0)
    if magic != MAGIC:
        raise FrameError("bad frame magic (not a secinfer frame)")
    if version != VERSION:
        raise FrameError(f"protocol version {version} not supported (this build speaks {VERSION})")
    if flags & ~ALIGNED:
        raise FrameError(f"unknown frame flags {flags:#x}")
    end_head = _PREFIX.size + head_len
    if end_head > size or head_len < _HEAD_MIN:
        raise FrameError("truncated frame header")
    # every read below is checked against end_head before it happens
    if expect is not None and data[12:12 + len(expect[0])] == expect[0] \
            and 12 + len(expect[0]) + _TAIL.size <= end_head:
        names, sender, tag = expect
        session_id = names[:16]
        pos = 12 + len(names)
    else:
        session_id, sender, tag, pos = _read_names(data, end_head)
    seq, phase_i, depth, n_arrays = _TAIL.unpack_from(data, pos)
    pos += _TAIL.size
    if phase_i >= len(PHASES):
        raise FrameError(f"unknown phase code {phase_i}")
    layout = None
    if cache is not None:
        key = (n_arrays, flags, bytes(data[pos:end_head]))
        layout = cache.get(key)
    if layout is None:
        layout = _read_layout(data, pos, end_head, n_arrays, size, flags)
        if cache is not None:
            if len(cache) >= 4096:
                cache.clear()
            cache[key] = layout
    specs, nbytes = layout
    if end_head + nbytes != size:
        raise FrameError(f"frame payload is {size - end_head} bytes, header announces {nbytes}")
    if own and expect is not None and cache is not None and data[12:12 + len(expect[0])] == expect[0]:
        # (remembered for the fast path above: these exact header bytes were checked in full)
        k = 12 + len(expect[0]) + _TAIL.size
        if len(cache) >= 4096:
            cache.clear()
        cache[expect[0]] = (bytes(data[:k - _TAIL.size]), bytes(data[k:end_head]), k, end_head, n_arrays,
                            specs, nbytes)
    # a buffer the receiver owns (a bytearray, or a numpy uint8 array: see the top) is shared
    # by its arrays where aligned; else copies
    try:
        arrays = _arrays(data, end_head, specs, own)
    except (ValueError, TypeError, OverflowError, MemoryError) as e:   # (the checks above should make it unreachable)
        raise FrameError(f"frame arrays cannot be rebuilt: {e}") from None
    return Header(session_id, sender, tag, seq, PHASES[phase_i], depth), arrays


def _arrays(data, off: int, specs, own: bool) -> list:
    """The frame's arrays from byte ``off`` on, as ``specs`` (dtype, shape, count, bytes) say:
    views of ``data`` where the receiver owns it and they are aligned, else copies."""
    arrays = []
    for dt, shape, n, nb in specs:
        a = np.frombuffer(data, dtype=dt, count=n, offset=off)
        off += nb
        if len(shape) != 1:
            a = a.reshape(shape)
        arrays.append(a if own and a.flags.aligned else a.copy())
    return arrays


def decode_known(data: bytearray, max_frame: int, names: bytes, cache: dict):
    """``decode_frame``'s shortcut for a receiver that owns ``data`` and expects ``names``
    (as ``encode_parts`` writes them): when the frame's header bytes equal, but for seq,
    phase and depth, a header that ``decode_frame`` checked in full with this ``cache``
    (same prefix, names, array layout and padding), (seq, phase, depth, arrays), the
    payload size, cap, array count and phase checked as there; else None (the caller
    decodes in full, which raises what is wrong). The names matched: the session, sender
    and tag are the expected ones."""
    fast = cache.get(names)
    if fast is None or not data.startswith(fast[0]) or not data.startswith(fast[1], fast[2]):
        return None
    _pre, _lay, k, end_head, n_arrays, specs, nbytes = fast
    size = len(data)
    if size != end_head + nbytes or size > max_frame:
        return None
    seq, phase_i, depth, n = _TAIL.unpack_from(data, k - _TAIL.size)
    if n != n_arrays or phase_i >= 3:
        return None
    return seq, PHASES[phase_i], depth, _arrays(data, end_head, specs, True)


def _read_names(data, end_head: int) -> tuple:
    """(session id, sender, tag, position after them) of a frame header, every read checked."""
    session_id = bytes(data[12:28])
    ls = data[28]
    pos = 29 + ls
    if pos + 2 > end_head:
        raise FrameError("truncated frame header")
    try:
        sender = str(data[29:pos], "utf-8")
        (lt,) = _U16.unpack_from(data, pos)
        pos += 2
        if pos + lt + _TAIL.size > end_head:
            raise FrameError("truncated frame header")
        tag = str(data[pos:pos + lt], "utf-8")
    except UnicodeDecodeError:
        raise FrameError("frame header holds invalid UTF-8") from None
    return session_id, sender, tag, pos + lt


def _read_layout(data, pos: int, end_head: int, n_arrays: int, size: int, flags: int) -> tuple:
    """The arrays' (dtype, shape, elements, bytes) and their total bytes, from the header's
    array part ``data[pos:end_head]`` (padding included), every read checked; ``size``
    bounds what any array may announce."""
    specs = []
    total = 0
    for _ in range(n_arrays):
        if pos + 2 > end_head:
            raise FrameError("truncated frame header")
        code, ndim = _ARR.unpack_from(data, pos)
        pos += 2
        dt = DTYPES.get(code)
        if dt is None:
            raise FrameError(f"unknown dtype code {code}")
        if ndim > _MAX_NDIM:
            raise FrameError(f"array with {ndim} dimensions")
        if pos + 8 * ndim > end_head:
            raise FrameError("truncated frame header")
        shape = _DIMS[ndim].unpack_from(data, pos)
        pos += 8 * ndim
        item = dt.itemsize
        if ndim == 1:
            n = shape[0]
            if n * item > size:
                raise FrameError("array shape larger than the frame")
        else:
            n = 1
            span = 1                  # product of the non-zero dimensions: numpy needs it to fit an intp
            for d in shape:           # (at most 8 dimensions of 64 bits: Python's integers stay small)
                n *= d
                span *= d or 1
            if n * item > size:
                raise FrameError("array shape larger than the frame")
            if span * item > _MAX_SPAN:   # e.g. (0, 2^64 - 1): no bytes, yet no numpy array
                raise FrameError(f"array shape {shape} is too large for any array")
        specs.append((dt, shape, n, n * item))
        total += n * item
        if total > size:
            raise FrameError("array shapes larger than the frame")
    if pos != end_head and not (flags & ALIGNED and end_head - pos < 8 and data[pos:end_head] == _PADS[end_head - pos]):
        raise FrameError("frame header length mismatch")
    return tuple(specs), total
