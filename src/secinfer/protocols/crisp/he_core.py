"""The HE machinery of CRISP's linear engine, shared by its two layouts (``he_rows``: a
matrix product as rows, ``he_conv``: channel-packed convolutions): the client's key pair,
encrypting and sending digit polynomials with their proof witnesses, validating the
client's ciphertexts, masking / rescaling / trimming the server's answers and reading them
back exactly. The encoding and the bounds are explained in ``ckks_engine`` and
docs/protocols/crisp.md.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from secinfer.arith.ring import Ring
from secinfer.crypto.he.errors import HESerializationError
from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.he.objects import Ciphertext, PublicKey
from secinfer.crypto.he.params import get_params
from secinfer.crypto.he.rlwe import coeff_encode, encode_limbs, encrypt_with_randomness
from secinfer.crypto.he.trimmed import decrypt_trimmed, trimmed_size
from secinfer.crypto.prg import PRG
from secinfer.crypto.zk.popk import FACTOR
from secinfer.errors import ConfigError, FrameError, InsecureParametersError, ProtocolError
from secinfer.net.channel import ArraySpec
from secinfer.protocols.crisp import he_native, proof
from secinfer.protocols.crisp.budget import META_LOG_SCALE, LayerBudget

SERVER, CLIENT = "server", "client"
DEFAULT_PARAMS = "ckks-n14-q380-128"


def ct_pt_dot(ev, cts, pts):
    """sum_i cts[i] * pts[i] as one new ciphertext (plaintext products: no relinearisation),
    accumulated in place with the evaluator's multiply-add."""
    acc = ev.mul(cts[0], pts[0], relin=False)
    for ct, pt in zip(cts[1:], pts[1:]):
        ev.mul_plain_add(ct, pt, acc)
    return acc


def close_all(*groups: dict) -> None:
    """Close every HE object in the given dicts (plaintexts, ciphertexts)."""
    for group in groups:
        for obj in group.values():
            obj.close()


