"""``secinfer bench runtime``: the runtime itself, with the reference protocol.

Runs a bundled model through the (insecure) reference protocol as separate processes
under each network profile and reports latency, bytes and rounds, with the slow-down of
each profile as a ratio against the ``none`` profile measured in the same run.

First, the whole ``secinfer run`` command on issue #23's W1 (astra, one query: wall time
with process start, median and spread, the start-up steps, the CPU seconds of all the
command's processes and the load average around the runs; ``secinfer.bench.command``).
Then the transport alone (``secinfer.bench.hop``), on both transports: one small
authenticated frame between two party processes (one-way latency, median and p10/p90 of
half the round trips) and bulk MB/s over one link, next to issue #23's targets (one-way
hop under 50 us, bulk over 1 GB/s per link on loopback).
"""

from __future__ import annotations

import numpy as np

HOP_TARGET_US = 50.0
BULK_TARGET_MB_S = 1000.0


def command_row(reps: int = 5, protocol: str = "astra") -> dict:
    """Issue #23 item 2: the whole ``secinfer run`` command on W1 (dot product d = 784 plus
    bias, one query), process start included: median and spread over ``reps`` runs, and the
    median of each start-up step (``secinfer.bench.command``)."""
    import os
    import resource
    import shutil
    import statistics
    import tempfile
    from pathlib import Path

    from secinfer.bench.command import COMMAND_TARGET_S, command_wall, summarize
    from secinfer.bench.peers_suite import COMMAND_TARGET_S as PEER_S, build_workload, workload_input

    tmp = Path(tempfile.mkdtemp(prefix="secinfer-cmdrow-"))
    os.chmod(tmp, 0o700)
    try:
        model, x = tmp / "W1.onnx", tmp / "W1-1.npy"
        model.write_bytes(build_workload("W1").SerializeToString())
        np.save(x, workload_input("W1", 1))
        walls, startups, cpus = [], [], []
        load = os.getloadavg()[0]
        for _ in range(reps):
            # CPU of every process of the command (itself, its fork server, run process and
            # parties: all reaped below it), a guide to the idle wall time on a loaded host
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            w, st = command_wall(protocol, str(model), str(x))
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            walls.append(w)
            startups.append(st)
            cpus.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    row = {"row": "command", "workload": "W1", "batch": 1, "protocol": protocol, "security": "semi-honest",
           "reps": reps, **summarize(walls, startups), "target_s": COMMAND_TARGET_S, "peer_s": PEER_S,
           "command_cpu_s_median": round(statistics.median(cpus), 4),
           "load_average_1min": [round(load, 2), round(os.getloadavg()[0], 2)]}   # (before, after)
    row["command_vs_target"] = row["command_s"] / COMMAND_TARGET_S
    return row


def run(quick: bool = False, network: str | None = None, batches=None, hop_sizes: dict | None = None,
        command_reps: int | None = None) -> dict:
    from secinfer.bench.common import Progress, split_profiles
    from secinfer.ir import bundled
    from secinfer.runtime.launcher import run_local

    profiles = split_profiles(network, ["none", "lan", "wan"])
    if "none" not in profiles:
        profiles = ["none", *profiles]
    model = "digits-mlp"
    X, _ = bundled.bundled_testset(model)
    batches = list(batches or ([1, 64] if quick else [1, 64, len(X)]))
    from secinfer.bench.hop import measure

    prog = Progress("runtime", len(batches) * len(profiles) + 3)
    rows, hops = [], []
    reps = int(command_reps or (3 if quick else 5))
    prog(f"whole `secinfer run` command on W1, astra semi-honest ({reps} runs)")
    command = command_row(reps)
    for transport in ("tcp", "zmq"):
        prog(f"hop and bulk over {transport} (2 processes)")
        sizes = hop_sizes or ({"pings": 500, "bulk_mb": 64, "bulk_frames": 16} if quick
                              else {"pings": 5000, "bulk_mb": 512, "bulk_frames": 64})
        h = measure(transport, **sizes)
        h.update(target_one_way_us=HOP_TARGET_US, target_bulk_MB_s=BULK_TARGET_MB_S,
                 hop_vs_target=h["one_way_us_median"] / HOP_TARGET_US,
                 bulk_vs_target=h["bulk_MB_s"] / BULK_TARGET_MB_S)
        hops.append(h)
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
            "rows": [command] + [{"row": "hop", **h} for h in hops] + rows, "plots": plots, "hops": hops,
            "command": command,
            "raw": {"model": model, "batches": batches, "profiles": profiles},
            "seconds": prog.elapsed(),
            "notes": "reference protocol is insecure; this suite measures the runtime and the shaping only",
            "checksum": float(np.sum([r["bytes_total"] for r in rows]))}
