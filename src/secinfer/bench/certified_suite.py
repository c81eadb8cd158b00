"""``secinfer bench certified``: Table 1 of CRISP's certified-data evaluation
[CRISP-certified Sec. 6, Table 1] for the three use cases, with the paper's figures beside.

Per use case, on synthetic data shaped like the paper's (half-hourly smart-meter readings,
SNP vectors with weights, location traces) and the production (128-bit) HE parameter set:
t_enc, t_dec, t_comp (psi on the ciphertext), t_prove / t_ver (ZKB++ + BDOP bound proof),
proof sizes per ciphertext and per data point, and the mean absolute relative error of
psi against the exact float result over several inputs.

``--quick``: few ZKB++ repetitions and a few dozen data points per ciphertext; the rows also
give the linear extrapolation to 219 repetitions (prover and verifier time and proof size
are linear in the repetitions: every repetition is the same circuit), labelled as such.
Full: 219 repetitions, the paper's 1,024 points per smart-metering ciphertext.
On a shared machine wall times depend on the load: the rows also give the prover's and
verifier's CPU seconds and their division by the cores (the wall time when idle).
"""

from __future__ import annotations

import hashlib
import os
import time

import numpy as np

from secinfer.arith import public_rng
from secinfer.bench.common import Progress
from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.he.params import get_params
from secinfer.crypto.he.rlwe import encrypt_with_randomness
from secinfer.crypto.prg import PRG
from secinfer.crypto.zk import bdop, zkbpp
from secinfer.protocols.certified import usecases
from secinfer.protocols.certified.protocol import (batch_size, constant_coeff, layout, make_message,
                                                   message_bytes)

QUICK = {"sum": 64, "weighted-sum": 64, "distance": 32}
FULL = {"sum": 1024, "weighted-sum": 869, "distance": 512}
QUICK_REPS, ERROR_RUNS_QUICK, ERROR_RUNS_FULL = 4, 4, 20
CORES = max(1, min(2, os.cpu_count() or 1))   # the prover uses GOMAXPROCS = all cores


