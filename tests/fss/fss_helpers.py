"""Shared by the FSS gate tests: deal keys, share x, simulate the opening, evaluate."""

import numpy as np


def run_local_gate(gate, prg, x, mu=None) -> dict:
    """Reconstructed outputs (as integers) of ``gate`` on x, both parties evaluated locally."""
    n = gate.n
    mask = np.uint64((1 << n) - 1 if n < 64 else (1 << 64) - 1)
    k0, k1 = gate.gen(prg, x.size, mac_key=mu)
    x0 = prg.ring(x.shape, n)
    x1 = (x - x0) & mask
    xhat = (gate.masked_share(k0, x0).astype(np.uint64) + gate.masked_share(k1, x1).astype(np.uint64)) & mask
    o0, o1 = gate.eval_local(k0, xhat), gate.eval_local(k1, xhat)
    return {name: gate.group.to_int(gate.group.add(o0[name], o1[name])) for name in gate.outputs}
