"""One party's replicated-sharing engine for the three-party protocols (STAMP, Falcon+).

Party p (0, 1, 2) holds ``Pair(x_p, x_{p+1})`` of every secret (``secinfer.sharing.
replicated``). The engine adds what needs the network: host PRF keys (the correlated
randomness of [STAMP App. A]), input, the single reshare after a local product
[STAMP 3.2], opening to everyone or to one party with the malicious redundant copies
[STAMP App. A "Reconstruction"], and the multiplication check with a replicated
triple [ABY3 / Furukawa et al., as STAMP 3.2 and Protocol 5 step 1 use it].
"""

from __future__ import annotations

import numpy as np

from secinfer.arith.fixed import FixedPointConfig
from secinfer.crypto.prg import PRF, PRG
from secinfer.errors import ProtocolError
from secinfer.net.channel import ArraySpec
from secinfer.protocols.rep3.digest import digest as _digest
from secinfer.sharing import replicated as rss
from secinfer.sharing.replicated import Pair

U64 = np.uint64


def digest(tag: str, *arrays: np.ndarray) -> np.ndarray:
    """``rep3.digest.digest`` of the arrays flattened (a sender's and a receiver's copy of
    one value may differ in shape, never in elements)."""
    return _digest(tag, *(np.ascontiguousarray(a).reshape(-1) for a in arrays))


class _CheckedEndpoint:
    """Endpoint proxy: before the next message from a peer is received, the hashes that
    peer was told to send first (``Engine.expect_hash``) are received and compared."""

    def __init__(self, ep) -> None:
        self._ep = ep
        self.expected: dict[str, list] = {}

    def _check(self, peer: str) -> None:
        for etag, h, check in self.expected.pop(peer, []):
            (got,) = self._ep.recv(peer, etag, ArraySpec(np.uint8, (32,)))
            self._ep.require(np.array_equal(got, h), check, None, "two parties received different copies of one value")

    def recv(self, peer: str, tag: str, *specs):
        self._check(peer)
        return self._ep.recv(peer, tag, *specs)

    def drain(self) -> None:
        """Compare every expected hash now (its message is the next one from its peer)."""
        for peer in list(self.expected):
            self._check(peer)

    def __getattr__(self, name):
        return getattr(self._ep, name)


