"""Issue #22 item 5: every decoder of the net layer lets only its typed error escape, on
any input (property-based, hypothesis). ``SECINFER_FUZZ_EXAMPLES=N`` runs a longer
bounded fuzz campaign (the default profile keeps ``make test`` fast).

* frames (``codec.decode_frame``): arbitrary bytes, and valid frames with bytes flipped,
  truncated or with a shape field overwritten -> ``FrameError`` only;
* tcp records (``TcpEndpoint._parse``): arbitrary bytes on an authenticated stream, and
  authentic records of arbitrary kind and content -> the peer is cut off with a
  ``FrameError``, nothing raised;
* tcp handshakes (``TcpEndpoint._respond``): arbitrary bytes from an unauthenticated
  connection -> ``AuthenticationError`` only;
* network profiles (``shaping.parse_profile``) -> ``ConfigError`` only.
"""

import os
import socket
import struct
import time

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secinfer.errors import AuthenticationError, ConfigError, FrameError
from secinfer.net import tcp_transport
from secinfer.net.codec import DTYPES, PHASES, Header, decode_frame, encode_frame
from secinfer.net.shaping import parse_profile
from secinfer.net.tcp_links import HDR as _HDR, RX_BUFFER, InStream as _In, nonce as _nonce
from secinfer.net.tcp_transport import TcpEndpoint
from transport_helpers import loopback_cluster  # tests/net helper

