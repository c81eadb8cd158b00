"""``secinfer bench astra``: ASTRA vs the in-repo ABY3 baseline [ASTRA Tables 3, 5-10, Figs. 13-15].

Adapter over ``secinfer.bench.astra_bench``: both protocols run in the same
invocation on the same model and query; every row gives both absolute figures and the
improvement factor of ASTRA over the baseline, next to the factor the paper reports.
Improvement factors follow the paper's "Improv." columns: baseline / ASTRA for latency,
bytes, rounds and measured seconds; ASTRA / baseline for throughput (so > 1 = ASTRA better).

``--network`` chooses the modelled profiles among ``lan`` and ``wan`` (default both);
the protocol runs are in-process, and the profile enters through the link model of
``astra_bench.model_network`` (rounds x one-way delay + bytes / bandwidth per link).
"""

from __future__ import annotations

from secinfer.bench.common import Progress, num, parse_networks

# Paper improvement factors ("Improv." columns, or ratios of the paper's own figures).
PAPER_THROUGHPUT = {  # [ASTRA Tables 7 (regression), 9 (classification)]
    ("regression", "semi-honest", "lan"): 1.02, ("regression", "semi-honest", "wan"): 2.56,
    ("regression", "malicious", "lan"): 1.5, ("regression", "malicious", "wan"): 1.5,
    ("classification", "semi-honest", "lan"): 2.2, ("classification", "semi-honest", "wan"): 2.93,
    ("classification", "malicious", "lan"): 1.5, ("classification", "malicious", "wan"): 1.5,
}
PAPER_LATENCY = {  # online latency ABY3 / ASTRA from [ASTRA Tables 6, 8]
    ("regression", "semi-honest", "lan"): 0.62 / 0.61, ("regression", "semi-honest", "wan"): 0.23 / 0.09,
    ("regression", "malicious", "lan"): 1.56 / 1.07, ("regression", "malicious", "wan"): 0.70 / 0.44,
    ("classification", "semi-honest", "lan"): 3.48 / 1.58, ("classification", "semi-honest", "wan"): 1.61 / 0.55,
    ("classification", "malicious", "lan"): 4.42 / 2.53, ("classification", "malicious", "wan"): 2.08 / 0.98,
}
PAPER_ONLINE_COMM = {  # online KB ABY3 / ASTRA from [ASTRA Tables 6, 8]
    ("regression", "semi-honest"): 0.02 / 0.01, ("regression", "malicious"): 55.13 / 12.27,
    ("classification", "semi-honest"): 0.07 / 0.04, ("classification", "malicious"): 55.3 / 12.4,
}
PAPER_RESTRICTED = {("regression", "lan"): 15.0, ("regression", "wan"): 3.75,  # [ASTRA Table 10]
                    ("classification", "lan"): 15.01, ("classification", "wan"): 3.75}
PAPER_AES_THROUGHPUT = {("semi-honest", "lan"): 1.0, ("semi-honest", "wan"): 1.51,  # [ASTRA Table 5]
                        ("malicious", "lan"): 1.05, ("malicious", "wan"): 1.50}

QUICK = {"d": 784, "sweep": (500, 1000, 1500, 2000, 2500), "micro": {"n": 1024, "d": 784, "cmp_n": 16}, "aes": True}
FULL = {"d": 784, "sweep": (500, 1000, 1500, 2000, 2500), "micro": {"n": 4096, "d": 784, "cmp_n": 64}, "aes": True}


def _table(task: str) -> str:
    return "6/7" if task == "regression" else "8/9"


