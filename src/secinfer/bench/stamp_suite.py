"""``secinfer bench stamp``: STAMP vs Falcon+ in one run [STAMP Tables 1-4].

Adapter over ``secinfer.bench.stamp_bench.run``: both protocols run on the same zoo
network, input and batch; latencies are modelled per network profile (``lan``, ``wan``
of [STAMP 5.1]) and LTEE kind from measured CPU time, bytes, rounds and bus traffic (see
that module). Every row gives STAMP's speed-up over the Falcon+ run of the same
invocation and its communication saving, next to the paper's factors.

``--quick``: Network-A, -B, -C, LeNet, AlexNet and the Transformer at batch 8 (the paper uses 128);
AlexNet and the Transformer semi-honest only (malicious Falcon+ generates its verification
triples in-protocol, several minutes each for these two).
Full: semi-honest, six networks at batch 128, VGG16 at 32 and ResNet18 at 2 (memory:
Falcon+'s comparison preprocessing for the whole run, see ``FULL_BATCH_OVERRIDES``); malicious, Network-A and -B at 128, Network-C and
LeNet at 32, AlexNet and the Transformer at 8 (time: malicious Falcon+ generates and checks
its triples in-protocol), VGG16 at 1 (23 min, 12.7 GB peak, 2026-11-24: Falcon+'s matrix
triples are now made one at a time, before which VGG16's 4096 x 4096 layer alone needed
~12 GB per party), ResNet18 not run (time). The JSON says which batch ran and what was
skipped.
Falcon+'s comparisons (Falcon's private compare, the default since 2026-11-24) need
preprocessing made by the parties offline, held in memory until the online phase uses it.
All semi-honest runs come first, and ``secinfer bench stamp`` appends each finished result to
``partial.jsonl`` in its results folder as soon as it is done, so a run stopped or killed
part-way keeps what finished.
"""

from __future__ import annotations

from secinfer.bench.common import Progress, num, parse_networks, ratio

QUICK_NETWORKS = ("secureml-a", "network-b", "network-c", "lenet", "alexnet", "stamp-transformer")
QUICK_SEMI_HONEST_ONLY = ("alexnet", "stamp-transformer")
QUICK_BATCH = 8
FULL_BATCH = 128
# Falcon+'s comparison preprocessing (Falcon's private compare, the default since 2026-11-24)
# is made for the whole run before the online phase and held until used (measured
# 2026-11-24 evening: VGG16 at 128 OOM-killed at 24.3 GB; Falcon+ alone at 16, 7.0 GB peak;
# the bench row at 32, 12.6 GB peak, 6.6 min). ResNet18 at 224 x 224 has ~8x VGG16's
# (32 x 32) activations per sample.
FULL_BATCH_OVERRIDES = {"vgg16": 32, "resnet18": 2}
# malicious: Network-C at 128 was OOM-killed at 17.8 GB (2026-11-22, when Falcon+ kept all 44
# copies of a matrix triple's operands); 32 since, not re-measured with the triples streamed
FULL_MALICIOUS_BATCH_OVERRIDES = {"network-c": 32, "lenet": 32, "alexnet": 8, "stamp-transformer": 8, "vgg16": 1}
FULL_MALICIOUS_SKIP = {"resnet18": "time: malicious Falcon+ on ResNet-18 at 224x224 (about 4M comparisons per "
                                   "sample, each with verified products) would take hours on a 2-core machine; "
                                   "VGG16 at batch 1 takes about 23 min"}


