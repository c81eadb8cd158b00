"""INSECURE test stand-in for the encryption in Pi_Lin [CRISP Fig. 2, App. C]: the client
sends its shares in the clear, so the server learns the client's input. It computes the
same functionality over Z_2^k as the HE engine and also carries the paper's separate
Re / Im shares c1, c2 and the tag t = mu^3 (c1 + <v>_0) - mu^2 (c2 + <w>_0), so the MAC
algebra, the truncation, the consistency check and Claim 2's Delta 2, 3, 4 run exactly and
fast. Registered as the engine ``plain-insecure`` by tests/crisp/conftest.py only; every
result it produces says ``insecure``."""

from __future__ import annotations

import numpy as np

from secinfer.arith.ring import Ring
from secinfer.net.channel import ArraySpec
from secinfer.protocols.crisp import lifted, linops

SERVER, CLIENT = "server", "client"


class PlainInsecureLinear:
    """INSECURE stand-in for the encryption in Pi_Lin (see module docstring)."""

    name = "plain-insecure"
    insecure = True
    missing = ""
    timing: dict = {}

    def setup_client(self, ep, prg=None) -> None:
        pass

    def prepare_client(self, steps) -> dict:
        return {}

    def setup_server(self, ep, prg=None) -> None:
        pass

    def prepare_server(self, steps, weights, prg) -> dict:
        return {}

    def release(self) -> None:
        pass

    def __init__(self, g: Ring, frac_bits: int, malicious: bool) -> None:
        self.g, self.f, self.malicious = g, frac_bits, malicious

    # ---- client ----------------------------------------------------------------------
    def client(self, ep, idx: int, step, v1: np.ndarray, w1: np.ndarray | None) -> tuple:
        g = self.g
        n_in = int(np.prod(step.in_shape))
        n_out = step.size
        c3re = v1.reshape(n_in, g.limbs)
        if self.malicious:
            # c3 = (v_1, w_1), c1 = Re, c2 = Im: the same values, sent separately
            c3im = w1.reshape(n_in, g.limbs)
            ep.send(SERVER, f"crisp/lin/{idx}", c3re, c3im, c3re, c3im)
            spec_out = ArraySpec(np.uint64, (n_out, g.limbs))
            z1, zi1, t1 = ep.recv(SERVER, f"crisp/lin/{idx}/out", spec_out, spec_out,
                                  ArraySpec(np.uint64, (n_in, g.limbs)))
            for a in (z1, zi1, t1):
                lifted.check_reduced(g, a, f"client <- server lin {idx}")
            shp = tuple(step.out_shape) + (g.limbs,)
            return z1.reshape(shp), zi1.reshape(shp), t1
        ep.send(SERVER, f"crisp/lin/{idx}", c3re)
        (z1,) = ep.recv(SERVER, f"crisp/lin/{idx}/out", ArraySpec(np.uint64, (n_out, g.limbs)))
        lifted.check_reduced(g, z1, f"client <- server lin {idx}")
        return z1.reshape(tuple(step.out_shape) + (g.limbs,)), None, None

    # ---- server ----------------------------------------------------------------------
    def server(self, ep, idx: int, step, weights, v0: np.ndarray, w0: np.ndarray | None,
               mu: np.ndarray | None, prg) -> tuple:
        g = self.g
        n_in = int(np.prod(step.in_shape))
        spec = ArraySpec(np.uint64, (n_in, g.limbs))
        in_shp = tuple(step.in_shape) + (g.limbs,)
        nparts = 4 if self.malicious else 1
        parts = ep.recv(CLIENT, f"crisp/lin/{idx}", *([spec] * nparts))
        # Validate every client element before computing anything on it.
        for a in parts:
            lifted.check_reduced(g, a, f"server <- client lin {idx}")
        w, b = weights.w, weights.b
        re = g.add(parts[0].reshape(in_shp), v0)
        s_re = linops.server_linear(step, w, g, re)
        if b is not None:
            s_re = g.add(s_re, linops.bias_term(step, b, g, self.f))
        r_re = g.random(prg, s_re.shape[:-1])
        if not self.malicious:
            ep.send(CLIENT, f"crisp/lin/{idx}/out", g.sub(s_re, r_re).reshape(-1, g.limbs))
            return r_re, None, None
        im = g.add(parts[1].reshape(in_shp), w0)
        s_im = linops.server_linear(step, w, g, im)
        if b is not None:
            s_im = g.add(s_im, g.mul(linops.bias_term(step, b, g, self.f), mu))
        # t = mu^3 (c1 + <v>_0) - mu^2 (c2 + <w>_0)   [CRISP Fig. 2 Lin]
        mu2 = g.mul(mu, mu)
        mu3 = g.mul(mu2, mu)
        c1 = g.add(parts[2], v0.reshape(n_in, g.limbs))
        c2 = g.add(parts[3], w0.reshape(n_in, g.limbs))
        t = g.sub(g.mul(c1, mu3), g.mul(c2, mu2))
        r_im = g.random(prg, s_im.shape[:-1])
        r_t = g.random(prg, (n_in,))
        ep.send(CLIENT, f"crisp/lin/{idx}/out", g.sub(s_re, r_re).reshape(-1, g.limbs),
                g.sub(s_im, r_im).reshape(-1, g.limbs), g.sub(t, r_t))
        return r_re, r_im, r_t


def factory(g: Ring, frac_bits: int, malicious: bool, options: dict) -> PlainInsecureLinear:
    return PlainInsecureLinear(g, frac_bits, malicious)
