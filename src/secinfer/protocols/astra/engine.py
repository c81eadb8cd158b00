"""The ASTRA 3PC core over Z_2^l: Pi_sh, Pi_add, Pi_mul, Pi_rec, Pi_dp (semi-honest and malicious).

Every server (p0, p1, p2) builds one ``AstraEngine`` and calls the same methods in the same
order; each method does that party's part. Methods come in offline/online pairs: the offline
half works on masks only (P0 is the distributor), the online half on masked values (P1, P2
are the evaluators) [ASTRA 4.1]. Malicious security [ASTRA 4.2] adds

* Pi_sh^m: P1, P2 cross-check H(m_x) of every value an outside owner shared (deferred);
* Pi_rec^m [ASTRA Fig. 6]: every missing share comes as a value from one holder and a hash from
  the other;
* Pi_mul^m [ASTRA Fig. 8]: chi reaches P0 offline, the triple (a, b, c) built from it is checked
  with Pi_prc against a triple from Pi_trip (``triples.py``) when ``finish_offline`` runs;
  online P1 sends m*_x, m*_y, P2 their hash, P0 answers with H(m*_z) which the evaluators
  check in ``verify`` before anything is revealed;
* Pi_dp^m [ASTRA Lemma 5.1]: the same with per-wire pads, so the online cost is 2d + 2 elements.

Deferred incoming hashes are checked in ``verify()``; callers run it before every reveal.
The adversarial tests make a party deviate from outside (tests/adversary.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from secinfer.arith.ring import Ring
from secinfer.errors import ConfigError
from secinfer.net.channel import ArraySpec
from secinfer.protocols.astra.triples import check_triples
from secinfer.protocols.rep3.digest import H_SPEC, RunningHashes, digest, digest_bytes
from secinfer.protocols.rep3.wire import pack, packed_spec, unpack
from secinfer.sharing.astra import AShare

EVALUATORS = ("p1", "p2")


def mstar_pad(key: bytes, mstar_x: np.ndarray) -> np.ndarray:
    """PRF_k02(m*_x): keyed BLAKE2b (a PRF under a secret key) of m*_x's shape and bytes, 32
    bytes as a uint8 array; masks P0's H(m*_z) in a receiver-checked product."""
    a = np.ascontiguousarray(mstar_x)
    h = hashlib.blake2b(str(a.shape).encode(), digest_size=32, key=key, person=b"astra-mstar-pad")
    h.update(a.tobytes())
    return np.frombuffer(h.digest(), dtype=np.uint8)


@dataclass
class MulPrep:
    """The offline state of one product (Pi_mul / Pi_dp [ASTRA Fig. 3, 8, 11]) for its online half."""

    prod_shape: tuple | None          # (B, K, N) of a dot product, None for elementwise
    lab: str = ""
    check_at: str | None = None       # the outside receiver of a receiver-checked product
    g1: np.ndarray | None = None      # [gamma]_1, [gamma]_2
    g2: np.ndarray | None = None
    dx: np.ndarray | None = None      # malicious: delta_x, delta_y, delta_z (evaluators)
    dy: np.ndarray | None = None
    dz: np.ndarray | None = None
    chi: np.ndarray | None = None     # malicious, P0: chi_1 + chi_2
    dz_sum: np.ndarray | None = None
    base: np.ndarray | None = None    # m_y known offline: [l_z]_i - [l_x]_i m_y + [gamma]_i
    coef: np.ndarray | None = None    # ... and the coefficient of m_x
    g_sum: np.ndarray | None = None   # otherwise: [gamma]_i summed over the inner dimension
    mstar_y: np.ndarray | None = None
    pad_key: bytes | None = None      # receiver-checked: the PRF key of P0's pad (k_02)
    p0_const: np.ndarray | None = None  # malicious, P0: l_z + 2 gamma + chi (- m*_y l_x)
    lx: np.ndarray | None = None
    ly: np.ndarray | None = None
    mz_check: tuple = ()              # receiver-checked: the hashes that ride with the output


