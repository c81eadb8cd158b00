"""ML-DSA signatures of the data source (cryptography's FIPS 204 implementation)."""

import hashlib

import pytest

from secinfer.crypto.signature import SCHEMES, SigningKey, VerifyKey
from secinfer.errors import ConfigError, SerializationError


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_sign_verify_roundtrip(scheme):
    sk = SigningKey(bytes(range(32)), scheme)
    d = hashlib.sha256(b"message").digest()
    sig = sk.sign(d)
    assert len(sig) == sk.verify_key.signature_bytes
    vk = VerifyKey(scheme, sk.verify_key.raw)
    assert vk.verify(d, sig)
    assert not vk.verify(hashlib.sha256(b"other").digest(), sig)
    bad = bytearray(sig)
    bad[7] ^= 1
    assert not vk.verify(d, bytes(bad))
    assert not vk.verify(d, b"")


def test_seeded_keys_are_deterministic_and_distinct():
    a, b = SigningKey(b"\x01" * 32), SigningKey(b"\x01" * 32)
    c = SigningKey(b"\x02" * 32)
    assert a.verify_key.raw == b.verify_key.raw != c.verify_key.raw
    d = hashlib.sha256(b"x").digest()
    assert not c.verify_key.verify(d, a.sign(d))


def test_bad_inputs_raise_typed_errors():
    with pytest.raises(ConfigError):
        SigningKey(b"short")
    with pytest.raises(ConfigError):
        SigningKey(b"\0" * 32, "rsa")
    with pytest.raises(SerializationError):
        VerifyKey("ml-dsa-65", b"\0" * 10)
