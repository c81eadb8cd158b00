"""SAFHIRE packing benchmark rows for ``secinfer bench he`` (``run() -> dict``).
[SAFHIRE Table 1, Table 2, Fig. 10]

* ``pack``: fast packing of n LWE ciphertexts (n = N and n = 256) at extraction level
  gamma = 0, 1, 2 for every parameter set of the b = 8 / 12 / 16 profiles: wall-clock and
  process CPU milliseconds per packed coefficient (``threads`` = 1 and 2), the key switches
  made, key switches per packed coefficient next to the paper's Table 1 and the closed form
  (``packing.expected_key_switches``; a mismatch is reported as a failed check).
* ``extract`` / ``linear``: partial trace extraction per member and the exact LWE linear
  layer (float64 BLAS on 16-bit limbs) per output and per input.
* ``noise``: the noise of encrypt -> extract -> linear -> pack -> decrypt over many runs per
  (b, gamma), with random inputs and weights whose accumulators fill the b-bit range, against
  the decoding bound delta/2 (= q/(2p)); a histogram per (b, gamma) (the paper's Fig. 10) and
  a check that no sample crossed the bound.

CPU time is reported next to wall time because this machine is shared: on a loaded machine
the wall time of one thread is inflated by the load, process CPU time much less.
"""

from __future__ import annotations

import time

import numpy as np

from secinfer.arith import public_rng
from secinfer.crypto.he import packing as pk
from secinfer.crypto.he.evaluator import Evaluator

# [SAFHIRE Table 1] key switches per packed coefficient, prime-power rings M = t^alpha
PAPER_TABLE1 = {"3^7": (2.50, 1.50, 0.50), "5^5": (3.25, 1.25, 0.25), "7^4": (4.16, 1.16, 0.16)}
# [SAFHIRE Table 2] the paper's ring for each b (N = phi(M))
PAPER_RING = {8: ("3^7", 1458), 12: ("7^4", 2058), 16: ("5^5", 2500)}


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, (time.perf_counter() - w0) * 1e3, (time.process_time() - c0) * 1e3


def _batch(P, kp, gamma: int, n: int, log_scale: int, rng) -> pk.LWEArrays:
    x = rng.integers(-100, 100, P.n)
    chunk = pk.encrypt_powers(P, x, kp.sk, log_scale, gamma)
    try:
        return pk.extract(P, [chunk], np.arange(n) % P.n, gamma=gamma)
    finally:
        for c in chunk:
            c.close()


def bench_pack(params_name: str, quick: bool, rng) -> tuple[list, list]:
    b = next((b for b, s in pk.PROFILE_SETS.items() if s == params_name), 16)
    prof = pk.profile(b, params_name)
    P = prof.params()
    rows, checks = [], []
    with P.keygen() as kp:
        keys = P.gen_eval_keys(kp.sk, relin=False, galois=pk.pack_galois_elements(P, 0))
        ev = Evaluator(P, keys)
        counts = (P.n, 256)
        for gamma in (0, 1, 2):
            for n in counts:
                batch = _batch(P, kp, gamma, n, prof.input_log_scale(gamma), rng)
                for threads in ((1,) if (quick and n != P.n) else (1, 2)):
                    (ct, ks), wall, cpu = _timed(lambda: pk.pack(ev, batch, threads=threads))
                    dec = pk.decode(P, ct, kp.sk, prof.log_delta)
                    ct.close()
                    expect = pk.expected_key_switches(P.log_n, n, gamma)
                    row = {"params": params_name, "log_n": P.log_n, "metric": "pack_per_coeff",
                           "gamma": gamma, "n_packed": n, "threads": threads,
                           "ms_wall": wall / n, "ms_cpu": cpu / n, "key_switches": ks,
                           "key_switches_per_coeff": ks / n, "key_switches_expected": expect}
                    if n == P.n:
                        row["paper_table1_key_switches_per_coeff"] = {
                            r: v[gamma] for r, v in PAPER_TABLE1.items()}
                    rows.append(row)
                    checks.append({"check": f"pack key switches {params_name} gamma={gamma} n={n}",
                                   "ok": ks == expect})
                    del dec
                # extraction cost per member
                if n == P.n:
                    x = rng.integers(-100, 100, P.n)
                    chunk = pk.encrypt_powers(P, x, kp.sk, prof.input_log_scale(gamma), gamma)
                    _, wall, cpu = _timed(lambda: pk.extract(P, [chunk], np.arange(n), gamma=gamma))
                    rows.append({"params": params_name, "log_n": P.log_n, "metric": "extract_per_coeff",
                                 "gamma": gamma, "n": n, "ms_wall": wall / n, "ms_cpu": cpu / n})
                    for c in chunk:
                        c.close()
        # the exact linear layer: a 64 x 256 layer on 256 members
        batch = _batch(P, kp, 0, 256, prof.log_delta, rng)
        W = rng.integers(-8, 8, (64, 256))
        for threads in (1, 2):
            _, wall, cpu = _timed(lambda: pk.lwe_linear(batch, W, threads=threads))
            rows.append({"params": params_name, "log_n": P.log_n, "metric": "lwe_linear_64x256",
                         "threads": threads, "ms_wall": wall, "ms_cpu": cpu,
                         "ns_wall_per_mac_coeff": wall * 1e6 / (64 * 256 * (P.n + 1))})
        ev.close()
        keys.close()
    return rows, checks


