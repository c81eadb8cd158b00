"""The client's proof of plaintext knowledge inside Pi_Lin  [CRISP Fig. 2 note a].

Every ciphertext the client sends to the HE engine is covered: the engine announces how
many ciphertexts a layer group will carry (``begin``), the client records each one's
witness as it encrypts (``ClientBatch.add``) and the server each validated ciphertext
(``ServerBatch.add``); when N_MAX of them (or the group's last) are in, the parties run
one proof (``crypto.zk.popk``), so the server has checked every ciphertext before it
computes on any of them and before anything derived from them returns to the client.

Messages of proof k of linear step i (attempt a = 0, 1, ..; restarts are rare, 2^-3):

    client -> server  crisp/lin/i/popk/k/h<a>    32-byte hash of the commitments
    server -> client  crisp/lin/i/popk/k/ch<a>   16-byte fresh challenge seed
    client -> server  crisp/lin/i/popk/k/z<a>    packed responses, or one 0 byte = restart

A failed check aborts with ``ProtocolAbort("crisp-popk", suspect="client")`` (``ep.require``).

The statement is relative to the client's public key, so in the setup phase the key
itself is proven well formed (``crypto.zk.keyproof``, :func:`key_setup_server` /
:func:`key_setup_client`):

    server -> client  crisp/he-a           16-byte fresh seed of a = pk1 (uniform in R_Q)
    client -> server  crisp/he-pk0         pk0 = e - a s, coefficient residues (QCount, N),
                                           each row packed at its prime's width
    client -> server  crisp/he-pk/h<a>     32-byte hash of the commitments
    server -> client  crisp/he-pk/ch<a>    16-byte fresh challenge seed
    client -> server  crisp/he-pk/z<a>     packed responses, or one 0 byte = restart

and a failed key proof aborts with ``ProtocolAbort("crisp-pk", suspect="client")``.
"""

from __future__ import annotations

import time

import numpy as np

from secinfer.crypto.he import rlwe
from secinfer.crypto.he.errors import HEError
from secinfer.crypto.he.trimmed import pack_poly, packed_poly_size, unpack_poly
from secinfer.crypto.zk import keyproof, popk
from secinfer.errors import FrameError, ProtocolAbort, ProtocolError
from secinfer.net.channel import ArraySpec

SERVER, CLIENT = "server", "client"
CHECK = "crisp-popk"
KEY_CHECK = "crisp-pk"
A_SEED_BYTES = 16


def _tick(eng, key: str, t0: float) -> float:
    """Add the seconds since t0 to eng.timing[key] (reported in the result info)."""
    t1 = time.perf_counter()
    eng.timing[key] = eng.timing.get(key, 0.0) + t1 - t0
    return t1


def support_positions(bud, n_ring: int) -> np.ndarray:
    """Coefficients where the client's digits may be non-zero (real half and MAC half):
    rows r S + [0, c) of the row layout, [0, C_b Hp Wp) of the channel-packed one."""
    half = n_ring // 2
    if hasattr(bud, "Hp"):
        base = np.arange(bud.C_b * bud.Hp * bud.Wp, dtype=np.int64)
    else:
        base = (np.arange(bud.rows_per)[:, None] * bud.S + np.arange(bud.c)[None, :]).reshape(-1)
    if base.size == 0 or base.max() >= half:
        raise ProtocolError("crisp: layout exceeds half the ring (no room for the MAC half)")
    return np.concatenate([base, half + base]).astype(np.int64)


def precommit_all(eng, jobs) -> dict:
    """Client, offline: (mask seed, h) for every proof of the announced layer groups
    ``jobs`` = [(idx, group, budget, ciphertexts)], keyed by proof and geometry."""
    for idx, group, bud, total in jobs:
        sup = support_positions(bud, eng.params.n)
        for k, cnt in enumerate(_chunks(total)):
            key = (idx, group, k, bud.level, bud.delta, bud.D, cnt, sup.size)
            eng._precommit[key] = popk.precommit(eng.params, eng.pk, bud.level, bud.delta, bud.D, sup,
                                                 cnt, eng.prg.derive(f"popk-pre/{idx}/{group}.{k}"), eng.sigma)
    expand_next(eng)
    return {"popk_precommits": len(eng._precommit)}


def expand_next(eng) -> None:
    """Client: regenerate the masks of the next unused precommitment now (offline for the
    first proof, then right after each response, while the server verifies), so that
    committing is not on the online critical path. One proof's masks are held at a time."""
    for key, pre in eng._precommit.items():       # insertion order = proof order
        if len(pre) == 3:
            eng._precommit[key] = popk.expand_masks(pre, eng.params.n, key[6], key[7], key[5], eng.sigma)
        return


