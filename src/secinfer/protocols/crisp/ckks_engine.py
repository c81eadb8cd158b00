"""Pi_Lin on Lattigo RLWE ciphertexts with an exact "complex" packing [CRISP Fig. 2, IV].

The paper's idea is kept -- one ciphertext carries the value and its MAC as the real and
imaginary part of a "complex" number, and one plaintext multiplication by W produces
both -- but in the coefficient domain, where it is exact (CKKS slots keep ~50 bits, far
too few for 104-bit shares masked 40 bits wider): in R = Z[X]/(X^N + 1), i = X^(N/2)
squares to -1. The client encrypts m(X) = Delta (a(X) + X^(N/2) b(X)) (a, b: the digits
of its value and MAC shares; Delta = t^-1 mod Q, t = 2^k, or 2^(k+1) for a malicious
client); the server multiplies by weight polynomials of degree < N/2 - deg a (matrix
products: ``he_rows``; channel-packed convolutions: ``he_conv``), adds a fresh encryption
of -Delta R + F (R: uniform mask, reduced mod t inside the ciphertext; F: flooding of the
noise), rescales and trims the answer to what the client reads (``he_core``). Every
bound (``budget.Budget``) and the argument in full: docs/protocols/crisp.md, "HE linear
layer". A malicious client proves plaintext knowledge of every ciphertext and that its
public key is well formed, and the budget is sized for the proven bounds (``proof``).

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


def input_layers(steps) -> list:
    """(index, step) of the linear layers applied to the input itself: the engine runs
    their HE part in the offline phase (``protocol._on_input``)."""
    return [(i, st) for i, st in enumerate(steps[1:-1], start=1)
            if st.op == "lin" and st.inp == steps[0].out]


class CKKSLinear(HECore):
    """Pi_Lin with the client's shares under RLWE encryption (see module docstring); a
    ``twopc.engine.LinearEngine``."""

    name = "ckks"
    insecure = False
    offline_input_layers = True   # server_masks: the HE part alone (protocol._on_input)

    def budget(self, k_in, n_out, wbits, n_rows: int = 1) -> LayerBudget:
        # no MAC half without MACs: the rows may span the whole ring (``LayerBudget``)
        span = self.params.n // 2 if self.malicious else self.params.n
        return self._harden(LayerBudget(self.params, self.g.bits, k_in, n_out, wbits, self.sigma, n_rows, span))

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
        """Offline (client): the message-independent part of every ciphertext of the
        layers that run online (``precompute_zeros``; the layers on the input run offline
        anyway) and, malicious, the witness-independent first message of every proof of
        plaintext knowledge the online phase will run."""
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
        out = proof.precommit_all(self, jobs) if self.malicious else {}
        offline = {i for i, _ in input_layers(steps)}
        out["encryptions_of_zero"] = self.precompute_zeros([j for j in jobs if j[0] not in offline])
        return out

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

    def server(self, ep, idx: int, step, weights, v0, w0, mu, prg, masks=None) -> tuple:
        """Server: its (s^Re, s^Im, None) shares. ``masks``: the HE part already run
        (``server_masks``, offline for a layer on the dealer's input mask), else run now."""
        g = self.g
        w, b = weights.w, weights.b
        mask_re, mask_im = masks if masks is not None else self.server_masks(ep, idx, step, w, prg)
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

    def server_masks(self, ep, idx: int, step, w, prg) -> tuple:
        """Server, the HE part of Pi_Lin: W times the client's ciphertexts, masked answers;
        returns its shares (sum_t 2^(D t) R_t of the value and of the MAC half). It needs
        only the client's ciphertexts, never the server's own share."""
        if int(np.max(np.abs(w), initial=0)) >= 1 << step.wbits:
            raise ConfigError("crisp/ckks: weight exceeds the announced bound")
        lay = self.conv_layout(step)
        if lay is not None:
            self.zk_begin(SERVER, idx, 0, lay, step.in_shape[0] * lay.n_cg * lay.T, prg)
            return he_conv.server_conv(self, ep, idx, step, lay, w, prg)
        return he_rows.server_rows(self, ep, idx, step, w, prg)
