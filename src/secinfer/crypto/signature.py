"""Post-quantum signatures of certified data: ML-DSA (FIPS 204) from ``cryptography``.

The data source of the certified-data protocol signs the SHA-256 digest of each message
(data point, nonce, user id, timestamp) [CRISP-certified Sec. 5.2: "messages certified by
the data source with a digital signature scheme that uses a cryptographic hash function
with nonces"]. The paper's setting is post-quantum, so the scheme is ML-DSA: the installed
``cryptography`` (>= 45, here 50 over OpenSSL >= 3.5) exposes ML-DSA-44/65/87 as
``cryptography.hazmat.primitives.asymmetric.mldsa``; no extra package is needed.

Default ML-DSA-65 (NIST security category 3, above the 128-bit target); ML-DSA-44
(category 2) is offered for smaller signatures. Keys can be derived from a 32-byte seed
(FIPS 204 ML-DSA.KeyGen_internal) so that keys come from the injected PRG.

Each signature is bound to a context string (FIPS 204 "ctx") naming the protocol, so a
signature made for another purpose never verifies here.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import mldsa

from secinfer.errors import ConfigError, SerializationError

# name -> (private class, public class, public key bytes, signature bytes, NIST category)
SCHEMES = {
    "ml-dsa-44": (mldsa.MLDSA44PrivateKey, mldsa.MLDSA44PublicKey, 1312, 2420, 2),
    "ml-dsa-65": (mldsa.MLDSA65PrivateKey, mldsa.MLDSA65PublicKey, 1952, 3309, 3),
    "ml-dsa-87": (mldsa.MLDSA87PrivateKey, mldsa.MLDSA87PublicKey, 2592, 4627, 5),
}
DEFAULT_SCHEME = "ml-dsa-65"
SEED_BYTES = 32
CONTEXT = b"secinfer/certified/v1"


def _scheme(name: str):
    s = SCHEMES.get(name)
    if s is None:
        raise ConfigError(f"unknown signature scheme {name!r}; known: {sorted(SCHEMES)}")
    return s


@dataclass(frozen=True)
class VerifyKey:
    """A data source's public key (what the service provider trusts)."""

    scheme: str
    raw: bytes

    def __post_init__(self) -> None:
        _, pub_cls, pk_len, _, _ = _scheme(self.scheme)
        if len(self.raw) != pk_len:
            raise SerializationError(f"{self.scheme} public key must have {pk_len} bytes, "
                                     f"not {len(self.raw)}")
        try:
            object.__setattr__(self, "_key", pub_cls.from_public_bytes(self.raw))
        except ValueError as exc:
            raise SerializationError(f"invalid {self.scheme} public key: {exc}") from None

    @property
    def signature_bytes(self) -> int:
        return _scheme(self.scheme)[3]

    def verify(self, digest: bytes, signature: bytes) -> bool:
        """True iff ``signature`` is this key's signature on ``digest`` (never raises for a
        malformed signature: it is just not valid)."""
        if not isinstance(signature, (bytes, bytearray)) or len(signature) != self.signature_bytes:
            return False
        try:
            self._key.verify(bytes(signature), bytes(digest), CONTEXT)  # type: ignore[attr-defined]
        except InvalidSignature:
            return False
        return True


class SigningKey:
    """A data source's signing key, derived from a 32-byte seed (from the injected PRG)."""

    def __init__(self, seed: bytes, scheme: str = DEFAULT_SCHEME) -> None:
        priv_cls = _scheme(scheme)[0]
        if len(seed) != SEED_BYTES:
            raise ConfigError(f"signing-key seed must have {SEED_BYTES} bytes")
        self.scheme = scheme
        self._key = priv_cls.from_seed_bytes(bytes(seed))
        self.verify_key = VerifyKey(scheme, self._key.public_key().public_bytes_raw())

    def sign(self, digest: bytes) -> bytes:
        return self._key.sign(bytes(digest), CONTEXT)