def _chunks(total: int) -> list:
    return [min(popk.N_MAX, total - s) for s in range(0, total, popk.N_MAX)]


class _Batch:
    def __init__(self, eng, idx: int, group: int, bud, total: int) -> None:
        self.eng, self.idx, self.group, self.bud = eng, idx, group, bud
        self.todo = _chunks(total)
        self.items: list = []
        self.proof_no = 0
        self.support = support_positions(bud, eng.params.n)

    @property
    def done(self) -> bool:
        return not self.todo and not self.items

    def _tag(self, what: str, a: int) -> str:
        return f"crisp/lin/{self.idx}/popk/{self.group}.{self.proof_no}/{what}{a}"

    def _full(self) -> bool:
        if not self.todo:
            raise ProtocolError(f"crisp: more client ciphertexts than announced at step {self.idx}")
        return len(self.items) == self.todo[0]

    def _key(self) -> tuple:
        b = self.bud
        return (self.idx, self.group, self.proof_no, b.level, b.delta, b.D, len(self.items),
                self.support.size)

    def _next(self) -> None:
        self.items = []
        self.todo.pop(0)
        self.proof_no += 1


class ClientBatch(_Batch):
    def add(self, ep, witness) -> None:
        self.items.append(witness)
        if self._full():
            self._prove(ep)
            self._next()

    def _prove(self, ep) -> None:
        e, b = self.eng, self.bud
        prover = popk.Prover(e.params, e.pk, b.level, b.delta, b.D, self.support, self.items,
                             e.prg.derive(f"popk/{self.idx}/{self.group}.{self.proof_no}"), e.sigma)
        pre = e._precommit.pop(self._key(), None)
        for a in range(popk.MAX_ATTEMPTS):
            t0 = time.perf_counter()
            h = prover.commit(pre if a == 0 and pre else None)
            _tick(e, "popk_commit", t0)
            ep.send(SERVER, self._tag("h", a), np.frombuffer(h, np.uint8))
            (seed,) = ep.recv(SERVER, self._tag("ch", a), ArraySpec(np.uint8, (popk.SEED_BYTES,)))
            t0 = time.perf_counter()
            z = prover.respond(seed.tobytes())
            _tick(e, "popk_respond", t0)
            if z is None:
                ep.send(SERVER, self._tag("z", a), np.zeros(1, np.uint8))
                continue
            ep.send(SERVER, self._tag("z", a), np.frombuffer(z, np.uint8))
            expand_next(e)     # idle until the answers arrive: prepare the next proof
            return
        raise ProtocolError(f"crisp: no proof attempt accepted in {popk.MAX_ATTEMPTS} (step {self.idx})")


class ServerBatch(_Batch):
    """Server side. When a proof's last ciphertext is in, the server reads h and issues the
    challenge at once (``add``), but reads and checks the response only in ``settle``,
    which the engine calls before anything derived from the batch leaves the server: the
    products and masked answers are computed while the client responds, and sent only
    after the check."""

    def __init__(self, eng, idx, group, bud, total, prg) -> None:
        super().__init__(eng, idx, group, bud, total)
        self.prg = prg
        self.pending = 0      # received, not yet proven
        self._open = None     # (verifier, attempt, seed, h) of the challenge issued

    def add(self, ep, ct) -> None:
        self.settle(ep)       # no-op: the engine settles before it reads the next ciphertext
        self.items.append(ct)
        self.pending += 1
        if self._full():
            e, b = self.eng, self.bud
            ver = popk.Verifier(e.params, e.pk, b.level, b.delta, b.D, self.support, self.items, e.sigma)
            self._challenge(ep, ver, 0)

    def _challenge(self, ep, ver, a: int) -> None:
        (h,) = ep.recv(CLIENT, self._tag("h", a), ArraySpec(np.uint8, (popk.HASH_BYTES,)))
        seed = self.prg.seed()          # drawn only now: the ciphertexts and h are fixed
        ep.send(CLIENT, self._tag("ch", a), np.frombuffer(seed, np.uint8))
        self._open = (ver, a, seed, h)

    def settle(self, ep) -> None:
        """Read the response to the issued challenge and check it (restarts included);
        abort on failure. Afterwards nothing of this group is unproven."""
        if self._open is None:
            return
        e = self.eng
        ver, a, seed, h = self._open
        spec_z = ArraySpec(np.uint8, (None,), max_elems=ver.g.payload_bytes)
        while True:
            t0 = time.perf_counter()
            (z,) = ep.recv(CLIENT, self._tag("z", a), spec_z)
            t0 = _tick(e, "popk_wait_response", t0)
            if z.size == 1 and z[0] == 0:
                a += 1
                if a == popk.MAX_ATTEMPTS:
                    ep.require(False, CHECK, CLIENT, f"step {self.idx}: no accepted proof in {a} attempts")
                    raise ProtocolError(f"crisp: step {self.idx}: no accepted proof (check {CHECK} off)")
                self._challenge(ep, ver, a)
                _, a, seed, h = self._open
                continue
            ok, why = ver.check(h.tobytes(), seed, z.tobytes())
            _tick(e, "popk_verify", t0)
            ep.require(ok, CHECK, CLIENT, f"step {self.idx}: {why}")
            break
        self._open = None
        self.pending = 0
        self._next()