def run(quick: bool = False, network: str | None = None, d: int | None = None, sweep=None,
        aes: bool | None = None, micro: bool = True) -> dict:
    from secinfer.bench import astra_bench as ab

    cfg = QUICK if quick else FULL
    profiles = parse_networks(network, tuple(ab.PROFILES), ("lan", "wan"))
    d = int(d or cfg["d"])
    sweep = tuple(cfg["sweep"] if sweep is None else sweep)
    aes = cfg["aes"] if aes is None else aes
    prog = Progress("astra", len(profiles) + int(bool(micro)) + int(bool(aes)))
    raw: dict = {"profiles": {}}
    for prof in profiles:
        prog(f"prediction d={d} + sweep {list(sweep)} under {prof} (ASTRA and ABY3)")
        raw["profiles"][prof] = ab.run(profile=prof, d=d, sweep=sweep, restricted=True, micro=False, aes=False)
    if micro:
        prog(f"micro kernels {cfg['micro']} (ASTRA and ABY3)")
        raw["micro"] = ab.micro_kernels(**cfg["micro"])
    if aes:
        prog("AES-128 circuit, semi-honest and malicious (ASTRA and the replicated baseline)")
        raw["aes128"] = ab.aes_circuit(profiles[0])
    rows: list = []
    for prof in profiles:
        rep = raw["profiles"][prof]
        unit = rep["units"]["throughput"]
        for p in rep["prediction"]:
            key = (p["task"], p["security"], prof)
            a, b = p["astra"], p["aby3"]
            rows.append({
                "table": _table(p["task"]), "profile": prof, "security": p["security"], "task": p["task"], "d": d,
                "astra_online_latency_ms": 1e3 * a["online_latency_s"], "aby3_online_latency_ms": 1e3 * b["online_latency_s"],
                "improv_online_latency": p["ratio_online_latency"], "paper_improv_online_latency": PAPER_LATENCY[key],
                "astra_offline_latency_ms": 1e3 * a["offline_latency_s"], "aby3_offline_latency_ms": 1e3 * b["offline_latency_s"],
                "astra_online_bytes": a["online_bytes_servers"], "aby3_online_bytes": b["online_bytes_servers"],
                "improv_online_bytes": p["ratio_online_bytes"],
                "paper_improv_online_bytes": PAPER_ONLINE_COMM[key[:2]],
                "astra_offline_bytes": a["offline_bytes_servers"], "aby3_offline_bytes": b["offline_bytes_servers"],
                "astra_online_rounds": a["online_rounds"], "aby3_online_rounds": b["online_rounds"],
                f"astra_throughput_{unit.replace('/', '_per_')}": a["online_throughput"],
                f"aby3_throughput_{unit.replace('/', '_per_')}": b["online_throughput"],
                "improv_throughput": p["ratio_online_throughput"], "paper_improv_throughput": PAPER_THROUGHPUT[key],
                "improv_bw_throughput": p["ratio_bw_throughput"],
                "astra_online_cpu_s": a["online_seconds"], "aby3_online_cpu_s": b["online_seconds"],
                "improv_measured_seconds": p["ratio_online_seconds"]})
            if "restricted" in p:
                r = p["restricted"]
                rows.append({"table": "10", "profile": prof, "security": "malicious", "task": p["task"], "d": d,
                             "restricted_link": "p0-p2", f"astra_throughput_{unit.replace('/', '_per_')}": r["astra_throughput"],
                             f"aby3_throughput_{unit.replace('/', '_per_')}": r["aby3_throughput"],
                             "improv_throughput": r["ratio"], "paper_improv_throughput": PAPER_RESTRICTED[(p["task"], prof)]})
        for s in rep["sweep"]:
            rows.append({"table": "fig13" if s["task"] == "regression" else "fig14", "profile": prof,
                         "security": "malicious", "task": s["task"], "d": s["d"],
                         f"astra_throughput_{unit.replace('/', '_per_')}": s["astra_throughput"],
                         f"aby3_throughput_{unit.replace('/', '_per_')}": s["aby3_throughput"],
                         "improv_throughput": s["ratio"]})
    for name, m in (raw.get("micro") or {}).items():
        sec, kernel = name.split("/", 1)
        rows.append({"table": "kernels", "security": sec, "kernel": kernel, "count": m["count"],
                     "astra_online_bits_per_op": m["astra_online_bits_per_op"],
                     "aby3_online_bits_per_op": m["aby3_online_bits_per_op"],
                     "astra_online_rounds": m["astra"]["online_rounds"], "aby3_online_rounds": m["aby3"]["online_rounds"],
                     "improv_online_bytes": m["ratio_online_bytes"], "improv_online_rounds": m["ratio_online_rounds"],
                     "improv_measured_seconds": m["ratio_online_seconds"]})
    if raw.get("aes128"):
        _aes_rows(ab, raw["aes128"], profiles, rows)
    return {"suite": "astra", "network": ",".join(profiles), "baseline": "in-repo ABY3 (same run)",
            "improvement_convention": "baseline/ASTRA for latency, bytes, rounds, seconds; ASTRA/baseline for throughput",
            "rows": rows, "plots": _plots(rows, profiles, raw), "raw": raw, "seconds": prog.elapsed()}


