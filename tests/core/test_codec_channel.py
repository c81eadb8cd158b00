import struct

import numpy as np
import pytest

from secinfer.errors import FrameError, MessageTooLargeError, PeerAbortedError, ProtocolAbort
from secinfer.net.channel import ArraySpec, run_local
from secinfer.net.codec import DTYPES, Header, decode_frame, encode_frame

SID = b"s" * 16


def _hdr(tag="t", phase="online"):
    return Header(SID, "alice", tag, 7, phase, 3)


@pytest.mark.parametrize("dt", list(DTYPES.values()))
def test_every_dtype_round_trips(dt):
    a = (np.arange(24).reshape(2, 3, 4) % 2).astype(dt)
    hdr, arrays = decode_frame(encode_frame(_hdr(), [a, np.zeros((0,), dt)]))
    assert hdr == _hdr()
    assert arrays[0].dtype == dt and np.array_equal(arrays[0], a) and arrays[1].shape == (0,)


def test_scalar_and_many_arrays():
    arrays = [np.uint64(5), np.arange(3, dtype=np.int64), np.ones((2, 2))]
    _, out = decode_frame(encode_frame(_hdr(), arrays))
    assert out[0].shape == () and int(out[0]) == 5 and np.array_equal(out[2], np.ones((2, 2)))


def test_malformed_frames_are_typed_errors():
    good = encode_frame(_hdr(), [np.arange(10, dtype=np.uint64)])
    for bad in (b"", b"XXXX" + good[4:], good[:-1], good + b"\0", good[:20]):
        with pytest.raises(FrameError):
            decode_frame(bad)
    # a header announcing an absurd shape must not allocate it
    broken = bytearray(good)
    off = good.index(struct.pack("<BB", 4, 1)) + 2
    broken[off:off + 8] = struct.pack("<Q", 1 << 60)
    with pytest.raises(FrameError):
        decode_frame(bytes(broken))
    version = bytearray(good)
    version[4:6] = struct.pack("<H", 99)
    with pytest.raises(FrameError, match="version"):
        decode_frame(bytes(version))


def test_random_corruption_never_crashes():
    from secinfer.crypto.prg import PRG

    prg = PRG.for_tests(3)
    good = encode_frame(_hdr(), [np.arange(10, dtype=np.uint64), np.ones(3)])
    for _ in range(300):
        b = bytearray(good)
        pos = int(prg.below(len(b), (1,))[0])
        b[pos] ^= int(prg.below(255, (1,))[0]) + 1
        try:
            decode_frame(bytes(b))
        except FrameError:
            pass


def test_size_cap_on_both_sides():
    big = np.zeros(1000, dtype=np.uint64)
    with pytest.raises(MessageTooLargeError):
        encode_frame(_hdr(), [big], max_frame=4000)
    frame = encode_frame(_hdr(), [big])
    with pytest.raises(MessageTooLargeError):
        decode_frame(frame, max_frame=4000)


def test_local_channel_validation_metering_and_rounds():
    n = 100

    def alice(ep):
        with ep.phase("online"):
            ep.send("bob", "x", np.arange(n, dtype=np.uint64))
            (y,) = ep.recv("bob", "y", ArraySpec(np.uint64, (n,)))
            ep.send("bob", "z", y)
        return ep.meter

    def bob(ep):
        with ep.phase("online"):
            (x,) = ep.recv("alice", "x", ArraySpec(np.uint64, (n,)))
            ep.send("alice", "y", x + np.uint64(1))
            ep.recv("alice", "z", ArraySpec(np.uint64, (n,)))
        return ep.meter

    res = run_local({"alice": alice, "bob": bob})
    ma, mb = res["alice"], res["bob"]
    assert ma.total("online", "sent") == 2 * 8 * n
    assert mb.total("online", "sent") == 8 * n
    assert mb.total("online", "recv") == 2 * 8 * n
    assert max(ma.rounds("online"), mb.rounds("online")) == 3


def test_unexpected_tag_shape_or_dtype_is_rejected():
    def sender(ep):
        ep.send("r", "a", np.zeros(4, dtype=np.uint64))
        ep.send("r", "b", np.zeros(4, dtype=np.uint32))
        ep.send("r", "c", np.zeros(5, dtype=np.uint64))

    def receiver(ep):
        errs = []
        for tag, spec in (("zz", ArraySpec(np.uint64, (4,))), ("b", ArraySpec(np.uint64, (4,))),
                          ("c", ArraySpec(np.uint64, (4,)))):
            try:
                ep.recv("s", tag, spec)
            except FrameError as e:
                errs.append(str(e))
        return errs

    res = run_local({"s": sender, "r": receiver})
    errs = res["r"]
    assert len(errs) == 3
    assert "out of step" in errs[0] and "dtype" in errs[1] and "shape" in errs[2]


def test_abort_reaches_the_peer_and_stops_it():
    def cheater_detector(ep):
        raise ep.abort("mac-check", "bob")

    def other(ep):
        ep.recv("alice", "never", ArraySpec(np.uint64, (1,)))

    res = run_local({"alice": cheater_detector, "bob": other})
    assert isinstance(res["alice"], ProtocolAbort) and res["alice"].check == "mac-check"
    assert isinstance(res["bob"], PeerAbortedError)


def test_recv_each_serves_frames_in_arrival_order():
    """``recv_each`` yields whichever requested peer's frame is there first, each once, and
    checks tags and shapes like ``recv``."""
    import time

    spec = ArraySpec(np.int64, (1,))

    def slow(ep):
        time.sleep(0.3)
        ep.send("me", "x", np.array([1]))

    def fast(ep):
        ep.send("me", "x", np.array([2]))

    def me(ep):
        got = [(p, int(a[0][0])) for p, a in ep.recv_each({"slow": ("x", spec), "fast": ("x", spec)})]
        with pytest.raises(FrameError, match="tag"):
            list(ep.recv_each({"fast": ("y", spec)}))
        return got

    def fast_twice(ep):
        fast(ep)
        ep.send("me", "x", np.array([3]))

    res = run_local({"me": me, "slow": slow, "fast": fast_twice}, recv_timeout=5)
    assert res["me"] == [("fast", 2), ("slow", 1)]
