"""The frame codec's parts and aligned payloads (``codec.encode_parts``, flag ``ALIGNED``):
the parts concatenate to the frame, payloads start 8-byte aligned, a buffer handed over
is shared by its aligned arrays (and nothing else is), and malformed padding or flags are
refused."""

import numpy as np
import pytest

from secinfer.errors import FrameError
from secinfer.net.codec import ALIGNED, Header, decode_frame, encode_frame, encode_one, encode_parts, encoded_names

H = Header(b"s" * 16, "p0", "tag/x", 7, "online", 3)
BIG = np.arange(1 << 13, dtype=np.uint64)
CASES = [
    [],
    [np.arange(5, dtype=np.uint64)],
    [np.ones(3, np.uint8), np.arange(4.0).reshape(2, 2), np.array(1 + 2j), np.zeros((0, 3)), np.array([True])],
    [np.arange(6, dtype=">u4")[::2], BIG, np.arange(3, dtype=np.int16), BIG.reshape(2, -1).T],
]


@pytest.mark.parametrize("arrays", CASES)
def test_parts_concatenate_to_the_frame_and_decode_from_any_buffer(arrays):
    parts, total, payload = encode_parts(H, arrays, cache={})
    frame = encode_frame(H, arrays)
    assert b"".join(parts) == frame and len(frame) == total
    assert payload == sum(np.asarray(a).nbytes for a in arrays)
    head_end = 12 + int.from_bytes(frame[8:12], "little")
    assert head_end % 8 == 0 and frame[6] & ALIGNED
    for data in (frame, bytearray(frame), memoryview(frame), np.frombuffer(frame, np.uint8).copy()):
        hdr, out = decode_frame(data)
        assert hdr == H and len(out) == len(arrays)
        for x, y in zip(arrays, out):
            assert x.shape == y.shape and np.array_equal(x, y)


def test_an_owned_buffer_is_shared_by_aligned_arrays_only():
    arrays = [np.arange(4, dtype=np.uint64), np.ones(3, np.uint8), np.arange(2, dtype=np.uint64)]
    frame = encode_frame(H, arrays)
    owned = bytearray(frame)
    _, out = decode_frame(owned)
    whole = np.frombuffer(owned, np.uint8)
    assert np.shares_memory(out[0], whole) and np.shares_memory(out[1], whole)   # aligned: views
    assert out[2].flags.owndata and out[2].flags.aligned      # at an odd offset: an aligned copy
    _, copied = decode_frame(frame)                                         # bytes: copies
    assert all(a.flags.owndata and a.flags.writeable for a in copied)


def test_bad_padding_or_unknown_flags_are_frame_errors():
    frame = bytearray(encode_frame(H, [np.arange(3, dtype=np.uint8)]))
    head_end = 12 + int.from_bytes(frame[8:12], "little")
    pad_at = head_end - 1
    assert frame[pad_at] == 0, "this header needs padding for the test"
    bad = bytearray(frame)
    bad[pad_at] = 1
    with pytest.raises(FrameError, match="length mismatch"):
        decode_frame(bytes(bad))
    flags = bytearray(frame)
    flags[6] |= 0x02
    with pytest.raises(FrameError, match="flags"):
        decode_frame(bytes(flags))


def test_the_per_endpoint_caches_give_the_same_bytes_and_the_same_checks():
    """``encode_parts`` with a cache (the header layout kept per names and array shapes) and
    ``decode_frame`` with ``expect`` and a layout cache (what ``Endpoint.recv`` passes) give
    exactly what the plain calls give, for repeated and changing shapes and dtypes, and a
    frame whose names or layout differ from what was cached is still checked in full."""
    from secinfer.net.codec import encoded_names

    enc, dec = {}, {}
    seq = 0
    for arrays in CASES + CASES + [[np.arange(7, dtype=np.uint64)], [np.arange(7, dtype=np.int64)],
                                   [np.arange(6, dtype=np.uint64).reshape(2, 3)], [np.arange(5, dtype=np.uint64)]]:
        h = H._replace(seq=seq, depth=seq % 5)
        seq += 1
        parts, total, payload = encode_parts(h, arrays, cache=enc)
        frame = b"".join(parts)
        assert frame == encode_frame(h, arrays) and len(frame) == total
        expect = (encoded_names(h.session_id, h.sender, h.tag, enc), h.sender, h.tag)
        for data in (frame, bytearray(frame)):
            hdr, out = decode_frame(data, expect=expect, cache=dec)
            assert hdr == h and [(a.dtype, a.shape) for a in out] == [(np.asarray(a).dtype.newbyteorder("<"), np.shape(a))
                                                                        for a in arrays]
            assert all(np.array_equal(x, y) for x, y in zip(arrays, out))
    # names other than expected: decoded from the frame (and then refused by Endpoint.recv)
    other = encode_frame(H._replace(sender="p1"), [np.arange(5, dtype=np.uint64)])
    hdr, _ = decode_frame(other, expect=expect, cache=dec)
    assert hdr.sender == "p1"
    # a cached layout does not let a frame with a different payload size through
    frame = bytearray(encode_frame(H, [np.arange(5, dtype=np.uint64)]))
    with pytest.raises(FrameError, match="payload"):
        decode_frame(frame + b"\0" * 8, expect=expect, cache=dec)
    with pytest.raises(FrameError):
        decode_frame(frame[:-8], expect=expect, cache=dec)
    # nor bad padding or flags
    flags = bytearray(frame)
    flags[6] &= ~ALIGNED
    with pytest.raises(FrameError, match="length mismatch"):
        decode_frame(bytes(flags), expect=expect, cache=dec)


