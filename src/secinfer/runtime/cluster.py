"""Cluster files: who takes part in a session, where they listen and their public keys.

A cluster file is TOML (read with ``tomllib``)::

    session = "demo"                 # a name; part of the session id
    network = "none"                 # optional default link profile (see secinfer.net.shaping)
    connect_timeout = 30.0           # optional, seconds to wait for every peer at start
    heartbeat_interval = 0.5         # optional, seconds
    peer_timeout = 10.0              # optional, a peer silent this long is dead
    max_frame = 1073741824           # optional, bytes; larger frames are refused
    transport = "zmq"                # optional: "zmq" (CurveZMQ) or "tcp" (direct encrypted
                                     # streams, fewer thread hand-offs: secinfer.net.tcp_transport)

    [[party]]
    id = "server"                    # unique name of the process/host entry
    role = "server"                  # the protocol role it plays (unique)
    host = "10.77.0.1"               # address the others connect to
    port = 5701
    public_key = "<z85 or hex>"      # its CURVE public key (``secinfer keygen``), or
    # public_key_file = "keys/server.key"   (relative to the cluster file)
    link = "wan"                     # optional: profile of this party's access link
    bind = "0.0.0.0"                 # optional: address to bind (default: host if it is an
                                     # IP address, else all interfaces)

    [[link]]                         # optional: an explicit profile for one pair
    between = ["server", "client"]   # party ids (both directions)
    profile = "bw=10,lat=50"

Secret keys never appear in it: each party reads its own ``<id>.key_secret`` from its
keys folder (default: ``keys/`` next to the cluster file, then the file's own folder).

Session id (all parties must agree, or the transport refuses the peer):
``SHA-256("secinfer-session-v1" || canonical cluster || nonce)[:16]`` where the canonical
cluster is the session name and every party's id, role, host, port and public key (not
the file's formatting, so hosts may hold differently formatted copies), and the nonce is
a fresh random value the launcher (or the operator, ``--session``) gives every party.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import secrets
import socket
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from secinfer.crypto.identity import (SECRET_SUFFIX, Identity, generate, load_identity, load_public, parse_public_key,
                                      write_identity)
from secinfer.errors import ConfigError
from secinfer.net.shaping import NONE, LinkProfile, link_profile, parse_profile

_TOP_KEYS = {"session", "network", "connect_timeout", "heartbeat_interval", "peer_timeout", "max_frame", "transport",
             "party", "link"}
_PARTY_KEYS = {"id", "role", "host", "port", "public_key", "public_key_file", "link", "bind"}
_LINK_KEYS = {"between", "profile"}
TRANSPORTS = ("zmq", "tcp")
DEFAULT_TRANSPORT = "tcp"


@dataclass(frozen=True)
class PartyEntry:
    id: str
    role: str
    host: str
    port: int
    public_key: bytes          # z85
    link: LinkProfile | None = None
    bind: str | None = None

    def connect_url(self) -> str:
        return f"tcp://{_bracket(self.host)}:{self.port}"

    def bind_url(self) -> str:
        """Where to listen: ``bind`` if given, ``host`` if it is an IP address, else all interfaces
        (a host name cannot be bound to)."""
        if self.bind:
            return f"tcp://{_bracket(self.bind)}:{self.port}"
        try:
            ipaddress.ip_address(self.host.strip("[]"))
            return f"tcp://{_bracket(self.host)}:{self.port}"
        except ValueError:
            return f"tcp://*:{self.port}"


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@dataclass
class Cluster:
    session: str
    parties: dict[str, PartyEntry]                 # id -> entry, in file order
    network: LinkProfile = NONE
    connect_timeout: float = 30.0
    heartbeat_interval: float = 0.5
    peer_timeout: float = 10.0
    max_frame: int | None = None
    links: dict[frozenset, LinkProfile] = field(default_factory=dict)
    path: Path | None = None
    transport: str = DEFAULT_TRANSPORT

    # ---- lookups ------------------------------------------------------------------
    def party(self, party_id: str) -> PartyEntry:
        try:
            return self.parties[party_id]
        except KeyError:
            raise ConfigError(f"party {party_id!r} is not in the cluster file "
                              f"(parties: {', '.join(self.parties)})") from None

    def by_role(self, role: str) -> PartyEntry:
        for p in self.parties.values():
            if p.role == role:
                return p
        raise ConfigError(f"no party plays role {role!r} in the cluster file")

    @property
    def roles(self) -> list[str]:
        return [p.role for p in self.parties.values()]

    def check_roles(self, roles) -> None:
        """The cluster must have exactly one party per protocol role."""
        want, have = set(roles), set(self.roles)
        if want != have:
            missing, extra = sorted(want - have), sorted(have - want)
            msg = []
            if missing:
                msg.append(f"no party for role(s) {', '.join(missing)}")
            if extra:
                msg.append(f"role(s) {', '.join(extra)} are not roles of this protocol")
            raise ConfigError("cluster file does not match the protocol: " + "; ".join(msg)
                              + f" (protocol roles: {', '.join(roles)})")

    def profile(self, sender_id: str, receiver_id: str, default: LinkProfile | None = None) -> LinkProfile:
        """Effective profile of the directed link sender -> receiver."""
        dflt = self.network if default is None else default
        explicit = self.links.get(frozenset((sender_id, receiver_id)))
        return link_profile(dflt, self.party(sender_id).link, self.party(receiver_id).link, explicit)

    # ---- session id -----------------------------------------------------------------
    def canonical(self) -> bytes:
        parts = [f"session={self.session}"]
        for p in sorted(self.parties.values(), key=lambda e: e.id):
            parts.append(f"party={p.id}|{p.role}|{p.host}|{p.port}|{p.public_key.decode()}")
        return "\n".join(parts).encode()

    def session_id(self, nonce: bytes | str | None) -> bytes:
        if isinstance(nonce, str):
            nonce = nonce.encode()
        h = hashlib.sha256(b"secinfer-session-v1\x00" + self.canonical() + b"\x00" + (nonce or b""))
        return h.digest()[:16]

    # ---- secret keys ------------------------------------------------------------------
    def load_secret(self, party_id: str, keys_dir: str | os.PathLike | None = None) -> Identity:
        entry = self.party(party_id)
        candidates = []
        if keys_dir is not None:
            candidates.append(Path(keys_dir))
        if self.path is not None:
            candidates += [self.path.parent / "keys", self.path.parent]
        for d in candidates:
            f = d / f"{party_id}{SECRET_SUFFIX}"
            if f.exists():
                ident = load_identity(f)
                if ident.public != entry.public_key:
                    raise ConfigError(f"secret key {str(f)!r} does not belong to the public key the "
                                      f"cluster file lists for {party_id!r}")
                return ident
        raise ConfigError(f"no secret key file {party_id}{SECRET_SUFFIX} for party {party_id!r} in "
                          + ", ".join(repr(str(d)) for d in candidates))


# ---- parsing ----------------------------------------------------------------------------
def _req(d: dict, key: str, typ, where: str):
    if key not in d:
        raise ConfigError(f"{where}: missing field {key!r}")
    v = d[key]
    if typ is float and isinstance(v, int) and not isinstance(v, bool):
        v = float(v) if abs(v) < 2**1000 else float("inf")
    if not isinstance(v, typ) or isinstance(v, bool):
        raise ConfigError(f"{where}: field {key!r} must be {getattr(typ, '__name__', typ)}, got {type(v).__name__}")
    return v


def _opt(d: dict, key: str, typ, default, where: str):
    return _req(d, key, typ, where) if key in d else default


def _positive(v: float, name: str, where: str) -> float:
    if not v > 0:
        raise ConfigError(f"{where}: {name} must be positive, got {v}")
    return v


def parse_cluster(data: dict, where: str = "cluster file", base_dir=None) -> Cluster:
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    session = _req(data, "session", str, where)
    if not session:
        raise ConfigError(f"{where}: session name is empty")
    network = parse_profile(_opt(data, "network", str, "none", where))
    ct = _positive(_opt(data, "connect_timeout", float, 30.0, where), "connect_timeout", where)
    hb = _positive(_opt(data, "heartbeat_interval", float, 0.5, where), "heartbeat_interval", where)
    pt = _positive(_opt(data, "peer_timeout", float, 10.0, where), "peer_timeout", where)
    if pt < 2 * hb:
        raise ConfigError(f"{where}: peer_timeout ({pt}s) must be at least twice heartbeat_interval ({hb}s)")
    mf = _opt(data, "max_frame", int, None, where)
    tr = _opt(data, "transport", str, DEFAULT_TRANSPORT, where)
    if tr not in TRANSPORTS:
        raise ConfigError(f"{where}: transport must be one of {', '.join(TRANSPORTS)}, got {tr!r}")
    if mf is not None and mf < 4096:
        raise ConfigError(f"{where}: max_frame must be at least 4096 bytes")
    plist = data.get("party")
    if not isinstance(plist, list) or not plist:
        raise ConfigError(f"{where}: no [[party]] entries")
    parties: dict[str, PartyEntry] = {}
    seen_roles: dict[str, str] = {}
    seen_addr: dict[tuple, str] = {}
    seen_keys: dict[bytes, str] = {}
    for i, p in enumerate(plist):
        pw = f"{where}: party #{i + 1}"
        if not isinstance(p, dict):
            raise ConfigError(f"{pw}: must be a table")
        pid = _req(p, "id", str, pw)
        pw = f"{where}: party {pid!r}"
        bad = set(p) - _PARTY_KEYS
        if bad:
            raise ConfigError(f"{pw}: unknown field(s) {', '.join(sorted(bad))}")
        if not pid or not all(c.isalnum() or c in "-_." for c in pid):
            raise ConfigError(f"{pw}: id must be letters, digits, '-', '_' or '.'")
        if pid in parties:
            raise ConfigError(f"{where}: duplicate party id {pid!r}")
        role = _req(p, "role", str, pw)
        if role in seen_roles:
            raise ConfigError(f"{pw}: role {role!r} is already played by {seen_roles[role]!r}")
        host = _req(p, "host", str, pw)
        if not host:
            raise ConfigError(f"{pw}: empty host")
        port = _req(p, "port", int, pw)
        if not 1 <= port <= 65535:
            raise ConfigError(f"{pw}: port {port} out of range 1..65535")
        if (host, port) in seen_addr:
            raise ConfigError(f"{pw}: duplicate port: {host}:{port} is already used by {seen_addr[(host, port)]!r}")
        if ("public_key" in p) == ("public_key_file" in p):
            raise ConfigError(f"{pw}: give exactly one of public_key and public_key_file")
        if "public_key" in p:
            key = parse_public_key(_req(p, "public_key", str, pw), f"{pw}: public_key")
        else:
            kf = Path(_req(p, "public_key_file", str, pw))
            kp = kf if kf.is_absolute() or base_dir is None else Path(base_dir) / kf
            try:
                _name, key = load_public(kp)
            except (OSError, ValueError) as e:   # a folder, a NUL byte, a name too long, not UTF-8
                raise ConfigError(f"{pw}: public_key_file {str(kp)!r} cannot be read: {e}") from None
        if key in seen_keys:
            raise ConfigError(f"{pw}: public_key is the same as {seen_keys[key]!r}'s; every party needs its own")
        link = parse_profile(p["link"]) if "link" in p else None
        if "link" in p and not isinstance(p["link"], str):
            raise ConfigError(f"{pw}: link must be a profile string")
        bind = _opt(p, "bind", str, None, pw)
        parties[pid] = PartyEntry(pid, role, host, port, key, link, bind)
        seen_roles[role], seen_addr[(host, port)], seen_keys[key] = pid, pid, pid
    if len(parties) < 2:
        raise ConfigError(f"{where}: a session needs at least two parties")
    links: dict[frozenset, LinkProfile] = {}
    link_list = data.get("link", []) or []
    if not isinstance(link_list, list):
        raise ConfigError(f"{where}: 'link' must be a list of [[link]] tables")
    for i, ln in enumerate(link_list):
        lw = f"{where}: link #{i + 1}"
        if not isinstance(ln, dict):
            raise ConfigError(f"{lw}: must be a table")
        bad = set(ln) - _LINK_KEYS
        if bad:
            raise ConfigError(f"{lw}: unknown field(s) {', '.join(sorted(bad))}")
        between = _req(ln, "between", list, lw)
        if not all(isinstance(b, str) for b in between):
            raise ConfigError(f"{lw}: 'between' must name two parties (strings)")
        if len(between) != 2 or len(set(between)) != 2 or any(b not in parties for b in between):
            raise ConfigError(f"{lw}: 'between' must name two different parties of the file")
        pair = frozenset(between)
        if pair in links:
            raise ConfigError(f"{lw}: a profile for {sorted(pair)} is already given")
        links[pair] = parse_profile(_req(ln, "profile", str, lw))
    return Cluster(session, parties, network, ct, hb, pt, mf, links, transport=tr)


def load_cluster(path: str | os.PathLike) -> Cluster:
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"cluster file {str(p)!r} does not exist") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"cluster file {str(p)!r} is not valid TOML: {e}") from None
    except OSError as e:
        raise ConfigError(f"cluster file {str(p)!r} cannot be read: {e}") from None
    c = parse_cluster(data, f"cluster file {p.name}", p.resolve().parent)
    c.path = p.resolve()
    return c


# ---- writing ----------------------------------------------------------------------------
def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dump_cluster(c: Cluster) -> str:
    lines = [f"session = {_toml_str(c.session)}", f"network = {_toml_str(c.network.name)}",
             f"connect_timeout = {float(c.connect_timeout)!r}",
             f"heartbeat_interval = {float(c.heartbeat_interval)!r}",
             f"peer_timeout = {float(c.peer_timeout)!r}"]
    if c.max_frame is not None:
        lines.append(f"max_frame = {int(c.max_frame)}")
    lines.append(f"transport = {_toml_str(c.transport)}")
    for p in c.parties.values():
        lines += ["", "[[party]]", f"id = {_toml_str(p.id)}", f"role = {_toml_str(p.role)}",
                  f"host = {_toml_str(p.host)}", f"port = {p.port}",
                  f"public_key = {_toml_str(p.public_key.decode())}"]
        if p.link is not None:
            lines.append(f"link = {_toml_str(p.link.name)}")
        if p.bind is not None:
            lines.append(f"bind = {_toml_str(p.bind)}")
    for pair, prof in c.links.items():
        a, b = sorted(pair)
        lines += ["", "[[link]]", f"between = [{_toml_str(a)}, {_toml_str(b)}]", f"profile = {_toml_str(prof.name)}"]
    return "\n".join(lines) + "\n"


class PortReservation:
    """Loopback ports held for the parties of one run until ``close``.

    Each port is held by a socket bound *without* ``SO_REUSEADDR`` (so the bind fails on any
    port another socket holds, in any state) which then sets ``SO_REUSEADDR`` and never
    listens. On Linux a party's listener (``SO_REUSEADDR``, as both transports set it) can
    then bind and listen on that port while it is held, and nobody else's probe can take it:
    two launchers never hand out the same port, however busy the host."""

    def __init__(self, socks: list[socket.socket]):
        self._socks = socks
        self.ports = [s.getsockname()[1] for s in socks]

    def close(self) -> None:
        for s in self._socks:
            s.close()
        self._socks = []

    def __enter__(self) -> "PortReservation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def reserve_ports(n: int, host: str = "127.0.0.1", low: int = 20000, high: int = 32000) -> PortReservation:
    """``n`` distinct TCP ports on ``host``, held until the reservation is closed (see
    ``PortReservation``). Drawn below Linux's ephemeral range (32768+), so outgoing
    connections of other processes do not take them; kernel-chosen ports (bound, so held
    too) if that range is crowded."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    socks: list[socket.socket] = []
    try:
        tries = 0
        while len(socks) < n:
            tries += 1
            s = socket.socket(fam, socket.SOCK_STREAM)
            port = low + secrets.randbelow(high - low) if tries <= 50 * n else 0
            try:
                s.bind((host, port))       # (no SO_REUSEADDR yet: fails on any port in use)
            except OSError:
                s.close()
                continue
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # the party may bind it now
            socks.append(s)
    except BaseException:
        for s in socks:
            s.close()
        raise
    return PortReservation(socks)


