"""What ``secinfer inspect`` and ``secinfer demo`` show for SAFHIRE: the quantized model's
accuracy next to float for b = 8, 12, 16 [SAFHIRE Table 4], its rounds and public
metadata [SAFHIRE Sec. 4.2], the packing noise measured at the model's Delta and the Theorem 2
bound per layer [SAFHIRE Sec. 5]; and the demo's oracle (the quantized model, not fx64)."""

from __future__ import annotations

import numpy as np

from secinfer.protocols.safhire import dp


def measure_packing_noise(params, log_delta: int, count: int, reps: int = 2, gamma: int = 0) -> dict:
    """Encrypt, extract, pack ``count`` integers ``reps`` times under a throwaway key (the
    noise does not depend on whose key it is); the decryption error in absolute units
    (std, max) and as a fraction of one message unit."""
    from secinfer.crypto import he
    from secinfer.protocols.safhire import lwe as L

    kp = params.keygen()
    evk = L.eval_keys(params, kp.sk, gamma)
    ev = he.Evaluator(params, evk)
    errs = []
    exact = True
    for i in range(reps):
        v = (np.arange(count, dtype=np.int64) * 7919 + i) % 7 - 3        # activation-sized values
        cts = L.encrypt(params, v, kp.sk, log_delta, gamma)
        out, _ = L.pack(params, ev, L.extract(params, cts, count, gamma), log_delta, gamma)
        got, noise = L.decrypt(params, out, kp.sk, log_delta, count)
        exact = exact and bool(np.array_equal(got, v))
        errs.append(noise)
        L.close_all(cts + out)
    e = np.concatenate(errs)
    ev.close()
    evk.close()
    kp.close()
    sd = float(np.std(e))
    return {"samples": int(e.size), "exact": exact, "std_units": sd, "max_units": float(np.max(np.abs(e))),
            "log2_std_abs": float(np.log2(sd) + log_delta) if sd else None,
            "log2_max_abs": float(np.log2(np.max(np.abs(e))) + log_delta) if sd else None}