def _aes_rows(ab, aes: dict, profiles, rows) -> None:
    for sec in ("semi-honest", "malicious"):
        if sec not in aes:
            continue
        a0, b0 = aes[sec]["astra"], aes[sec]["baseline"]
        for prof in profiles:
            # the circuit ran once; the other profile is the same metered run, re-modelled
            a, b = {**a0, **ab.model_network(a0, prof)}, {**b0, **ab.model_network(b0, prof)}
            unit = "aes_per_s" if prof == "lan" else "aes_per_min"
            rows.append({"table": "3/5", "profile": prof, "security": sec, "task": "aes128",
                         "astra_online_latency_ms": 1e3 * a["online_latency_s"],
                         "aby3_online_latency_ms": 1e3 * b["online_latency_s"],
                         "improv_online_latency": _r(b["online_latency_s"], a["online_latency_s"]),
                         "astra_online_bytes": a["online_bytes"], "aby3_online_bytes": b["online_bytes"],
                         "improv_online_bytes": _r(b["online_bytes"], a["online_bytes"]),
                         "astra_offline_bytes": a["offline_bytes"], "aby3_offline_bytes": b["offline_bytes"],
                         "astra_online_rounds": a["online_rounds"], "aby3_online_rounds": b["online_rounds"],
                         f"astra_throughput_{unit}": a["online_throughput"],
                         f"aby3_throughput_{unit}": b["online_throughput"],
                         "improv_throughput": _r(a["online_throughput"], b["online_throughput"]),
                         "paper_improv_throughput": PAPER_AES_THROUGHPUT[(sec, prof)],
                         "astra_online_cpu_s": a["online_seconds"], "aby3_online_cpu_s": b["online_seconds"]})


def _r(a, b):
    return a / b if b else None


