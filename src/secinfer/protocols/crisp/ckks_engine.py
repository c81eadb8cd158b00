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

Files: ``he_core`` (keys, ciphertext traffic, masked answers, exact decoding), ``he_rows``
(the row layout), ``he_conv`` (channel-packed convolutions), this module (the engine:
the two-party ``LinearEngine`` interface, choosing the layout per step).
"""

from __future__ import annotations

import numpy as np

from secinfer.errors import ConfigError
from secinfer.protocols.crisp import he_conv, he_rows, linops, proof
from secinfer.protocols.crisp.budget import FLOOD_UNION_BITS, LayerBudget
from secinfer.protocols.crisp.he_core import CLIENT, DEFAULT_PARAMS, SERVER, HECore, _mask_key

__all__ = ["CKKSLinear", "DEFAULT_PARAMS", "LayerBudget"]


class CKKSLinear(HECore):
    """Pi_Lin with the client's shares under RLWE encryption (see module docstring); a
    ``twopc.engine.LinearEngine``."""

    name = "ckks"
    insecure = False

    def budget(self, k_in, n_out, wbits) -> LayerBudget:
        return self._harden(LayerBudget(self.params, self.g.bits, k_in, n_out, wbits, self.sigma))

    def conv_layout(self, step):
        return he_conv.conv_layout(step, self.params, self.g.bits, self.sigma, harden=self._harden,
                                   malicious=self.malicious)

    # ---- offline -----------------------------------------------------------------------
    def prepare_server(self, steps: list, weights: dict, prg) -> dict:
        """Offline: every mask ciphertext the online phase will add (they depend only on
        public shapes and the server's randomness) and the weight plaintexts."""
        reads = sum(st.size for st in steps if st.op == "lin")
        reads *= 2 if self.malicious else 1
        if reads > 1 << FLOOD_UNION_BITS:
            raise ConfigError(f"crisp/ckks: the client would read {reads} flooded coefficients in one "
                              f"inference; the flooding is sized for at most 2^{FLOOD_UNION_BITS} "
                              "(use a smaller batch)")
        count = 0
        for idx, st in enumerate(steps):
            if st.op != "lin":
                continue
            lay = self.conv_layout(st)
            if lay is not None:
                plan = [(lay, st.in_shape[0] * lay.n_mb * lay.T)]
                self._wcache[idx] = he_conv.kernel_polys(self, lay, weights[idx].w)
            else:
                plan = []
                for gi, bud, _, n_rg, _, mat in he_rows.plans(self, st, weights[idx].w):
                    plan.append((bud, bud.T * n_rg * bud.n_blocks))
                    self._wcache[idx, gi] = he_rows.weight_polys(self, mat, bud)
            sub = prg.derive(f"masks{idx}")
            for bud, n in plan:
                q = self._prepared.setdefault(_mask_key(idx, bud), [])
                q.extend(self.mask_ciphertext(bud, sub) for _ in range(n))
                count += n
        return {"mask_ciphertexts": count}

    def prepare_client(self, steps: list) -> dict:
        """Offline (client, malicious): the witness-independent first message of every
        proof of plaintext knowledge the online phase will run."""
        if not self.malicious:
            return {}
        jobs = []
        for idx, st in enumerate(steps):
            if st.op != "lin":
                continue
            lay = self.conv_layout(st)
            if lay is not None:
                jobs.append((idx, 0, lay, st.in_shape[0] * lay.n_cg * lay.T))
                continue
            for gi, bud, _, n_rg, _, _ in he_rows.plans(self, st):
                jobs.append((idx, gi, bud, bud.T * n_rg * bud.n_chunks))
        return proof.precommit_all(self, jobs)

    # ---- online ------------------------------------------------------------------------
    def client(self, ep, idx: int, step, v1: np.ndarray, w1) -> tuple:
        """Client: (s^Re, s^Im, None) shares of the layer's output (``linear`` docstring)."""
        lay = self.conv_layout(step)
        if lay is not None:
            self.zk_begin(CLIENT, idx, 0, lay, v1.shape[0] * lay.n_cg * lay.T)
            s_re, s_im = he_conv.client_conv(self, ep, idx, lay, v1, w1)
        else:
            s_re, s_im = he_rows.client_rows(self, ep, idx, step, v1, w1)
        return s_re, s_im, None

    def server(self, ep, idx: int, step, weights, v0, w0, mu, prg) -> tuple:
        g = self.g
        w, b = weights.w, weights.b
        if int(np.max(np.abs(w), initial=0)) >= 1 << step.wbits:
            raise ConfigError("crisp/ckks: weight exceeds the announced bound")
        lay = self.conv_layout(step)
        if lay is not None:
            self.zk_begin(SERVER, idx, 0, lay, step.in_shape[0] * lay.n_cg * lay.T, prg)
            mask_re, mask_im = he_conv.server_conv(self, ep, idx, step, lay, w, prg)
        else:
            mask_re, mask_im = he_rows.server_rows(self, ep, idx, step, w, prg)
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
