"""The local Z85 codec and key pairs made without pyzmq: the same text and keys as ZeroMQ's."""

import os
import subprocess
import sys

import pytest
import zmq
from zmq.utils import z85 as zmq_z85

from secinfer.crypto import z85
from secinfer.crypto.identity import generate, keygen, load_identity, load_public, write_identity, Identity
from secinfer.errors import ConfigError

pytestmark = pytest.mark.timeout(60)


def test_rfc32_example():
    raw = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85.encode(raw) == b"HelloWorld"
    assert z85.decode(b"HelloWorld") == raw and z85.decode("HelloWorld") == raw


@pytest.mark.parametrize("n", [0, 4, 8, 32, 64, 400])
def test_same_as_pyzmq(n):
    for _ in range(20):
        raw = os.urandom(n)
        text = z85.encode(raw)
        assert text == zmq_z85.encode(raw)
        assert z85.decode(text) == raw == zmq_z85.decode(text)
    for edge in (b"\x00" * 4, b"\xff" * 4, b"\x00\x00\x00\x01\xff\xff\xff\xfe"):
        assert z85.encode(edge) == zmq_z85.encode(edge)


@pytest.mark.parametrize("bad", [b"Hell", b"HelloWorl", b"Hell~", b"Hell\x00", b"#####"])
def test_decode_refuses_what_is_not_z85(bad):
    with pytest.raises(ValueError):
        z85.decode(bad)


def test_encode_refuses_a_partial_group():
    with pytest.raises(ValueError):
        z85.encode(b"abc")


def test_generated_keys_are_curvezmq_pairs(tmp_path):
    for _ in range(5):
        ident = generate("a")
        assert len(ident.public) == len(ident.secret) == 40
        assert zmq.curve_public(ident.secret) == ident.public     # libzmq derives the same public key
    keygen(tmp_path, ["server"])
    ident = load_identity(tmp_path / "server.key_secret")
    assert zmq.curve_public(ident.secret) == ident.public


def test_files_written_with_zmq_keys_still_load(tmp_path):
    """Key files made by earlier versions (keys from zmq.curve_keypair) read as before."""
    public, secret = zmq.curve_keypair()
    write_identity(Identity("old", public, secret), tmp_path)
    ident = load_identity(tmp_path / "old.key_secret")
    assert (ident.public, ident.secret) == (public, secret)
    assert load_public(tmp_path / "old.key") == ("old", public)
    other_public, _ = zmq.curve_keypair()
    text = (tmp_path / "old.key_secret").read_text().replace(public.decode(), other_public.decode())
    (tmp_path / "old.key_secret").write_text(text)
    with pytest.raises(ConfigError, match="does not match"):
        load_identity(tmp_path / "old.key_secret")


def test_identity_and_cluster_do_not_load_zmq():
    code = ("import sys, secinfer.crypto.identity, secinfer.runtime.cluster as c\n"
            "import tempfile; c.write_loopback_cluster(tempfile.mkdtemp(), ['a', 'b'])\n"
            "print('zmq' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