def _plots(rows, profiles, raw) -> list:
    plots = []
    settings = [("semi-honest", "regression", "6/7"), ("semi-honest", "classification", "8/9"),
                ("malicious", "regression", "6/7"), ("malicious", "classification", "8/9"),
                ("malicious", "regression", "10"), ("malicious", "classification", "10"),
                ("semi-honest", "aes128", "3/5"), ("malicious", "aes128", "3/5")]
    short = {"regression": "regr.", "classification": "class.", "aes128": "AES"}
    labels = [f"{'restr. ' if t == '10' else ''}{'mal.' if s == 'malicious' else 'semi'} {short[k]}"
              for s, k, t in settings]

    def pick(prof, s, k, t, key):
        return num(next((r.get(key) for r in rows if r.get("profile") == prof and r.get("security") == s
                         and r.get("task") == k and r.get("table") == t), None))
    series = {}
    for prof in profiles:
        series[f"{prof} measured"] = [pick(prof, s, k, t, "improv_throughput") for s, k, t in settings]
        series[f"{prof} paper"] = [pick(prof, s, k, t, "paper_improv_throughput") for s, k, t in settings]
    plots.append({"title": "ASTRA / ABY3 online throughput (Tables 5, 7, 9, 10)", "kind": "bar", "x": labels,
                  "xlabel": "setting", "ylabel": "improvement factor (x)", "logy": True,
                  "file": "astra_throughput_improvement.png", "series": series, "hline": 1.0})
    lat_settings = settings[:4] + settings[6:]
    lat_labels = [labels[i] for i in (0, 1, 2, 3, 6, 7)]
    series = {}
    for prof in profiles:
        series[f"{prof} ASTRA"] = [pick(prof, s, k, t, "astra_online_latency_ms") for s, k, t in lat_settings]
        series[f"{prof} ABY3"] = [pick(prof, s, k, t, "aby3_online_latency_ms") for s, k, t in lat_settings]
    plots.append({"title": "Modelled online latency (Tables 3, 6, 8)", "kind": "bar", "x": lat_labels,
                  "xlabel": "setting", "ylabel": "milliseconds", "logy": True, "file": "astra_latency.png",
                  "series": series})
    for prof in profiles:
        sw = [r for r in rows if r.get("profile") == prof and r.get("table") in ("fig13", "fig14")]
        if not sw:
            continue
        ds = sorted({r["d"] for r in sw})
        ser = {}
        for task in ("regression", "classification"):
            for who in ("astra", "aby3"):
                key = next(k for k in sw[0] if k.startswith(f"{who}_throughput"))
                ser[f"{who.upper()} {task}"] = [num(next((r[key] for r in sw if r["d"] == dd and r["task"] == task),
                                                         None)) for dd in ds]
        unit = "queries/s" if prof == "lan" else "queries/min"
        plots.append({"title": f"Malicious online throughput vs features, {prof} (Figs. 13-14)", "kind": "line",
                      "x": ds, "xlabel": "features d", "ylabel": unit, "logy": True,
                      "file": f"astra_sweep_{prof}.png", "series": ser})
    km = [r for r in rows if r.get("table") == "kernels"]
    if km:
        xs = [f"{'mal.' if r['security'] == 'malicious' else 'semi'} {r['kernel']}" for r in km]
        plots.append({"title": "Online bits per operation (mul, dot product, comparison)", "kind": "bar", "x": xs,
                      "xlabel": "kernel", "ylabel": "bits per op", "logy": True, "file": "astra_kernels.png",
                      "series": {"ASTRA": [num(r["astra_online_bits_per_op"]) for r in km],
                                 "ABY3": [num(r["aby3_online_bits_per_op"]) for r in km]}})
    return plots


# ---- real processes: `secinfer bench astra-real` ------------------------------------------

REAL = {"quick": {"queries": 40, "warmup": 10}, "full": {"queries": 200, "warmup": 20}}
PAPER_LAN_MS = {  # [ASTRA Tables 6, 8] LAN online latency in ms: (ASTRA, ABY3); RTT 0.47 ms
    ("regression", "semi-honest"): (0.61, 0.62), ("regression", "malicious"): (1.07, 1.56),
    ("classification", "semi-honest"): (1.58, 3.48), ("classification", "malicious"): (2.53, 4.42),
}


def query_intervals(meters: dict) -> list[dict]:
    """Per-query intervals (seconds) from the parties' marks of one multi-query session.

    ``server``: from the moment the later of P1, P2 holds its share of the query ("shared")
    to the client holding the checked output ("output") -- the servers' online work as
    [ASTRA 6] counts it (input sharing excluded, the output's way to the client included);
    ``upload``: the client starts sharing ("query") -> shared; ``online``: the sum, the
    client's whole online phase. The marks are CLOCK_MONOTONIC, one clock on one host.
    """
    def marks(role, name):
        return [t for n, t in meters.get(role, {}).get("marks", []) if n == name]
    q, out = marks("client", "query"), marks("client", "output")
    sh = [marks(p, "shared") for p in ("p1", "p2")]
    n = min(len(q), len(out), *(len(s) for s in sh))
    res = []
    for i in range(n):
        start = max(s[i] for s in sh)
        res.append({"upload": start - q[i], "server": out[i] - start, "online": out[i] - q[i]})
    return res