def inspect_lines(graph, options: dict | None = None) -> list[str]:
    from secinfer.ir import bundled
    from secinfer.ir import quantize as Q
    from secinfer.protocols.safhire.protocol import _config, _params, log_delta, quantized_model
    from secinfer.protocols.base import PartyJob

    options = dict(options or {})
    lines = ["SAFHIRE (quantized integer model; accuracy of the oracle next to float):"]
    name = str(graph.name).replace("_", "-")
    task = None
    if name in bundled.bundled_names():
        x, y = bundled.bundled_testset(name)
        x, y = x[len(x) // 2:], y[len(y) // 2:]            # the half not used for calibration
        task = bundled.bundled_info(name)["task"]
        labels = y
    else:
        x, labels = Q.calibration_inputs(Q.batch_free(graph), None, 32), None
    models = {}
    for b in (8, 12, 16):
        cfg = _config(PartyJob("server", "semi-honest", None, None, options=dict(options, b=b)))
        qm = models[b] = quantized_model(graph, cfg, options)
        rep = Q.accuracy_report(graph, qm, x, labels, task=task)
        if rep["task"] == "regression":     # an argmax of one output means nothing
            tgt = (f"RMSE vs targets {rep['quantized_rmse']:.4g} (float {rep['float_rmse']:.4g}), "
                   if "float_rmse" in rep else "")
            agree = (f"{tgt}error vs float: RMSE {rep['rmse']:.3g} ({rep['rel_rmse']:.2%} of the "
                     f"float outputs' spread), max {rep['max_abs_err']:.3g} on {rep['samples']} inputs")
        else:
            acc = (f"accuracy {rep['quantized_accuracy']:.4f} (float {rep['float_accuracy']:.4f}), "
                   if "float_accuracy" in rep else "")
            agree = f"{acc}argmax agrees with float on {rep['agreement']:.1%} of {rep['samples']} inputs"
        lines.append(f"  b={b:<2} act {qm.act_bits} bits, weights <= {qm.weight_bits} bits: {agree}; "
                     f"{len(qm.rounds)} rounds, eta {[rd.eta for rd in qm.rounds[:-1]]}")
        lines += _zero_weight_lines(qm) + acc_use_lines(qm)
    # rounds, noise and DP at b = 12 with the default (secure) ring
    cfg = _config(PartyJob("server", "semi-honest", None, None, options=dict(options, b=12)))
    qm = models[12]
    params = _params(cfg)
    ld = log_delta(qm, params)
    # the noise does not depend on the model: always 128 packed values (a one-output model
    # packed one value, whose std is 0 and has no log)
    noise = measure_packing_noise(params, ld, 128, reps=1)
    std_abs = "0" if noise["log2_std_abs"] is None else f"2^{noise['log2_std_abs']:.1f}"
    max_abs = "0" if noise["log2_max_abs"] is None else f"2^{noise['log2_max_abs']:.1f}"
    lines.append(f"  b=12 on {cfg['he_params']} (N = {params.n}), Delta = 2^{ld}: packing noise std "
                 f"{std_abs}, max {max_abs} (decryption needs < 2^{ld - 1}); "
                 f"{noise['std_units']:.2e} message units")
    for r, rd in enumerate(qm.rounds):
        last = r == len(qm.rounds) - 1
        d = None if last else dp.theorem2(noise["std_units"], rd.n_out)
        dps = "last round, not shuffled" if last else (
            f"Theorem 2: eps {d['eps']:.3g}, delta {d['delta_total']:.2g}" if d["applicable"]
            else f"Theorem 2 not applicable ({d['why']})")
        lines.append(f"  round {r}: sources {rd.sources}, {rd.m} outputs, window {rd.k}, "
                     f"{'ReLU, ' if rd.relu else ''}eta {rd.eta}; {dps}")
    return lines


def acc_use_lines(qm) -> list[str]:
    """The largest accumulator per round over the calibration inputs, as a share of the
    b-bit range, and any wrap: a calibration input that overflows is never silent [issue
    18]. Inputs unlike the calibration data can still wrap unseen (docs/protocols/safhire.md)."""
    c = qm.calib
    if "max_acc_use" not in c:
        return []
    use = [float(u) for u in c["max_acc_use"]]
    worst = max(range(len(use)), key=lambda r: use[r]) if use else 0
    out = [f"       accumulator use on {c.get('samples', '?')} calibration inputs (share of 2^{qm.b - 1}, "
           f"scale from {c.get('scale_from', 'float')} activations): max {max(use, default=0.0):.3f} "
           f"(round {worst}); per round {[round(u, 3) for u in use]}"]
    if c.get("wrapped_accumulators"):
        out.append(f"       WARNING: {c['wrapped_accumulators']} accumulators wrapped mod 2^{qm.b} on "
                   f"{c.get('wrapped_inputs', '?')} calibration inputs: their outputs are wrong")
    return out


def _zero_weight_lines(qm) -> list[str]:
    """How much of the model the integer rounding removed, and whether what is left still
    answers anything [issue 18]."""
    from secinfer.ir.degeneracy import degeneracy, degeneracy_warnings

    d = degeneracy(qm)
    out = []
    if d["known"]:
        fr = d["zero_weight_frac"]
        worst = max(range(len(fr)), key=lambda r: fr[r]) if fr else 0
        out.append(f"       real weights rounded to 0: up to {max(fr, default=0.0):.1%} of a round's "
                   f"(round {worst}); {d['distinct_outputs']} distinct outputs on {d['samples']} "
                   f"calibration inputs")
    return out + [f"       WARNING: {w}" for w in degeneracy_warnings(qm)]


def demo_oracle(graph, x: np.ndarray, options: dict | None = None) -> np.ndarray:
    """The quantized model's float output for ``x`` (what the protocol must equal exactly)."""
    from secinfer.protocols.safhire.protocol import _config, quantized_model
    from secinfer.protocols.base import PartyJob

    cfg = _config(PartyJob("server", "semi-honest", None, None, options=dict(options or {})))
    return quantized_model(graph, cfg, dict(options or {})).run(x)