def test_an_encode_cache_is_bounded_and_not_fooled_by_lists():
    cache = {}
    for n in range(5000):
        encode_parts(H, [np.zeros(n % 4500, np.uint8)], cache=cache)
    assert len(cache) <= 4096
    parts, _, _ = encode_parts(H, [[1, 2, 3]], cache=cache)            # unhashable: no cached layout
    assert b"".join(parts) == encode_frame(H, [np.array([1, 2, 3])])
    parts, _, _ = encode_parts(H, [np.arange(3, dtype=">u4")], cache=cache)   # converted: not cached
    assert b"".join(parts) == encode_frame(H, [np.arange(3, dtype="<u4")])
    again, _, _ = encode_parts(H, [np.arange(3, dtype=">u4")], cache=cache)
    assert again == parts


ONE = [np.arange(5, dtype=np.uint64), np.arange(6, dtype=">u4")[::2], np.ones((2, 3), np.int16), BIG,
       np.arange(7, dtype=np.uint8), np.array(3.5)]


@pytest.mark.parametrize("a", ONE)
def test_encode_one_gives_encode_parts_frames(a):
    cache: dict = {}
    for seq, phase, depth in ((0, "online", 0), (1, "online", 4), (2, "offline", 1)):
        h = Header(H.session_id, H.sender, H.tag, seq, phase, depth)
        parts, total, payload = encode_one(cache, H.session_id, H.sender, H.tag, seq, phase, depth, a)
        want = encode_parts(h, [a])
        assert b"".join(bytes(p) for p in parts) == b"".join(bytes(p) for p in want[0])
        assert (total, payload) == want[1:]
    with pytest.raises(FrameError):   # the cap is checked on the cached path too
        encode_one(cache, H.session_id, H.sender, H.tag, 3, "online", 0, a, max_frame=10)


def _expect(h: Header) -> tuple:
    return (encoded_names(h.session_id, h.sender, h.tag, None), h.sender, h.tag)


def test_a_header_seen_before_decodes_alike_and_every_change_is_still_checked():
    arrays = [np.arange(5, dtype=np.uint64), np.ones(3, np.uint8)]
    expect, cache = _expect(H), {}
    first = decode_frame(bytearray(encode_frame(H, arrays)), expect=expect, cache=cache)
    h2 = Header(H.session_id, H.sender, H.tag, 8, "offline", 9)
    frame = encode_frame(h2, arrays)
    hdr, out = decode_frame(bytearray(frame), expect=expect, cache=cache)     # (the remembered header)
    assert hdr == h2 and first[0] == H and all(np.array_equal(x, y) for x, y in zip(arrays, out))
    assert expect[0] in cache          # (so the second decode took the shortcut)
    slow = decode_frame(frame)
    assert slow[0] == hdr and all(np.array_equal(x, y) for x, y in zip(slow[1], out))
    k = 12 + len(expect[0])            # the header's seq u64, phase u8, depth u32, n_arrays u16
    bad_phase = bytearray(frame)
    bad_phase[k + 8] = 3
    more_arrays = bytearray(frame)
    more_arrays[k + 13] += 1
    cases = [(bad_phase, "unknown phase code"), (more_arrays, None), (bytearray(frame[:-1]), "payload"),
             (bytearray(frame) + b"\x00", "payload")]
    for data, msg in cases:
        with pytest.raises(FrameError, match=msg):
            decode_frame(data, expect=expect, cache=cache)
        with pytest.raises(FrameError, match=msg):
            decode_frame(bytes(data))           # (the same error without the shortcut)
    with pytest.raises(FrameError):             # the cap, as without the shortcut
        decode_frame(bytearray(frame), max_frame=len(frame) - 1, expect=expect, cache=cache)
    other = bytearray(frame)
    other[-1] ^= 1                              # (a payload byte: decoded, not refused)
    assert decode_frame(other, expect=expect, cache=cache)[1][1][-1] == 0