# SECINFER_FUZZ_EXAMPLES=N runs a longer bounded fuzz campaign (default: 300 per property)
FAST = settings(max_examples=int(os.environ.get("SECINFER_FUZZ_EXAMPLES", "300")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _frame(arrays, tag="t"):
    return encode_frame(Header(b"s" * 16, "a", tag, 3, "online", 2), arrays)


arrays_st = st.lists(
    st.tuples(st.sampled_from(sorted(DTYPES)), st.lists(st.integers(0, 4), min_size=0, max_size=4)),
    max_size=3).map(lambda specs: [np.zeros(shape, dtype=DTYPES[c]) for c, shape in specs])


@FAST
@given(st.binary(max_size=4096))
def test_arbitrary_bytes_give_frame_error_only(data):
    try:
        decode_frame(data, 1 << 20)
    except FrameError:
        pass


@FAST
@given(arrays_st, st.data())
def test_mutated_frames_give_frame_error_or_decode(arrays, data):
    f = bytearray(_frame(arrays))
    op = data.draw(st.sampled_from(["flip", "truncate", "overwrite8", "extend"]))
    if op == "flip" and f:
        i = data.draw(st.integers(0, len(f) - 1))
        f[i] ^= data.draw(st.integers(1, 255))
    elif op == "truncate":
        f = f[:data.draw(st.integers(0, len(f)))]
    elif op == "overwrite8" and len(f) >= 8:
        i = data.draw(st.integers(0, len(f) - 8))   # e.g. a dimension: 0, 2^64 - 1, ...
        f[i:i + 8] = struct.pack("<Q", data.draw(st.sampled_from([0, 1, 2**32, 2**63, 2**64 - 1])
                                                 | st.integers(0, 2**64 - 1)))
    else:
        f += data.draw(st.binary(max_size=64))
    try:
        hdr, out = decode_frame(bytes(f), 1 << 20)
    except FrameError:
        return
    assert hdr.phase in PHASES and all(isinstance(a, np.ndarray) for a in out)


@FAST
@given(arrays_st)
def test_frames_round_trip(arrays):
    hdr, out = decode_frame(_frame(arrays))
    assert hdr.tag == "t" and hdr.seq == 3 and hdr.depth == 2
    assert [(a.dtype, a.shape) for a in out] == [(a.dtype, a.shape) for a in arrays]


def test_the_reported_huge_empty_shape_is_a_frame_error():
    f = bytearray(_frame([np.zeros((0, 5), dtype=np.uint8)]))
    i = f.index(struct.pack("<QQ", 0, 5))
    f[i + 8:i + 16] = struct.pack("<Q", 2**64 - 1)
    with pytest.raises(FrameError, match="too large"):
        decode_frame(bytes(f))


@FAST
@given(st.text(max_size=40))
def test_network_profiles_give_config_error_only(spec):
    try:
        parse_profile(spec)
    except ConfigError:
        pass


# ---- the tcp transport's own decoders ------------------------------------------------------
SID_TAG = tcp_transport.session_tag(b"\x00" * 16)   # replaced by the fixture's own below


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    c = loopback_cluster(tmp_path_factory.mktemp("fuzz"), "tcp")
    ep = TcpEndpoint.from_cluster(c, "a", c.load_secret("a"), c.session_id("n"), connect=False)
    global SID_TAG
    SID_TAG = tcp_transport.session_tag(ep.session_id)
    yield ep
    ep.close(flush=False)


def _feed(ep, data: bytes, key: bytes):
    """Parse ``data`` as b's stream to a (a fresh stream state each time)."""
    a, b = socket.socketpair()
    try:
        c = _In(a, key)
        ep._in["b"] = c
        ep._fatal.pop("b", None)
        ep._inbox["b"].clear()
        ep._queued["b"] = 0
        for i in range(0, len(data), RX_BUFFER):
            chunk = data[i:i + RX_BUFFER]
            if c.body is not None:       # a large record being filled
                take = min(len(chunk), len(c.body) - c.got)
                c.body[c.got:c.got + take] = chunk[:take]
                c.got += take
                if c.got == len(c.body):
                    body, c.body = c.body, None
                    ep._record("b", c, c.hdr, body)
                chunk = chunk[take:]
            c.buf[c.fill:c.fill + len(chunk)] = chunk
            c.fill += len(chunk)
            ep._parse("b", c)
        return ep._fatal.get("b"), list(ep._inbox["b"])
    finally:
        ep._in.pop("b", None)
        a.close()
        b.close()


@FAST
@given(st.binary(max_size=2048))
def test_arbitrary_stream_bytes_cut_the_peer_off_with_frame_error(endpoint, data):
    err, _ = _feed(endpoint, data, b"k" * 32)
    assert err is None or isinstance(err, FrameError)


@FAST
@given(st.lists(st.tuples(st.integers(0, 255), st.binary(max_size=300)), max_size=6))
def test_authentic_records_of_any_kind_and_content(endpoint, records):
    """Records that pass authentication (a peer's own key) but carry any kind and bytes:
    what comes out are whole frames, errors in order, or a FrameError cut-off."""
    key = b"k" * 32
    aead, out = AESGCM(key), bytearray()
    for i, (kind, pt) in enumerate(records, start=1):
        hdr = _HDR.pack(len(pt) + 16, time.monotonic(), kind)
        out += hdr + aead.encrypt(_nonce(i), pt, hdr)
    err, inbox = _feed(endpoint, bytes(out), key)
    assert err is None or isinstance(err, FrameError)
    for _release, item, _stamp in inbox:
        assert isinstance(item, (bytearray, np.ndarray, FrameError)) or item is tcp_transport._CLOSED


@FAST
@given(st.one_of(st.binary(max_size=300),
                 st.tuples(st.integers(0, 255), st.binary(max_size=260)).map(
                     lambda t: tcp_transport.MAGIC + bytes([t[0]]) + t[1]),
                 st.binary(min_size=32, max_size=32).map(lambda e: tcp_transport.MAGIC + b"\x01b" + e),
                 st.binary(max_size=80).map(lambda r: tcp_transport.MAGIC + b"\x01b" + bytes(32) + r),
                 st.tuples(st.binary(min_size=32, max_size=32), st.binary(max_size=80)).map(
                     lambda t: tcp_transport.MAGIC + b"\x01b" + t[0] + SID_TAG + b"\x00" + t[1])))
def test_handshake_bytes_give_authentication_error_only(endpoint, data):
    a, b = socket.socketpair()
    try:
        b.sendall(data)
        b.shutdown(socket.SHUT_WR)
        with pytest.raises(AuthenticationError):
            endpoint._respond(a, ("fuzz", 0))
        assert "b" not in endpoint._in
    finally:
        a.close()
        b.close()