class HECore:
    """The engine's keys, ciphertext traffic and answer masking (see module docstring)."""

    def __init__(self, g: Ring, frac_bits: int, malicious: bool, params_name: str = DEFAULT_PARAMS,
                 allow_insecure: bool = False, sigma: int = 40) -> None:
        self.g, self.f, self.malicious, self.sigma = g, frac_bits, malicious, sigma
        # Malicious client: its proofs guarantee a short preimage of 2 c (popk.FACTOR), so
        # the server computes on 2 c -- the kernels carry the factor -- and the halving
        # is done on the shares (``_mask_limbs``, ``decode_residues``).
        self.ct_factor = FACTOR if malicious else 1
        self.missing = ""      # malicious: ciphertexts and the public key are proven
        self.params = get_params(params_name, allow_insecure=True)
        if self.params.insecure and not allow_insecure:
            raise InsecureParametersError(f"crisp/ckks: {params_name} is a test-only parameter set")
        self.sk = self.pk = None
        self._prepared: dict = {}  # server: (step, budget) -> mask ciphertexts made offline
        self._wcache: dict = {}    # server: weight / kernel plaintexts made offline
        self.stats: dict = {}     # client side: largest decryption noise seen (log2), Delta
        self.timing: dict = {}    # seconds spent in the proofs (both sides), for the result info
        self.prg = None           # client: encryption randomness and proof masks
        self._zk = None           # the current layer group's proof batch (malicious only)
        self._precommit: dict = {}  # client: proof first messages made offline
        self._zeros: dict = {}     # client: (layer, group) -> encryptions of zero made offline
        self._zero_q = None        # client: the current layer group's queue of them
        self._ev = None            # client: the evaluator that adds a plaintext to them

    # ---- setup: the client's key pair [CRISP Fig. 2 InitLin, first bullet] ------------------
    def setup_client(self, ep, prg=None) -> None:
        self.prg = prg if prg is not None else PRG.fresh("crisp-client-he")
        if self.malicious:   # a = pk1 from the server, pk0 proven well formed (proof.py)
            kp = proof.key_setup_client(self, ep, self.prg.derive("key"))
        else:
            kp = self.params.keygen()
            ep.send(SERVER, "crisp/he-pk", np.frombuffer(kp.pk.to_bytes(), np.uint8))
        self.sk, self.pk = kp.sk, kp.pk

    def setup_server(self, ep, prg=None) -> None:
        if self.malicious:
            self.pk = proof.key_setup_server(self, ep, prg if prg is not None else PRG.fresh("crisp-he-setup"))
            return
        (raw,) = ep.recv(CLIENT, "crisp/he-pk", ArraySpec(np.uint8, (None,), max_elems=1 << 26))
        try:
            self.pk = self.params.load(raw.tobytes(), PublicKey)
        except Exception as e:  # noqa: BLE001 - any decoding failure is the client's fault
            raise FrameError(f"crisp/ckks: client public key rejected: {e}") from None

    def _harden(self, bud):
        """Malicious client: size the budget for its *proven* bounds [CRISP Fig. 2 note a]."""
        return proof.hardened(bud, self.params, self.sigma) if bud is not None and self.malicious else bud

    def zk_begin(self, side: str, idx: int, group: int, bud, total: int, prg=None) -> None:
        """Announce the next ``total`` client ciphertexts (one layer group) to the proof."""
        if side == CLIENT:
            self._zero_q = self._zeros.pop((idx, group), None)
        if not self.malicious:
            return
        if side == CLIENT:
            self._zk = proof.ClientBatch(self, idx, group, bud, total)
        else:
            self._zk = proof.ServerBatch(self, idx, group, bud, total, prg.derive(f"popk{group}"))

    def read_positions(self, bud, pos: np.ndarray) -> np.ndarray:
        """The coefficients the client reads of an answer, in frame order: ``pos``
        (flattened) and, malicious, pos + N/2 (the MAC half). Public: both sides compute
        them from the layout."""
        flat = np.asarray(pos, np.int64).reshape(-1)
        return np.concatenate([flat, flat + bud.half]) if self.malicious else flat

    def decrypt_positions(self, raw, bud, pos: np.ndarray) -> list:
        """Read coefficients ``pos`` (and pos + N/2 for the MAC half) of a trimmed answer
        (:meth:`masked_answer`) exactly: c0 at those positions plus c1 s, CRT of the RNS
        residues, centre, scale back by the dropped primes, round / Delta -> Z_2^k."""
        prm = self.params
        level = bud.level - bud.drop
        read = self.read_positions(bud, pos)
        want = trimmed_size(prm, level, read.size)
        if raw.dtype != np.uint8 or raw.ndim != 1 or raw.size != want:
            raise FrameError(f"crisp/ckks: answer rejected: {raw.size} bytes, "
                             f"a trimmed answer at level {level} for {read.size} positions has {want}")
        try:
            res = decrypt_trimmed(prm, self.sk, raw, level, read)
        except HESerializationError as e:
            raise FrameError(f"crisp/ckks: answer rejected: {e}") from None
        return self.decode_residues(res, bud, pos)

    def decode_residues(self, res: np.ndarray, bud, pos: np.ndarray) -> list:
        """Residues (levels, len(read_positions)) of the decrypted answer -> the Z_2^k
        values at ``pos`` (and the MAC half): CRT, Y = [t phase]_Q' (centred),
        U = Q_d Y mod t (the drop multiplied U by Q_d^-1: ``Budget``); with the factor 2
        the answer holds U = (2 v - R) mod 2t and the client's share is floor(U / 2)."""
        self._check_modulus(bud)
        prm = self.params
        lv = res.shape[0] - 1
        q = prm.q_level(lv)
        back = (prm.q_level(bud.level) // q) % bud.t     # Q_d mod t
        cnt = int(np.asarray(pos).size)
        if res.shape[1] != cnt * (2 if self.malicious else 1):
            raise ProtocolError("crisp/ckks: residues do not match the read positions")
        # CRT, centring, mod t, times Q_d, halving: exact, in Go (he_native.decode)
        u, noise = he_native.decode(prm, res, bud.t_bits, back, self.ct_factor == 2, self.g.limbs)
        self.stats["max_log2_noise"] = max(self.stats.get("max_log2_noise", 0.0), noise)
        self.stats["log2_answer_modulus"] = q.bit_length()
        u = self.g.reduce(u)
        return [u[h * cnt:(h + 1) * cnt].reshape(pos.shape + (self.g.limbs,))
                for h in range(2 if self.malicious else 1)]

    def encrypt(self, poly, bud) -> tuple:
        """Encrypt the digit polynomial ``poly`` ((L, N) int64 limbs of 40 bits:
        ``he_rows.client_poly``, ``he_conv.client_poly``) at Delta and the layer's level:
        (ciphertext, witness [m, u, e0, e1] for the proof, or None when semi-honest)."""
        prm = self.params
        with encode_limbs(prm, poly, np.zeros((1, prm.n), np.int64), META_LOG_SCALE, bud.level,
                          delta=bud.delta) as pt:
            if not self.malicious:
                return prm.encrypt(pt, self.pk), None
            # c = (pk0 u + e0 + Delta m, pk1 u + e1) exactly: provable
            zero = self._take_zero(bud)
            if zero is None:
                ct, r = encrypt_with_randomness(prm, pt, self.pk, seed=self.prg.seed())
            else:   # (pk0 u + e0, pk1 u + e1) made offline, plus Delta m: the same ciphertext
                ct, r = zero
                self._ev.add(ct, pt, out=ct)
        # the witness m as one int64 array while it fits, else as its limbs
        m = poly if bud.D > 62 else sum(poly[l] << (40 * l) for l in range(poly.shape[0]))
        return ct, [m, r.u, r.e0, r.e1]

    def precompute_zeros(self, jobs) -> int:
        """Client, offline: for the announced layer groups ``jobs`` = [(idx, group,
        budget, ciphertexts)], the message-independent part of every encryption, at the
        layer's level. Malicious: u, e0, e1 from a fresh seed and (pk0 u + e0, pk1 u + e1),
        an encryption of zero at the layer's scale; online :meth:`encrypt` adds Delta m to
        c0: the ciphertext and the proof's witness are exactly ``encrypt_with_randomness``'s
        with the same randomness (tested). Semi-honest: a fresh seed and c0 = -a s + e
        (``he_native.seeded_zero``); online the plaintext is added and c0 packed. The
        randomness is independent of m whenever it is drawn, so nothing about the
        ciphertexts' distribution changes; only when the work is done."""
        prm, count = self.params, 0
        for idx, group, bud, total in jobs:
            q = self._zeros.setdefault((idx, group), deque())
            prg = self.prg.derive(f"enc0/{idx}/{group}")
            if not self.malicious:
                for _ in range(total):
                    seed = prg.seed()
                    q.append((seed, he_native.seeded_zero(prm, self.sk, bud.level, seed)))
                count += total
                continue
            z = np.zeros((1, prm.n), np.int64)
            with encode_limbs(prm, z, z, META_LOG_SCALE, bud.level, delta=bud.delta) as pt0:
                for _ in range(total):
                    q.append(encrypt_with_randomness(prm, pt0, self.pk, seed=prg.seed()))
            count += total
        if count and self.malicious and self._ev is None:
            self._ev = Evaluator(prm)
        return count

    def _take_zero(self, bud):
        """The next message-independent part of the current group made offline
        (``precompute_zeros``: (ciphertext, randomness) malicious, (seed, c0) semi-honest),
        or None when there is none."""
        if not self._zero_q:
            return None
        item = self._zero_q.popleft()
        ct = item[0] if self.malicious else item[1]
        if ct.level != bud.level:
            ct.close()
            raise ProtocolError("crisp/ckks: an encryption made offline has the wrong level")
        return item

    def encrypt_seeded(self, poly, bud, seed: bytes | None = None, zero=None) -> bytes:
        """Semi-honest client: ``poly`` at Delta and the layer's level, encrypted under the
        secret key with c1 from a fresh public seed; the frame is seed || c0 (he_native).
        ``zero``: (seed, c0 = -a s + e) made offline (``precompute_zeros``), finished here."""
        prm = self.params
        with encode_limbs(prm, poly, np.zeros((1, prm.n), np.int64), META_LOG_SCALE, bud.level,
                          delta=bud.delta) as pt:
            if zero is not None:
                return he_native.seeded_finish(prm, zero[1], pt, zero[0])
            return he_native.encrypt_seeded(prm, self.sk, pt, seed if seed is not None else self.prg.seed())

    def encrypt_send_all(self, ep, idx, polys, bud, window: int = 4) -> None:
        """:meth:`encrypt_send` for the client polynomials ``polys`` (an iterable, in order).
        Semi-honest: up to ``window`` seeded encryptions in flight on two worker threads
        (the Go calls leave the GIL: both cores encrypt), seeds (or the encryptions of
        zero made offline) taken here and frames sent in order. Malicious: one after the
        other (each ciphertext's witness joins the proof in order; the tests' adversaries
        replace chosen encryptions)."""
        if self.malicious:
            for poly in polys:
                self.encrypt_send(ep, idx, poly, bud)
            return
        with ThreadPoolExecutor(2) as pool:
            pending: deque = deque()
            for poly in polys:
                zero = self._take_zero(bud)
                pending.append(pool.submit(self.encrypt_seeded, poly, bud,
                                           None if zero else self.prg.seed(), zero))
                if len(pending) >= window:
                    ep.send(SERVER, f"crisp/lin/{idx}/ct", np.frombuffer(pending.popleft().result(), np.uint8))
            while pending:
                ep.send(SERVER, f"crisp/lin/{idx}/ct", np.frombuffer(pending.popleft().result(), np.uint8))

    def encrypt_send(self, ep, idx, poly, bud) -> None:
        """Encrypt ``poly`` (:meth:`encrypt`), send it, and (malicious) add its witness to
        the layer group's proof of plaintext knowledge."""
        if not self.malicious:     # seeded secret-key encryption: half the bytes (he_native)
            raw = self.encrypt_seeded(poly, bud, zero=self._take_zero(bud))
            ep.send(SERVER, f"crisp/lin/{idx}/ct", np.frombuffer(raw, np.uint8))
            return
        ct, wit = self.encrypt(poly, bud)
        raw = np.frombuffer(ct.to_bytes(), np.uint8)
        ct.close()
        ep.send(SERVER, f"crisp/lin/{idx}/ct", raw)
        if wit is not None:
            self._zk.add(ep, wit)

    def masked_answer(self, idx, acc, bud, prg, pos) -> tuple:
        """acc + a mask ciphertext (prepared offline when possible), rescaled and trimmed
        to what the client reads (c1 in full, c0 at :meth:`read_positions` of ``pos``:
        crypto.he.trimmed), not sent; returns (bytes, R mod 2^k of length N: the server's
        share of the answer). May run before the client's proof is settled: nothing
        leaves the server here."""
        queue = self._prepared.get(_mask_key(idx, bud))
        mask_ct, rmask = queue.pop() if queue else self.mask_ciphertext(bud, prg)
        try:     # add, rescale by bud.drop primes and trim in one Go call (he_native)
            raw = he_native.answer(self.params, acc, mask_ct, bud.drop, self.read_positions(bud, pos))
        finally:
            acc.close()
            mask_ct.close()
        return np.frombuffer(raw, np.uint8), rmask

    def answer_into(self, idx, acc, bud, prg, pos, t: int, masks, sel, raws: list) -> None:
        """``masked_answer`` of acc, its bytes appended to ``raws``; the server's share of
        the answer (digit ``t``: times 2^(D t)) added to ``masks`` = (real, imaginary) at
        ``sel`` (the imaginary half, positions ``pos + bud.half``, for a malicious client)."""
        g = self.g
        raw, rmask = self.masked_answer(idx, acc, bud, prg, pos)
        raws.append(raw)
        parts = ((masks[0], pos), (masks[1], pos + bud.half)) if self.malicious else ((masks[0], pos),)
        for m, at in parts:
            m[sel] = g.add(m[sel], g.shl(rmask[at], bud.D * t))

    def masked_rescaled(self, idx, acc, bud, prg) -> tuple:
        """acc + the mask ciphertext, rescaled by ``bud.drop`` primes (a ciphertext at level
        bud.level - bud.drop); consumes acc. Returns (ciphertext, R mod 2^k)."""
        queue = self._prepared.get(_mask_key(idx, bud))
        mask_ct, rmask = queue.pop() if queue else self.mask_ciphertext(bud, prg)
        ev = Evaluator(self.params)
        out = ev.add(acc, mask_ct)
        acc.close()
        mask_ct.close()
        for _ in range(bud.drop):     # smaller answers: see Budget.drop
            nxt = ev.rescale(out)
            out.close()
            out = nxt
        ev.close()
        return out, rmask

    def settle_proof(self, ep) -> None:
        """Read and check the response of the current group's open proof (no-op without)."""
        if self._zk is not None:
            self._zk.settle(ep)

    def send_answers(self, ep, idx, raws) -> None:
        """Send answers -- only after the client's proof for their ciphertexts is checked."""
        if self._zk is not None:
            self._zk.settle(ep)
            if self._zk.pending:
                raise ProtocolError("crisp/ckks: answer computed before the client's proof was checked")
        for raw in raws:
            ep.send(CLIENT, f"crisp/lin/{idx}/res", raw)

    def mask_ciphertext(self, bud, prg):
        """A fresh public-key encryption of -Delta R + F (R: statistical mask, F: flooding).
        Added to an answer it masks the values and re-randomises the ciphertext (its c_1
        is fresh), replacing a separate flooding step [circuit privacy of Fig. 2's c_4]."""
        prm = self.params
        neg_r, f, rmask = self._mask_limbs(bud, prg)
        # Malicious client: only the proven (pk0, a) over Q may be used, so the Q-only
        # encryption (c0 = pk0 u + e0 + p, c1 = a u + e1; Lattigo's also uses pk's P part).
        with encode_limbs(prm, neg_r, f, META_LOG_SCALE, bud.level, delta=bud.delta) as pt:
            if self.malicious:
                from secinfer.crypto.he.rlwe import encrypt_with_randomness

                ct, _ = encrypt_with_randomness(prm, pt, self.pk, seed=prg.seed())
            else:
                ct = prm.encrypt(pt, self.pk)
        return ct, rmask

    def release(self) -> None:
        """Free every prepared ciphertext / plaintext (end of session, or abort)."""
        for q in list(self._zeros.values()) + [self._zero_q or ()]:
            for item in q:
                item[0 if self.malicious else 1].close()
        self._zeros.clear()
        self._zero_q = None
        if self._ev is not None:
            self._ev.close()
            self._ev = None
        for q in self._prepared.values():
            for ct, _ in q:
                ct.close()
        self._prepared.clear()
        for polys in self._wcache.values():
            for p in polys.values():
                p.close()
        self._wcache.clear()

    def weight_plaintext(self, coeffs: np.ndarray, level: int):
        """A weight / kernel polynomial (integer coefficients, float64) as a plaintext at
        scale 1, times ``ct_factor``: a malicious client's ciphertexts enter as 2 c. Its
        Montgomery form, which every product reads, is made here too (these plaintexts are
        made offline: ``prepare_server``), not at the first product online."""
        pt = coeff_encode(self.params, coeffs * self.ct_factor, 1.0, level)
        he_native.montgomery(self.params, pt)
        return pt

    def recv_client_ct(self, ep, idx, bud):
        if self._zk is not None:     # a full proof of this group: its response comes first
            self._zk.settle(ep)
        (raw,) = ep.recv(CLIENT, f"crisp/lin/{idx}/ct", ArraySpec(np.uint8, (None,), max_elems=1 << 28))
        ct = self._load_client_ct(raw, bud)
        if self._zk is not None:     # the batch's proof runs when its last ciphertext is in
            self._zk.add(ep, ct)
        return ct

    # ---- server ------------------------------------------------------------------------

    def _load_client_ct(self, raw, bud):
        """Validate a client ciphertext before any computation on it."""
        prm = self.params
        if not self.malicious:   # a seeded frame (encrypt_seeded): exact size, then strict parse
            want = he_native.seeded_size(prm, bud.level)
            if raw.size != want:
                raise FrameError(f"crisp/ckks: client ciphertext rejected: {raw.size} bytes, a seeded "
                                 f"ciphertext at level {bud.level} has {want}")
            try:
                return he_native.load_seeded(prm, raw.tobytes(), bud.level, META_LOG_SCALE)
            except Exception as e:  # noqa: BLE001
                raise FrameError(f"crisp/ckks: client ciphertext rejected: {e}") from None
        try:
            ct = prm.load(raw.tobytes(), Ciphertext)
        except Exception as e:  # noqa: BLE001
            raise FrameError(f"crisp/ckks: client ciphertext rejected: {e}") from None
        if ct.degree != 1 or ct.level != bud.level or abs(ct.log_scale - META_LOG_SCALE) > 1e-6:
            ct.close()
            raise FrameError("crisp/ckks: client ciphertext has the wrong degree, level or scale")
        return ct

    def _check_modulus(self, bud) -> None:
        if bud.factor != self.ct_factor or bud.t_bits != self.g.bits + self.ct_factor.bit_length() - 1:
            raise ConfigError("crisp/ckks: the layer budget's plaintext modulus does not match the "
                              "engine (a malicious engine needs the hardened budget)")

    def _mask_limbs(self, bud: LayerBudget, prg):
        """The mask plaintext -Delta R + F of every coefficient as the exact multi-limb
        integers (-R, F) (``rlwe.encode_limbs`` with Delta = t^-1 mod Q), R uniform in
        [0, t), F uniform in [-2^phi, 2^phi]. Returns (-R limbs, F limbs, the server's
        share of the answer as a Z_2^k array of length N: R mod 2^k, or with the factor 2
        (t = 2^(k+1), the answer holds (2 v - R) mod t) ceil(R / 2) mod 2^k, which with the
        client's floor(U / 2) adds up to v: U and R have the same parity)."""
        self._check_modulus(bud)
        g, n = self.g, self.params.n
        r_words = _uniform_words(prg, n, bud.t_bits)
        f = _limbs40(_uniform_words(prg, n, bud.phi + 1), bud.phi + 1)
        top, off = divmod(bud.phi, 40)
        f[top] -= 1 << off                 # centre: F' - 2^phi, F' uniform in [0, 2^(phi+1))
        share = r_words
        if self.ct_factor == 2:           # floor(R / 2), then + (R mod 2) = ceil(R / 2)
            share = r_words >> np.uint64(1)
            share[:, :-1] |= r_words[:, 1:] << np.uint64(63)
        r_ring = g.zeros((n,))
        w = min(g.limbs, share.shape[1])
        r_ring[:, :w] = share[:, :w]
        r_ring = g.reduce(r_ring)
        if self.ct_factor == 2:
            low = g.zeros((n,))
            low[:, 0] = r_words[:, 0] & np.uint64(1)
            r_ring = g.add(r_ring, low)
        return -_limbs40(r_words, bud.t_bits), f, r_ring



def _mask_key(idx: int, bud) -> tuple:
    return (idx, bud.level, bud.t_bits, bud.phi, bud.D, bud.T)


def _uniform_words(prg, n: int, bits: int) -> np.ndarray:
    """n integers uniform in [0, 2^bits) as little-endian uint64 words, shape (n, W)."""
    words = prg.uint64((n, -(-bits // 64)))
    if bits % 64:
        words[:, -1] &= np.uint64((1 << (bits % 64)) - 1)
    return words


def _limbs40(words: np.ndarray, bits: int) -> np.ndarray:
    """(n, W) uint64 words of integers below 2^bits -> (ceil(bits / 40), n) int64 limbs of
    40 bits (the HE layer's multi-limb format, x = sum_l limb[l] 2^(40 l))."""
    return np.stack([_bitfield(words, 40 * l, 40).astype(np.int64) for l in range(-(-bits // 40))])


def digit_limbs(a: np.ndarray, start: int, width: int) -> list:
    """Bits [start, start + width) of Z_2^k limb arrays (any width) as a list of
    ceil(width / 40) int64 arrays of 40-bit limbs (``rlwe.encode_limbs``' format)."""
    return [_bitfield(a, start + 40 * l, min(40, width - 40 * l)).astype(np.int64)
            for l in range(-(-width // 40))]


def _as_limbs(x) -> np.ndarray:
    """(L, ...) int64: a list of limb arrays stacked, or one integer array (values below
    2^63, e.g. float64 digits of D <= 52 bits) as a single limb."""
    if isinstance(x, (list, tuple)):
        return np.stack([np.asarray(v, np.int64) for v in x])
    return np.asarray(x).astype(np.int64)[None]


def _bitfield(a: np.ndarray, start: int, width: int) -> np.ndarray:
    """Bits [start, start + width) of Z_2^k limb arrays (width <= 64) as uint64."""
    a = np.asarray(a, np.uint64)
    limb, off = divmod(start, 64)
    lo = a[..., limb] >> np.uint64(off)
    if off and limb + 1 < a.shape[-1]:
        lo = lo | (a[..., limb + 1] << np.uint64(64 - off))
    return lo & np.uint64((1 << width) - 1) if width < 64 else lo
