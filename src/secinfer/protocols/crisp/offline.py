"""Offline phase [CRISP Fig. 3]: the trusted dealer (the paper's F_FSS) and the
consume-once preprocessing store each party keeps its share of it in.

The dealer is its own role, ``dealer``, in its own process: it is the trusted provider of
correlated randomness the paper assumes for the offline phase [CRISP III-B: "assuming a
semi-trusted dealer ... or introducing a trusted third party"]. It learns the server's
MAC key mu (it must, to write mu into the MAC-twin payloads beta' = (mu, -mu r)
[CRISP Alg. 1]) and never sees the model or the input. It is never used silently: it appears
in the protocol's roles and every run names it.

What the dealer produces for one inference (``DealerOutput``):

* the input mask r_in (uniform in Z_2^k, one per input element), to the client, and
  (malicious) additive shares of mu r_in: the InitLin correlation that gives the parties
  shares of mu x without the client learning mu [CRISP Fig. 2 InitLin, "multiplication
  triplets"];
* for every FSS gate batch of the plan, the key pair of ``secinfer.crypto.fss.gates``
  (ReLU or ARS, with the MAC twin in the malicious setting), k_0 to the server, k_1 to
  the client.

Every item goes into the party's store (``PartyStore``: a
``secinfer.crypto.preprocessing.PreprocessingStore``, the project's provider interface,
that keeps gate keys as validated objects) under a label and is taken exactly once:
``take`` removes it and a second ``take`` raises ``PreprocessingReuseError``, so no key or
mask can be used twice within or across sessions; keys are fully validated when received
(or loaded) in the offline phase, their gate and party checked again when taken, and their
count by the gate.
"""

from __future__ import annotations

import os
import time

import numpy as np

from secinfer.crypto.fss.gates import GateKey, make_gate
from secinfer.arith.ring import Ring
from secinfer.crypto.preprocessing import ArrayItem, PreprocessingStore
from secinfer.errors import ConfigError, PreprocessingReuseError, ProtocolError, SerializationError
from secinfer.net.channel import ArraySpec
from secinfer.protocols.crisp.plan import gate_list

SERVER, CLIENT, DEALER = "server", "client", "dealer"
_MAX_KEY_BYTES = 1 << 31
# Gate keys travel and are stored in pieces of at most this many gates (~84 MB per party for
# a ReLU with MACs at n = 64): the dealer holds one piece at a time, a party evaluates one
# piece at a time, and no frame is so large that decoding it stalls a party for seconds.
KEY_PIECE = 16384


def key_pieces(count: int) -> list:
    """Sizes of the pieces a batch of ``count`` gate keys is delivered in."""
    return [min(KEY_PIECE, count - s) for s in range(0, count, KEY_PIECE)]


def wipe(store) -> None:
    """Consume (and so destroy) every item still in the store: session secrets never
    outlive the session, and nothing left over can be taken later."""
    for label in store.labels():
        store.take(label)


class Params:
    """Ring parameters of one session: data ring Z_2^n, share ring Z_2^k (k = n + s)."""

    def __init__(self, n: int, frac: int, malicious: bool, s: int = 40) -> None:
        self.n, self.f, self.malicious = n, frac, malicious
        self.s = int(s) if malicious else 0
        self.k = n + self.s
        if malicious and not (8 <= self.s and self.k <= 128):
            raise ConfigError(f"crisp: statistical parameter s = {s} must be >= 8 with n + s <= 128")

    def gate(self, kind: str):
        if kind == "ars":
            return make_gate("ars", self.n, self.k, mac=self.malicious, frac_bits=self.f)
        return make_gate(kind, self.n, self.k, mac=self.malicious)


class PartyStore:
    """A party's consume-once store that keeps its FSS gate keys as the validated
    ``GateKey`` objects (validated once, when received or loaded in the offline phase),
    so the online phase does not serialise and re-validate them (with MACs at n = 64,
    ~40 MB of correction words per 16384 gates). Other items live in the
    ``PreprocessingStore`` underneath. Same contract: ``take`` wipes the item, a second
    ``take`` or a ``put`` under a used label raises ``PreprocessingReuseError``, and a
    gate key is handed out only for the gate and party it was validated for."""

    def __init__(self, party: str, base: PreprocessingStore | None = None) -> None:
        self.party = party
        self._base = base if base is not None else PreprocessingStore(party)
        self._keys: dict = {}
        self._used: set = set()

    def put(self, label: str, item) -> None:
        if not isinstance(item, GateKey):
            if label in self._keys or label in self._used:
                raise PreprocessingReuseError(f"{self.party}: preprocessing label {label!r} already used")
            self._base.put(label, item)
            return
        if label in self._keys or label in self._used or label in self._base:
            raise PreprocessingReuseError(f"{self.party}: preprocessing label {label!r} already used; "
                                          "labels are single-use")
        self._keys[label] = item

    def take(self, label: str, kind: str | None = None, expect=None, party: int | None = None, **validate):
        if label in self._used:
            raise PreprocessingReuseError(f"{self.party}: preprocessing item {label!r} was already consumed")
        if label not in self._keys:
            extra = {k: v for k, v in (("expect", expect), ("party", party)) if v is not None}
            return self._base.take(label, kind, **extra, **validate)
        key = self._keys.pop(label)
        self._used.add(label)
        if kind not in (None, GateKey.kind):
            raise SerializationError(f"preprocessing item {label!r} is a {GateKey.kind!r}, expected {kind!r}")
        if expect is not None and key.gate.spec() != expect.spec():
            raise SerializationError(f"FSS gate key is for {key.gate.spec()}, expected {expect.spec()}")
        if party is not None and key.party != party:
            raise SerializationError(f"FSS gate key belongs to party {key.party}, expected party {party}")
        return key

    def __contains__(self, label: str) -> bool:
        return label in self._keys or label in self._base

    def labels(self) -> list:
        return sorted(set(self._keys) | set(self._base.labels()))

    def absorb_keys(self, prm: "Params", steps: list, party: int) -> None:
        """Offline: validate every gate key of the plan now held as arrays underneath
        (a store loaded from disk) and keep it as an object."""
        for (label, _i, _j, kind, _size) in gate_labels(steps):
            if label in self._base:
                self._keys[label] = self._base.take(label, GateKey.kind, expect=prm.gate(kind), party=party)


