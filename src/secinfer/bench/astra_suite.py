"""``secinfer bench astra``: ASTRA vs the in-repo ABY3 baseline [ASTRA Tables 3, 5-10, Figs. 13-15].

Adapter over ``secinfer.protocols.astra.bench``: both protocols run in the same
invocation on the same model and query; every row gives both absolute figures and the
improvement factor of ASTRA over the baseline, next to the factor the paper reports.
Improvement factors follow the paper's "Improv." columns: baseline / ASTRA for latency,
bytes, rounds and measured seconds; ASTRA / baseline for throughput (so > 1 = ASTRA better).

``--network`` chooses the modelled profiles among ``lan`` and ``wan`` (default both);
the protocol runs are in-process, and the profile enters through the link model of
``astra.bench.model_network`` (rounds x one-way delay + bytes / bandwidth per link).
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
    from secinfer.protocols.astra import bench as ab

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
