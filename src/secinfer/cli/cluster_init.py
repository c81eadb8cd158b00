"""``secinfer cluster init``: a cluster file (and keys) for one protocol's roles.

The roles come from the protocol's ``ProtocolSpec.roles`` (crisp: server, client, dealer;
stamp: p0, p1, p2; astra: its three servers, the model owner and the client; ...). Each
role is a party whose id is the role name. ``--hosts`` gives one host for every role (in
the order ``secinfer cluster init --protocol P --list-roles`` prints) or ``role=host``
pairs, or one host for all. Keys: fresh key pairs in ``<out>/keys/`` (copy each
``<role>.key_secret`` to that role's host only), or the public keys each host made itself
with ``secinfer keygen`` (``--public-keys DIR``: secrets never leave their hosts).
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from secinfer.errors import ConfigError

DEFAULT_PORT = 5701


def add_cluster_parser(sub) -> None:
    c = sub.add_parser("cluster", help="write a cluster file and keys for a protocol's parties (multi-host)")
    csub = c.add_subparsers(dest="cluster_cmd", required=True)
    i = csub.add_parser("init", help="cluster.toml (+ keys) for every role of a protocol")
    i.add_argument("--protocol", "-p", required=True, help="protocol whose roles the cluster has")
    i.add_argument("--hosts", default=None,
                   help="comma separated: one host per role in role order, role=host pairs, or one host for "
                        "all roles (default 127.0.0.1)")
    i.add_argument("--out", default="cluster", help="output folder (default: cluster/)")
    i.add_argument("--port", default=str(DEFAULT_PORT),
                   help=f"first port; role k listens on port+k (default {DEFAULT_PORT}); 'auto': free ports "
                        f"on this machine (one-machine tests)")
    i.add_argument("--public-keys", default=None, metavar="DIR",
                   help="use the <role>.key files each host made with `secinfer keygen` (no secret written "
                        "here); default: fresh key pairs in OUT/keys/")
    i.add_argument("--session", default=None, help="session name (default: PROTOCOL)")
    i.add_argument("--network", default="none", help="default link profile: none | lan | wan | bw=<MB/s>,lat=<ms>")
    i.add_argument("--transport", choices=("tcp", "zmq"), default="tcp", help="tcp (default) or zmq")
    i.add_argument("--peer-timeout", type=float, default=None, metavar="SECONDS",
                   help="declare a silent peer dead after this long")
    i.add_argument("--force", action="store_true", help="overwrite an existing cluster.toml")
    i.add_argument("--list-roles", action="store_true", help="only print the protocol's roles, in order")


def role_hosts(roles: list[str], hosts: str | None) -> dict[str, str]:
    """``--hosts`` -> {role: host}; every role exactly once."""
    items = [h.strip() for h in (hosts or "127.0.0.1").split(",") if h.strip()]
    if not items:
        raise ConfigError("--hosts is empty")
    if all("=" in h for h in items):
        out: dict[str, str] = {}
        for it in items:
            r, h = (s.strip() for s in it.split("=", 1))
            if r not in roles:
                raise ConfigError(f"--hosts: {r!r} is not a role of this protocol; roles: {', '.join(roles)}")
            if r in out:
                raise ConfigError(f"--hosts: role {r!r} given twice")
            if not h:
                raise ConfigError(f"--hosts: no host for role {r!r}")
            out[r] = h
        missing = [r for r in roles if r not in out]
        if missing:
            raise ConfigError(f"--hosts: no host for role(s) {', '.join(missing)}; roles: {', '.join(roles)}")
        return out
    if any("=" in h for h in items):
        raise ConfigError("--hosts: give either role=host pairs or plain hosts, not both")
    if len(items) == 1:
        return {r: items[0] for r in roles}
    if len(items) != len(roles):
        raise ConfigError(f"--hosts: {len(items)} hosts for {len(roles)} roles ({', '.join(roles)}); give one per "
                          f"role in this order, role=host pairs, or one host for all")
    return dict(zip(roles, items))


def role_ports(roles: list[str], hosts: dict[str, str], port: str) -> dict[str, int]:
    if port == "auto":
        from secinfer.runtime.cluster import free_ports

        out = {}
        for h in dict.fromkeys(hosts.values()):
            mine = [r for r in roles if hosts[r] == h]
            try:
                for r, p in zip(mine, free_ports(len(mine), h)):
                    out[r] = p
            except OSError as e:
                raise ConfigError(f"--port auto: cannot find free ports on {h!r} ({e}); "
                                  f"auto is for hosts of this machine: give --port N") from None
        return out
    try:
        base = int(port)
    except ValueError:
        raise ConfigError(f"--port must be a number or 'auto', not {port!r}") from None
    if not 1 <= base <= 65535 - len(roles):
        raise ConfigError(f"--port {base} leaves no room for {len(roles)} ports")
    return {r: base + k for k, r in enumerate(roles)}


def _role_duty(spec, role: str) -> str:
    duties = []
    if role == spec.model_role:
        duties.append("model owner: --model MODEL")
    if role == spec.input_role:
        duties.append("client: --input X --output Y")
    return "; ".join(duties) or "helper (no model, no input)"


def init_cluster(protocol: str, hosts: str | None = None, out: str | os.PathLike = "cluster",
                 port: str | int = DEFAULT_PORT, public_keys: str | None = None, session: str | None = None,
                 network: str = "none", transport: str = "tcp", peer_timeout: float | None = None,
                 force: bool = False) -> Path:
    """Write ``<out>/cluster.toml`` for every role of ``protocol`` (and ``<out>/keys/`` unless
    ``public_keys``); returns the path. Reads the file back before returning."""
    from secinfer.crypto.identity import generate, load_public, write_identity
    from secinfer.net.shaping import parse_profile
    from secinfer.protocols import registry
    from secinfer.runtime.cluster import Cluster, PartyEntry, dump_cluster, load_cluster

    spec = registry.get(protocol)
    roles = list(spec.roles)
    where = role_hosts(roles, hosts)
    ports = role_ports(roles, where, str(port))
    net = parse_profile(network)
    outp = Path(out)
    path = outp / "cluster.toml"
    if path.exists() and not force:
        raise ConfigError(f"{str(path)!r} exists; --force overwrites it (and its keys)")
    pubs: dict[str, bytes] = {}
    if public_keys:
        for r in roles:
            f = Path(public_keys) / f"{r}.key"
            if not f.is_file():
                raise ConfigError(f"--public-keys: no {str(f)!r} (make it on {where[r]} with "
                                  f"`secinfer keygen --out keys/ {r}` and copy the .key file here)")
            name, pub = load_public(f)
            if name != r:
                raise ConfigError(f"{str(f)!r} is the key of {name!r}, not of role {r!r}")
            pubs[r] = pub
    outp.mkdir(parents=True, exist_ok=True)
    if not public_keys:
        os.chmod(outp, 0o700)
        for r in roles:
            ident = generate(r)
            write_identity(ident, outp / "keys")
            pubs[r] = ident.public
    entries = {r: PartyEntry(r, r, where[r], ports[r], pubs[r]) for r in roles}
    settings = {"transport": transport}
    if peer_timeout is not None:
        settings["peer_timeout"] = float(peer_timeout)
    c = Cluster(session or protocol, entries, net, **settings)
    path.write_text(f"# secinfer cluster for protocol {spec.name!r}: roles {', '.join(roles)}\n" + dump_cluster(c))
    load_cluster(path).check_roles(roles)    # what we wrote must read back and fit the protocol
    return path


def party_commands(protocol: str, cluster_path: str | os.PathLike, nonce: str) -> list[tuple[str, str]]:
    """(role, command line) for every role, with placeholders MODEL, X.npy, Y.npy."""
    from secinfer.protocols import registry

    spec = registry.get(protocol)
    out = []
    for r in spec.roles:
        cmd = f"secinfer party --cluster {cluster_path} --id {r} --protocol {spec.name} --session {nonce}"
        if r == spec.model_role:
            cmd += " --model MODEL"
        if r == spec.input_role:
            cmd += " --input X.npy --output Y.npy"
        out.append((r, cmd))
    return out


def cmd_cluster(args) -> int:
    from secinfer.protocols import registry

    spec = registry.get(args.protocol)
    if args.list_roles:
        for r in spec.roles:
            print(f"{r:<12} {_role_duty(spec, r)}")
        return 0
    path = init_cluster(args.protocol, args.hosts, args.out, args.port, args.public_keys, args.session,
                        args.network, args.transport, args.peer_timeout, args.force)
    from secinfer.runtime.cluster import load_cluster

    c = load_cluster(path)
    print(f"wrote {path}")
    if not args.public_keys:
        print(f"wrote keys in {Path(args.out) / 'keys'}: copy each <role>.key_secret to that role's host only "
              f"(and cluster.toml to every host)", file=sys.stderr)
    if getattr(spec, "trust", ""):
        print(f"[secinfer] {spec.name}: {spec.trust}", file=sys.stderr)
    nonce = secrets.token_hex(16)
    print(f"\nparties of {spec.name} (start every one, any order, with the same --session):")
    for (r, cmd), p in zip(party_commands(spec.name, path, nonce), c.parties.values()):
        print(f"  # {r} on {p.host}:{p.port} ({_role_duty(spec, r)})")
        print(f"  {cmd}")
    return 0