def synthetic(name: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    if name == "sum":
        x = np.round(rng.gamma(2.0, 0.15, n), 3)                 # kWh per half hour
        return x, usecases.describe(name, n)
    if name == "weighted-sum":
        x = rng.choice([0.0, 1.0, 2.0], n, p=[0.5, 0.35, 0.15])
        w = rng.uniform(0, 1, n)
        return x, usecases.describe(name, n, w / w.sum())
    pts = np.cumsum(np.vstack([[100.0, 200.0], rng.uniform(-2.0, 2.0, (n // 2 - 1, 2))]), axis=0)
    return pts.reshape(-1), usecases.describe(name, n, None, 3.0)


def exact(desc: dict, x: np.ndarray) -> float:
    if desc["usecase"] == "distance":
        p = x.reshape(-1, 2)
        return float(np.sum(np.linalg.norm(p[1:] - p[:-1], axis=1)))
    if desc["usecase"] == "sum":
        return float(x.sum())
    return float(np.dot(desc["weights"], x))


def _case(name: str, n: int, reps: int, error_runs: int, seed: int) -> dict:
    u = usecases.get(name)
    params = get_params(u.params)
    level = u.levels                     # the release blinding needs no level
    primes = tuple(params.q[: level + 1])
    rng = public_rng("bench/certified/data", seed)
    prg = PRG(hashlib.sha256(b"bench-certified" + name.encode()).digest()[:16])
    kp = params.keygen()
    slots = params.n // 2
    evk = params.gen_eval_keys(kp.sk, rotations=usecases.rotation_steps(slots, name))
    ev = Evaluator(params, evk)
    # the protocol's message layout: one signed message per point, or one per batch
    n_msgs, per_msg = layout(batch_size(u, slots), n)
    cfg = zkbpp.ZKConfig(params.log_n, primes, reps, message_bytes(u, per_msg), u.data_bits,
                         n_msgs, u.log_scale, per_msg)
    bp = bdop.BDOPParams(params.log_n, primes)
    key = bdop.commitment_key(bp, prg.bytes(16))
    errs, t_enc, t_comp, t_dec = [], [], [], []
    for run in range(error_runs):
        x, desc = synthetic(name, n, rng)
        d = u.quantize(x)
        t0 = time.perf_counter()
        pt = zkbpp.plaintext(params, zkbpp.encode(cfg, d), level, u.log_scale)
        ct, rnd = encrypt_with_randomness(params, pt, kp.pk, seed=prg.bytes(32))
        t_enc.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        res = usecases.evaluate(ev, desc, [ct], slots)
        t_comp.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        if u.release == "coeff":      # psi's result is the constant coefficient (sum)
            m = usecases.coeff_value(constant_coeff(params, res, kp.sk), params.q[0], params.n,
                                     res.log_scale)
        else:
            m = params.decrypt_decode(res, kp.sk).real[0]
        m /= usecases.result_scale(desc)
        t_dec.append(time.perf_counter() - t0)
        want = exact(desc, x)
        errs.append(abs(want - m) / abs(want))
        if run == 0:
            first = (x, d, ct, rnd)
        else:
            ct.close()
        pt.close()
        if res is not ct:
            res.close()
    x, d, ct, rnd = first
    msgs = [make_message(u, d[i * per_msg:(i + 1) * per_msg], prg.bytes(16), 1, 1_700_000_000 + 1800 * i)
            for i in range(n_msgs)]
    noises = np.stack([rnd.u, rnd.e0, rnd.e1])
    r = bdop.sample_randomness(bp, prg)
    com = bdop.commit(bp, key, noises, r)
    L = len(primes)
    st = zkbpp.Statement(
        [hashlib.sha256(m).digest() for m in msgs],
        np.concatenate([np.stack([params._poly(kp.pk, i)[:L] for i in (0, 1)]), key]),
        np.concatenate([np.stack([params._poly(ct, i) for i in (0, 1)]), com]))
    wit = zkbpp.Witness(msgs, np.vstack([noises, r]).astype(np.int64))
    t0, c0 = time.perf_counter(), time.process_time()
    proof = zkbpp.prove(cfg, st, wit, prg.bytes(32), b"bench")
    t_zk_prove, c_zk_prove = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    bound = bdop.prove_bound(bp, key, com, noises, r, prg, b"bench")
    t_b_prove = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    ok = zkbpp.verify(cfg, st, proof, b"bench").ok
    t_zk_ver, c_zk_ver = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    ok = ok and bdop.verify_bound(bp, key, com, bound, b"bench").ok
    t_b_ver = time.perf_counter() - t0
    if not ok:
        raise RuntimeError(f"bench {name}: an honest proof did not verify")
    ext = zkbpp.PRODUCTION_REPS / reps
    p = u.paper
    row = {
        "usecase": name, "params": u.params, "points": n, "reps": reps,
        "soundness_bits": round(zkbpp.soundness_bits(reps), 1),
        "t_enc_ms": 1e3 * float(np.mean(t_enc)), "paper_t_enc_ms": p["t_enc_ms"],
        "t_dec_ms": 1e3 * float(np.mean(t_dec)), "paper_t_dec_ms": p["t_dec_ms"],
        "t_comp_ms": 1e3 * float(np.mean(t_comp)), "paper_t_comp_ms": p["t_comp_ms"],
        "t_prove_s": t_zk_prove + t_b_prove, "t_ver_s": t_zk_ver + t_b_ver,
        "t_prove_219_s": t_zk_prove * ext + t_b_prove, "t_ver_219_s": t_zk_ver * ext + t_b_ver,
        "paper_t_prove_s": p["t_prove_s"], "paper_t_ver_s": p["t_ver_s"],
        # CPU seconds of the ZKB++ prover/verifier (all threads), extrapolated to 219 reps,
        # and that over the cores: the wall time on an otherwise idle machine
        "zk_prove_219_cpu_s": c_zk_prove * ext, "zk_ver_219_cpu_s": c_zk_ver * ext,
        "zk_prove_219_idle_wall_s": c_zk_prove * ext / CORES, "zk_ver_219_idle_wall_s": c_zk_ver * ext / CORES,
        "zkbpp_mb": len(proof) / 1e6, "zkbpp_219_mb": len(proof) * ext / 1e6,
        "zkbpp_219_kb_per_point": len(proof) * ext / 1e3 / n,
        "paper_mb_per_ct": p.get("proof_mb_per_ct"), "paper_kb_per_point": p.get("proof_kb_per_point"),
        "bound_proof_mb": len(bound) / 1e6, "paper_bound_proof_mb": p.get("bound_proof_mb"),
        "mare": float(np.mean(errs)), "paper_mare": p["mare"], "error_runs": error_runs,
    }
    kp.close()
    return row


def run(quick: bool = False, network: str | None = None) -> dict:
    sizes = QUICK if quick else FULL
    reps = QUICK_REPS if quick else zkbpp.PRODUCTION_REPS
    runs = ERROR_RUNS_QUICK if quick else ERROR_RUNS_FULL
    rows = []
    prog = Progress("certified", len(sizes))
    for i, (name, n) in enumerate(sizes.items()):
        rows.append(_case(name, n, reps, runs, seed=i))
        prog(f"{name}: {n} points, {reps} repetitions")
    names = [r["usecase"] for r in rows]
    plots = [
        {"kind": "bar", "title": "certified: prover / verifier time, extrapolated to 219 repetitions "
                                 "(ours) vs Table 1 (paper)", "x": names, "ylabel": "seconds", "logy": True,
         "series": {"ours t_prove": [r["t_prove_219_s"] for r in rows],
                    "paper t_prove": [r["paper_t_prove_s"] for r in rows],
                    "ours t_ver": [r["t_ver_219_s"] for r in rows],
                    "paper t_ver": [r["paper_t_ver_s"] for r in rows]}, "file": "certified-times.png"},
    ]
    note = ("t_prove_219_s / t_ver_219_s / zkbpp_219_* are linear extrapolations of the measured "
            "repetitions to 219" if quick else "219 repetitions measured")
    return {"suite": "certified", "rows": rows, "plots": plots, "raw": {"note": note}}
