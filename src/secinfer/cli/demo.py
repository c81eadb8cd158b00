"""``secinfer demo``: every bundled model through every implemented protocol.

For each (protocol, model) pair that the protocol can run, all parties run as separate
local processes over authenticated sockets; the output is compared with the bit-exact
fixed-point reference executor (the oracle) and with the held-out labels.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from secinfer.errors import SecinferError
from secinfer.runtime.launcher import format_bytes


def demo_rows(spec, available: int, rows: int | None) -> int:
    limit = rows or getattr(spec, "demo_rows", 0) or 0
    return min(available, limit) if limit else available


def overflow_nodes(graph, X, cfg) -> list[str]:
    """Nodes whose sums of products leave ``cfg``'s range on this data (result meaningless):
    the check ``secinfer run``, ``inspect`` and the Python API make (secinfer.ir.validate)."""
    from secinfer.ir.validate import overflow_nodes as exact_overflows

    return sorted({r["node"] for r in exact_overflows(graph, X, cfg)})


def evaluate_pair(spec, mname: str, rows: int | None, network: str, security: str | None = None) -> dict:
    """Run one bundled model through one protocol; compare with the oracle and the labels."""
    from secinfer.arith.fixed import get_config
    from secinfer.ir import bundled
    from secinfer.ir.fixed_exec import derived_error_bound, run_fixed
    from secinfer.ir.float_exec import run_float
    from secinfer.ir.onnx_import import load_model
    from secinfer.runtime.launcher import run_local

    path = str(bundled.bundled_path(mname))
    graph = load_model(path)
    X, y = bundled.bundled_testset(mname)
    n = demo_rows(spec, len(X), rows)
    X, y = X[:n], y[:n]
    security = security or spec.default_security
    cfg = get_config(spec.default_fixed)
    ref_ring = run_fixed(graph, X, cfg)
    ref_float = run_float(graph, X)
    res = run_local(protocol=spec.name, security=security, model_path=path, input_array=X,
                    network=network, fixed=cfg.name, options={}, timeout=1800, progress=False)
    out = np.asarray(res.output, dtype=np.float64).reshape(ref_float.shape)
    out_ring = None if res.output_ring is None else np.asarray(res.output_ring)
    exact = out_ring is not None and out_ring.shape == ref_ring.shape and bool(np.all(out_ring == ref_ring))
    ref_dec = cfg.decode(ref_ring)
    if spec.oracle is not None:     # the protocol's own reference (e.g. a quantized model)
        ref_dec = np.asarray(spec.oracle(graph, X, {}), dtype=np.float64).reshape(out.shape)
        exact = bool(np.array_equal(out, ref_dec))
    reference = "own oracle" if spec.oracle is not None else "fixed-point ref"
    if spec.reveals is not None and spec.reveals(graph, security, {}) == "labels":
        # the protocol reveals the predicted class only: compare it with the reference's class
        ref_dec = bundled.predict_from_output(mname, ref_dec.reshape(n, -1)).astype(np.float64).reshape(out.shape)
        exact, reference = bool(np.array_equal(out, ref_dec)), reference + " labels (the class is all it reveals)"
    max_err = float(np.max(np.abs(out - ref_dec)))
    info = bundled.bundled_info(mname)
    metric = info["metric"]
    pred_secure = bundled.predict_from_output(mname, out.reshape(n, -1))
    pred_ref = bundled.predict_from_output(mname, ref_dec.reshape(n, -1))
    pred_float = bundled.predict_from_output(mname, ref_float.reshape(n, -1))
    if info["task"] == "classification":
        agree = float(np.mean(pred_secure == pred_ref))
    else:
        # a protocol may compute a depth-one model at higher precision than the oracle (ASTRA
        # folds the standardiser): both sides are then within the oracle's derived bound of
        # the float model, so they agree within twice that bound
        tol = 2 * derived_error_bound(graph, cfg, x=X)["bound"]
        agree = float(np.mean(np.abs(pred_secure - pred_ref) <= tol))
    return {
        "protocol": spec.name, "security": security, "model": mname, "rows": int(n),
        "bit_exact": exact, "max_abs_err_vs_fixed": max_err, "prediction_agreement": agree,
        "reference": reference,
        "metric": metric, "secure": bundled.score(mname, y, pred_secure)[metric],
        "float": bundled.score(mname, y, pred_float)[metric],
        "offline_s": res.latency_s["offline"], "online_s": res.latency_s["online"],
        "bytes_total": res.bytes_total, "rounds_online": res.rounds.get("online", 0),
    }


def _plan(names, baselines: bool, explicit: bool, all_securities: bool) -> tuple[list, int]:
    """(spec, model, security) jobs of the demo, with a note on stderr for what is skipped."""
    from secinfer.arith.fixed import get_config
    from secinfer.ir import bundled
    from secinfer.ir.onnx_import import load_model
    from secinfer.protocols import registry

    jobs, failures = [], 0
    for pname in names:
        try:
            spec = registry.get(pname)
        except SecinferError:
            raise
        except Exception as e:  # noqa: BLE001 - a protocol whose dependencies are missing
            print(f"[{pname}] unavailable: {e}", file=sys.stderr)
            failures += 1
            continue
        if spec.baseline_for and not (baselines or explicit):
            print(f"[{pname}] in-repo baseline for {spec.baseline_for}: run by `secinfer bench "
                  f"{spec.baseline_for}` (add --baselines to include it here)", file=sys.stderr)
            continue
        if spec.insecure:
            print(f"[{pname}] NOTE: {spec.description}", file=sys.stderr)
        from secinfer.api import run_warning

        if run_warning(spec, get_config(spec.default_fixed)):
            print(f"[{pname}] {run_warning(spec, get_config(spec.default_fixed))}", file=sys.stderr)
        securities = spec.securities if all_securities else (spec.default_security,)
        for mname in bundled.bundled_names():
            graph = load_model(str(bundled.bundled_path(mname)))
            runnable = []
            for sec in securities:
                try:
                    spec.check_model(graph, sec)
                    runnable.append(sec)
                except SecinferError:
                    pass
            if not runnable:
                continue
            X, _ = bundled.bundled_testset(mname)
            over = overflow_nodes(graph, X, get_config(spec.default_fixed))
            if over:
                print(f"[{pname}] {mname}: skipped: its sums of products overflow {spec.default_fixed} "
                      f"at {', '.join(over)} (needs a 64-bit ring)", file=sys.stderr)
                continue
            jobs += [(spec, mname, sec) for sec in runnable]
    return jobs, failures


def run_demo(protocols=None, rows=None, network="none", as_json=False, baselines=False,
             all_securities=True) -> int:
    from tqdm import tqdm

    from secinfer.protocols import registry

    jobs, failures = _plan(protocols or registry.names(), baselines, bool(protocols), all_securities)
    results = []
    bar = tqdm(jobs, desc="[secinfer demo]", unit="run", file=sys.stderr, leave=False,
               disable=as_json or not sys.stderr.isatty())
    for spec, mname, sec in bar:
        bar.set_postfix_str(f"{spec.name} {sec} {mname}")
        try:
            r = evaluate_pair(spec, mname, rows, network, sec)
        except SecinferError as e:
            tqdm.write(f"[{spec.name}] {mname} ({sec}): FAILED: {e}", file=sys.stderr)
            failures += 1
            continue
        results.append(r)
        if not as_json:
            fixed = ("equal" if "labels" in r["reference"] else "bit-exact") if r["bit_exact"] \
                else f"max err {r['max_abs_err_vs_fixed']:.2e}"
            tqdm.write(f"{spec.name:<9} {r['security']:<11} {mname:<16} rows={r['rows']:<4} vs {r['reference']}: "
                       f"{fixed:<16} predictions agree {r['prediction_agreement']:6.1%}  "
                       f"{r['metric']} {r['secure']:.4f} (float {r['float']:.4f})  "
                       f"offline {r['offline_s']:.3f}s online {r['online_s']:.3f}s  "
                       f"{format_bytes(r['bytes_total'])}  {r['rounds_online']} rounds", file=sys.stdout)
            sys.stdout.flush()
    bar.close()
    if as_json:
        print(json.dumps({"results": results}))
    return 1 if failures else 0