def gate_label(step: int, pos: int, piece: int = 0) -> str:
    return f"gate/{step}/{pos}" + (f"/{piece}" if piece else "")


def gate_labels(steps: list) -> list:
    """(label, step, pos, kind, piece size) of every stored key piece, in plan order."""
    return [(gate_label(i, j, p), i, j, kind, size) for (i, j, kind, count) in gate_list(steps)
            for p, size in enumerate(key_pieces(count))]


def take_gate_key(store: PartyStore, prm: "Params", kind: str, step: int, pos: int, party: int) -> list:
    """This party's key pieces for gate batch (step, pos), each taken (and so destroyed) once;
    the gate checks that they cover its input exactly."""
    gate = prm.gate(kind)
    keys = [store.take(gate_label(step, pos), GateKey.kind, expect=gate, party=party)]
    present = set(store.labels())
    while gate_label(step, pos, len(keys)) in present:
        keys.append(store.take(gate_label(step, pos, len(keys)), GateKey.kind, expect=gate, party=party))
    return keys


def take_in_mask(store: PreprocessingStore) -> dict:
    return store.take("in-mask", ArrayItem.kind).arrays


def run_dealer(ep, prm: Params, steps: list, prg, to_client=None) -> dict:
    """The dealer's whole job (offline phase). Returns metering info. ``to_client(tag,
    *arrays)``: where the client's half goes (default: sent to the client now; serving
    keeps it for the session the item is spent on, ``HeldClientHalf``)."""
    g = Ring(prm.k)
    if to_client is None:
        def to_client(tag, *arrays):
            ep.send(CLIENT, tag, *arrays)
    mu = None
    if prm.malicious:
        (mu_arr,) = ep.recv(SERVER, "crisp/mu", ArraySpec(np.uint64, (g.limbs,)))
        if not g.is_reduced(mu_arr[None]):
            raise ProtocolError("crisp dealer: MAC key outside Z_2^k")
        mu = int(g.to_int(mu_arr[None])[0])
    srv, cli = _in_masks(prm, prg, steps, g.from_int(mu) if prm.malicious else None)
    if srv is not None:
        ep.send(SERVER, "crisp/in-mask", srv["mu_r"])
    to_client("crisp/in-mask", *cli.values())
    key_bytes, by_kind, t_gen, t_ser = 0, {}, 0.0, 0.0
    for (label, i, j, kind, size) in gate_labels(steps):
        gate = prm.gate(kind)
        t0 = time.perf_counter()
        k0, k1 = gate.gen(prg.derive(label), size, mac_key=mu)
        t1 = time.perf_counter()
        b0, b1 = k0.to_buffer(), k1.to_buffer()
        t_ser += time.perf_counter() - t1
        t_gen += t1 - t0
        del k0, k1
        ep.send(SERVER, "crisp/key/" + label[5:], b0)
        to_client("crisp/key/" + label[5:], b1)
        key_bytes += b0.nbytes + b1.nbytes
        ent = by_kind.setdefault(gate.cost().gate, {"gates": 0, "bytes_both": 0})
        ent["gates"] += size
        ent["bytes_both"] += len(b0) + len(b1)
    return {"key_bytes": key_bytes, "key_bytes_by_gate": by_kind, "keygen_s": t_gen, "key_serialise_s": t_ser}


