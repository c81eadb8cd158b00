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


def predictions(graph, outputs: np.ndarray, task: str) -> np.ndarray:
    """Class labels (classification) or values (regression) from a model's raw output."""
    out = np.asarray(outputs, dtype=np.float64)
    out = out.reshape(out.shape[0], -1)
    if task == "regression":
        return out[:, 0]
    if out.shape[1] == 1:
        last = graph.nodes[-1].op if graph.nodes else ""
        threshold = 0.5 if last == "Sigmoid" else 0.0
        return (out[:, 0] > threshold).astype(np.int64)
    return np.argmax(out, axis=1)


def score(task: str, pred: np.ndarray, y: np.ndarray) -> tuple[str, float]:
    if task == "regression":
        ss_res = float(np.sum((y - pred) ** 2))
        ss_tot = float(np.sum((y - np.mean(y)) ** 2))
        return "R^2", 1.0 - ss_res / ss_tot
    return "accuracy", float(np.mean(pred == y))


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def run_demo(protocols=None, rows=None, network="none", as_json=False) -> int:
    from secinfer.ir import zoo
    from secinfer.ir.fixed_exec import run_fixed
    from secinfer.ir.float_exec import run_float
    from secinfer.ir.onnx_import import load_model
    from secinfer.arith.fixed import get_config
    from secinfer.protocols import registry
    from secinfer.runtime.launcher import run_local

    names = protocols or registry.names()
    rows_out = []
    failures = 0
    for pname in names:
        try:
            spec = registry.get(pname)
        except Exception as e:  # noqa: BLE001 - report an unavailable protocol, go on
            print(f"[{pname}] unavailable: {e}", file=sys.stderr)
            failures += 1
            continue
        if spec.insecure:
            print(f"[{pname}] NOTE: {spec.description}", file=sys.stderr)
        for mname in zoo.bundled_names():
            path = str(zoo.bundled_path(mname))
            graph = load_model(path)
            security = spec.default_security
            try:
                spec.check_model(graph, security)
            except SecinferError:
                continue
            info = zoo.bundled_info(mname)
            task = info.get("task", "classification")
            X, y = zoo.bundled_testset(mname)
            n = rows or spec_demo_rows(spec, len(X))
            X, y = X[:n], y[:n]
            cfg = get_config(spec.default_fixed)
            ref_ring = run_fixed(graph, X, cfg)
            ref_float = run_float(graph, X)
            try:
                res = run_local(protocol=pname, security=security, model_path=path, input_array=X,
                                network=network, fixed=cfg.name, options={}, timeout=1800,
                                progress=False)
            except SecinferError as e:
                print(f"[{pname}] {mname}: FAILED: {e}", file=sys.stderr)
                failures += 1
                continue
            out_ring = np.asarray(res.output_ring) if res.output_ring is not None else None
            exact = (out_ring is not None and out_ring.shape == ref_ring.shape
                     and bool(np.all(out_ring == ref_ring)))
            max_err = float(np.max(np.abs(np.asarray(res.output).reshape(ref_float.shape) - cfg.decode(ref_ring))))
            pred_secure = predictions(graph, res.output, task)
            pred_ref = predictions(graph, cfg.decode(ref_ring), task)
            metric, val = score(task, pred_secure, y)
            _, val_float = score(task, predictions(graph, ref_float, task), y)
            agree = float(np.mean(np.isclose(pred_secure, pred_ref, atol=1e-3 if task == "regression" else 0)))
            rows_out.append({
                "protocol": pname, "security": security, "model": mname, "rows": int(n),
                "bit_exact": exact, "max_abs_err_vs_fixed": max_err, "prediction_agreement": agree,
                "metric": metric, "secure": val, "float": val_float,
                "offline_s": res.latency_s["offline"], "online_s": res.latency_s["online"],
                "bytes_total": res.bytes_total, "rounds_online": res.rounds.get("online", 0),
            })
            if not as_json:
                r = rows_out[-1]
                print(f"{pname:<10} {security:<11} {mname:<18} rows={n:<4} "
                      f"fixed-ref: {'bit-exact' if exact else f'max err {max_err:.2e}'}  "
                      f"pred agree {agree:6.1%}  {metric} {val:.4f} (float {val_float:.4f})  "
                      f"offline {r['offline_s']:.3f}s online {r['online_s']:.3f}s  "
                      f"{_fmt_bytes(r['bytes_total'])}  {r['rounds_online']} rounds", flush=True)
    if as_json:
        print(json.dumps({"results": rows_out}))
    return 1 if failures else 0


def spec_demo_rows(spec, available: int) -> int:
    limit = getattr(spec, "demo_rows", 0) or 0
    return min(available, limit) if limit else available
