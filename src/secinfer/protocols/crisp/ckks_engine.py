"""Pi_Lin on Lattigo CKKS ciphertexts with an exact "complex" packing [CRISP Fig. 2, IV].

Why not the CKKS slots. The shares Pi_Lin works on are uniform elements of Z_2^(n+s)
(104 bits for n = 64), and the server must hide W <client share> statistically, i.e. add a
mask 40 bits wider than the value. Slot encoding and decoding go through a float64 FFT
(the HE layer's encoder), which keeps ~50 significant bits: far too few to round
B + 40 >= 100 bit values back to exact ring elements. The argument in full is in
docs/protocols/crisp.md.

What we do instead keeps the paper's idea -- one ciphertext carries the value and its MAC
as the real and imaginary part of a "complex" number, and one plaintext multiplication
by W produces both -- but in the coefficient domain, where it is exact: in
R = Z[X]/(X^N + 1) the monomial X^(N/2) squares to -1, so R contains Z[i] with
i = X^(N/2). The client encrypts

    m(X) = Delta (a(X) + X^(N/2) b(X)),   a = Re share digits, b = Im share digits

(each of degree < N/2; Delta = t^-1 mod Q, below) and the server multiplies by the
weight polynomial w(X) of degree < N/2 - deg a, so a w and b w never meet: (a + i b) w = a w + i b w, exactly the
complex-slot computation of the paper with integer arithmetic. Matrix-vector products
use the coefficient layout a(X) = sum_i x_i X^i, w(X) = sum_ij W_ij X^(j c + c - 1 - i)
(c = input chunk): coefficient j c + c - 1 of a w is (x W)_j; several rows sit at
stride S = c (n_o + 1) in one polynomial.

Exactness and hiding (bounds checked here, argued in the docs; ``Budget``):
* plaintext modulus t = 2^k (2^(k+1) malicious: the server works on 2 c), one digit of k
  bits, encoded at Delta = t^-1 mod Q exactly from 40-bit limbs (``rlwe.encode_limbs``);
* every product coefficient (target or not) is an integer |V| < 2^B; the server adds one
  fresh encryption of -Delta R + F (R uniform in Z_t, F flooding in [-2^phi, 2^phi]), made
  offline, which also re-randomises the answer. Since Delta t = 1 (mod Q) the phase is
  Delta U + (K + noise) with U = (V - R) mod t uniform and K = (V - R - U) / t small: the
  value is reduced mod t inside the ciphertext, F floods K and e W (2^-40 per coefficient);
* the level's Q holds 2 t nu0 > 2 |U + t e|, so [t phase]_Q mod t is U exactly -- decryption
  never fails for noise within the bounded-Gaussian support;
* the masked answer is rescaled (``Budget.drop``: Lattigo's exact rounding division keeps
  the form, U -> U q^-1 mod t) and trimmed to what the client reads: c1 in full, c0 only
  at the targets (and the MAC half), ``crypto.he.trimmed`` -- public post-processing of
  the masked answer.

Malicious client: every client ciphertext is covered by a proof of plaintext knowledge
and the client's public key by a proof of well-formedness (server-chosen a = pk1, short
(s, e) with pk0 + a s = e), and the budget above is sized for the *proven* bounds
(``proof.py``, docs/protocols/crisp.md).
"""

from __future__ import annotations

import math

import numpy as np

from secinfer.crypto.fss.group import Z2k
from secinfer.errors import ConfigError, FrameError, InsecureParametersError, ProtocolError
from secinfer.net.channel import ArraySpec
from secinfer.protocols.crisp import lifted, linops
from secinfer.protocols.crisp.budget import FLOOD_UNION_BITS, META_LOG_SCALE, LayerBudget

SERVER, CLIENT = "server", "client"
DEFAULT_PARAMS = "ckks-n14-q380-128"


def ct_pt_dot(ev, cts, pts):
    """sum_i cts[i] * pts[i] as one new ciphertext (plaintext products: no relinearisation),
    accumulated in place with the evaluator's multiply-add."""
    acc = ev.mul(cts[0], pts[0], relin=False)
    for ct, pt in zip(cts[1:], pts[1:]):
        ev.mul_plain_add(ct, pt, acc)
    return acc


