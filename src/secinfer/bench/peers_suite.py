"""``secinfer bench peers``: four workloads side by side with a mature C++ MPC framework.

The targets are the figures the peer framework reached on this machine kind (2 cores,
loopback, every party its own process, no shaping, medians of 5 interleaved runs; issue
#23), written into the JSON next to ours so the plot shows the gap:

    W1  dot product d = 784 plus bias                      (Gemm 784 -> 1)
    W2  sign(w.x + b)                                       (Gemm 784 -> 1, Sigmoid: ASTRA and
                                                            ABY3 reveal the class, i.e. the sign)
    W3  MLP 784-128-128-10 with ReLU
    W4  conv 5x5x16 on 1x28x28, ReLU, max pool 2, FC 10

Each workload is an ONNX model this suite builds itself (fixed seed). Every protocol whose
``check_model`` accepts a workload runs it (W2 only where the protocol reveals the sign:
elsewhere a Sigmoid is a different, costlier function). Per row: online and offline
latency, bytes (all parties, online phase and total), rounds, and the whole-command wall
time of ``secinfer run`` (process start included), as medians over interleaved repetitions
with the spread (min, max). Every output is compared with the fixed-point reference.
A protocol's variants (``VARIANTS``) run as series of their own beside its default rows:
stamp with its LTEE emulation in the host's process (``"ltee": "inprocess"``, plotted as
"stamp (LTEE in process)"; docs/protocols/stamp.md, "Tenth pass").
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path

import numpy as np

from secinfer.arith import public_rng

# workload -> batch -> (online seconds, bytes or None): the peer's best semi-honest 3PC
TARGETS = {
    ("W1", 1): (0.77e-3, 6.3e3), ("W1", 1000): (89e-3, None),
    ("W2", 1): (1.48e-3, None), ("W2", 1000): (93e-3, None),
    ("W3", 1): (6.2e-3, 30e3), ("W3", 128): (100e-3, 5.7e6),
    ("W4", 1): (13.2e-3, 1.3e6),
}
COMMAND_TARGET_S = 0.12   # the peer's whole command on W1
TWO_PARTY_TARGETS = {("W3", 1): (0.573, 2.8e6), ("W3", 128): (2.08, 11.9e6)}  # lattice-based 2PC peer
# issue #23 item 5: crisp malicious at W3 batch 128 within 5 s online (no peer figure: the bound)
MALICIOUS_TARGETS = {("crisp", "W3", 128): (5.0, None)}
MALICIOUS_ROWS = {"crisp": ("W3",)}      # protocol -> workloads also run at security "malicious"

# protocol -> its extra series: (row field, value, run options, plot label); the default row
# of each cell is run as before, the variant as a row of its own with that field
VARIANTS = {"stamp": [("ltee", "inprocess", {"stamp_ltee": "inprocess"}, "stamp (LTEE in process)")]}

THREE_PARTY = ("astra", "aby3", "falcon", "stamp")
TWO_PARTY = ("crisp",)


def build_workload(name: str, seed: int = 2026, sign_head: bool = True):
    """The ONNX model of workload ``name`` (float weights drawn from a fixed seed).
    ``sign_head=False``: W2 without its final Sigmoid (the decision value w.x + b)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = public_rng("bench/peers/weights", seed)

    def init(nm, arr):
        return numpy_helper.from_array(np.asarray(arr, np.float32), nm)

    if name in ("W1", "W2"):
        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 784])
        w = init("w", rng.normal(0, 0.05, (784, 1)))
        b = init("b", rng.normal(0, 0.1, (1,)))
        head = name == "W2" and sign_head
        nodes = [helper.make_node("Gemm", ["input", "w", "b"], ["z" if head else "output"], name="fc")]
        if head:
            nodes.append(helper.make_node("Sigmoid", ["z"], ["output"], name="sign"))
        inits = [w, b]
        out = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 1])
    elif name == "W3":
        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 784])
        dims = [784, 128, 128, 10]
        nodes, inits, prev = [], [], "input"
        for i in range(3):
            inits += [init(f"w{i}", rng.normal(0, 1 / np.sqrt(dims[i]), (dims[i], dims[i + 1]))),
                      init(f"b{i}", rng.normal(0, 0.05, (dims[i + 1],)))]
            y = "output" if i == 2 else f"h{i}"
            nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [y if i == 2 else f"g{i}"], name=f"fc{i}"))
            if i < 2:
                nodes.append(helper.make_node("Relu", [f"g{i}"], [y], name=f"relu{i}"))
            prev = y
        out = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 10])
    elif name == "W4":
        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 28, 28])
        inits = [init("cw", rng.normal(0, 0.2, (16, 1, 5, 5))), init("cb", rng.normal(0, 0.05, (16,))),
                 init("fw", rng.normal(0, 1 / np.sqrt(16 * 12 * 12), (16 * 12 * 12, 10))),
                 init("fb", rng.normal(0, 0.05, (10,)))]
        nodes = [helper.make_node("Conv", ["input", "cw", "cb"], ["c"], name="conv", kernel_shape=[5, 5]),
                 helper.make_node("Relu", ["c"], ["r"], name="relu"),
                 helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
                 helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),
                 helper.make_node("Gemm", ["f", "fw", "fb"], ["output"], name="fc")]
        out = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 10])
    else:
        raise ValueError(f"unknown workload {name!r}")
    graph = helper.make_graph(nodes, f"peers-{name}", [x], [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def workload_input(name: str, batch: int, seed: int = 7) -> np.ndarray:
    rng = public_rng("bench/peers/inputs", seed)
    shape = (batch, 1, 28, 28) if name == "W4" else (batch, 784)
    return rng.uniform(0.0, 1.0, shape)


def reference(workload: str, graph, x: np.ndarray, cfg) -> np.ndarray:
    """What a row's output is compared with, like with like: the fixed-point reference
    executor's output, except for W2, whose protocols (astra, aby3) reveal the class -- the
    sign of the decision value -- and not the sigmoid: there the reference is the class of
    the reference's decision value, 1.0 iff trunc(x W) + b > 0 (the Gemm without the
    Sigmoid; the labels 0.0 / 1.0 the protocols output for a Sigmoid head)."""
    from secinfer.ir.fixed_exec import run_fixed_decoded
    from secinfer.ir.onnx_import import load_model

    if workload == "W2":
        z = run_fixed_decoded(load_model(build_workload("W2", sign_head=False)), x, cfg)
        return (np.asarray(z) > 0).astype(np.float64)
    return run_fixed_decoded(graph, x, cfg)


def _plan(quick: bool):
    if quick:
        return [("W1", 1), ("W2", 1), ("W3", 1), ("W4", 1)], 1
    return [("W1", 1), ("W1", 1000), ("W2", 1), ("W2", 1000), ("W3", 1), ("W3", 128), ("W4", 1)], 5


def _series(row: dict) -> str:
    """The plot's series of a row: the protocol, with its security when not semi-honest."""
    for field, value, _, label in VARIANTS.get(row["protocol"], ()):
        if row.get(field) == value:
            return label
    return row["protocol"] if row.get("security", "semi-honest") == "semi-honest" else f"{row['protocol']} ({row['security']})"


def _runnable(protocol: str, workload: str, graph, security: str = "semi-honest") -> str | None:
    """None if ``protocol`` runs ``workload`` at ``security`` here, else why not."""
    from secinfer.protocols import registry

    if workload == "W2" and protocol not in ("astra", "aby3"):
        return "sign(w.x+b) is revealed as a class only by astra/aby3; elsewhere Sigmoid is another function"
    spec = registry.get(protocol)
    try:
        spec.check_model(graph, security)
    except Exception as e:  # noqa: BLE001 - the reason is reported in the JSON
        return f"{type(e).__name__}: {e}"
    return None


def _command_wall(protocol: str, model_path: str, x_path: str) -> tuple[float, dict]:
    """Wall seconds of the whole ``secinfer run`` command, process start included, and its
    start-up report."""
    from secinfer.bench.command import command_wall

    return command_wall(protocol, model_path, x_path)


def _stats(values):
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None, None
    return statistics.median(vals), min(vals), max(vals)


def run(quick: bool = False, network: str | None = None, partial: str | None = None,
        protocols=None, plan=None, reps: int | None = None) -> dict:
    from secinfer.bench.common import Progress
    from secinfer.arith.fixed import get_config
    from secinfer.ir.onnx_import import load_model
    from secinfer.protocols import registry
    from secinfer.runtime.launcher import run_local

    if network not in (None, "none"):
        raise ValueError("bench peers runs unshaped loopback only (the peer's figures are unshaped)")
    plan_rows, default_reps = _plan(quick)
    plan_rows = list(plan or plan_rows)
    reps = int(reps or default_reps)
    protocols = [p for p in (protocols or THREE_PARTY + TWO_PARTY) if p in registry.names()]
    tmp = Path(tempfile.mkdtemp(prefix="secinfer-peers-"))
    os.chmod(tmp, 0o700)
    prog = None
    try:
        cells, skipped = [], []
        for wl in sorted({w for w, _ in plan_rows}):
            model = build_workload(wl)
            path = tmp / f"{wl}.onnx"
            path.write_bytes(model.SerializeToString())
            graph = load_model(str(path))
            for b in sorted({b for w, b in plan_rows if w == wl}):
                x = workload_input(wl, b)
                xp = tmp / f"{wl}-{b}.npy"
                np.save(xp, x)
                for p in protocols:
                    for sec in ("semi-honest", "malicious"):
                        if sec == "malicious" and wl not in MALICIOUS_ROWS.get(p, ()):
                            continue
                        why = _runnable(p, wl, graph, sec)
                        if why:
                            skipped.append({"workload": wl, "batch": b, "protocol": p, "security": sec, "why": why})
                            continue
                        cell = {"workload": wl, "batch": b, "protocol": p, "security": sec, "model": str(path),
                                "x": x, "x_path": str(xp), "graph": graph, "samples": [], "options": {}}
                        cells.append(cell)
                        for field, value, opts, _ in VARIANTS.get(p, ()) if sec == "semi-honest" else ():
                            cells.append({**cell, "samples": [], "options": opts, "variant": (field, value)})
        prog = Progress("peers", len(cells) * reps)
        for rep in range(reps):                      # interleaved: every cell once per repetition
            for c in cells:
                spec = registry.get(c["protocol"])
                prog(f"{c['workload']} batch {c['batch']} {_series(_variant_row(c))} {c['security']} "
                     f"(repetition {rep + 1}/{reps})")
                # with the checked graph, as `secinfer run` passes it (api.launch): the same
                # record layer for small runs (launcher.small_run_record_layer) as the command
                res = run_local(protocol=c["protocol"], security=c["security"], model_path=c["model"],
                                input_array=c["x"], network="none", options=dict(c["options"]), timeout=900,
                                model_graph=c["graph"])
                wall, startup = _command_wall(c["protocol"], c["model"], c["x_path"]) \
                    if c["batch"] == 1 and c["security"] == "semi-honest" and "variant" not in c else (None, None)
                if "reference" not in c:
                    c["reference"] = reference(c["workload"], c["graph"], c["x"], get_config(spec.default_fixed))
                c["samples"].append({
                    "online_s": res.latency_s.get("online"), "offline_s": res.latency_s.get("offline"),
                    "online_to_output_s": _to_output(res.meters, spec.input_role),
                    "bytes_online": res.bytes_by_phase.get("online"), "bytes_total": res.bytes_total,
                    "rounds_online": res.rounds.get("online"), "command_s": wall, "startup": startup,
                    "record_layer": (res.startup or {}).get("record_layer") or "default",
                    "max_abs_err": _max_err(res.output, c["reference"]),
                })
        rows = []
        for c in cells:
            s = c["samples"]
            on, on_lo, on_hi = _stats([v["online_s"] for v in s])
            cmd, cmd_lo, cmd_hi = _stats([v["command_s"] for v in s])
            if c["security"] == "malicious":
                tgt = MALICIOUS_TARGETS.get((c["protocol"], c["workload"], c["batch"]))
            else:
                tgt = (TWO_PARTY_TARGETS if c["protocol"] in TWO_PARTY else TARGETS).get((c["workload"], c["batch"]))
            row = {**_variant_row(c),
                   "online_ms": None if on is None else on * 1e3,
                   "online_ms_min": None if on_lo is None else on_lo * 1e3,
                   "online_ms_max": None if on_hi is None else on_hi * 1e3,
                   **_ms3("online_to_output_ms", _stats([v["online_to_output_s"] for v in s])),
                   "offline_ms": _ms(_stats([v["offline_s"] for v in s])[0]),
                   "bytes_online": _stats([v["bytes_online"] for v in s])[0],
                   "bytes_total": _stats([v["bytes_total"] for v in s])[0],
                   "rounds_online": _stats([v["rounds_online"] for v in s])[0],
                   "command_s": cmd, "command_s_min": cmd_lo, "command_s_max": cmd_hi,
                   "startup_steps_median_s": _startup_steps([v["startup"] for v in s if v["startup"]]),
                   "target_online_ms": None if tgt is None else tgt[0] * 1e3,
                   "target_bytes": None if tgt is None else tgt[1],
                   "max_abs_err_vs_reference": _stats([v["max_abs_err"] for v in s])[2],
                   "record_layer": sorted({v["record_layer"] for v in s}),
                   "reps": len(s)}
            if tgt is not None and on is not None:
                row["online_vs_target"] = on / tgt[0]
            if tgt is not None and row["online_to_output_ms"] is not None:
                # the peer's "online" ends when the client holds its output (issue #23)
                row["to_output_vs_target"] = row["online_to_output_ms"] / (tgt[0] * 1e3)
            rows.append(row)
            if partial:
                os.makedirs(os.path.dirname(partial), exist_ok=True)
                with open(partial, "a") as f:
                    f.write(json.dumps(row) + "\n")
        labels = [f"{r['workload']}/{r['batch']}" for r in rows]
        series = sorted({_series(r) for r in rows})
        plots = [{
            "title": "online latency / the peer's target (1 = at target; lower is better)",
            "kind": "bar", "x": sorted(set(labels), key=labels.index), "xlabel": "workload / batch",
            "ylabel": "online latency / target", "logy": True, "hline": 1.0, "file": "peers_vs_target.png",
            "series": {p: [next((r.get("online_vs_target") for r in rows
                                 if _series(r) == p and f"{r['workload']}/{r['batch']}" == lab), None)
                            for lab in sorted(set(labels), key=labels.index)]
                       for p in series},
        }]
        return {"suite": "peers", "rows": rows, "plots": plots, "skipped": skipped,
                "targets": {f"{w}/{b}": {"online_s": t[0], "bytes": t[1]} for (w, b), t in TARGETS.items()},
                "two_party_targets": {f"{w}/{b}": {"online_s": t[0], "bytes": t[1]}
                                      for (w, b), t in TWO_PARTY_TARGETS.items()},
                "malicious_targets": {f"{p}/{w}/{b}": {"online_s": t[0], "bytes": t[1]}
                                      for (p, w, b), t in MALICIOUS_TARGETS.items()},
                "command_target_s": COMMAND_TARGET_S, "reps": reps, "interleaved": True,
                "baseline": "the peer framework's figures on this machine kind (issue #23); ours measured here",
                "seconds": prog.elapsed()}
    finally:
        if prog is not None:     # (its "still running" ticker stops with the run, also outside the CLI)
            prog.close()
        shutil.rmtree(tmp, ignore_errors=True)   # the workload models and inputs


def _variant_row(c: dict) -> dict:
    """A row's identifying fields: workload, batch, protocol, security, and a variant's field
    (``VARIANTS``: e.g. ``"ltee": "inprocess"``)."""
    row = {k: c[k] for k in ("workload", "batch", "protocol", "security")}
    if "variant" in c:
        row[c["variant"][0]] = c["variant"][1]
    return row


def _startup_steps(startups: list) -> dict | None:
    """Median of each start-up step of the whole command (``secinfer.bench.command``)."""
    if not startups:
        return None
    from secinfer.bench.command import summarize

    return summarize([0.0] * len(startups), startups)["startup_steps_median_s"]


def _to_output(meters: dict, input_role: str) -> float | None:
    """Seconds from the last party's entry into the online phase (as ``online``) to the
    input role's exit from it, i.e. to the moment the client holds its output. ``online``
    ends at the last party's exit instead, and on a loaded 2-core host a server preempted
    right after its last send (the receiver it woke runs first) leaves the phase up to
    tens of milliseconds after the client is done: that tail is not latency."""
    wins = [m["phases"]["online"].get("window") for m in meters.values()]
    wins = [w for w in wins if w]
    mine = meters.get(input_role, {}).get("phases", {}).get("online", {}).get("window")
    if not wins or not mine:
        return None
    return max(0.0, mine[1] - max(w[0] for w in wins))


def _ms3(name: str, st) -> dict:
    """{name: median, name_min, name_max} in ms from ``_stats`` seconds."""
    return {name: _ms(st[0]), name + "_min": _ms(st[1]), name + "_max": _ms(st[2])}


def _ms(v):
    return None if v is None else v * 1e3


def _max_err(out, ref) -> float | None:
    """Max |output - reference| (real units; W2: classes, so 0 when every class agrees and 1
    otherwise, ``reference``); None when the shapes differ."""
    if out is None or np.size(out) != np.size(ref):
        return None
    return float(np.max(np.abs(np.asarray(out, np.float64).reshape(-1) - np.asarray(ref, np.float64).reshape(-1))))
