"""Serialisation round trips, rejection of truncated/foreign/random bytes, parameter binding."""

import numpy as np
import pytest

from secinfer.crypto import he
from secinfer.errors import HEError, ParameterMismatchError, SerializationError


@pytest.fixture(scope="module")
def objects(P, kp):
    keys = P.gen_eval_keys(kp.sk, rotations=[1], conjugate=True)
    x = np.linspace(-1, 1, 16) + 0.5j
    pt = P.encode(x)
    ct = P.encrypt(x, kp.pk)
    ev = he.Evaluator(P, keys)
    ct3 = ev.mul(ct, ct, relin=False)  # degree 2
    cct = he.coeff_encrypt(P, np.arange(32), kp.pk, 2.0 ** 30)
    lwe = he.extract_lwe(P, cct, [0, 3, 31])
    return {"sk": kp.sk, "pk": kp.pk, "evk": keys, "pt": pt, "ct": ct, "ct3": ct3, "lwe": lwe}


def test_round_trip_every_kind(P, kp, objects):
    for name, obj in objects.items():
        data = obj.to_bytes()
        back = P.load(data)
        assert type(back) is type(obj), name
        assert back.to_bytes() == data, name
        assert type(P.load(data, expected=type(obj))) is type(obj)
    # loaded objects work
    ct = P.load(objects["ct"].to_bytes(), he.Ciphertext)
    sk = P.load(objects["sk"].to_bytes(), he.SecretKey)
    assert np.abs(P.decrypt_decode(ct, sk)[:16] - (np.linspace(-1, 1, 16) + 0.5j)).max() < 1e-6
    keys = P.load(objects["evk"].to_bytes(), he.EvalKeys)
    assert keys.has_relin and keys.galois_elements == objects["evk"].galois_elements
    with he.Evaluator(P, keys) as ev:
        r = P.decrypt_decode(ev.rotate(ct, 1), sk)
    assert abs(r[0] - (np.linspace(-1, 1, 16)[1] + 0.5j)) < 1e-6
    lwe = P.load(objects["lwe"].to_bytes(), he.LWEBatch)
    assert np.array_equal(np.round(he.lwe_decrypt(P, lwe, sk, 2.0 ** 30)), [0, 3, 31])


def test_truncated_bytes_raise_typed_error(P, objects):
    for name, obj in objects.items():
        data = obj.to_bytes()
        for cut in (0, 3, 20, 31, len(data) // 2, len(data) - 1):
            with pytest.raises(he.HESerializationError):
                P.load(data[:cut])
        with pytest.raises(he.HESerializationError):
            P.load(data + b"\x00")


def test_random_and_corrupted_bytes_raise_typed_error(P, objects):
    rng = np.random.default_rng(7)
    for n in (0, 10, 1000, 100000):
        with pytest.raises(he.HESerializationError):
            P.load(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    for name, obj in objects.items():
        data = obj.to_bytes()
        hdr = he.objects._HEADER.size
        # Garbage inside a valid envelope: Go validates and reports, never crashes.
        for trial in range(3):
            bad = np.frombuffer(data, dtype=np.uint8).copy()
            pos = rng.integers(hdr, len(bad), 64)
            bad[pos] = rng.integers(0, 256, 64, dtype=np.uint8)
            try:
                P.load(bad.tobytes())
            except he.HESerializationError:
                pass  # expected for most corruptions (others may hit only coefficients)
        junk = bytes(data[:hdr]) + rng.integers(0, 256, len(data) - hdr, dtype=np.uint8).tobytes()
        with pytest.raises(he.HESerializationError):
            P.load(junk)


def test_wrong_kind_and_not_bytes(P, objects):
    with pytest.raises(he.HESerializationError):
        P.load(objects["ct"].to_bytes(), expected=he.PublicKey)
    with pytest.raises(he.HESerializationError):
        P.load("not bytes")


def test_foreign_parameters_rejected(P, objects):
    other = he.get_params("ckks-n10-insecure")
    for obj in objects.values():
        with pytest.raises(ParameterMismatchError):
            other.load(obj.to_bytes())


def test_errors_are_he_errors():
    assert issubclass(he.HESerializationError, HEError)
    assert issubclass(he.HESerializationError, SerializationError)
    assert issubclass(he.ParameterMismatchError, HEError)
    assert issubclass(he.HENativeBuildError, HEError)


def test_parameter_mismatch_in_operations(P, kp, objects):
    other = he.get_params("ckks-n10-insecure")
    okp = other.keygen()
    oct_ = other.encrypt([1.0], okp.pk)
    ev = he.Evaluator(P, objects["evk"])
    with pytest.raises(ParameterMismatchError):
        ev.add(objects["ct"], oct_)
    with pytest.raises(ParameterMismatchError):
        P.decrypt(oct_, kp.sk)
    with pytest.raises(ParameterMismatchError):
        other.decrypt(oct_, kp.sk)
    with pytest.raises(ParameterMismatchError):
        P.encrypt([1.0], okp.pk)
    with pytest.raises(ParameterMismatchError):
        he.Evaluator(other, objects["evk"])
    with pytest.raises(ParameterMismatchError):
        he.extract_lwe(other, objects["ct"], [0])
    with pytest.raises(he.HEArgumentError):
        ev.add(objects["ct"], "not a ciphertext")


def test_forged_fingerprint_caught_by_shape_validation(P, objects):
    # Bytes from another ring relabelled with this set's fingerprint: the Go loader's
    # template/length checks reject them (typed error, no crash).
    other = he.get_params("ckks-n10-insecure")
    okp = other.keygen()
    hdr = he.objects._HEADER
    for obj in (okp.sk, okp.pk, other.encrypt([1.0], okp.pk), other.encode([1.0])):
        data = obj.to_bytes()
        magic, ver, kind, _fp, length = hdr.unpack_from(data)
        forged = hdr.pack(magic, ver, kind, P.fingerprint, length) + data[hdr.size:]
        with pytest.raises(he.HESerializationError):
            P.load(forged)


def test_coefficients_are_packed_at_their_prime_width(P, kp, objects):
    """Each residue row takes ceil(N bitlen(q) / 8) bytes (not 8 N); values at or above
    their prime and bytes changed in a row are caught or decode to other residues."""
    ct = objects["ct"]
    level = ct.level
    row = [(P.n * int(q).bit_length() + 7) // 8 for q in P.q[: level + 1]]
    data = ct.to_bytes()
    assert 0 < len(data) - he.objects._HEADER.size - 2 * sum(row) < 512     # + tag, shape, metadata
    assert len(data) < 2 * (level + 1) * P.n * 8 * 0.8
    back = P.load(data)
    for c in (0, 1):
        np.testing.assert_array_equal(back.poly(c), ct.poly(c))
    # the last coefficient of the last row: all ones is >= that 40-bit-ish prime
    w = int(P.q[level]).bit_length()
    bad = bytearray(data)
    tail = P.n * w % 8
    assert tail == 0
    bad[-(w // 8):] = b"\xff" * (w // 8)
    with pytest.raises(he.HESerializationError):
        P.load(bytes(bad))