class AstraEngine:
    def __init__(self, ep, role: str, keys, security: str, bits: int = 64,
                 bucket: int | None = None, opened: int | None = None, prg=None) -> None:
        if role not in ("p0", "p1", "p2"):
            raise ConfigError(f"AstraEngine runs on servers only, not {role!r}")
        self.ep, self.role, self.keys, self.security = ep, role, keys, security
        self.malicious = security in ("malicious", "fair")
        self.bits = bits
        self.R = Ring(bits)
        self.out_h = RunningHashes("astra-verify")   # (peer, check): hashes to send at verify()
        self.in_h = RunningHashes("astra-verify")    # (peer, check): hashes expected at verify()
        self.triple_checks: list = []      # (a, b, c) shares awaiting Pi_prc
        self.bucket, self.opened = bucket, opened
        self.prg = prg
        self._n = 0                        # op counter: fresh labels for every call

    # ---- helpers --------------------------------------------------------------------
    def _label(self, name: str) -> str:
        self._n += 1
        return f"{name}#{self._n}/{self.bits}"

    def draw(self, key: str, label: str, shape) -> np.ndarray:
        return self.keys.stream(key, label).ring(tuple(shape), self.bits)

    def spec(self, shape) -> ArraySpec:
        return ArraySpec(np.uint64, tuple(shape))

    def send(self, peer: str, tag: str, *arrays) -> None:
        """Send ring elements (packed to the ring's width)."""
        self.ep.send(peer, tag, *(pack(a, self.bits) for a in arrays))

    def recv(self, peer: str, tag: str, *shapes) -> list:
        got = self.ep.recv(peer, tag, *(packed_spec(self.bits, s) for s in shapes))
        return [unpack(g, self.bits, s) for g, s in zip(got, shapes)]

    def recv1(self, peer: str, tag: str, shape) -> np.ndarray:
        return self.recv(peer, tag, shape)[0]

    def send_hash(self, peer: str, check: str, *arrays) -> None:
        """Fold arrays into the running hash this party sends ``peer`` at ``verify``."""
        self.out_h.fold(peer, check, *arrays)

    def expect_hash(self, peer: str, check: str, *arrays) -> None:
        """Fold arrays into the running hash this party expects from ``peer`` at ``verify``."""
        self.in_h.fold(peer, check, *arrays)

    def verify(self) -> None:
        """One round: every server sends every other server its running hashes (one message,
        sorted by check name), then compares what it expected; abort on the first mismatch.
        Amortises all hash checks of [ASTRA 4.2] into a single message per pair."""
        self.verify_finish(self.verify_start())

    def verify_start(self, peers=None) -> dict:
        """First half of ``verify``: send the running hashes and fix the expected ones, for
        every other server or only ``peers``. Callers may run further steps that fold nothing
        for those servers (e.g. the garbled comparison, whose checks are immediate) before
        ``verify_finish``, so the verify message travels in parallel with them; it must
        finish before anything is revealed (``open_to`` refuses while a check is pending).
        With ``peers`` (in the order given), a check whose hashes are complete can leave
        before the others are."""
        servers = [p for p in (("p0", "p1", "p2") if peers is None else peers) if p != self.role]
        expected = {}
        for p in servers:
            out = self.verify_payload(p)
            if out is not None:   # every check is folded by both ends, so an empty message is not sent
                self.ep.send(p, "astra/verify", out)
            want = self.verify_expected(p)
            if want:
                expected[p] = want
        return expected

    def verify_payload(self, peer: str) -> np.ndarray | None:
        """The running hashes for ``peer`` as (checks, 32) bytes, sorted by check name (None
        if there is none), and forget them: the part of a verify message that another frame
        to ``peer`` may carry instead (``products_send``)."""
        got = self.out_h.pop_peer(peer)
        return np.stack([np.frombuffer(h, np.uint8) for _, h in got]) if got else None

    def verify_expected(self, peer: str) -> list:
        """The hashes expected from ``peer`` [(check, 32-byte string)], sorted, and forget them."""
        return self.in_h.pop_peer(peer)

    def verify_compare(self, peer: str, want: list, got: np.ndarray) -> None:
        for i, (c, h) in enumerate(want):
            self.ep.require(got[i].tobytes() == h, c, peer, "hash check failed")   # byte strings: cheap

    def verify_finish(self, expected: dict, peers=None) -> None:
        """Second half of ``verify``: receive the hashes of ``peers`` (default: all whose
        message is still due) and compare. Messages between two parties are ordered, so a
        step between the halves that receives from a server calls this for that server
        first."""
        ep = self.ep
        for p in list(expected) if peers is None else [q for q in peers if q in expected]:
            if self.out_h.has_peer(p) or self.in_h.has_peer(p):
                raise ConfigError(f"a hash check with {p} was folded between verify_start and verify_finish")
            want = expected.pop(p)
            self.verify_compare(p, want, ep.recv_one(p, "astra/verify", ArraySpec(np.uint8, (len(want), 32))))

    def require_verified(self) -> None:
        """Every reveal is preceded by the checks [ASTRA 4.2]: refuse while a folded hash
        has not been compared (a programming error, never a peer's)."""
        if self.malicious and (self.out_h or self.in_h):
            raise ConfigError(f"reveal with unverified hash checks {sorted(self.out_h.keys() | self.in_h.keys())}")

    # ---- input sharing: Pi_sh [ASTRA Fig. 1], Pi_sh^m [ASTRA 4.2] -------------------------------
    @staticmethod
    def mask_keys(owner: str) -> tuple[str, str]:
        return {"p0": ("01", "02"), "p1": ("01", "P"), "p2": ("P", "02"),
                "model_owner": ("M1", "M2"), "client": ("C1", "C2")}[owner]

    def share_offline(self, owner: str, shape, label: str) -> tuple[AShare, np.ndarray | None]:
        """Masks for a value ``owner`` will input. Returns (share, full lambda if I own it)."""
        k1, k2 = self.mask_keys(owner)
        r = self.role
        l1 = self.draw(k1, label, shape) if (r in ("p0", "p1") or r == owner) else None
        l2 = self.draw(k2, label, shape) if (r in ("p0", "p2") or r == owner) else None
        lam = self.R.add(l1, l2) if r == owner else None
        keep1 = l1 if r in ("p0", "p1") else None
        keep2 = l2 if r in ("p0", "p2") else None
        return AShare(self.bits, None, keep1, keep2), lam

    def share_online(self, owner: str, sh: AShare, label: str, x: np.ndarray | None = None,
                     lam: np.ndarray | None = None) -> AShare:
        tag = f"astra/sh/{label}"
        shape = sh.shape
        if self.role == owner:
            m = self.R.add(self.R.reduce(x), lam)
            for p in EVALUATORS:
                if p != self.role:
                    self.send(p, tag, m)
            return sh.with_m(m) if self.role in EVALUATORS else sh
        if self.role in EVALUATORS:
            m = self.recv1(owner, tag, shape)
            if self.malicious and owner not in EVALUATORS:
                self.cross_check_m(m, label, owner)
            return sh.with_m(m)
        return sh

    def cross_check_m(self, m: np.ndarray, label: str, owner: str) -> None:
        """P1, P2 exchange H(m) of a value an outsider sent to both [ASTRA 4.2, Pi_sh^m]."""
        other = "p2" if self.role == "p1" else "p1"
        self.send_hash(other, "sh-consistency", m)
        self.expect_hash(other, "sh-consistency", m)

    # ---- reconstruction: Pi_rec^s [ASTRA 4.1], Pi_rec^m [ASTRA Fig. 6] ------------------------------
    def open_all(self, sh: AShare, label: str) -> np.ndarray:
        """Reveal v to all three servers."""
        ep, R, shape = self.ep, self.R, sh.shape
        t = f"astra/rec/{label}"
        role = self.role
        if not self.malicious:
            if role == "p1":
                self.send("p2", t + "/l1", sh.l1)
                self.send("p0", t + "/m", sh.m)
                l2 = self.recv1("p2", t + "/l2", shape)
                return R.sub(R.sub(sh.m, sh.l1), l2)
            if role == "p2":
                self.send("p1", t + "/l2", sh.l2)
                l1 = self.recv1("p1", t + "/l1", shape)
                return R.sub(R.sub(sh.m, l1), sh.l2)
            m = self.recv1("p1", t + "/m", shape)
            return R.sub(R.sub(m, sh.l1), sh.l2)
        if role == "p0":
            self.send("p1", t + "/l2", sh.l2)
            self.send("p2", t + "/l1", sh.l1)
            m = self.recv1("p1", t + "/m", shape)
            hm = ep.recv_one("p2", t + "/hm", H_SPEC)
            ep.require(np.array_equal(hm, digest("rec", m)), "rec-consistency", None, "m from P1 and H(m) from P2 differ")
            return R.sub(R.sub(m, sh.l1), sh.l2)
        if role == "p1":
            self.send("p0", t + "/m", sh.m)
            ep.send("p2", t + "/hl1", digest("rec", sh.l1))
            l2 = self.recv1("p0", t + "/l2", shape)
            hl2 = ep.recv_one("p2", t + "/hl2", H_SPEC)
            ep.require(np.array_equal(hl2, digest("rec", l2)), "rec-consistency", None,
                       "lambda_2 from P0 and its hash from P2 differ")
            return R.sub(R.sub(sh.m, sh.l1), l2)
        ep.send("p0", t + "/hm", digest("rec", sh.m))
        ep.send("p1", t + "/hl2", digest("rec", sh.l2))
        l1 = self.recv1("p0", t + "/l1", shape)
        hl1 = ep.recv_one("p1", t + "/hl1", H_SPEC)
        ep.require(np.array_equal(hl1, digest("rec", l1)), "rec-consistency", None,
                   "lambda_1 from P0 and its hash from P1 differ")
        return R.sub(R.sub(sh.m, l1), sh.l2)

    def open_to(self, receiver: str, sh: AShare, label: str, extra=()) -> None:
        """Server side of reconstructing [[v]] towards an outside party (the client).

        Semi-honest: P1 sends m, P0 sends lambda_1, P2 sends lambda_2. Malicious: every
        component also comes as a hash from its second holder [ASTRA Fig. 6]. ``extra`` arrays
        ride in the same frame (the client-checked H(m*_z) / H(expected)).
        """
        ep, t, role = self.ep, f"astra/out/{label}", self.role
        self.require_verified()
        # one frame per server: its component, and (malicious) the hash of the component
        # the receiver gets as a value from the next server
        if role == "p0":
            val, tag, hashed = sh.l1, "/l1", sh.l2
        elif role == "p1":
            val, tag, hashed = sh.m, "/m", sh.l1
        else:
            val, tag, hashed = sh.l2, "/l2", sh.m
        hashes = (digest("out", hashed),) if self.malicious else ()
        ep.send(receiver, t + tag, pack(val, self.bits), *hashes, *extra)

    # ---- multiplication: Pi_mul^s [ASTRA Fig. 3], Pi_mul^m [ASTRA Fig. 8] ---------------------------
    def mul_offline(self, x: AShare, y: AShare) -> tuple[AShare, MulPrep]:
        """Offline half of z = x * y (elementwise, equal shapes)."""
        return self._products_offline(x, y, x.shape, None)

    def matmul_offline(self, x: AShare, w: AShare, check_at: str | None = None) -> tuple[AShare, MulPrep]:
        """Offline half of U = X @ W (X: (B, K), W: (K, N)) -- Pi_dp^s [ASTRA Fig. 11] / Pi_dp^m.

        ``check_at`` (malicious, W's masked value known offline): the outside party that
        receives U's reveal runs the mul-mz comparison of [ASTRA Fig. 8] -- P0's H(m*_z) against
        both evaluators' H(m_z - m_x m_w + delta_z) ride with the output (``prep.mz_check``)
        instead of P0's verify message to the evaluators -- and P1 sends m*_w (P2 its hash)
        in the offline phase (docs/protocols/astra.md, "Receiver-checked products")."""
        b, k = x.shape
        k2, n = w.shape
        if k != k2:
            raise ConfigError(f"matmul shapes {x.shape} @ {w.shape}")
        if check_at is not None and (not self.malicious or (self.role != "p0" and w.m is None)):
            raise ConfigError("a receiver-checked product needs malicious security and W's masked value offline")
        return self._products_offline(x, w, (b, n), (b, k, n), check_at)

    def _products_offline(self, x: AShare, y: AShare, out_shape, prod_shape, check_at=None):
        ep, R, role = self.ep, self.R, self.role
        lab = self._label("mul")
        prep = MulPrep(prod_shape)
        # P0, P1 sample lambda_{z,1}; P0, P2 sample lambda_{z,2} [ASTRA Fig. 3 offline]
        lz1 = self.draw("01", lab + "/lz", out_shape) if role in ("p0", "p1") else None
        lz2 = self.draw("02", lab + "/lz", out_shape) if role in ("p0", "p2") else None
        z = AShare(self.bits, None, lz1, lz2)
        # gamma is shared per product when malicious (each product's triple is checked),
        # summed over the inner dimension when semi-honest (Pi_dp^s: cost independent of d)
        g_shape = prod_shape if (self.malicious and prod_shape is not None) else out_shape
        g1 = self.draw("01", lab + "/g", g_shape) if role in ("p0", "p1") else None
        if role == "p0":
            lx, ly = R.add(x.l1, x.l2), R.add(y.l1, y.l2)
            gamma = self._prod(lx, ly, prod_shape, keep=g_shape != out_shape)
            g2 = R.sub(gamma, g1)
            self.send("p2", f"astra/mul/{lab}/g2", g2)
            prep.g1, prep.g2 = g1, g2
        elif role == "p1":
            prep.g1 = g1
        else:
            prep.g2 = self.recv1("p0", f"astra/mul/{lab}/g2", g_shape)
        prep.check_at = check_at
        if self.malicious:
            self._mal_offline(x, y, prep, lab, prod_shape, out_shape)
        prep.lab = lab
        self._precompute(x, y, z, prep)
        return z, prep

    def _precompute(self, x, y, z, prep) -> None:
        """Everything of the online step that does not depend on m_x, done offline.

        Sums over the inner dimension (gamma, chi, delta_z of a dot product); and when y's
        masked value is already known (the model's weights, shared in the offline phase),
        the whole term [l_z]_i - [l_x]_i m_y + [gamma]_i and the vector m_x is multiplied by
        online, so an evaluator does one (malicious: two) dot products after the query
        arrives; P0's constant l_z + 2 gamma + chi likewise [ASTRA Fig. 3, 8, 11]."""
        R, ps = self.R, prep.prod_shape

        def total(a):  # per-product values summed over k (Pi_dp: one value per output)
            return R.reduce(a.sum(axis=1, dtype=np.uint64)) if ps is not None and a.shape != z.shape else R.reduce(a)
        if self.role in EVALUATORS:
            i = 1 if self.role == "p1" else 2
            g = total(prep.g1 if i == 1 else prep.g2)
            lz, lx, ly = (z.l1, x.l1, y.l1) if i == 1 else (z.l2, x.l2, y.l2)
            if self.malicious:
                prep.dz_sum = total(prep.dz)
            if y.m is not None:
                prep.base = R.add(R.sub(lz, self._prod(lx, y.m, ps, False)), g)
                prep.coef = R.sub(y.m, ly) if i == 2 else R.neg(ly)
                if self.malicious:
                    prep.mstar_y = R.add(y.m, prep.dy)
                    if prep.check_at is not None:   # m*_y offline [ASTRA Fig. 8, moved]
                        t = f"astra/mul/{prep.lab}"
                        if i == 1:
                            self.send("p0", t + "/mstar_y", prep.mstar_y)
                        else:
                            self.ep.send("p0", t + "/hmstar_y", digest("mstar", prep.mstar_y))
                            prep.pad_key = self.keys.stream("02", prep.lab + "/mstar-pad").bytes(32)
            else:
                prep.g_sum = g
        elif self.malicious:
            prep.p0_const = R.add(R.add(R.add(z.l1, z.l2), R.mul(total(R.add(prep.g1, prep.g2)), 2)),
                                     total(prep.chi))
            prep.lx, prep.ly = R.add(x.l1, x.l2), R.add(y.l1, y.l2)
            if prep.check_at is not None:
                t = f"astra/mul/{prep.lab}"
                prep.pad_key = self.keys.stream("02", prep.lab + "/mstar-pad").bytes(32)
                my = self.recv1("p1", t + "/mstar_y", y.shape)
                self.ep.require(np.array_equal(self.ep.recv_one("p2", t + "/hmstar_y", H_SPEC), digest("mstar", my)),
                                "mul-mstar", None, "m*_y from P1 does not match P2's hash")
                # the m*_y l_x term of m*_z is known now: only -m*_x l_y is left online
                prep.p0_const = R.sub(prep.p0_const, self._prod(prep.lx, my, ps, False))

    def _prod(self, a, b, prod_shape, keep: bool):
        """Elementwise a*b, or a@b (summed) / per-product a[:,:,None]*b[None] (keep=True)."""
        R = self.R
        if prod_shape is None:
            return R.mul(a, b)
        if keep:
            return R.mul(a[:, :, None], b[None, :, :])
        return ring_dot(R, a, b)

    def _expand(self, a, which: str, prod_shape):
        if prod_shape is None or a is None:
            return a
        bsz, k, n = prod_shape
        return np.broadcast_to(a[:, :, None], prod_shape) if which == "x" else np.broadcast_to(a[None, :, :], prod_shape)

    def _mal_offline(self, x, y, prep, lab, prod_shape, out_shape):
        """chi to P0 and the triple (a, b, c) to be checked [ASTRA Fig. 8 offline]."""
        ep, R, role = self.ep, self.R, self.role
        pshape = prod_shape if prod_shape is not None else out_shape
        ex = lambda a, w: self._expand(a, w, prod_shape)  # noqa: E731
        if role in EVALUATORS:
            # P1, P2 sample delta_x, delta_y (per wire) and delta_z (per product) [ASTRA Fig. 8]
            dx = self.draw("12", lab + "/dx", x.shape)
            dy = self.draw("12", lab + "/dy", y.shape)
            dz = self.draw("12", lab + "/dz", pshape)
            lx = x.l1 if role == "p1" else x.l2
            ly = y.l1 if role == "p1" else y.l2
            g = prep.g1 if role == "p1" else prep.g2
            dzi = dz if role == "p1" else np.zeros_like(dz)     # [delta_z] = (delta_z, 0)
            chi = R.sub(R.add(R.add(R.mul(ex(dx, "x"), ex(ly, "y")), R.mul(ex(dy, "y"), ex(lx, "x"))), dzi), g)
            self.send("p0", f"astra/mul/{lab}/chi", chi)
            prep.dx, prep.dy, prep.dz = dx, dy, dz
            mc = R.add(dz, R.mul(ex(dx, "x"), ex(dy, "y")))
            a = AShare(self.bits, ex(dx, "x"), ex(x.l1, "x"), ex(x.l2, "x"))
            b = AShare(self.bits, ex(dy, "y"), ex(y.l1, "y"), ex(y.l2, "y"))
            c = AShare(self.bits, mc, chi if role == "p1" else None, chi if role == "p2" else None)
        else:
            chi1 = self.recv1("p1", f"astra/mul/{lab}/chi", pshape)
            chi2 = self.recv1("p2", f"astra/mul/{lab}/chi", pshape)
            prep.chi = R.add(chi1, chi2)
            a = AShare(self.bits, None, ex(x.l1, "x"), ex(x.l2, "x"))
            b = AShare(self.bits, None, ex(y.l1, "y"), ex(y.l2, "y"))
            c = AShare(self.bits, None, chi1, chi2)
        # a = delta_x - lambda_x, b = delta_y - lambda_y, c = delta_z + dx*dy - chi
        self.triple_checks.append(tuple(s.map(lambda v: np.ascontiguousarray(v).reshape(-1)) for s in (a, b, c)))

    def finish_offline(self) -> None:
        """Malicious only: Pi_trip + Pi_prc on every triple (a, b, c) collected so far."""
        if not self.malicious or not self.triple_checks:
            return
        checks, self.triple_checks = self.triple_checks, []
        cat = lambda i: _concat([c[i] for c in checks])  # noqa: E731
        check_triples(self, cat(0), cat(1), cat(2))

    def mul_online(self, x: AShare, y: AShare, z: AShare, prep: MulPrep) -> AShare:
        return self.products_recv(self.products_send(x, y, z, prep))

    def matmul_online(self, x: AShare, w: AShare, u: AShare, prep: MulPrep, mstar_first: bool = False) -> AShare:
        """``mstar_first`` (malicious): send P0 m* (hash) before the m_z exchange, when P0's
        answer is on the longer path (the product is revealed next); otherwise m_z first
        (the comparison needs it)."""
        return self.products_recv(self.products_send(x, w, u, prep, mstar_first))

    def products_send(self, x, y, z, prep, mstar_first: bool = False, with_verify: bool = False) -> dict:
        """First half of the online product: the evaluators send their m_z share (and, in
        [ASTRA Fig. 8]'s structure, m*_x, m*_y / their hash to P0). Returns the state for
        ``products_recv``; steps in between may send (e.g. a verify message) but not receive
        from the other evaluator. ``with_verify``: the m_z frame also carries the verify
        hashes for the other evaluator (the input checks folded so far), compared when it
        arrives -- one frame fewer each way."""
        ep, R, role, lab = self.ep, self.R, self.role, prep.lab
        ps = prep.prod_shape
        t = f"astra/mul/{lab}"
        st = {"x": x, "y": y, "z": z, "prep": prep}
        if role in EVALUATORS:
            i = 1 if role == "p1" else 2
            to_p0 = self.malicious
            y_offline = prep.check_at is not None   # m*_y went to P0 offline

            def send_mstar():   # m*_x, m*_y (P1) / their hash (P2) [ASTRA Fig. 8]
                mstar_x = self._mstar_x(x, prep)
                mstar_y = () if y_offline else (prep.mstar_y if prep.mstar_y is not None else R.add(y.m, prep.dy),)
                if i == 1:
                    self.send("p0", t + "/mstar", mstar_x, *mstar_y)
                elif y_offline:   # receiver-checked: the pad of P0's H(m*_z) goes to the receiver
                    st["mz_pad"] = mstar_pad(prep.pad_key, mstar_x)
                else:
                    ep.send("p0", t + "/hmstar", digest("mstar", mstar_x, *mstar_y))
            # m* first when P0's answer is on the longer path (``mstar_first``: the product
            # is revealed next); receiver-checked: P1's m*_x first (P0's step after it, a
            # dot product and two hashes, is the longest; measured), P2's pad after its m_z
            first = to_p0 and (mstar_first or (y_offline and i == 1))
            if first:
                send_mstar()
            share = self._mz_share(x, y, z, prep)
            other = "p2" if i == 1 else "p1"
            carry = ()
            if with_verify:
                out = self.verify_payload(other)
                st["want"] = self.verify_expected(other)
                carry = () if out is None else (out,)
            self.ep.send(other, t + "/mz", pack(share, self.bits), *carry)
            if to_p0 and not first:
                send_mstar()
            if self.malicious:   # m_x m_y for the check: computed while the other's share travels
                st["mxy"] = self._prod(x.m, y.m, ps, False)
            st.update(share=share, other=other)
        return st

    def products_recv(self, st: dict) -> AShare:
        """Second half: the evaluators complete m_z (malicious: fold the expected H(m*_z));
        P0 (malicious) gets m*_x, m*_y and folds H(m*_z) for the evaluators."""
        ep, R, role = self.ep, self.R, self.role
        x, y, z, prep = st["x"], st["y"], st["z"], st["prep"]
        ps, t = prep.prod_shape, f"astra/mul/{prep.lab}"
        if role in EVALUATORS:
            want = st.get("want") or []
            specs = (ArraySpec(np.uint8, (len(want), 32)),) if want else ()
            got = self.ep.recv(st["other"], t + "/mz", packed_spec(self.bits, z.shape), *specs)
            if want:
                self.verify_compare(st["other"], want, got[1])
            mz = R.add(st["share"], unpack(got[0], self.bits, z.shape))
            if self.malicious:
                expect = R.add(R.sub(mz, st["mxy"]), prep.dz_sum)
                if prep.check_at is not None:
                    # compared by the receiver; P2 adds the pad that unmasks P0's hash
                    prep.mz_check = (digest("mul-mz", expect),) + ((st["mz_pad"],) if "mz_pad" in st else ())
                else:
                    self.expect_hash("p0", "mul-mz", expect)
            return z.with_m(mz)
        if self.malicious:
            y_offline = prep.check_at is not None   # m*_y received (and checked) offline
            got = self.recv("p1", t + "/mstar", x.shape, *(() if y_offline else (y.shape,)))
            if not y_offline:
                h = ep.recv_one("p2", t + "/hmstar", H_SPEC)
                ep.require(h.tobytes() == digest_bytes("mstar", *got), "mul-mstar", None,
                           "m*_x, m*_y from P1 do not match P2's hash")
            # m*_z = -m*_x l_y - m*_y l_x + (l_z + 2 gamma + chi, precomputed)   [ASTRA Fig. 8]
            mstar = R.sub(prep.p0_const, self._prod(got[0], prep.ly, ps, False))
            if not y_offline:
                mstar = R.sub(mstar, self._prod(prep.lx, got[1], ps, False))
            if prep.check_at is not None:
                # receiver-checked: the party the product is revealed to compares H(m*_z) with
                # both evaluators' H(m_z - m_x m_y + delta_z) (docs/protocols/astra.md)
                # masked with a PRF (key shared with P2) of the m*_x it got: unmasked by P2's pad
                # of the true m*_x, so a wrong m*_x from P1 gives the receiver garbage (abort)
                # and a coalition of P1 and the receiver nothing (no H(m*_z) of a shifted m*_x)
                prep.mz_check = (np.bitwise_xor(digest("mul-mz", mstar), mstar_pad(prep.pad_key, got[0])),)
            else:
                for p in EVALUATORS:
                    self.send_hash(p, "mul-mz", mstar)
        return z

    def _mstar_x(self, x, prep):
        """m*_x = m_x + delta_x [ASTRA Fig. 8]."""
        return self.R.add(x.m, prep.dx)

    def _mz_share(self, x, y, z, prep):
        """Evaluator i's additive part of m_z [ASTRA Fig. 3]: (i-1) m_x m_y - m_x [l_y]_i -
        m_y [l_x]_i + [l_z]_i + [gamma]_i."""
        R, ps, i = self.R, prep.prod_shape, 1 if self.role == "p1" else 2
        if prep.base is not None:   # m_y known offline: base = [l_z]_i - [l_x]_i m_y + [gamma]_i
            return R.add(prep.base, self._prod(x.m, prep.coef, ps, False))
        lx, ly, lz = (x.l1, y.l1, z.l1) if i == 1 else (x.l2, y.l2, z.l2)
        share = R.add(R.sub(R.sub(lz, self._prod(x.m, ly, ps, False)), self._prod(lx, y.m, ps, False)),
                      prep.g_sum)
        if i == 2:
            share = R.add(share, self._prod(x.m, y.m, ps, keep=False))
        return share

    def parts_pad(self, shape) -> np.ndarray | None:
        """Offline: the pad rho (from k_12) that re-randomises the evaluators' additive parts
        of a value revealed to an outside party without their exchange (``direct.py``); every
        server calls it (labels stay in step), P0 gets None."""
        lab = self._label("rho")
        return self.draw("12", lab, shape) if self.role in EVALUATORS else None

    # ---- truncation (fixed point) -----------------------------------------------------
    def trunc_offline(self, z: AShare, f: int) -> tuple[AShare, int]:
        """Masks of [[z >> f]]: P0 shares trunc(lambda_z) (one element offline, none online).

        z^t = (m_z >> f) - (lambda_z >> f) equals arshift(z, f) or arshift(z, f) + 1, except
        with probability |z| / 2^l (a wrap of m_z = z + lambda_z); see docs/protocols/astra.md.
        """
        ep, R, role = self.ep, self.R, self.role
        lab = self._label("trunc")
        l1 = self.draw("01", lab, z.shape) if role in ("p0", "p1") else None
        l2 = None
        if role == "p0":
            lt = R.add(z.l1, z.l2) >> np.uint64(f)
            l2 = R.sub(lt, l1)
            self.send("p2", f"astra/trunc/{lab}", l2)
        elif role == "p2":
            l2 = self.recv1("p0", f"astra/trunc/{lab}", z.shape)
        return AShare(self.bits, None, l1, l2), f

    def trunc_online(self, z: AShare, zt: AShare, f: int) -> AShare:
        if self.role == "p0":
            return zt
        return zt.with_m(self.R.reduce(z.m) >> np.uint64(f))


SMALL_PRODUCT = 1 << 16


def ring_dot(R: Ring, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b over Z_2^l. Few products (b*k*n <= 2^16, e.g. a query times a weight vector):
    broadcast multiply and sum in uint64, which wraps mod 2^64 exactly and costs ~10 us for
    d = 784 instead of ~130 us for the limb-split BLAS product (``Ring.matmul``), which is
    the fast one for large matrices."""
    if a.ndim == 2 and b.ndim == 2 and a.shape[0] * a.shape[1] * b.shape[1] <= SMALL_PRODUCT:
        a = np.asarray(a, np.uint64)
        b = np.asarray(b, np.uint64)
        if b.shape[1] == 1:
            out = (a * b[:, 0]).sum(axis=1, dtype=np.uint64)[:, None]
        else:
            out = (a[:, :, None] * b[None, :, :]).sum(axis=1, dtype=np.uint64)
        return R.reduce(out)
    return R.matmul(a, b)


def _concat(shares: list[AShare]) -> AShare:
    def cat(i):
        parts = [getattr(s, i) for s in shares]
        return None if parts[0] is None else np.concatenate(parts)
    return AShare(shares[0].bits, cat("m"), cat("l1"), cat("l2"))