def bench_noise(b: int, runs: int, rng, n_in: int = 64, n_out: int = 64,
                params_name: str | None = None) -> tuple[dict, list]:
    """Noise after extraction -> linear -> packing for each gamma: ``runs`` random layers
    (weights in [-7, 7], fewer for b = 8, inputs scaled so that |W x + bias| provably stays
    inside the b-bit range)."""
    prof = pk.profile(b, params_name)
    P = prof.params()
    out, checks = {}, []
    lim = 1 << (b - 1)
    with P.keygen() as kp:
        keys = P.gen_eval_keys(kp.sk, relin=False, galois=pk.pack_galois_elements(P, 0))
        ev = Evaluator(P, keys)
        raw = {}
        for gamma in (0, 1, 2):
            samples = []
            wmax = max(1, min(7, (lim // 2) // n_in))
            for _ in range(runs):
                W = rng.integers(-wmax, wmax + 1, (n_out, n_in))
                xmax = max(1, (lim // 2) // max(1, int(np.abs(W).sum(axis=1).max())))
                x = rng.integers(-xmax, xmax + 1, n_in)
                bias = rng.integers(-(lim // 4), lim // 4, n_out)
                acc = np.abs(W).sum(axis=1) * xmax + np.abs(bias)
                if acc.max() >= lim:      # the b-bit accumulator bound the profile assumes
                    raise ValueError("bench layer exceeds the b-bit accumulator range")
                samples.append(pk.pipeline_noise(prof, kp, ev, gamma, x, W, bias))
            raw[gamma] = np.concatenate(samples).astype(np.float64)
        bound = 2.0 ** prof.log_delta / 2
        top = max(float(np.abs(e).max()) for e in raw.values()) + 1
        edges = np.linspace(-top, top, 42)          # shared bins: the Fig. 10 plot overlays them
        for gamma, e in raw.items():
            hist, _ = np.histogram(e, bins=edges)
            out[gamma] = {"b": b, "params": prof.params_name, "gamma": gamma, "samples": int(e.size),
                          "std": float(e.std()), "max_abs": float(np.abs(e).max()),
                          "log2_std": float(np.log2(e.std() + 1e-300)),
                          "bound_delta_half": bound, "log2_bound": float(np.log2(bound)),
                          "log2_margin_max": float(np.log2(bound) - np.log2(np.abs(e).max() + 1)),
                          "hist": hist.tolist(), "hist_edges": edges.tolist()}
            checks.append({"check": f"noise below delta/2 b={b} gamma={gamma}",
                           "ok": bool(np.abs(e).max() < bound)})
        ev.close()
        keys.close()
    return out, checks


def run(quick: bool = False, seed: int = 2026, sets=None, noise_profiles=None) -> dict:
    """Every row of the SAFHIRE packing benchmark (see the module docstring). ``sets``:
    parameter sets to time (default: those of the b = 8/12/16 profiles); ``noise_profiles``:
    (b, set) pairs for the noise runs (default: the three profiles)."""
    rng = public_rng("bench/he-pack/data", seed)
    rows, checks = [], []
    for name in (sets or dict.fromkeys(pk.PROFILE_SETS.values())):
        r, c = bench_pack(name, quick, rng)
        rows += r
        checks += c
    noise = {}
    for b, name in (noise_profiles or [(b, pk.PROFILE_SETS[b]) for b in (8, 12, 16)]):
        nz, c = bench_noise(b, 3 if quick else 40, rng, params_name=name)
        noise[b] = nz
        checks += c
    return {"rows": rows, "noise": noise, "checks": checks, "paper_table1": PAPER_TABLE1,
            "paper_ring": PAPER_RING}