def free_ports(n: int, host: str = "127.0.0.1", low: int = 20000, high: int = 32000) -> list[int]:
    """``n`` distinct TCP ports free right now on ``host`` (all held while choosing, then
    released: another process may take one before it is used; the local launcher holds
    its ports instead, ``reserve_ports``)."""
    with reserve_ports(n, host, low, high) as r:
        return list(r.ports)


def write_cluster(out_dir: str | os.PathLike, parties: list[dict], session: str = "session",
                  **settings) -> Path:
    """Write ``cluster.toml`` plus fresh keys (``keys/``) for ``parties`` = [{id, role, host, port, ...}]."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o700)
    entries: dict[str, PartyEntry] = {}
    for p in parties:
        ident = generate(p["id"])
        write_identity(ident, out / "keys")
        link = parse_profile(p["link"]) if p.get("link") else None
        entries[p["id"]] = PartyEntry(p["id"], p.get("role", p["id"]), p["host"], int(p["port"]),
                                      ident.public, link, p.get("bind"))
    net = parse_profile(settings.pop("network", "none"))
    c = Cluster(session, entries, net, **settings)
    path = out / "cluster.toml"
    path.write_text(dump_cluster(c))
    load_cluster(path)  # what we wrote must read back
    return path


def write_loopback_cluster(out_dir: str | os.PathLike, roles, session: str = "local", host: str = "127.0.0.1",
                           ports: list[int] | None = None, **settings) -> Path:
    """A cluster of ``roles`` on loopback with fresh keys (the local launcher's), on
    ``ports`` (e.g. a ``reserve_ports`` reservation's) or on ports free right now."""
    roles = list(roles)
    if ports is None:
        ports = free_ports(len(roles), host)
    elif len(ports) != len(roles):
        raise ConfigError(f"write_loopback_cluster: {len(ports)} ports for {len(roles)} roles")
    return write_cluster(out_dir, [{"id": r, "role": r, "host": host, "port": pt} for r, pt in zip(roles, ports)],
                         session=session, **settings)
