"""Trimmed ciphertexts (crypto.he.trimmed, go/he/wire.go): c0 at chosen coefficients, c1 in full.

The reference is the full decryption of the same ciphertext: its coefficient-domain
residues at the positions must equal what the trimmed frame decrypts to, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from secinfer.crypto import he
from secinfer.crypto.he.errors import HEArgumentError, HESerializationError

WIDE = "ckks-n12-wide-insecure"   # 7 primes: several levels to trim at


@pytest.fixture(scope="module")
def PW():
    return he.get_params(WIDE, allow_insecure=True)


@pytest.fixture(scope="module")
def kpw(PW):
    pair = PW.keygen()
    yield pair
    pair.close()


def _ct(P, pk, rng, level, rescales=0):
    vals = rng.integers(-2**30, 2**30, P.n).astype(np.float64)
    ct = he.coeff_encrypt(P, vals, pk, 2.0 ** 60, level=level)
    ev = he.Evaluator(P)
    for _ in range(rescales):
        nxt = ev.rescale(ct)
        ct.close()
        ct = nxt
    ev.close()
    return ct


def _reference(P, ct, sk, pos):
    with P.decrypt(ct, sk) as pt:
        return pt.poly(0)[:, pos]


def _size(P, level, count):
    return sum((count * q.bit_length() + 7) // 8 + (P.n * q.bit_length() + 7) // 8
               for q in P.q[:level + 1])


@pytest.mark.parametrize("level,rescales", [(6, 0), (6, 3), (4, 1), (0, 0)])
@pytest.mark.parametrize("count", [1, 7, 333])
def test_trimmed_decryption_equals_full_decryption(PW, kpw, rng, level, rescales, count):
    ct = _ct(PW, kpw.pk, rng, level, rescales)
    lv = ct.level
    assert lv == level - rescales
    pos = rng.choice(PW.n, count, replace=False)
    raw = he.trim(PW, ct, pos)
    assert len(raw) == he.trimmed_size(PW, lv, count) == _size(PW, lv, count)
    got = he.decrypt_trimmed(PW, kpw.sk, raw, lv, pos)
    assert got.dtype == np.uint64 and got.shape == (lv + 1, count)
    np.testing.assert_array_equal(got, _reference(PW, ct, kpw.sk, pos))
    # a numpy byte array works the same way
    np.testing.assert_array_equal(he.decrypt_trimmed(PW, kpw.sk, np.frombuffer(raw, np.uint8), lv, pos), got)
    ct.close()


def test_positions_in_any_order_with_repeats_and_the_mac_half(PW, kpw, rng):
    ct = _ct(PW, kpw.pk, rng, 3)
    base = np.array([5, 0, PW.n // 2 - 1, 17, 17])
    pos = np.concatenate([base, base + PW.n // 2])      # crisp's malicious read order
    got = he.decrypt_trimmed(PW, kpw.sk, he.trim(PW, ct, pos), 3, pos)
    np.testing.assert_array_equal(got, _reference(PW, ct, kpw.sk, pos))
    ct.close()


def test_trimmed_frame_is_about_half_a_ciphertext(PW, kpw, rng):
    ct = _ct(PW, kpw.pk, rng, 6, 3)
    full = len(ct.to_bytes())
    small = len(he.trim(PW, ct, np.arange(64)))
    assert small == _size(PW, 3, 64) < 0.51 * full
    ct.close()


def _set_field(raw: bytes, bit: int, width: int, value: int) -> bytes:
    """Overwrite bits [bit, bit + width) (LSB first) of ``raw`` with ``value``."""
    x = int.from_bytes(raw, "little")
    mask = ((1 << width) - 1) << bit
    return ((x & ~mask) | (value << bit)).to_bytes(len(raw), "little")


def test_malformed_frames_are_rejected(PW, kpw, rng):
    ct = _ct(PW, kpw.pk, rng, 2)
    count = 3                                     # 3 * 60 bits: row 0 has 4 padding bits
    pos = np.array([1, 2, 3])
    raw = he.trim(PW, ct, pos)
    dec = lambda r, lv=2: he.decrypt_trimmed(PW, kpw.sk, r, lv, pos)  # noqa: E731
    for bad in (raw[:-1], raw + b"\0", b"", raw[: len(raw) // 2]):
        with pytest.raises(HESerializationError, match="bytes"):
            dec(bad)
    with pytest.raises(HESerializationError):     # the frame of another level
        dec(raw, lv=1)
    q0, w0 = PW.q[0], PW.q[0].bit_length()
    c0_bytes = sum((count * q.bit_length() + 7) // 8 for q in PW.q[:3])
    for bit in (0, 8 * c0_bytes):                 # c0's first residue, c1's first residue
        with pytest.raises(HESerializationError, match="not reduced"):
            dec(_set_field(raw, bit, w0, q0))
        with pytest.raises(HESerializationError, match="not reduced"):
            dec(_set_field(raw, bit, w0, (1 << w0) - 1))
    assert (count * w0) % 8 == 4
    with pytest.raises(HESerializationError, match="padding"):
        dec(_set_field(raw, count * w0 + 3, 1, 1))
    ct.close()


def test_bad_arguments(PW, kpw, rng):
    ct = _ct(PW, kpw.pk, rng, 1)
    for pos in ([], [-1], [PW.n]):
        with pytest.raises(HEArgumentError):
            he.trim(PW, ct, pos)
    raw = he.trim(PW, ct, [0])
    with pytest.raises(HEArgumentError):
        he.decrypt_trimmed(PW, kpw.sk, raw, 1, [PW.n])
    with pytest.raises(HEArgumentError):
        he.trimmed_size(PW, 7, 1)
    other = he.get_params("ckks-n11-insecure")
    with other.keygen() as kp2, pytest.raises(he.ParameterMismatchError):
        he.decrypt_trimmed(PW, kp2.sk, raw, 1, [0])
    ct.close()


def test_packed_raw_polynomial_round_trips_and_rejects_malformed_frames(PW, kpw):
    """pack_poly / unpack_poly (crisp's pk0): every row at its prime's width, exact size,
    round trip at several levels; wrong length, unreduced residues and unreduced input are
    refused (N is a multiple of 8: a full row has no padding bits)."""
    from secinfer.crypto.he.trimmed import pack_poly, packed_poly_size, unpack_poly

    full = kpw.pk.poly(0)                              # (7, N) residues of pk0
    for level in (0, 3, len(PW.q) - 1):
        res = np.ascontiguousarray(full[:level + 1])
        raw = pack_poly(PW, res)
        assert len(raw) == packed_poly_size(PW, level) == sum(
            -(-PW.n * int(q).bit_length() // 8) for q in PW.q[:level + 1])
        assert np.array_equal(unpack_poly(PW, raw, level), res)
    top = len(PW.q) - 1
    raw = bytearray(pack_poly(PW, full))
    assert len(raw) < full.nbytes * 0.7                  # 304 of 448 bits per coefficient
    for bad in (bytes(raw[:-1]), bytes(raw) + b"\0", bytes(b"\xff" * len(raw))):
        with pytest.raises(HESerializationError):
            unpack_poly(PW, bad, top)
    bad = full.copy()
    bad[2, 5] = PW.q[2]
    with pytest.raises(HEArgumentError):
        pack_poly(PW, bad)