def _linear_onnx(path, d: int, classifier: bool, seed: int = 7):
    """x (1, d) -> Gemm [-> Sigmoid]: the benchmark's linear / logistic regression model."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from secinfer.crypto.prg import PRG

    g = PRG(seed.to_bytes(16, "big"), "astra-real-bench")   # benchmark data, not protocol randomness
    w = (g.uint64((d, 1)).astype(np.float64) / 2.0 ** 63 - 1.0) * (1.7 / np.sqrt(d))
    x = (g.uint64((1, d)).astype(np.float64) / 2.0 ** 63 - 1.0) * 1.7
    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["z" if classifier else "y"])]
    if classifier:
        nodes.append(helper.make_node("Sigmoid", ["z"], ["y"]))
    graph = helper.make_graph(
        nodes, "astra-bench", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
        [numpy_helper.from_array(w.astype(np.float32), "W"), numpy_helper.from_array(np.array([0.1], np.float32), "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return x


def _stats(vals) -> dict:
    import numpy as np
    a = 1e3 * np.asarray(vals, np.float64)
    return {"median_ms": float(np.median(a)), "p10_ms": float(np.percentile(a, 10)),
            "p90_ms": float(np.percentile(a, 90)), "min_ms": float(a.min())}


# [ASTRA 6, "Network & Hardware"] WAN: per-link RTTs, 25 Mbit/s; the client and the model
# owner get LAN links (the paper's figures count the servers' work only)
PAPER_WAN_LINKS = {("p0", "p1"): 201.928, ("p1", "p2"): 81.736, ("p0", "p2"): 229.792}
REAL_WAN_BATCH = {"quick": 50, "full": 200}


def paper_wan_links() -> dict:
    from secinfer.net.shaping import parse_profile
    return {frozenset(k): parse_profile(f"bw=3.125,lat={rtt / 2:g}") for k, rtt in PAPER_WAN_LINKS.items()}


def real_throughput(protocol: str, security: str, task: str, d: int, batch: int, workdir=None) -> dict:
    """Online throughput with real processes on the paper's WAN (per-link RTTs, 25 Mbit/s
    between the servers): one batch of ``batch`` queries, throughput = batch / the servers'
    online interval, in queries per minute [ASTRA Tables 7, 9]. ASTRA runs the paper's
    message structure (``reveal="paper"``): the tables compare the servers' links, and the
    direct reveal would move the semi-honest output off them onto the client's LAN link."""
    import tempfile
    from pathlib import Path

    import numpy as np

    from secinfer.runtime.launcher import run_local

    cls = task == "classification"
    with tempfile.TemporaryDirectory(prefix="astra-wan-", dir=workdir) as tmp:
        path = Path(tmp) / f"linear-{d}-{task}.onnx"
        x = np.repeat(_linear_onnx(path, d, cls), batch, axis=0)
        r = run_local(protocol, security, path, x, network="lan", timeout=1800.0,
                      options={"reveal": "paper"} if protocol == "astra" else None,
                      cluster_settings={"links": paper_wan_links(), "peer_timeout": 30.0})
    iv = query_intervals(r.meters)[0]
    return {"protocol": protocol, "security": security, "task": task, "d": d, "batch": batch,
            "server_s": iv["server"], "upload_s": iv["upload"], "online_rounds": r.rounds["online"],
            "throughput_per_min": 60.0 * batch / iv["server"],
            "online_bytes": r.bytes_by_phase["online"]}


def real_latency(protocol: str, security: str, task: str, d: int, queries: int, warmup: int,
                 network: str = "lan", workdir=None, options: dict | None = None, transport: str | None = None) -> dict:
    """One real multi-process session (``runtime.launcher.run_local``: one OS process per
    role, authenticated and encrypted sockets on loopback -- ``transport`` tcp (the
    default) or zmq --, the ``network`` profile applied to every frame) that answers
    ``queries`` queries one after the other; statistics over the queries after the first
    ``warmup``."""
    import os
    import tempfile
    from pathlib import Path

    import numpy as np

    from secinfer.ir.onnx_import import load_model
    from secinfer.net.shaping import parse_profile
    from secinfer.protocols.rep3 import linear as mdl
    from secinfer.runtime.cluster import DEFAULT_TRANSPORT
    from secinfer.runtime.launcher import run_local

    cls = task == "classification"
    transport = transport or DEFAULT_TRANSPORT
    with tempfile.TemporaryDirectory(prefix="astra-real-", dir=workdir) as tmp:
        path = Path(tmp) / f"linear-{d}-{task}.onnx"
        x = _linear_onnx(path, d, cls)
        load0 = os.getloadavg()[0]
        r = run_local(protocol, security, path, x, network=network, options={**(options or {}), "queries": queries},
                      timeout=60.0 + 2.0 * queries, cluster_settings={"transport": transport})
        load1 = os.getloadavg()[0]
        from secinfer.arith.fixed import FX64
        lm = mdl.to_linear(load_model(str(path)))
        want = mdl.oracle(mdl.resolve_wfrac(lm, FX64), x, FX64)
    iv = query_intervals(r.meters)[warmup:]
    if not iv:
        raise ValueError(f"{queries} queries leave nothing after {warmup} warm-up queries")
    lat = parse_profile(network).latency
    online_rounds = r.rounds["online"]
    got = np.asarray(r.output_ring).reshape(-1)
    return {"protocol": protocol, "security": security, "task": task, "d": d, "network": network,
            "transport": transport, "queries": queries, "warmup": warmup, "measured": len(iv),
            "server": _stats([v["server"] for v in iv]), "upload": _stats([v["upload"] for v in iv]),
            "online": _stats([v["online"] for v in iv]),
            "online_rounds": online_rounds, "server_rounds": online_rounds - 1,
            "floor_server_ms": 1e3 * (online_rounds - 1) * lat,
            "online_bytes_per_query": r.bytes_by_phase["online"] / queries,
            "correct": bool(np.array_equal(got, np.asarray(want).reshape(-1))),
            "load_avg": [load0, load1]}