def rows_and_mats(step: dict, w: np.ndarray | None, a: np.ndarray | None, batch_in_shape) -> tuple:
    """The layer as grouped row-matrix products: rows (R, K) per group and W (K, N_out).

    Returns (groups, finish) where groups = [(rows or None, W or None, K, N_out)] and
    ``finish(list of (R, N_out, L))`` rearranges the products into out_shape + (L,).
    Weights may be None (client side: only shapes needed; K, N_out come from the plan).
    """
    op = step["node_op"]
    out_shape = tuple(step["out_shape"])
    if op in ("Gemm", "MatMul"):
        k, n_out = step["in_shape"][-1], out_shape[-1]
        rows = None if a is None else a.reshape(-1, k, a.shape[-1])

        def finish(ys):
            return ys[0].reshape(out_shape + (ys[0].shape[-1],))
        return [(rows, w, k, n_out)], finish
    if op == "Mul":
        feat = int(np.prod(step["in_shape"][1:]))
        blk = 32
        groups = []
        wf = None if w is None else np.broadcast_to(w, step["in_shape"][1:]).reshape(-1)
        for s in range(0, feat, blk):
            e = min(feat, s + blk)
            rows = None if a is None else a.reshape(a.shape[0], feat, a.shape[-1])[:, s:e]
            mat = None if wf is None else np.diag(wf[s:e]).astype(np.int64)
            groups.append((rows, mat, e - s, e - s))

        def finish(ys):
            return np.concatenate(ys, axis=1).reshape(out_shape + (ys[0].shape[-1],))
        return groups, finish
    if op == "Conv":
        from secinfer.arith.linalg import conv_columns
        from secinfer.ir.graph import lift_2d
        from secinfer.protocols.crisp.plan import node_of

        p = lift_2d(node_of(step))
        g_ = int(step["attrs"].get("group", 1))
        m = out_shape[1]
        kc = step["in_shape"][1] // g_ * int(np.prod(step["attrs"]["kernel_shape"]))
        n_, oh, ow = out_shape[0], out_shape[2], out_shape[3]
        cols = None
        if a is not None:
            wshape = (m, step["in_shape"][1] // g_) + tuple(step["attrs"]["kernel_shape"])
            cols = lifted.apply_limbwise(a, lambda x: conv_columns(x, wshape, p["strides"], p["pads"],
                                                                  p["dilations"], g_)[0])
        wg = None if w is None else w.reshape(g_, m // g_, -1)
        groups = []
        for gi in range(g_):
            rows = None if cols is None else cols[:, gi].transpose(0, 2, 1, 3).reshape(-1, kc, cols.shape[-1])
            mat = None if wg is None else np.ascontiguousarray(wg[gi].T)
            groups.append((rows, mat, kc, m // g_))

        def finish(ys):
            lim = ys[0].shape[-1]
            parts = [y.reshape(n_, oh * ow, m // g_, lim).transpose(0, 2, 1, 3) for y in ys]
            return np.concatenate(parts, axis=1).reshape(n_, m, oh, ow, lim)
        return groups, finish
    raise ConfigError(f"crisp/ckks: no HE layout for {op}")


class CKKSLinear:
    """Pi_Lin with the client's shares under RLWE encryption (see module docstring)."""

    name = "ckks"
    insecure = False
    def __init__(self, g: Z2k, frac_bits: int, malicious: bool, params_name: str = DEFAULT_PARAMS,
                 allow_insecure: bool = False, sigma: int = 40) -> None:
        from secinfer.crypto.he.params import get_params

        self.g, self.f, self.malicious, self.sigma = g, frac_bits, malicious, sigma
        # Malicious client: its proofs guarantee a short preimage of 2 c (popk.FACTOR), so
        # the server computes on 2 c -- the kernels carry the factor -- and the halving
        # is done on the shares (``_mask_limbs``, ``decode_residues``).
        self.ct_factor = 1
        if malicious:
            from secinfer.crypto.zk.popk import FACTOR

            self.ct_factor = FACTOR
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

    # ---- setup: the client's key pair [Fig. 2 InitLin, first bullet] ------------------
    def setup_client(self, ep, prg=None, tamper=None) -> None:
        from secinfer.crypto.prg import PRG

        self.prg = prg if prg is not None else PRG.fresh("crisp-client-he")
        if self.malicious:   # a = pk1 from the server, pk0 proven well formed (proof.py)
            from secinfer.protocols.crisp import proof

            kp = proof.key_setup_client(self, ep, self.prg.derive("key"),
                                        tamper or (lambda point, idx, a: a))
        else:
            kp = self.params.keygen()
            ep.send(SERVER, "crisp/he-pk", np.frombuffer(kp.pk.to_bytes(), np.uint8))
        self.sk, self.pk = kp.sk, kp.pk

    def setup_server(self, ep, prg=None) -> None:
        from secinfer.crypto.he.objects import PublicKey
        from secinfer.crypto.prg import PRG

        if self.malicious:
            from secinfer.protocols.crisp import proof

            self.pk = proof.key_setup_server(self, ep, prg if prg is not None else PRG.fresh("crisp-he-setup"))
            return
        (raw,) = ep.recv(CLIENT, "crisp/he-pk", ArraySpec(np.uint8, (None,), max_elems=1 << 26))
        try:
            self.pk = self.params.load(raw.tobytes(), PublicKey)
        except Exception as e:  # noqa: BLE001 - any decoding failure is the client's fault
            raise FrameError(f"crisp/ckks: client public key rejected: {e}") from None

    # ---- helpers -----------------------------------------------------------------------
    def _budget(self, k_in, n_out, wbits) -> LayerBudget:
        return self._harden(LayerBudget(self.params, self.g.bits, k_in, n_out, wbits, self.sigma))

    def _harden(self, bud):
        """Malicious client: size the budget for its *proven* bounds [CRISP Fig. 2 note a]."""
        from secinfer.protocols.crisp import proof

        return proof.hardened(bud, self.params, self.sigma) if bud is not None and self.malicious else bud

    def _conv_layout(self, step):
        from secinfer.protocols.crisp import he_conv

        return he_conv.conv_layout(step, self.params, self.g.bits, self.sigma, harden=self._harden,
                                   malicious=self.malicious)

    def _zk_begin(self, side: str, idx: int, group: int, bud, total: int, prg=None) -> None:
        """Announce the next ``total`` client ciphertexts (one layer group) to the proof."""
        from secinfer.protocols.crisp import proof

        if not self.malicious:
            return
        if side == CLIENT:
            self._zk = proof.ClientBatch(self, idx, group, bud, total)
        else:
            self._zk = proof.ServerBatch(self, idx, group, bud, total, prg.derive(f"popk{group}"))

    def _digits(self, rows: np.ndarray, bud: LayerBudget) -> list:
        """T digits of D bits of each element, each as 40-bit limbs (``digit_limbs``)."""
        return [digit_limbs(rows, bud.D * t, bud.D) for t in range(bud.T)]

    def _layout(self, re_d, im_d, bud: LayerBudget, chunk: int, rg: int) -> np.ndarray:
        """The client polynomial of one row group and input chunk as (L, N) int64 limbs;
        digits as limb arrays (L, rows, k) or one integer array (rows, k)."""
        re_d = _as_limbs(re_d)
        im_d = None if im_d is None else _as_limbs(im_d)
        poly = np.zeros((re_d.shape[0], self.params.n), np.int64)
        r0 = rg * bud.rows_per
        cs = slice(chunk * bud.c, (chunk + 1) * bud.c)
        for r in range(r0, min(r0 + bud.rows_per, re_d.shape[1])):
            seg = re_d[:, r, cs]
            base = (r - r0) * bud.S
            poly[:, base:base + seg.shape[1]] = seg
            if im_d is not None:
                poly[:, bud.half + base:bud.half + base + seg.shape[1]] = im_d[:, r, cs]
        return poly

    def _targets(self, bud: LayerBudget, n_rows: int, rg: int, block: int, n_out: int):
        r0 = rg * bud.rows_per
        rows = np.arange(r0, min(r0 + bud.rows_per, n_rows))
        js = np.arange(block * bud.n_o, min((block + 1) * bud.n_o, n_out))
        pos = ((rows - r0)[:, None] * bud.S + (js - block * bud.n_o)[None, :] * bud.c + bud.c - 1)
        return rows, js, pos

    # ---- client ------------------------------------------------------------------------
    def client(self, ep, idx: int, step: dict, v1: np.ndarray, w1, tamper) -> tuple:
        from secinfer.protocols.crisp import he_conv

        lay = self._conv_layout(step)
        if lay is not None:
            self._zk_begin(CLIENT, idx, 0, lay, v1.shape[0] * lay.n_cg * lay.T)
            return he_conv.client_conv(self, ep, idx, step, lay, v1, w1, tamper)
        g = self.g
        groups, finish = rows_and_mats(step, None, v1, None)
        groups_im = rows_and_mats(step, None, w1, None)[0] if self.malicious else None
        wbits = int(step["wbits"])
        outs_re, outs_im = [], []
        for gi, (rows, _, k_in, n_out) in enumerate(groups):
            bud = self._budget(k_in, n_out, wbits)
            rows = tamper("c3re", idx, rows) if gi == 0 else rows
            d_re = self._digits(rows, bud)
            d_im = None
            if self.malicious:
                rows_im = groups_im[gi][0]
                rows_im = tamper("c3im", idx, rows_im) if gi == 0 else rows_im
                d_im = self._digits(rows_im, bud)
            n_rows = rows.shape[0]
            n_rg = -(-n_rows // bud.rows_per)
            self._zk_begin(CLIENT, idx, gi, bud, bud.T * n_rg * bud.n_chunks)
            for t in range(bud.T):
                for rg in range(n_rg):
                    for ch in range(bud.n_chunks):
                        poly = self._layout(d_re[t], d_im[t] if d_im else None, bud, ch, rg)
                        self.encrypt_send(ep, idx, poly, bud, tamper)
            acc_re = g.zeros((n_rows, n_out))
            acc_im = g.zeros((n_rows, n_out)) if self.malicious else None
            for t in range(bud.T):
                for rg in range(n_rg):
                    for blk in range(bud.n_blocks):
                        (raw,) = ep.recv(SERVER, f"crisp/lin/{idx}/res", ArraySpec(np.uint8, (None,), max_elems=1 << 28))
                        vals = self._decrypt_targets(raw, bud, n_rows, rg, blk, n_out)
                        rws, js, _ = self._targets(bud, n_rows, rg, blk, n_out)
                        sel = (slice(rws[0], rws[-1] + 1), slice(js[0], js[-1] + 1))
                        acc_re[sel] = g.add(acc_re[sel], g.shl(vals[0], bud.D * t))
                        if self.malicious:
                            acc_im[sel] = g.add(acc_im[sel], g.shl(vals[1], bud.D * t))
            outs_re.append(acc_re)
            outs_im.append(acc_im)
        s_re = finish(outs_re)
        s_im = finish(outs_im) if self.malicious else None
        return s_re, s_im, None

    def _decrypt_targets(self, raw, bud, n_rows, rg, blk, n_out):
        _, _, pos = self._targets(bud, n_rows, rg, blk, n_out)
        return self.decrypt_positions(raw, bud, pos)

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
        from secinfer.crypto.he.errors import HESerializationError
        from secinfer.crypto.he.trimmed import decrypt_trimmed, trimmed_size

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
        t = bud.t
        back = (prm.q_level(bud.level) // q) % t     # Q_d mod t
        out = []
        cnt = int(np.asarray(pos).size)
        for h in range(2 if self.malicious else 1):
            x = _crt(res[:, h * cnt:(h + 1) * cnt], prm.q[:lv + 1])
            y = (x * t) % q
            y = np.where(y > q // 2, y - q, y)
            low = y % t
            eps = int(np.max(np.abs((y - low) // t), initial=0))
            self.stats["max_log2_noise"] = max(self.stats.get("max_log2_noise", 0.0),
                                               math.log2(eps) if eps else 0.0)
            self.stats["log2_answer_modulus"] = q.bit_length()
            u = (low * back) % t
            if self.ct_factor == 2:     # U = (2 v - R) mod 2t: the client's share floor(U / 2)
                u = u >> 1
            out.append(self.g.from_int(u).reshape(pos.shape + (self.g.limbs,)))
        return out

    def encrypt_send(self, ep, idx, poly, bud, tamper) -> None:
        """Encrypt the digit polynomial ``poly`` ((L, N) int64 limbs of 40 bits: ``_layout``,
        ``he_conv.client_poly``) at Delta and the layer's level, send it, and (malicious) add
        it with its witness to the layer's proof of plaintext knowledge."""
        from secinfer.crypto.he.rlwe import encode_limbs, encrypt_with_randomness

        prm = self.params
        wit = None
        with encode_limbs(prm, poly, np.zeros((1, prm.n), np.int64), META_LOG_SCALE, bud.level,
                          delta=bud.delta) as pt:
            if self.malicious:   # c = (pk0 u + e0 + Delta m, pk1 u + e1) exactly: provable
                ct, r = encrypt_with_randomness(prm, pt, self.pk, seed=self.prg.seed())
                # the witness m as one int64 array while it fits, else as its limbs
                m = poly if bud.D > 62 else sum(poly[l] << (40 * l) for l in range(poly.shape[0]))
                ct, wit = tamper("popk-ct", idx, (ct, [m, r.u, r.e0, r.e1]))
            else:
                ct = prm.encrypt(pt, self.pk)
        raw = tamper("ct", idx, np.frombuffer(ct.to_bytes(), np.uint8))
        ct.close()
        ep.send(SERVER, f"crisp/lin/{idx}/ct", raw)
        if wit is not None:
            self._zk.add(ep, wit, tamper)

    def answer(self, ep, idx, acc, bud, prg, pos) -> np.ndarray:
        """Mask and send one answer at once (see :meth:`masked_answer`, :meth:`send_answers`)."""
        raw, rmask = self.masked_answer(idx, acc, bud, prg, pos)
        self.send_answers(ep, idx, [raw])
        return rmask

    def masked_answer(self, idx, acc, bud, prg, pos) -> tuple:
        """acc + a mask ciphertext (prepared offline when possible), rescaled and trimmed
        to what the client reads (c1 in full, c0 at :meth:`read_positions` of ``pos``:
        crypto.he.trimmed), not sent; returns (bytes, R mod 2^k of length N: the server's
        share of the answer). May run before the client's proof is settled: nothing
        leaves the server here."""
        from secinfer.crypto.he.trimmed import trim

        out, rmask = self.masked_rescaled(idx, acc, bud, prg)
        raw = np.frombuffer(trim(self.params, out, self.read_positions(bud, pos)), np.uint8)
        out.close()
        return raw, rmask

    def masked_rescaled(self, idx, acc, bud, prg) -> tuple:
        """acc + the mask ciphertext, rescaled by ``bud.drop`` primes (a ciphertext at level
        bud.level - bud.drop); consumes acc. Returns (ciphertext, R mod 2^k)."""
        from secinfer.crypto.he.evaluator import Evaluator

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
        from secinfer.crypto.he.rlwe import encode_limbs

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

    def prepare_server(self, steps: list, weights: dict, prg) -> dict:
        """Offline: every mask ciphertext the online phase will add (they depend only on
        public shapes and the server's randomness) and the weight plaintexts."""
        from secinfer.protocols.crisp import he_conv

        reads = sum(int(np.prod(st["out_shape"])) for st in steps if st.get("op") == "lin")
        reads *= 2 if self.malicious else 1
        if reads > 1 << FLOOD_UNION_BITS:
            raise ConfigError(f"crisp/ckks: the client would read {reads} flooded coefficients in one "
                              f"inference; the flooding is sized for at most 2^{FLOOD_UNION_BITS} "
                              "(use a smaller batch)")
        count = 0
        for idx, st in enumerate(steps):
            if st.get("op") != "lin":
                continue
            lay = self._conv_layout(st)
            if lay is not None:
                plan = [(lay, st["in_shape"][0] * lay.n_mb * lay.T)]
                self._wcache[idx] = he_conv.kernel_polys(self, lay, weights[idx]["w"])
            else:
                plan = []
                groups, _ = rows_and_mats(st, weights[idx]["w"], None, None)
                for gi, (_, mat, k_in, n_out) in enumerate(groups):
                    bud = self._budget(k_in, n_out, int(st["wbits"]))
                    n_rg = -(-_rows_of(st, k_in, len(groups)) // bud.rows_per)
                    plan.append((bud, bud.T * n_rg * bud.n_blocks))
                    self._wcache[idx, gi] = self._weight_polys(mat, bud)
            sub = prg.derive(f"masks{idx}")
            for bud, n in plan:
                q = self._prepared.setdefault(_mask_key(idx, bud), [])
                q.extend(self.mask_ciphertext(bud, sub) for _ in range(n))
                count += n
        return {"mask_ciphertexts": count}

    def prepare_client(self, steps: list) -> dict:
        """Offline (client, malicious): the witness-independent first message of every
        proof of plaintext knowledge the online phase will run."""
        from secinfer.protocols.crisp import proof

        if not self.malicious:
            return {}
        jobs = []
        for idx, st in enumerate(steps):
            if st.get("op") != "lin":
                continue
            lay = self._conv_layout(st)
            if lay is not None:
                jobs.append((idx, 0, lay, st["in_shape"][0] * lay.n_cg * lay.T))
                continue
            groups, _ = rows_and_mats(st, None, None, None)
            for gi, (_, _, k_in, n_out) in enumerate(groups):
                bud = self._budget(k_in, n_out, int(st["wbits"]))
                n_rg = -(-_rows_of(st, k_in, len(groups)) // bud.rows_per)
                jobs.append((idx, gi, bud, bud.T * n_rg * bud.n_chunks))
        return proof.precommit_all(self, jobs)

    def release(self) -> None:
        """Free every prepared ciphertext / plaintext (end of session, or abort)."""
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
        scale 1, times ``ct_factor``: a malicious client's ciphertexts enter as 2 c."""
        from secinfer.crypto.he.rlwe import coeff_encode

        return coeff_encode(self.params, coeffs * self.ct_factor, 1.0, level)

    def _weight_polys(self, mat, bud) -> dict:
        prm = self.params
        out = {}
        for ch in range(bud.n_chunks):
            for blk in range(bud.n_blocks):
                wp = np.zeros(prm.n, np.float64)
                sub = mat[ch * bud.c:(ch + 1) * bud.c, blk * bud.n_o:(blk + 1) * bud.n_o]
                jj, ii = np.meshgrid(np.arange(sub.shape[1]), np.arange(sub.shape[0]), indexing="ij")
                wp[jj * bud.c + bud.c - 1 - ii] = sub.T
                out[ch, blk] = self.weight_plaintext(wp, bud.level)
        return out

    def recv_client_ct(self, ep, idx, bud):
        from secinfer.crypto.he.objects import Ciphertext

        if self._zk is not None:     # a full proof of this group: its response comes first
            self._zk.settle(ep)
        (raw,) = ep.recv(CLIENT, f"crisp/lin/{idx}/ct", ArraySpec(np.uint8, (None,), max_elems=1 << 28))
        ct = self._load_client_ct(raw, bud, Ciphertext)
        if self._zk is not None:     # the batch's proof runs when its last ciphertext is in
            self._zk.add(ep, ct)
        return ct

    # ---- server ------------------------------------------------------------------------
    def server(self, ep, idx: int, step: dict, weights: dict, v0, w0, mu, prg) -> tuple:
        from secinfer.protocols.crisp import he_conv

        g = self.g
        w, b = weights["w"], weights["b"]
        if int(np.max(np.abs(w), initial=0)) >= 1 << int(step["wbits"]):
            raise ConfigError("crisp/ckks: weight exceeds the announced bound")
        lay = self._conv_layout(step)
        if lay is not None:
            self._zk_begin(SERVER, idx, 0, lay, step["in_shape"][0] * lay.n_cg * lay.T, prg)
            mask_re, mask_im = he_conv.server_conv(self, ep, idx, step, lay, w, prg)
        else:
            mask_re, mask_im = self._server_rows(ep, idx, step, w, prg)
        # Server shares: L(<v>_0) in the clear + sum_t 2^(D t) R_t  (+ bias, MAC of bias)
        s_re = g.add(linops.server_linear(step, w, g, v0), mask_re)
        if b is not None:
            s_re = g.add(s_re, linops.bias_term(step, b, g, self.f))
        if not self.malicious:
            return s_re, None, None
        s_im = g.add(linops.server_linear(step, w, g, w0), mask_im)
        if b is not None:
            s_im = g.add(s_im, g.mul(linops.bias_term(step, b, g, self.f), mu))
        return s_re, s_im, None

    def _server_rows(self, ep, idx, step, w, prg):
        from secinfer.crypto.he.evaluator import Evaluator

        g, prm = self.g, self.params
        wbits = int(step["wbits"])
        groups, finish = rows_and_mats(step, w, None, None)
        ev = Evaluator(prm)
        masks_re, masks_im = [], []
        for gi, (_, mat, k_in, n_out) in enumerate(groups):
            bud = self._budget(k_in, n_out, wbits)
            n_rows = _rows_of(step, k_in, len(groups))
            n_rg = -(-n_rows // bud.rows_per)
            wpolys = self._wcache.pop((idx, gi), None) or self._weight_polys(mat, bud)
            self._zk_begin(SERVER, idx, gi, bud, bud.T * n_rg * bud.n_chunks, prg)
            cts = {}
            for t in range(bud.T):
                for rg in range(n_rg):
                    for ch in range(bud.n_chunks):
                        cts[t, rg, ch] = self.recv_client_ct(ep, idx, bud)
            m_re = g.zeros((n_rows, n_out))
            m_im = g.zeros((n_rows, n_out))
            # every answer of the group is computed (while the client answers the proof's
            # challenge), then sent once the proof is checked (send_answers settles it)
            raws = []
            for t in range(bud.T):
                for rg in range(n_rg):
                    for blk in range(bud.n_blocks):
                        acc = ct_pt_dot(ev, [cts[t, rg, ch] for ch in range(bud.n_chunks)],
                                        [wpolys[ch, blk] for ch in range(bud.n_chunks)])
                        rws, js, pos = self._targets(bud, n_rows, rg, blk, n_out)
                        raw, rmask = self.masked_answer(idx, acc, bud, prg, pos)
                        raws.append(raw)
                        sel = (slice(rws[0], rws[-1] + 1), slice(js[0], js[-1] + 1))
                        m_re[sel] = g.add(m_re[sel], g.shl(rmask[pos], bud.D * t))
                        if self.malicious:
                            m_im[sel] = g.add(m_im[sel], g.shl(rmask[pos + bud.half], bud.D * t))
            self.send_answers(ep, idx, raws)
            for p in wpolys.values():
                p.close()
            for c in cts.values():
                c.close()
            masks_re.append(m_re)
            masks_im.append(m_im)
        ev.close()
        return finish(masks_re), finish(masks_im)

    def _load_client_ct(self, raw, bud, Ciphertext):
        """Validate a client ciphertext before any computation on it."""
        prm = self.params
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


def _rows_of(step: dict, k_in: int, n_groups: int) -> int:
    op = step["node_op"]
    if op in ("Gemm", "MatMul"):
        return int(np.prod(step["in_shape"][:-1]))
    if op == "Mul":
        return int(step["in_shape"][0])
    out = step["out_shape"]
    return int(out[0] * out[2] * out[3])


def _crt(res: np.ndarray, moduli) -> np.ndarray:
    """Residues (levels, m) -> integers in [0, Q) (object array)."""
    q = 1
    for qi in moduli:
        q *= qi
    acc = np.zeros(res.shape[1], dtype=object)
    for l, qi in enumerate(moduli):
        m = q // qi
        c = m * pow(m % qi, -1, qi) % q
        acc = acc + res[l].astype(object) * c
    return acc % q