class HeldClientHalf:
    """The client's half of one dealer output, made ahead (serving: ``prepare`` of the
    dealer) and kept in order until the session it belongs to: ``send(ep)`` delivers it,
    message for message as ``run_dealer`` would have, and wipes it; a second ``send``
    (or one after ``wipe``) is a ``PreprocessingReuseError``."""

    def __init__(self) -> None:
        self._msgs: list | None = []

    def __call__(self, tag: str, *arrays) -> None:       # run_dealer's to_client
        self._msgs.append((tag, [np.array(a, copy=True) for a in arrays]))

    def __len__(self) -> int:
        return len(self._msgs or ())

    def send(self, ep) -> None:
        if self._msgs is None:
            raise PreprocessingReuseError("dealer: this client half was sent (or wiped) already")
        msgs, self._msgs = self._msgs, None
        msgs.reverse()
        try:
            while msgs:    # the transport may still hold a sent array (paced links): dropped, not zeroed
                tag, arrays = msgs.pop()
                ep.send(CLIENT, tag, *arrays)
                del arrays
        finally:
            _zero(msgs)    # what a failed session did not send

    def wipe(self) -> None:
        msgs, self._msgs = self._msgs, None
        _zero(msgs or [])


def _zero(msgs: list) -> None:
    for _tag, arrays in msgs:
        for a in arrays:
            a.fill(0)
    msgs.clear()


def _in_masks(prm: Params, prg, steps: list, mu_arr) -> tuple:
    """InitLin's correlation [CRISP Fig. 2]: r_in for the client and (malicious) additive shares
    of mu r_in: (server's arrays or None, client's arrays)."""
    g = Ring(prm.k)
    r_in = g.random(prg, (int(np.prod(steps[0].out_shape)),))
    if not prm.malicious:
        return None, {"r": r_in}
    m0 = g.random(prg, r_in.shape[:-1])
    return {"mu_r": m0}, {"r": r_in, "mu_r": g.sub(g.mul(r_in, mu_arr[None, :]), m0)}


def store_path(directory, role: str) -> str:
    return os.path.join(os.fspath(directory), f"crisp-{role}.npz")


def produce_ahead(steps: list, prm: Params, prg, server_path, client_path) -> dict:
    """The dealer running *ahead of time*: the same items as ``run_dealer`` (the dealer also
    samples mu here, since no server is online), written as the two parties' stores
    (``PreprocessingStore.save``). A party loads its file with ``PreprocessingStore.load``,
    which deletes it, so one file feeds one session only."""
    g = Ring(prm.k)
    st0, st1 = PreprocessingStore(SERVER), PreprocessingStore(CLIENT)
    mu_arr = g.random(prg.derive("mac-key"), ()) if prm.malicious else None
    mu = None if mu_arr is None else int(g.to_int(mu_arr[None])[0])
    srv, cli = _in_masks(prm, prg, steps, mu_arr)
    if srv is not None:
        st0.put("mu", ArrayItem({"mu": mu_arr}))
        st0.put("in-mask", ArrayItem(srv))
    st1.put("in-mask", ArrayItem(cli))
    for (label, i, j, kind, size) in gate_labels(steps):
        k0, k1 = prm.gate(kind).gen(prg.derive(label), size, mac_key=mu)
        st0.put(label, k0)
        st1.put(label, k1)
    st0.save(server_path)
    st1.save(client_path)
    return {"server_bytes": st0.nbytes(), "client_bytes": st1.nbytes()}


def load_ahead(path, prm: Params, steps: list, party: int) -> PartyStore:
    """Load (and delete) a store made by ``produce_ahead``; check it covers this plan and
    validate its gate keys (offline)."""
    base = PreprocessingStore.load(path)
    need = {"in-mask"} | {lab[0] for lab in gate_labels(steps)}
    if party == 0 and prm.malicious:
        need.add("mu")
    if set(base.labels()) != need:
        raise ProtocolError("crisp: the stored preprocessing does not match this inference's plan")
    store = PartyStore(base.party, base)
    store.absorb_keys(prm, steps, party)
    return store


def receive_preprocessing(ep, prm: Params, steps: list, party: int, store: PartyStore) -> None:
    """Server (party 0) / client (party 1): receive and store this party's dealer output."""
    g = Ring(prm.k)
    n_in = int(np.prod(steps[0].out_shape))
    spec = ArraySpec(np.uint64, (n_in, g.limbs))
    if party == 0:
        if prm.malicious:
            (m0,) = ep.recv(DEALER, "crisp/in-mask", spec)
            store.put("in-mask", ArrayItem({"mu_r": m0}))
    else:
        if prm.malicious:
            r_in, m1 = ep.recv(DEALER, "crisp/in-mask", spec, spec)
            store.put("in-mask", ArrayItem({"r": r_in, "mu_r": m1}))
        else:
            (r_in,) = ep.recv(DEALER, "crisp/in-mask", spec)
            store.put("in-mask", ArrayItem({"r": r_in}))
    for (label, i, j, kind, size) in gate_labels(steps):
        gate = prm.gate(kind)
        (raw,) = ep.recv(DEALER, "crisp/key/" + label[5:], ArraySpec(np.uint8, (None,), max_elems=_MAX_KEY_BYTES))
        key = GateKey.from_bytes(raw, expect=gate, party=party)   # validated (exact length)
        del raw
        if key.count != size:
            raise ProtocolError(f"crisp: dealer key piece {label} holds {key.count} gates, plan says {size}")
        store.put(label, key)