def run_real(quick: bool = False, network: str | None = None, d: int = 784, queries: int | None = None,
             warmup: int | None = None, protocols=("astra", "aby3")) -> dict:
    """``secinfer bench astra-real``: real processes, ``lan`` (default) per-query latency of
    ASTRA and ABY3 at d = 784 next to the link model and the paper [Tables 6, 8], plus the
    modelled WAN throughput ratio [Tables 7, 9] from the same invocation."""
    from secinfer.bench import astra_bench as ab

    cfg = REAL["quick" if quick else "full"]
    queries = int(queries or cfg["queries"])
    warmup = int(cfg["warmup"] if warmup is None else warmup)
    nets = parse_networks(network, ("lan", "wan", "none"), ("lan",))
    settings = [(s, t) for s in ("semi-honest", "malicious") for t in ("regression", "classification")]
    # ASTRA also over the ZeroMQ transport (the comparison row: same code, other sockets)
    zmq_rows = "astra" in protocols and "lan" in nets
    prog = Progress("astra-real", len(nets) * len(settings) * len(protocols) + 2 + (len(settings) if zmq_rows else 0))
    raw: dict = {"real": [], "model": {}}
    wan_batch = REAL_WAN_BATCH["quick" if quick else "full"]
    raw["wan_throughput"] = []
    for net in nets:
        for sec, task in settings:
            for proto in protocols:
                if net == "wan":   # throughput on the paper's WAN links, one batch
                    prog(f"{proto} {sec} {task} d={d}: batch of {wan_batch}, real processes, paper WAN links")
                    raw["wan_throughput"].append(real_throughput(proto, sec, task, d, wan_batch))
                    continue
                prog(f"{proto} {sec} {task} d={d}: {queries} queries, real processes, network {net}")
                raw["real"].append(real_latency(proto, sec, task, d, queries, warmup, net))
                if proto == "astra" and net == "lan" and zmq_rows:
                    prog(f"astra {sec} {task} d={d}: {queries} queries, real processes, network {net}, zmq transport")
                    raw["real"].append(real_latency(proto, sec, task, d, queries, warmup, net, transport="zmq"))
    for prof in ("lan", "wan"):
        prog(f"link model {prof} (in-process metered run of both protocols)")
        raw["model"][prof] = ab.run(profile=prof, d=d, sweep=(), restricted=False, micro=False)
    rows = []
    for r in raw["real"]:
        if r["protocol"] != "astra" or r["transport"] == "zmq":
            continue
        base = next((b for b in raw["real"] if b["protocol"] == "aby3" and b["security"] == r["security"]
                     and b["task"] == r["task"] and b["network"] == r["network"]), None)
        other = next((b for b in raw["real"] if b["protocol"] == "astra" and b["transport"] == "zmq"
                      and b["security"] == r["security"] and b["task"] == r["task"] and b["network"] == r["network"]), None)
        pred = next(p for p in raw["model"]["lan"]["prediction"]
                    if p["security"] == r["security"] and p["task"] == r["task"])
        wan = next(p for p in raw["model"]["wan"]["prediction"]
                   if p["security"] == r["security"] and p["task"] == r["task"])
        paper = PAPER_LAN_MS[(r["task"], r["security"])]
        row = {"table": "6/8 real", "profile": r["network"], "security": r["security"], "task": r["task"], "d": d,
               "queries": r["measured"], "astra_server_ms_median": r["server"]["median_ms"],
               "astra_server_ms_p90": r["server"]["p90_ms"], "astra_upload_ms_median": r["upload"]["median_ms"],
               "astra_online_ms_median": r["online"]["median_ms"], "astra_server_rounds": r["server_rounds"],
               "astra_floor_server_ms": r["floor_server_ms"],
               "model_astra_online_ms": 1e3 * pred["astra"]["online_latency_s"],
               "paper_astra_ms": paper[0], "paper_aby3_ms": paper[1],
               "target_met": r["server"]["median_ms"] <= paper[0] if r["network"] == "lan" else None,
               "astra_correct": r["correct"], "load_avg": r["load_avg"], "transport": r["transport"],
               "astra_zmq_server_ms_median": other and other["server"]["median_ms"],
               "wan_model_improv_throughput": wan["ratio_online_throughput"],
               "paper_wan_improv_throughput": PAPER_THROUGHPUT[(r["task"], r["security"], "wan")]}
        if base is not None:
            row.update({"aby3_server_ms_median": base["server"]["median_ms"], "aby3_server_ms_p90": base["server"]["p90_ms"],
                        "aby3_server_rounds": base["server_rounds"], "aby3_correct": base["correct"],
                        "improv_server_latency": base["server"]["median_ms"] / r["server"]["median_ms"]})
        rows.append(row)
    for r in raw["wan_throughput"]:
        if r["protocol"] != "astra":
            continue
        base = next((b for b in raw["wan_throughput"] if b["protocol"] == "aby3" and b["security"] == r["security"]
                     and b["task"] == r["task"]), None)
        wan = next(p for p in raw["model"]["wan"]["prediction"]
                   if p["security"] == r["security"] and p["task"] == r["task"])
        rows.append({"table": "7/9 real", "profile": "paper-wan", "security": r["security"], "task": r["task"], "d": d,
                     "batch": r["batch"], "astra_server_s": r["server_s"],
                     "astra_throughput_per_min": r["throughput_per_min"],
                     "aby3_server_s": base and base["server_s"],
                     "aby3_throughput_per_min": base and base["throughput_per_min"],
                     "improv_throughput": base and r["throughput_per_min"] / base["throughput_per_min"],
                     "wan_model_improv_throughput": wan["ratio_online_throughput"],
                     "paper_improv_throughput": PAPER_THROUGHPUT[(r["task"], r["security"], "wan")]})
    rows_lat = [r for r in rows if r["table"] == "6/8 real"]
    plots = [{"title": f"Real-process online latency (servers' part), d = {d}", "kind": "bar",
              "x": [f"{'mal.' if r['security'] == 'malicious' else 'semi'} {r['task'][:5]}. {r['profile']}" for r in rows_lat],
              "xlabel": "setting", "ylabel": "milliseconds (median)", "logy": True, "file": "astra_real_latency.png",
              "series": {"ASTRA": [num(r["astra_server_ms_median"]) for r in rows_lat],
                         "ABY3": [num(r.get("aby3_server_ms_median")) for r in rows_lat],
                         "paper ASTRA": [num(r["paper_astra_ms"]) for r in rows_lat],
                         "rounds x latency": [num(r["astra_floor_server_ms"]) for r in rows_lat]}}] if rows_lat else []
    return {"suite": "astra-real", "network": ",".join(nets), "baseline": "in-repo ABY3 (same run)",
            "interval": query_intervals.__doc__.strip().split("\n\n")[0], "rows": rows, "plots": plots,
            "raw": raw, "seconds": prog.elapsed()}
