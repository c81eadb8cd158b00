"""Identity keys and cluster files: permissions, parsing, validation messages, session ids."""

import os
import stat

import pytest
import zmq

from secinfer.crypto.identity import keygen, load_identity, load_public, parse_public_key, public_to_hex
from secinfer.errors import ConfigError
from secinfer.runtime.cluster import dump_cluster, load_cluster, parse_cluster, write_loopback_cluster

pytestmark = pytest.mark.timeout(30)


def test_keygen_writes_0600_secret_and_loadable_pairs(tmp_path):
    written = keygen(tmp_path / "keys", ["server", "client"])
    assert len(written) == 4
    sec = tmp_path / "keys" / "server.key_secret"
    assert stat.S_IMODE(sec.stat().st_mode) == 0o600
    ident = load_identity(sec)
    name, pub = load_public(tmp_path / "keys" / "server.key")
    assert name == "server" and pub == ident.public
    assert zmq.curve_public(ident.secret) == ident.public
    assert ident.secret.decode() not in repr(ident)
    other = load_identity(tmp_path / "keys" / "client.key_secret")
    assert other.public != ident.public


def test_secret_key_readable_by_others_is_refused(tmp_path):
    keygen(tmp_path, ["a"])
    sec = tmp_path / "a.key_secret"
    os.chmod(sec, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_identity(sec)


def test_mismatched_pair_is_refused(tmp_path):
    keygen(tmp_path, ["a", "b"])
    a = (tmp_path / "a.key_secret").read_text()
    b = (tmp_path / "b.key_secret").read_text()
    secret_b = [ln for ln in b.splitlines() if ln.startswith("secret")][0]
    bad = "\n".join(secret_b if ln.startswith("secret") else ln for ln in a.splitlines())
    (tmp_path / "a.key_secret").write_text(bad)
    with pytest.raises(ConfigError, match="does not match"):
        load_identity(tmp_path / "a.key_secret")


def test_public_key_encodings():
    pub, _ = zmq.curve_keypair()
    assert parse_public_key(pub.decode()) == pub
    assert parse_public_key(public_to_hex(pub)) == pub
    for bad in ["abc", "z" * 64, "~" * 40, 123]:
        with pytest.raises(ConfigError):
            parse_public_key(bad)


def _data(**over):
    k1, _ = zmq.curve_keypair()
    k2, _ = zmq.curve_keypair()
    d = {"session": "s", "party": [
        {"id": "server", "role": "server", "host": "127.0.0.1", "port": 7001, "public_key": k1.decode()},
        {"id": "client", "role": "client", "host": "127.0.0.1", "port": 7002, "public_key": k2.decode()}]}
    d.update(over)
    return d


def test_parse_valid_cluster_and_profiles():
    d = _data(network="lan", link=[{"between": ["server", "client"], "profile": "bw=5,lat=7"}])
    d["party"][0]["link"] = "wan"
    c = parse_cluster(d)
    assert c.roles == ["server", "client"]
    assert c.profile("server", "client").latency == pytest.approx(7e-3)  # explicit link wins
    c2 = parse_cluster(_data(network="lan"))
    assert c2.profile("server", "client").name == "lan"
    d3 = _data()
    d3["party"][1]["link"] = "wan"
    c3 = parse_cluster(d3)
    assert c3.profile("server", "client").name == "wan" and c3.profile("client", "server").name == "wan"
    assert parse_cluster(dump_and_reload(c)).canonical() == c.canonical()


def dump_and_reload(c):
    import tomllib

    return tomllib.loads(dump_cluster(c))


@pytest.mark.parametrize("mutate, msg", [
    (lambda d: d["party"][0].pop("port"), "missing field 'port'"),
    (lambda d: d["party"][1].update(port=7001), "duplicate port"),
    (lambda d: d["party"][1].update(public_key="not-a-key"), "public_key"),
    (lambda d: d["party"][1].update(public_key=d["party"][0]["public_key"]), "its own"),
    (lambda d: d["party"][1].update(id="server"), "duplicate party id"),
    (lambda d: d["party"][1].update(role="server"), "already played"),
    (lambda d: d["party"][1].update(port=70000), "out of range"),
    (lambda d: d["party"][1].update(port="7002"), "must be int"),
    (lambda d: d["party"][1].update(colour="red"), "unknown field"),
    (lambda d: d.pop("session"), "missing field 'session'"),
    (lambda d: d.update(network="warp"), "network profile"),
    (lambda d: d.update(peer_timeout=0.1), "peer_timeout"),
    (lambda d: d.update(party=d["party"][:1]), "at least two"),
    (lambda d: d.update(link=[{"between": ["server", "nobody"], "profile": "lan"}]), "between"),
])
def test_bad_cluster_files_give_clear_errors(mutate, msg):
    d = _data()
    mutate(d)
    with pytest.raises(ConfigError, match=msg):
        parse_cluster(d)


def test_session_id_depends_on_cluster_and_nonce(tmp_path):
    p = write_loopback_cluster(tmp_path / "c", ["a", "b"])
    c = load_cluster(p)
    assert len(c.session_id("n")) == 16
    assert c.session_id("n") == load_cluster(p).session_id("n")
    assert c.session_id("n") != c.session_id("m")
    q = write_loopback_cluster(tmp_path / "d", ["a", "b"])  # other keys and ports
    assert load_cluster(q).session_id("n") != c.session_id("n")
    assert c.load_secret("a").public == c.party("a").public_key
    with pytest.raises(ConfigError, match="not in the cluster"):
        c.party("zed")
    with pytest.raises(ConfigError, match="no party for role"):
        c.check_roles(["a", "b", "c"])


def test_public_key_file_and_missing_secret(tmp_path):
    keygen(tmp_path / "keys", ["x", "y"])
    (tmp_path / "cluster.toml").write_text(
        'session = "t"\n'
        '[[party]]\nid = "x"\nrole = "x"\nhost = "127.0.0.1"\nport = 7101\npublic_key_file = "keys/x.key"\n'
        '[[party]]\nid = "y"\nrole = "y"\nhost = "127.0.0.1"\nport = 7102\npublic_key_file = "keys/y.key"\n')
    c = load_cluster(tmp_path / "cluster.toml")
    assert c.load_secret("x").public == c.party("x").public_key
    os.remove(tmp_path / "keys" / "y.key_secret")
    with pytest.raises(ConfigError, match="no secret key file"):
        c.load_secret("y")
    with pytest.raises(ConfigError, match="does not exist"):
        load_cluster(tmp_path / "nope.toml")
    (tmp_path / "bad.toml").write_text("session = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_cluster(tmp_path / "bad.toml")


def test_reserved_ports_are_never_handed_out_twice(monkeypatch):
    """Two launchers that draw the same candidate port: the second must get another one
    (ports are held, not released, until the run ends), and the party can still listen."""
    import socket

    from secinfer.runtime import cluster as cluster_mod

    port = cluster_mod.free_ports(1)[0]                      # a port in the drawn range, free now
    monkeypatch.setattr(cluster_mod.secrets, "randbelow", lambda n: port - 20000)   # every draw: that port
    first = cluster_mod.reserve_ports(1)
    try:
        assert first.ports == [port]
        with cluster_mod.reserve_ports(2) as second:       # falls back to ports nobody holds
            assert port not in second.ports and len(set(second.ports)) == 2
        assert port not in cluster_mod.free_ports(1)
        party = socket.socket()                              # what a party's listener does
        party.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        party.bind(("127.0.0.1", port))
        party.listen(1)
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        conn, _ = party.accept()
        for s in (client, conn, party):                      # (the client closes first: no TIME_WAIT here)
            s.close()
    finally:
        first.close()
    monkeypatch.undo()
    port2 = cluster_mod.free_ports(1)[0]
    monkeypatch.setattr(cluster_mod.secrets, "randbelow", lambda n: port2 - 20000)
    with cluster_mod.reserve_ports(1) as r:
        assert r.ports == [port2]
    assert cluster_mod.free_ports(1) == [port2]              # released when the reservation closes


def test_write_loopback_cluster_on_given_ports(tmp_path):
    from secinfer.runtime.cluster import reserve_ports

    with reserve_ports(2) as r:
        c = load_cluster(write_loopback_cluster(tmp_path / "c", ["a", "b"], ports=r.ports))
        assert [c.party(x).port for x in ("a", "b")] == r.ports
    with pytest.raises(ConfigError, match="2 roles"):
        write_loopback_cluster(tmp_path / "d", ["a", "b"], ports=[1])
