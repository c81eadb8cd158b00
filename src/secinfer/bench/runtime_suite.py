"""``secinfer bench runtime``: the runtime itself, with the reference protocol.

Runs a bundled model through the (insecure) reference protocol as separate processes
under each network profile and reports latency, bytes and rounds, with the slow-down of
each profile as a ratio against the ``none`` profile measured in the same run.
"""

from __future__ import annotations

import numpy as np


def run(quick: bool = False, network: str | None = None, batches=None) -> dict:
    from secinfer.bench.common import Progress, split_profiles
    from secinfer.ir import bundled
    from secinfer.runtime.launcher import run_local

    profiles = split_profiles(network, ["none", "lan", "wan"])
    if "none" not in profiles:
        profiles = ["none", *profiles]
    model = "digits-mlp"
    X, _ = bundled.bundled_testset(model)
    batches = list(batches or ([1, 64] if quick else [1, 64, len(X)]))
    prog = Progress("runtime", len(batches) * len(profiles))
    rows = []
    for batch in batches:
        base = None
        for prof in profiles:
            prog(f"{model} batch {batch} over {prof} (3 processes)")
            res = run_local(protocol="reference", security="semi-honest", model_path=str(bundled.bundled_path(model)),
                            input_array=X[:batch], network=prof, fixed=None, options={}, timeout=600,
                            progress=False)
            online = res.latency_s["online"]
            base = online if prof == "none" else base
            rows.append({"model": model, "batch": batch, "network": prof, "online_s": online,
                         "bytes_total": res.bytes_total, "rounds_online": res.rounds.get("online", 0),
                         "ratio_vs_none": online / base if base else float("nan")})
    plots = [{
        "title": f"reference protocol, {model}: online latency by network profile",
        "kind": "bar", "x": [str(b) for b in batches], "xlabel": "batch size", "ylabel": "online seconds",
        "logy": True, "file": "runtime_latency.png",
        "series": {p: [r["online_s"] for r in rows if r["network"] == p] for p in profiles},
    }]
    return {"suite": "runtime", "network": ",".join(profiles), "baseline": "profile none, same run",
            "rows": rows, "plots": plots, "raw": {"model": model, "batches": batches, "profiles": profiles},
            "seconds": prog.elapsed(),
            "notes": "reference protocol is insecure; this suite measures the runtime and the shaping only",
            "checksum": float(np.sum([r["bytes_total"] for r in rows]))}