def run(quick: bool = False, network: str | None = None, networks=None, batch: int | None = None,
        securities=("semi-honest", "malicious"), batches: dict | None = None, partial: str | None = None) -> dict:
    """``partial``: a file to which each (network, security) result is appended as one JSON
    line as soon as it is done (long runs keep what finished)."""
    import json
    import os

    from secinfer.bench import stamp_bench as sb

    profiles = parse_networks(network, tuple(sb.NET_PROFILES), ("lan", "wan"))
    nets = tuple(networks or (QUICK_NETWORKS if quick else sb.NETWORKS))
    batch = int(batch or (QUICK_BATCH if quick else FULL_BATCH))
    if batches is None:
        batches = {} if quick else dict(FULL_BATCH_OVERRIDES)
    full_default = not quick and networks is None

    def plan(name: str, sec: str):
        """(batch, None) to run, or (None, reason) to skip."""
        if quick and name in QUICK_SEMI_HONEST_ONLY and sec != "semi-honest" and "semi-honest" in securities:
            return None, "--quick: semi-honest only for this network"
        if full_default and sec == "malicious":
            if name in FULL_MALICIOUS_SKIP:
                return None, FULL_MALICIOUS_SKIP[name]
            return int(FULL_MALICIOUS_BATCH_OVERRIDES.get(name, batches.get(name, batch))), None
        return int(batches.get(name, batch)), None

    todo = [(sec, name) for sec in securities for name in nets]
    prog = Progress("stamp", sum(1 for sec, name in todo if plan(name, sec)[0] is not None))
    raw = {"networks": {}, "skipped": []}
    for sec, name in todo:   # semi-honest first; one network per call, results kept per network
        b, why = plan(name, sec)
        if b is None:
            raw["skipped"].append({"network": name, "security": sec, "reason": why})
            continue
        r = sb.run(networks=(name,), batch=b, securities=(sec,), profiles=tuple(profiles),
                   progress=lambda m: prog(f"{m} (STAMP then Falcon+)"))
        for k, v in r.items():
            if k != "networks":
                raw.setdefault(k, v)
        e = r["networks"][name]
        e["results"][sec]["batch"] = e["batch"]
        slot = raw["networks"].setdefault(name, {"paper_name": e["paper_name"], "batch": e["batch"], "results": {}})
        slot["results"][sec] = e["results"][sec]
        if partial:
            os.makedirs(os.path.dirname(partial) or ".", exist_ok=True)
            with open(partial, "a") as f:
                f.write(json.dumps({"network": name, "security": sec, "batch": e["batch"],
                                    "lines": sb.summary_lines(r), "result": e["results"][sec]}, default=str) + "\n")
    rows = []
    for name, e in raw["networks"].items():
        paper_name = e["paper_name"]
        for sec, res in e["results"].items():
            c = res["communication"]
            bsz = res.get("batch", e["batch"])
            paper_comm = (res.get("paper") or {}).get("comm_MB_falcon_stamp_bus_at_128")
            paper_speed = (res.get("paper") or {}).get("speedup_semi_honest_chip") or {}
            for key, lat in res["latency"].items():
                prof, dev = key.split("/", 1)
                row = {"table": "1" if sec == "semi-honest" else "2", "network": paper_name, "batch": bsz,
                       "security": sec, "profile": prof, "ltee": dev,
                       "stamp_s": lat["stamp"]["total_s"], "falcon_s": lat["falcon"]["total_s"],
                       "speedup_vs_falcon": lat["speedup"],
                       "stamp_cpu_s": lat["stamp"]["cpu_s"], "stamp_ltee_s": lat["stamp"]["ltee_s"],
                       "stamp_comm_s": lat["stamp"]["comm_s"], "falcon_cpu_s": lat["falcon"]["cpu_s"],
                       "falcon_comm_s": lat["falcon"]["comm_s"]}
                pre = (res.get("latency_input_preshared") or {}).get(key)
                if pre is not None:   # the paper's accounting: parties start from input shares
                    row.update({"speedup_input_preshared": pre["speedup"], "stamp_s_input_preshared": pre["stamp"]["total_s"],
                                "falcon_s_input_preshared": pre["falcon"]["total_s"]})
                if sec == "semi-honest" and dev == "ltee-chip":
                    row["paper_speedup_cpu"] = paper_speed.get(f"{prof}-cpu")
                    row["paper_speedup_gpu"] = paper_speed.get(f"{prof}-gpu")
                rows.append(row)
            rows.append({"table": "3" if sec == "semi-honest" else "4", "network": paper_name, "batch": bsz,
                         "security": sec, "falcon_MB": c["falcon_interparty_MB"], "stamp_MB": c["stamp_interparty_MB"],
                         "stamp_bus_MB": c["stamp_bus_MB"], "comm_ratio_falcon_over_stamp": c["comm_ratio"],
                         "paper_comm_ratio": ratio(paper_comm[0], paper_comm[1]) if paper_comm else None,
                         "stamp_rounds": c["rounds"]["stamp"], "falcon_rounds": c["rounds"]["falcon"],
                         "rounds_ratio_falcon_over_stamp": ratio(c["rounds"]["falcon"], c["rounds"]["stamp"]),
                         "rounds_input_preshared": res.get("rounds_input_preshared"),
                         "prediction_agreement": res["prediction_agreement_stamp_vs_falcon"],
                         **(res.get("oracle") or {})})
    return {"suite": "stamp", "network": ",".join(profiles), "baseline": "in-repo Falcon+ (same run)", "skipped": raw["skipped"],
            "rows": rows, "plots": _plots(rows, profiles), "raw": raw, "seconds": prog.elapsed()}


def _plots(rows, profiles) -> list:
    plots = []
    nets = list(dict.fromkeys(r["network"] for r in rows))
    for sec, table in (("semi-honest", "1"), ("malicious", "2")):
        sel = [r for r in rows if r["table"] == table]
        if not sel:
            continue
        series = {}
        for prof in profiles:
            for dev in ("ltee-chip", "ltee-soc"):
                vals = [num(next((r["speedup_vs_falcon"] for r in sel if r["network"] == n and r["profile"] == prof
                                  and r["ltee"] == dev), None)) for n in nets]
                if any(v == v for v in vals):
                    series[f"{prof} {dev}"] = vals
            if sec == "semi-honest":
                series[f"{prof} paper (cpu)"] = [num(next((r.get("paper_speedup_cpu") for r in sel
                                                            if r["network"] == n and r["profile"] == prof
                                                            and r["ltee"] == "ltee-chip"), None)) for n in nets]
        plots.append({"title": f"STAMP speed-up over Falcon+, {sec} (Table {table})", "kind": "bar", "x": nets,
                      "xlabel": "network", "ylabel": "speed-up (x)", "logy": True,
                      "file": f"stamp_speedup_{sec}.png", "series": series, "hline": 1.0})
    comm = [r for r in rows if r["table"] in ("3", "4")]
    if comm:
        xs = [f"{r['network']} {'mal.' if r['security'] == 'malicious' else 'semi'}" for r in comm]
        plots.append({"title": "Inter-party communication per inference batch (Tables 3-4)", "kind": "bar",
                      "x": xs, "xlabel": "network, security", "ylabel": "MB", "logy": True,
                      "file": "stamp_communication.png",
                      "series": {"Falcon+": [num(r["falcon_MB"]) for r in comm],
                                 "STAMP": [num(r["stamp_MB"]) for r in comm],
                                 "STAMP bus": [num(r["stamp_bus_MB"]) for r in comm]}})
    return plots