class Engine:
    """Party ``me`` of three; ``names[p]`` is party p's role name on the endpoint."""

    def __init__(self, ep, names: tuple[str, str, str], me: int, cfg: FixedPointConfig, malicious: bool,
                 prg: PRG) -> None:
        if me not in (0, 1, 2):
            raise ProtocolError(f"party index {me} out of range")
        self.ep, self.names, self.me, self.cfg = _CheckedEndpoint(ep), names, me, cfg
        self.ring = cfg.ring
        self.malicious = malicious
        self.prg = prg
        self.nxt, self.prv = (me + 1) % 3, (me + 2) % 3
        self._k_own: PRF | None = None    # k_me, shared with the next party
        self._k_prev: PRF | None = None   # k_{me-1}, shared with the previous party
        self._k_all: PRF | None = None    # shared by all three
        self._tick = 0
        self.stats = {"mult_checks": 0}
        self._pending: list[Pair] = []
        self._deferred: list = []     # reshare_send: (tag, own component, shape, callback)
        self._inflight: list = []     # start_check: (tag, expected hash)
        # ring elements travel in whole bytes of the ring: 4 for Z_2^32 (the paper's count)
        self.wire = np.dtype(np.uint32) if cfg.ring_bits <= 32 else np.dtype(np.uint64)

    # ---- ring messages ---------------------------------------------------------------------
    def pack(self, a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(a).reshape(-1), dtype=self.wire)

    def send_ring(self, peer: int, tag: str, *arrays: np.ndarray) -> None:
        self.ep.send(self.names[peer], tag, *[self.pack(a) for a in arrays])

    def recv_ring(self, peer: int, tag: str, *sizes: int) -> list[np.ndarray]:
        got = self.ep.recv(self.names[peer], tag, *[ArraySpec(self.wire, (int(n),)) for n in sizes])
        return [g.astype(U64) for g in got]

    # ---- set-up: host PRF keys [STAMP App. A] -----------------------------------------------
    def setup_keys(self) -> None:
        ep = self.ep
        own = self.prg.seed()
        ep.send(self.names[self.nxt], "rss/key", np.frombuffer(own, np.uint8))
        if self.me == 0:
            kall = self.prg.seed()
            ep.send(self.names[1], "rss/kall", np.frombuffer(kall, np.uint8))
            ep.send(self.names[2], "rss/kall", np.frombuffer(kall, np.uint8))
        (prev,) = ep.recv(self.names[self.prv], "rss/key", ArraySpec(np.uint8, (16,)))
        if self.me != 0:
            (kall_a,) = ep.recv(self.names[0], "rss/kall", ArraySpec(np.uint8, (16,)))
            kall = bytes(kall_a)
        self._k_own, self._k_prev, self._k_all = PRF(own), PRF(bytes(prev)), PRF(kall)

    def _label(self, what: str) -> str:
        self._tick += 1
        return f"{what}/{self._tick}"

    def _draw(self, prf: PRF, label: str, n: int) -> np.ndarray:
        return self.ring.reduce(np.frombuffer(prf.keystream(label, 0, 8 * n), dtype=U64).copy())

    def zero3(self, shape) -> np.ndarray:
        """This party's component of a 3-out-of-3 sharing of zero."""
        n = int(np.prod(shape))
        lab = self._label("zero")
        return self.ring.sub(self._draw(self._k_own, lab, n), self._draw(self._k_prev, lab, n)).reshape(shape)

    def zero3_xor(self, shape) -> np.ndarray:
        """This party's component of a 3-out-of-3 XOR sharing of zero (boolean reshare)."""
        n = int(np.prod(shape))
        lab = self._label("zerob")
        return (self._draw(self._k_own, lab, n) ^ self._draw(self._k_prev, lab, n)).reshape(shape)

    def _draw_mod(self, prf: PRF, label: str, n: int, p: int) -> np.ndarray:
        """n uniform values of Z_p, in ``rss.mod_dtype(p)``. p < 128: bytes below the
        largest multiple of p under 256 are kept (rejection: exactly uniform, about 1.3 bytes
        of keystream per value), further blocks drawn if needed; otherwise floor(v p / 2^64)
        of 64-bit words v (statistical distance < p / 2^64 per value)."""
        if p < 128:
            top = (256 // p) * p
            out, got, block = [], 0, 0
            while got < n:
                want = n - got
                m = want + want // 3 + 64
                raw = np.frombuffer(prf.keystream(label, block, m), dtype=np.uint8)
                block += prf.blocks_for(m)
                keep = raw[raw < top][:want]
                out.append(keep)
                got += keep.size
            v = out[0] if len(out) == 1 else np.concatenate(out)
            return rss.mod_reduce(p, v)
        v = np.frombuffer(prf.keystream(label, 0, 8 * n), dtype=U64)
        hi, lo = v >> U64(32), v & U64(0xFFFFFFFF)
        return (hi * U64(p) + ((lo * U64(p)) >> U64(32))) >> U64(32)

    def zero3_mod(self, shape, p: int) -> np.ndarray:
        """This party's component of a 3-out-of-3 sharing of zero in Z_p (a small prime field:
        Falcon's private compare [Falcon Alg. 1] reshares its products there)."""
        n = int(np.prod(shape))
        lab = self._label("zerop")
        own, prev = self._draw_mod(self._k_own, lab, n, p), self._draw_mod(self._k_prev, lab, n, p)
        return rss.mod_reduce(p, own + rss.mod_dtype(p)(p) - prev).reshape(shape)

    def random_pair_mod(self, shape, p: int) -> Pair:
        """``random_pair`` in Z_p: a replicated sharing of a uniform element nobody knows."""
        n = int(np.prod(shape))
        lab = self._label("randp")
        return Pair(self._draw_mod(self._k_prev, lab, n, p).reshape(shape),
                    self._draw_mod(self._k_own, lab, n, p).reshape(shape))

    def random_pair(self, shape) -> Pair:
        """A replicated sharing of a uniformly random value nobody knows: component c from
        the key of parties c and c-1 (k_{c-1})."""
        return self.random_pair_at(shape, self._label("rand"))

    def fresh_label(self, what: str) -> str:
        """A label no other draw of this session uses (the same on every party, which
        calls in the same order), for ``random_pair_at``."""
        return self._label(what)

    def random_pair_at(self, shape, label: str) -> Pair:
        """``random_pair`` under a label of the caller's (from ``fresh_label``, extended):
        the same label draws the same sharing again, so a large random operand can be
        dropped and re-drawn instead of kept (Falcon+'s matrix triples)."""
        n = int(np.prod(shape))
        # my components: me (key k_{me-1} = k_prev) and me+1 (key k_me = k_own)
        return Pair(self._draw(self._k_prev, label, n).reshape(shape),
                    self._draw(self._k_own, label, n).reshape(shape))

    # ---- input -----------------------------------------------------------------------------
    def input(self, owner: int, x: np.ndarray | None, shape: tuple) -> Pair:
        """Share ``x`` held by ``owner``: components owner+1 (key of owner and owner+1) and
        owner+2 (three-way key) are pseudo-random, component owner = x minus both is sent to
        owner-1, the only other holder. One message of n elements, consistent by
        construction (a variant of [STAMP App. A "Input Phase"])."""
        n = int(np.prod(shape))
        lab = self._label("input")
        o = owner
        me = self.me
        c_next = None
        if me in (o, (o + 1) % 3):      # parties o and o+1 share k_o
            c_next = self._draw(self._k_own if me == o else self._k_prev, lab, n)
        c_all = self._draw(self._k_all, lab, n)
        if me == o:
            if x is None or x.shape != tuple(shape):
                raise ProtocolError(f"input owner needs an array of shape {shape}")
            c_own = self.ring.sub(self.ring.sub(self.ring.reduce(x.reshape(-1)), c_next), c_all)
            self.send_ring((o + 2) % 3, "rss/input", c_own)
            return Pair(c_own.reshape(shape), c_next.reshape(shape))
        if me == (o + 1) % 3:   # holds (o+1, o+2)
            return Pair(c_next.reshape(shape), c_all.reshape(shape))
        (c_own,) = self.recv_ring(o, "rss/input", n)
        return Pair(c_all.reshape(shape), c_own.reshape(shape))   # holds (o+2, o)

    # ---- reshare after a local product [STAMP 3.2] --------------------------------------------
    def _reshare_out(self, z3: np.ndarray, tag: str) -> np.ndarray:
        """Mask this party's 3-out-of-3 component with a zero sharing and send it to the
        previous party; returns it flat (the first component of the re-shared Pair)."""
        z = self.ring.add(z3, self.zero3(z3.shape)).reshape(-1)
        self.send_ring(self.prv, tag, z)
        return z

    def reshare(self, z3: np.ndarray, tag: str = "rss/reshare") -> Pair:
        z = self._reshare_out(z3, tag)
        (zn,) = self.recv_ring(self.nxt, tag, z.size)
        return Pair(z.reshape(z3.shape), zn.reshape(z3.shape))

    # ---- opening --------------------------------------------------------------------------------
    def open_all(self, x: Pair, tag: str = "rss/open") -> np.ndarray:
        """Everyone learns x. Malicious: the missing component arrives from one holder and
        its hash from the other; a mismatch aborts [STAMP App. A "Reconstruction"]."""
        self.flush_checks()
        a = x.a.reshape(-1)
        self.send_ring(self.nxt, tag, a)
        if self.malicious:
            self.ep.send(self.names[self.prv], tag + "/h", digest("open", x.b))
        (miss,) = self.recv_ring(self.prv, tag, a.size)
        if self.malicious:
            (h,) = self.ep.recv(self.names[self.nxt], tag + "/h", ArraySpec(np.uint8, (32,)))
            self.ep.require(np.array_equal(h, digest("open", miss)), "reconstruct-consistency", None,
                            "the two copies of a share disagree at opening")
        return self.ring.reduce(a + x.b.reshape(-1) + miss).reshape(x.a.shape)

    def reveal_to(self, target: int, x: Pair, tag: str = "rss/reveal") -> np.ndarray | None:
        """Only ``target`` learns x. It lacks component target+2, held by target+2 (first)
        and target+1 (second); malicious: both send it and the target compares."""
        self.flush_checks()
        miss = (target + 2) % 3
        if self.me == miss:
            self.send_ring(target, tag, x.a)
        elif self.me == (target + 1) % 3 and self.malicious:
            self.send_ring(target, tag, x.b)
        if self.me != target:
            return None
        n = x.a.size
        (c1,) = self.recv_ring(miss, tag, n)
        if self.malicious:
            (c2,) = self.recv_ring((target + 1) % 3, tag, n)
            self.ep.require(np.array_equal(c1, c2), "reconstruct-consistency", None,
                            "the two copies of the output share disagree")
        return self.ring.reduce(x.a.reshape(-1) + x.b.reshape(-1) + c1).reshape(x.a.shape)

    # ---- multiplication with verification ---------------------------------------------------
    def _open_send(self, x: Pair, tag: str) -> None:
        self.send_ring(self.nxt, tag, x.a)
        if self.malicious:
            self.ep.send(self.names[self.prv], tag + "/h", digest("open", self.ring.reduce(x.b)))

    def _open_recv(self, x: Pair, tag: str) -> np.ndarray:
        (miss,) = self.recv_ring(self.prv, tag, x.a.size)
        miss = miss.reshape(x.a.shape)
        if self.malicious:
            (h,) = self.ep.recv(self.names[self.nxt], tag + "/h", ArraySpec(np.uint8, (32,)))
            self.ep.require(np.array_equal(h, digest("open", miss)), "reconstruct-consistency", None,
                            "the two copies of a share disagree")
        return self.ring.reduce(x.a + x.b + miss)

    def open_many(self, xs: list[Pair], tag: str = "rss/open-many") -> list[np.ndarray]:
        """Open several sharings to everyone in one round (malicious: the second holder's
        hash is compared, as ``open_all``); no pending checks are flushed."""
        if not xs:
            return []
        flat = Pair(np.concatenate([x.a.reshape(-1) for x in xs]), np.concatenate([x.b.reshape(-1) for x in xs]))
        self._open_send(flat, tag)
        v = self._open_recv(flat, tag)
        out, k = [], 0
        for x in xs:
            out.append(v[k:k + x.a.size].reshape(x.a.shape))
            k += x.a.size
        return out

    def reshare_verified(self, f, x: Pair, y: Pair, z3: np.ndarray, triple: tuple[Pair, Pair, Pair],
                         tag: str = "rss/reshare", rho: np.ndarray | None = None,
                         sigma: np.ndarray | None = None) -> tuple[Pair, np.ndarray]:
        """Reshare z = f(x, y) and, in the same round, open rho = x - a and sigma = y - b
        of a replicated triple c = f(a, b); delta = z - c - f(rho, b) - f(a, sigma) - f(rho, sigma)
        is kept and checked to be zero by ``flush_checks`` before anything is revealed [ABY3 5.3 /
        Furukawa et al. 2017, as STAMP Protocol 5 step 1 uses it].

        ``sigma`` (or ``rho``) already opened: the triple shares its b (or a) with an earlier
        one whose y - b (x - a) was opened for the same y (x) -- the model weights, opened
        once in the offline phase, or an activation feeding several products. The triple is
        made by the LTEEs, so c = f(a, b) holds exactly and delta equals the error the
        adversary put into z, whichever operand is shared (docs/protocols/stamp.md).
        Returns (z, rho)."""
        h = self.reshare_verified_send(x, y, z3, triple, tag, open_rho=rho is None, open_sigma=sigma is None)
        return self.reshare_verified_recv(h, f, rho, sigma)

    def reshare_verified_send(self, x: Pair, y: Pair, z3: np.ndarray, triple: tuple[Pair, Pair, Pair],
                              tag: str = "rss/reshare", open_rho: bool = True, open_sigma: bool = True) -> tuple:
        """The sending half of ``reshare_verified``: several products whose halves are all
        sent before any is received re-share (and open) in one round."""
        ring = self.ring
        a, b, c = triple
        shape = z3.shape
        zc = self._reshare_out(z3, tag)
        rho_p = rss.sub(ring, x, a) if open_rho else None
        sig_p = rss.sub(ring, y, b) if open_sigma else None
        if rho_p is not None:
            self._open_send(rho_p, tag + "/rho")
        if sig_p is not None:
            self._open_send(sig_p, tag + "/sigma")
        return (tag, zc, shape, rho_p, sig_p, triple)

    def reshare_verified_recv(self, h: tuple, f, rho: np.ndarray | None = None,
                              sigma: np.ndarray | None = None) -> tuple[Pair, np.ndarray]:
        """The receiving half of ``reshare_verified`` (in the order the halves were sent);
        ``rho``/``sigma``: the values opened elsewhere when this product does not open them."""
        tag, zc, shape, rho_p, sig_p, triple = h
        (zn,) = self.recv_ring(self.nxt, tag, zc.size)
        z = Pair(zc.reshape(shape), zn.reshape(shape))
        if rho_p is not None:
            rho = self._open_recv(rho_p, tag + "/rho")
        if sig_p is not None:
            sigma = self._open_recv(sig_p, tag + "/sigma")
        if rho is None or sigma is None:
            raise ProtocolError("a verified product needs rho and sigma, opened here or before")
        self.queue_delta(f, z, triple, rho, sigma)
        return z, rho

    def queue_delta(self, f, z: Pair, triple: tuple[Pair, Pair, Pair], rho: np.ndarray | None,
                    sigma: np.ndarray) -> None:
        """Queue delta = z - c - f(rho, b) - f(a, sigma) - f(rho, sigma) of a re-shared product
        z = f(x, y) against its triple (a, b, c = f(a, b)), rho = x - a and sigma = y - b opened;
        ``rho=None``: x is a itself (rho = 0, ``reshare_send`` of a premultiplied product)."""
        ring = self.ring
        a, b, c = triple
        fa = lambda u, v: ring.reduce(f(u, v))  # noqa: E731
        d = rss.sub(ring, z, c)
        if rho is not None:
            d = rss.sub(ring, d, rss.Pair(fa(rho, b.a), fa(rho, b.b)))
        d = rss.sub(ring, d, rss.Pair(fa(a.a, sigma), fa(a.b, sigma)))
        if rho is not None:
            d = rss.add_public(ring, self.me, d, ring.neg(fa(rho, sigma)))
        self._pending.append(d)
        self.stats["mult_checks"] += 1

    # ---- messages that ride on later rounds (malicious STAMP) -------------------------------
    def reshare_send(self, z3: np.ndarray, tag: str, on_recv) -> None:
        """The sending half of ``reshare``, for a product whose operands are known before it is
        needed (a premultiplied f(A, W), ``StampBackend``): mask and send now; the next
        party's component is received by ``recv_deferred`` -- called by every party at the
        same point of the protocol, after its next sends, so the message travels with them
        and costs no round -- which calls ``on_recv(z)`` with the re-shared Pair."""
        self._deferred.append((tag, self._reshare_out(z3, tag), z3.shape, on_recv))

    def recv_deferred(self) -> None:
        """Receive the components of every ``reshare_send`` still outstanding (in order)."""
        todo, self._deferred = self._deferred, []
        for tag, z, shape, on_recv in todo:
            (zn,) = self.recv_ring(self.nxt, tag, z.size)
            on_recv(Pair(z.reshape(shape), zn.reshape(shape)))

    def start_check(self, tag: str = "rss/mcheck") -> bool:
        """The sending half of ``flush_checks``: send the hash of every pending delta now, so
        that it travels with the messages of the current round; ``finish_check`` (called by
        every party at the same later point, before any reveal) receives and compares.
        Returns whether anything was sent (the same at every party)."""
        if not self._pending:
            return False
        ring = self.ring
        da = np.concatenate([ring.reduce(d.a).reshape(-1) for d in self._pending]).astype(U64)
        db = np.concatenate([ring.reduce(d.b).reshape(-1) for d in self._pending]).astype(U64)
        self._pending = []
        self.ep.send(self.names[self.prv], tag, digest("mcheck", db))
        self._inflight.append((tag, digest("mcheck", ring.neg(ring.add(da, db)).astype(U64))))
        return True

    def finish_check(self) -> None:
        """Receive and compare the hashes of every ``start_check`` (``multiplication-check``)."""
        todo, self._inflight = self._inflight, []
        for tag, want in todo:
            (h,) = self.ep.recv(self.names[self.nxt], tag, ArraySpec(np.uint8, (32,)))
            self.ep.require(np.array_equal(h, want), "multiplication-check", None,
                            "a multiplication result does not match its verification triple")

    def send_hash(self, peer: int, tag: str, value: np.ndarray) -> None:
        """Tell ``peer`` the hash of a value both received from the same sender."""
        self.ep.send(self.names[peer], tag, digest("copy", np.ascontiguousarray(value, dtype=U64)))

    def expect_hash(self, peer: int, tag: str, value: np.ndarray, check: str) -> None:
        """``peer`` sent (``send_hash``) the hash of its copy of ``value``: compare it, just
        before the next message from that peer is received -- so the comparison rides on
        messages that flow anyway and costs no round; a mismatch aborts with ``check``
        (at the latest in ``flush_checks``, before anything is revealed)."""
        self.ep.expected.setdefault(self.names[peer], []).append(
            (tag, digest("copy", np.ascontiguousarray(value, dtype=U64)), check))

    def flush_checks(self, tag: str = "rss/mcheck") -> None:
        """Check that every pending delta is zero, in one round of 32-byte messages.

        Party p holds (d_p, d_{p+1}) and lacks d_{p+2}; if d = 0 then d_{p+2} = -(d_p + d_{p+1}).
        Each party sends the hash of its second component to the previous party (which
        lacks exactly that one) and compares the hash it receives with its own prediction
        [ABY3 5.3: compare views by hash]. With one corrupted party c, party c+1 compares
        only honest copies (its own, and c+2's copy of d_c), whose sum is the error c put
        into the products, so any non-zero delta makes an honest party abort.
        Hashes still expected from ``expect_hash``, re-shares still outstanding
        (``reshare_send``) and checks under way (``start_check``) are completed first."""
        self.recv_deferred()
        self.finish_check()
        self.ep.drain()
        if self.start_check(tag):
            self.finish_check()