def hardened(bud, params, sec: int):
    """Re-derive a layer budget from what the proof guarantees (soundness slack included)
    instead of the honest bounds, so a client that passes the proof with out-of-range but
    provable values still cannot break the masking / flooding argument."""
    bud.rebudget(keyproof.ProvenBounds(params.n, sec))
    return bud


# ---- setup: the client's public key, proven well formed --------------------------------
def key_setup_server(eng, ep, prg):
    """Server: choose a (seed), receive pk0, verify the proof of short (s, e) with
    pk0 + a s = e; returns the Q-only public key (pk0, a) the engine then uses."""
    prm = eng.params
    a_seed = prg.seed()[:A_SEED_BYTES]
    ep.send(CLIENT, "crisp/he-a", np.frombuffer(a_seed, np.uint8))
    top = len(prm.q) - 1
    (raw,) = ep.recv(CLIENT, "crisp/he-pk0", ArraySpec(np.uint8, (packed_poly_size(prm, top),)))
    try:     # exact length, every residue below its prime, zero padding: else FrameError
        pk = rlwe.public_key_from_parts(prm, a_seed, unpack_poly(prm, raw, top))
    except HEError as e:
        raise FrameError(f"crisp: client pk0 rejected: {e}") from None
    ver = keyproof.KeyVerifier(prm, pk, eng.sigma)
    spec_z = ArraySpec(np.uint8, (None,), max_elems=ver.g.payload_bytes)
    for a in range(popk.MAX_ATTEMPTS):
        (h,) = ep.recv(CLIENT, f"crisp/he-pk/h{a}", ArraySpec(np.uint8, (popk.HASH_BYTES,)))
        seed = prg.seed()          # drawn only now: pk0 and h are fixed
        ep.send(CLIENT, f"crisp/he-pk/ch{a}", np.frombuffer(seed, np.uint8))
        (z,) = ep.recv(CLIENT, f"crisp/he-pk/z{a}", spec_z)
        if z.size == 1 and z[0] == 0:
            continue
        ok, why = ver.check(h.tobytes(), seed, z.tobytes())
        _require_key(ep, ok, pk, f"public key: {why}")
        return pk
    _require_key(ep, False, pk, f"public key: no accepted proof in {popk.MAX_ATTEMPTS} attempts")
    raise ProtocolError(f"crisp: no accepted key proof (check {KEY_CHECK} off)")


def _require_key(ep, ok, pk, why: str) -> None:
    """The key proof's check; on failure the key is freed before the abort propagates."""
    try:
        ep.require(ok, KEY_CHECK, CLIENT, why)
    except ProtocolAbort:
        pk.close()
        raise


def key_setup_client(eng, ep, prg):
    """Client: key pair for the server's a, pk0 to the server, proof of short (s, e)."""
    prm = eng.params
    (a_seed,) = ep.recv(SERVER, "crisp/he-a", ArraySpec(np.uint8, (A_SEED_BYTES,)))
    kp, s, e = rlwe.keygen_seeded(prm, a_seed.tobytes(), prg.seed())
    ep.send(SERVER, "crisp/he-pk0", np.frombuffer(pack_poly(prm, kp.pk.poly(0)), np.uint8))
    prover = keyproof.KeyProver(prm, kp.pk, s, e, prg.derive("keyproof"), eng.sigma)
    for a in range(popk.MAX_ATTEMPTS):
        ep.send(SERVER, f"crisp/he-pk/h{a}", np.frombuffer(prover.commit(), np.uint8))
        (seed,) = ep.recv(SERVER, f"crisp/he-pk/ch{a}", ArraySpec(np.uint8, (popk.SEED_BYTES,)))
        z = prover.respond(seed.tobytes())
        if z is None:
            ep.send(SERVER, f"crisp/he-pk/z{a}", np.zeros(1, np.uint8))
            continue
        ep.send(SERVER, f"crisp/he-pk/z{a}", np.frombuffer(z, np.uint8))
        return kp
    raise ProtocolError(f"crisp: no key-proof attempt accepted in {popk.MAX_ATTEMPTS}")
