"""Z85, the text encoding of ZeroMQ's CURVE keys (ZeroMQ RFC 32/Z85), without pyzmq.

Every 4 bytes (a big-endian 32-bit number) become 5 characters of an 85-letter alphabet,
most significant digit first; the input length must be a multiple of 4 (a 32-byte key is
40 characters). Written here so that reading and writing key files does not load the
ZeroMQ library; the tests compare it with pyzmq's ``zmq.utils.z85`` and the RFC's example.
"""

from __future__ import annotations

ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_VALUE = {c: i for i, c in enumerate(ALPHABET)}


def encode(data: bytes) -> bytes:
    """``data`` (a multiple of 4 bytes) as Z85 text (bytes)."""
    data = bytes(data)
    if len(data) % 4:
        raise ValueError(f"z85 encodes a multiple of 4 bytes, not {len(data)}")
    out = bytearray()
    for i in range(0, len(data), 4):
        n = int.from_bytes(data[i:i + 4], "big")
        digits = bytearray(5)
        for k in range(4, -1, -1):
            n, digits[k] = divmod(n, 85)
        out += bytes(ALPHABET[d] for d in digits)
    return bytes(out)


def decode(text: bytes | str) -> bytes:
    """Z85 text (a multiple of 5 characters) -> bytes; ValueError if it is not Z85."""
    if isinstance(text, str):
        text = text.encode("ascii")
    if len(text) % 5:
        raise ValueError(f"z85 text has a multiple of 5 characters, not {len(text)}")
    out = bytearray()
    for i in range(0, len(text), 5):
        n = 0
        for c in text[i:i + 5]:
            v = _VALUE.get(c)
            if v is None:
                raise ValueError(f"{chr(c)!r} is not a z85 character")
            n = n * 85 + v
        if n >= 1 << 32:
            raise ValueError("z85 group out of range")
        out += n.to_bytes(4, "big")
    return bytes(out)
