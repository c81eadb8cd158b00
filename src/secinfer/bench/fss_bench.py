"""Micro-benchmark of the FSS gates: ``run() -> dict`` (wired into ``secinfer bench fss``).

For each batch size, times key generation (the dealer, both keys) and one party's local
evaluation of the CRISP ReLU with MACs in the lifted ring Z_2^(n+40), and of the plain
semi-honest ReLU in Z_2^n, and reports per-ReLU figures and the declared costs. Timings are
wall-clock on this machine, plus process CPU time (less sensitive to other jobs sharing the
cores); the JSON names the machine so figures are comparable.

Every size is measured with each backend (``native.resolve``): the native kernels and the
numpy reference, one after the other in the same process, so their ratio is a same-run
figure (``backend`` in each result).
"""

from __future__ import annotations

import os
import platform
import time

from secinfer.crypto.fss import native
from secinfer.crypto.fss.gates import make_gate
from secinfer.crypto.prg import PRG

LIFT_BITS = 40  # s of [CRISP V-B]


def _one(gate, count: int, prg, mac_key, backend: str = "auto") -> dict:
    with native.use_backend(backend):
        t0, c0 = time.perf_counter(), time.process_time()
        k0, k1 = gate.gen(prg, count, mac_key=mac_key)
        t_gen, c_gen = time.perf_counter() - t0, time.process_time() - c0
        xhat = prg.ring((count,), gate.n)
        t0, c0 = time.perf_counter(), time.process_time()
        gate.eval_local(k0, xhat)
        t_eval, c_eval = time.perf_counter() - t0, time.process_time() - c0
    cost = gate.cost()
    return {"gate": cost.gate, "backend": native.resolve(backend), "n_bits": gate.n, "out_bits": gate.k,
            "count": count,
            "keygen_seconds": t_gen, "eval_seconds_per_party": t_eval,
            "keygen_cpu_seconds": c_gen, "eval_cpu_seconds_per_party": c_eval,
            "keygen_us_per_relu": 1e6 * t_gen / count, "eval_us_per_relu": 1e6 * t_eval / count,
            "key_bytes_per_relu_per_party": cost.key_bytes,
            "key_bytes_measured": k0.nbytes() // count,
            "online_bits_per_relu_per_party": cost.online_bits, "online_rounds": cost.rounds}


def default_backends() -> tuple:
    """The native kernels and the numpy reference when the library is there, else numpy."""
    return ("native", "numpy") if native.available() else ("numpy",)


def run(sizes=(10**4, 10**5), n_bits: int = 32, lift_bits: int = LIFT_BITS, seed: bytes | None = None,
        backends=None) -> dict:
    """Keygen and eval per ReLU for each batch size and backend; returns a JSON-ready dict."""
    prg = PRG(seed) if seed is not None else PRG.fresh("fss-bench")
    k = n_bits + lift_bits
    mac_gate = make_gate("relu", n_bits, k, mac=True)
    plain_gate = make_gate("relu", n_bits)
    mu = mac_gate.group.random(prg, ())
    results = []
    for count in sizes:
        for backend in backends or default_backends():
            results.append(_one(mac_gate, int(count), prg, mu, backend))
            results.append(_one(plain_gate, int(count), prg, None, backend))
    return {"benchmark": "fss-relu", "machine": {"platform": platform.platform(),
                                                 "cpus": os.cpu_count(), "python": platform.python_version(),
                                                 "fss_kernel": native.info() if native.available() else "numpy"},
            "results": results}


if __name__ == "__main__":  # pragma: no cover - manual use
    import json
    print(json.dumps(run(), indent=2))
