"""Long-term party identities: CURVE (X25519) key pairs as ZeroMQ uses them.

Every party of a session owns one key pair. The public half goes into the cluster file
(z85 or hex); the secret half stays on the party's host in ``<name>.key_secret``, a file
only its owner can read (mode 0600; loading refuses a file readable by group or others,
the way ssh treats private keys). The transport (``secinfer.net.zmq_transport``)
authenticates and encrypts every connection with these keys (CurveZMQ: X25519 +
XSalsa20-Poly1305) and accepts only the public keys listed in the cluster file.

Files written by ``keygen(out_dir, names)``::

    <name>.key          public key    (0644)   name = "..."  public = "<z85>"
    <name>.key_secret   key pair      (0600)   name = "..."  public = "<z85>"  secret = "<z85>"

both TOML, read with ``tomllib``. Keys are made and checked with ``cryptography``'s X25519
and written in Z85 by ``secinfer.crypto.z85`` (the same text pyzmq reads and writes), so
neither needs the ZeroMQ library.
"""

from __future__ import annotations

import binascii
import os
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path

from secinfer.crypto import z85
from secinfer.errors import ConfigError

KEY_BYTES = 32
Z85_LEN = 40
HEX_LEN = 64
PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"


@dataclass(frozen=True)
class Identity:
    """A party's key pair; ``public`` and ``secret`` are z85 bytes (what pyzmq expects)."""

    name: str
    public: bytes
    secret: bytes

    def __repr__(self) -> str:  # never print the secret
        return f"Identity(name={self.name!r}, public={self.public.decode()!r})"


def _check_name(name: str) -> str:
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise ConfigError(f"party name {name!r}: use letters, digits, '-', '_' or '.'")
    return name


def parse_public_key(text: str | bytes, where: str = "public key") -> bytes:
    """A 32-byte key written as z85 (40 characters) or hex (64 characters) -> z85 bytes."""
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            raise ConfigError(f"{where}: not ASCII text") from None
    if not isinstance(text, str):
        raise ConfigError(f"{where}: expected a string, got {type(text).__name__}")
    s = text.strip()
    if len(s) == HEX_LEN:
        try:
            raw = binascii.unhexlify(s)
        except binascii.Error:
            raise ConfigError(f"{where}: 64 characters but not valid hex") from None
        return z85.encode(raw)
    if len(s) == Z85_LEN:
        try:
            raw = z85.decode(s.encode("ascii"))
        except ValueError:
            raise ConfigError(f"{where}: 40 characters but not valid z85") from None
        if len(raw) != KEY_BYTES:
            raise ConfigError(f"{where}: does not decode to {KEY_BYTES} bytes")
        # re-encode so that equal keys compare equal byte for byte
        return z85.encode(raw)
    raise ConfigError(f"{where}: expected a 32-byte key as 40 z85 or 64 hex characters, got {len(s)} characters")


def public_to_hex(public_z85: bytes) -> str:
    return binascii.hexlify(z85.decode(public_z85)).decode()


def _public_of(secret_raw: bytes) -> bytes:
    """The X25519 public key (raw) of a raw 32-byte secret, as CurveZMQ derives it."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    return X25519PrivateKey.from_private_bytes(secret_raw).public_key().public_bytes_raw()


def generate(name: str) -> Identity:
    """A fresh key pair: 32 bytes from the operating system's CSPRNG as the secret (as
    libsodium's ``crypto_box_keypair`` draws it), its X25519 public key."""
    secret = os.urandom(KEY_BYTES)
    return Identity(_check_name(name), z85.encode(_public_of(secret)), z85.encode(secret))


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to an existing file
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def write_identity(ident: Identity, out_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Write ``<name>.key`` (public) and ``<name>.key_secret`` (0600); returns both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pub = out / f"{ident.name}{PUBLIC_SUFFIX}"
    sec = out / f"{ident.name}{SECRET_SUFFIX}"
    head = "# secinfer party identity (CurveZMQ / X25519, z85)\n"
    pub.write_text(f'{head}name = "{ident.name}"\npublic = "{ident.public.decode()}"\n')
    _write_private(sec, f'{head}# SECRET: keep this file on the party\'s host only\n'
                        f'name = "{ident.name}"\npublic = "{ident.public.decode()}"\n'
                        f'secret = "{ident.secret.decode()}"\n')
    return pub, sec


def keygen(out_dir: str | os.PathLike, names) -> list[str]:
    """Fresh key pairs for ``names`` in ``out_dir``; returns the written paths (public first)."""
    names = list(names)
    if len(set(names)) != len(names):
        raise ConfigError("keygen: party names must be distinct")
    written: list[str] = []
    for n in names:
        pub, sec = write_identity(generate(n), out_dir)
        written += [str(pub), str(sec)]
    return written


def _read_toml(path: Path, what: str) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{what} {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{what} {str(path)!r} is not valid TOML: {e}") from None


def load_identity(path: str | os.PathLike, check_permissions: bool = True) -> Identity:
    """Read a ``.key_secret`` file; refuses one readable by group/others or a mismatched pair."""
    p = Path(path)
    if check_permissions and p.exists():
        mode = stat.S_IMODE(p.stat().st_mode)
        if mode & 0o077:
            raise ConfigError(f"secret key file {str(p)!r} has permissions {mode:o}; "
                              f"it must be readable by its owner only (chmod 600)")
    d = _read_toml(p, "secret key file")
    for field in ("name", "public", "secret"):
        if field not in d:
            raise ConfigError(f"secret key file {str(p)!r}: missing field {field!r}")
    public = parse_public_key(d["public"], f"{p}: public")
    secret = parse_public_key(d["secret"], f"{p}: secret")  # same encoding rules
    if z85.encode(_public_of(z85.decode(secret))) != public:
        raise ConfigError(f"secret key file {str(p)!r}: the secret key does not match the public key")
    return Identity(_check_name(str(d["name"])), public, secret)


def load_public(path: str | os.PathLike) -> tuple[str, bytes]:
    """Read a ``.key`` (or ``.key_secret``) file -> (name, public z85)."""
    p = Path(path)
    d = _read_toml(p, "public key file")
    if "public" not in d or "name" not in d:
        raise ConfigError(f"public key file {str(p)!r}: needs 'name' and 'public'")
    return str(d["name"]), parse_public_key(d["public"], f"{p}: public")
