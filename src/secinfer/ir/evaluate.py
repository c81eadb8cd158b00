"""Float vs fixed-point accuracy of the bundled models on their held-out splits.

``accuracy_report(name, cfg)`` imports a bundled model with ``onnx_import.load_model``,
runs the held-out split through the float executor and through the bit-exact
fixed-point executor (the oracle every protocol matches), and scores both with the
model's own metric. Products that leave the ring (``FixedPointConfig.product_max_abs``)
are collected, not hidden: a model whose figures collapse under FX32 names the nodes
that overflowed.

``zoo_agreement(name, cfg)`` does the same for a random-weight zoo model on seeded
random inputs: there are no labels, so it reports how often the fixed-point argmax
equals the float argmax and the largest output error.
"""

from __future__ import annotations

import hashlib

import numpy as np

from secinfer.arith.fixed import FX32, FX64, FixedPointConfig
from secinfer.crypto.prg import PRG
from secinfer.ir import bundled

CONFIGS = (FX64, FX32)


def _executors():
    # Imported lazily: the executors live in modules of their own (and import onnx).
    from secinfer.ir.fixed_exec import run_fixed
    from secinfer.ir.float_exec import run_float
    from secinfer.ir.onnx_import import load_model

    return load_model, run_float, run_fixed


def _compare(graph, x: np.ndarray, cfg: FixedPointConfig):
    _, run_float, run_fixed = _executors()
    out_float = np.asarray(run_float(graph, x), dtype=np.float64)
    overflows: list = []
    ring = run_fixed(graph, x, cfg, overflow="collect", overflows=overflows)
    out_fixed = cfg.decode(ring)
    nodes = sorted({r.node for r in overflows})
    return out_float, out_fixed, nodes


def accuracy_report(name: str, cfg: FixedPointConfig) -> dict:
    """Float and fixed-point metric of bundled model ``name`` on its held-out split."""
    load_model, _, _ = _executors()
    graph = load_model(bundled.bundled_path(name))
    x, y = bundled.bundled_testset(name)
    out_float, out_fixed, overflow_nodes = _compare(graph, x, cfg)
    pred_float = bundled.predict_from_output(name, out_float)
    pred_fixed = bundled.predict_from_output(name, out_fixed)
    report = {
        "config": cfg.name,
        "n_test": int(len(y)),
        "float": bundled.score(name, y, pred_float),
        "fixed": bundled.score(name, y, pred_fixed),
        "max_abs_output_error": float(np.max(np.abs(out_fixed - out_float))),
        "overflow_nodes": overflow_nodes,
    }
    if bundled.bundled_info(name)["task"] == "classification":
        report["agreement"] = float(np.mean(pred_float == pred_fixed))
    return report


def fixed_point_entry(name: str, configs=CONFIGS) -> dict:
    """{config name: the fixed-point part of ``accuracy_report``}, rounded for JSON."""
    entry = {}
    for cfg in configs:
        r = accuracy_report(name, cfg)
        item = {k: round(v, 6) for k, v in r["fixed"].items()}
        item["max_abs_output_error"] = float(f"{r['max_abs_output_error']:.3g}")
        if "agreement" in r:
            item["agreement_with_float"] = round(r["agreement"], 6)
        item["overflow_nodes"] = r["overflow_nodes"]
        entry[cfg.name] = item
    return entry


def zoo_agreement(name: str, cfg: FixedPointConfig, n: int = 8, seed: int = 0,
                  **options) -> dict:
    """Fixed vs float on ``n`` seeded [0,1) inputs for zoo model ``name`` (random weights)."""
    from secinfer.ir import zoo

    load_model, _, _ = _executors()
    graph = load_model(zoo.build(name, seed=seed, batch=n, **options))
    shape = (n,) + zoo.describe(name, **options).input_shape[1:]
    prg = PRG(hashlib.sha256(f"secinfer-zoo-inputs/{name}/{seed}".encode()).digest()[:16])
    x = (prg.uint64(shape) >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    out_float, out_fixed, overflow_nodes = _compare(graph, x, cfg)
    flat_f = out_float.reshape(n, -1)
    flat_q = out_fixed.reshape(n, -1)
    return {
        "config": cfg.name, "n": n,
        "argmax_agreement": float(np.mean(flat_f.argmax(1) == flat_q.argmax(1))),
        "max_abs_output_error": float(np.max(np.abs(flat_q - flat_f))),
        "overflow_nodes": overflow_nodes,
    }
