"""``secinfer.bench.astra_bench.run``: ASTRA against the in-repo ABY3 baseline, side by side.

Reproduces the shape of [ASTRA Tables 6-10, Fig. 13-15] as ratios measured in one run on
this machine: both protocols run in-process (LocalHub, one thread per party) on the same
synthetic linear model and query; metered payload bytes per link and causal rounds give a
modelled latency and a bandwidth-bound online throughput under a network profile:

    lan: rtt 0.47 ms on every link, 1 Gbit/s            [ASTRA 6, "Network & Hardware"]
    wan: rtt P0-P1 201.9 ms, P1-P2 81.7 ms, P0-P2 229.8 ms, 25 Mbit/s
    restricted: the P0-P2 link at 100 Mbit/s (lan) / 10 Mbit/s (wan)   [ASTRA 6.2]

modelled online latency = online rounds x (largest one-way delay among the server links the
phase uses) + max over links (bytes on the link / bandwidth); online throughput = Q / latency
of Q = 1000 queries run together (rounds are shared, bytes scale with Q), in queries per second
on lan and per minute on wan as in the paper; ``bw_throughput`` is the pure bandwidth bound
(Q -> infinity) and ``ratio_bw_throughput`` its ratio. Note: with bits packed 8 per byte the
baseline's boolean comparison sends ~3 x 243 bits online while the garbled comparison sends
l kappa = 8192 bits [ASTRA Lemma 5.2], so in the pure bandwidth bound ABY3 wins semi-honest
classification; ASTRA wins on rounds (2 vs log l + 2) and therefore on latency. Measured wall-clock seconds (max over parties, in-process, CPU-bound
Python) are reported next to them. Every figure is given for both protocols and as a ratio.
"""

from __future__ import annotations

import time

import numpy as np

from secinfer.arith.fixed import FX64
from secinfer.crypto.prg import PRG
from secinfer.net.channel import run_local
from secinfer.protocols.rep3.linear import LinearModel

PROFILES = {
    "lan": {"rtt": {("p0", "p1"): 0.47e-3, ("p1", "p2"): 0.47e-3, ("p0", "p2"): 0.47e-3}, "bw": 1e9, "per": 1.0},
    "wan": {"rtt": {("p0", "p1"): 201.928e-3, ("p1", "p2"): 81.736e-3, ("p0", "p2"): 229.792e-3}, "bw": 25e6,
            "per": 60.0},
}
RESTRICTED_BW = {"lan": 100e6, "wan": 10e6}
SERVERS = ("p0", "p1", "p2")
PARALLEL_QUERIES = 1_000


def _link(a, b):
    return tuple(sorted((a, b)))


def _model(d: int, classifier: bool, seed: int) -> tuple[LinearModel, np.ndarray]:
    # benchmark data only (not protocol randomness): uniform values from a seeded PRG stream
    g = PRG(seed.to_bytes(16, "big"), "astra-bench-data")

    def unif(shape):
        return g.uint64(shape).astype(np.float64) / 2.0 ** 64 * 2.0 - 1.0
    w = unif((d, 1)) * (1.7 / np.sqrt(d))
    lm = LinearModel(w, np.array([0.1]), classifier, np.array([0.0, 1.0]))
    return lm, unif((1, d)) * 1.7


def run_prediction(protocol: str, security: str, d: int, classifier: bool, seed: int = 0,
                   batch: int = 1) -> dict:
    from secinfer.protocols.base import PartyJob
    from secinfer.protocols.registry import get
    spec = get(protocol)
    lm, x = _model(d, classifier, seed)
    x = np.repeat(x, batch, axis=0)

    def party(role):
        def f(ep):
            # the paper's message structure [Fig. 4, 6] (``reveal="paper"``): these figures
            # reproduce its tables; `secinfer bench astra-real` runs the default one
            job = PartyJob(role, security, FX64, PRG.fresh(), model=lm if role == "model_owner" else None,
                           input=x if role == "client" else None,
                           options={"reveal": "paper"} if protocol == "astra" else {})
            t0 = time.perf_counter()
            r = spec.run_party(role, ep, job)
            return r, ep.meter, time.perf_counter() - t0
        return f
    res = run_local({r: party(r) for r in spec.roles}, recv_timeout=300)
    for r, v in res.items():
        if isinstance(v, BaseException):
            raise v
    meters = {r: v[1] for r, v in res.items()}
    links: dict = {}
    for s in SERVERS:
        for (ph, dirn, peer, _tag), c in meters[s].counters.items():
            if dirn == "sent" and peer in SERVERS:
                links.setdefault(ph, {}).setdefault(_link(s, peer), 0)
                links[ph][_link(s, peer)] += c.payload
    out = {"protocol": protocol, "security": security, "d": d, "classifier": classifier, "batch": batch}
    for ph in ("offline", "online"):
        out[f"{ph}_bytes_servers"] = int(sum(links.get(ph, {}).values()))
        out[f"{ph}_bytes_total"] = int(sum(m.total(ph) for m in meters.values()))
        out[f"{ph}_rounds"] = max(m.rounds(ph) for m in meters.values())
        out[f"{ph}_seconds"] = max(m.seconds[ph] for m in meters.values())
        out[f"{ph}_links"] = {f"{a}-{b}": v for (a, b), v in links.get(ph, {}).items()}
    out["correct"] = bool(np.all(np.isfinite(res["client"][0].output)))
    return out


def model_network(r: dict, profile: str, restricted: bool = False) -> dict:
    prof = PROFILES[profile]
    bw = {k: prof["bw"] for k in prof["rtt"]}
    if restricted:
        bw[("p0", "p2")] = RESTRICTED_BW[profile]
    out = {}
    for ph in ("offline", "online"):
        used = {tuple(k.split("-")): v for k, v in r[f"{ph}_links"].items() if v > 0}
        one_way = max((prof["rtt"][k] / 2 for k in used), default=0.0)
        xfer = max((8 * v / bw[k] for k, v in used.items()), default=0.0)
        out[f"{ph}_latency_s"] = r[f"{ph}_rounds"] * one_way + xfer
        if ph == "online":
            # [ASTRA 5.1] counts only the servers' work: drop the client's input round and
            # the output round (both protocols have exactly one of each)
            out["server_latency_s"] = max(r["online_rounds"] - 2, 0) * one_way + xfer
        per_query = max((8 * v / bw[k] / r["batch"] for k, v in used.items()), default=0.0)
        out[f"{ph}_bw_throughput"] = (prof["per"] / per_query) if per_query else float("inf")
        q = PARALLEL_QUERIES
        lat_q = r[f"{ph}_rounds"] * one_way + q * per_query
        out[f"{ph}_throughput"] = (prof["per"] * q / lat_q) if lat_q else float("inf")
    return out


def _ratio(a, b):
    return (a / b) if b else None


def run(profile: str = "lan", d: int = 784, securities=("semi-honest", "malicious"),
        sweep=(500, 1000, 1500, 2000, 2500), restricted: bool = True, micro: bool = True,
        aes: bool = False) -> dict:
    """All figures for ``secinfer bench astra``; returns a JSON-ready dict."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}")
    report: dict = {"profile": profile, "d": d, "units": {"throughput": "queries/s" if profile == "lan"
                                                            else "queries/min"}, "prediction": [], "sweep": []}
    for sec in securities:
        for cls in (False, True):
            a = run_prediction("astra", sec, d, cls)
            b = run_prediction("aby3", sec, d, cls)
            ma, mb = model_network(a, profile), model_network(b, profile)
            row = {"security": sec, "task": "classification" if cls else "regression", "astra": {**a, **ma},
                   "aby3": {**b, **mb},
                   "ratio_online_bytes": _ratio(b["online_bytes_servers"], a["online_bytes_servers"]),
                   "ratio_online_rounds": _ratio(b["online_rounds"], a["online_rounds"]),
                   "ratio_online_latency": _ratio(mb["online_latency_s"], ma["online_latency_s"]),
                   "ratio_online_throughput": _ratio(ma["online_throughput"], mb["online_throughput"]),
                   "ratio_bw_throughput": _ratio(ma["online_bw_throughput"], mb["online_bw_throughput"]),
                   "ratio_online_seconds": _ratio(b["online_seconds"], a["online_seconds"])}
            if restricted and sec == "malicious":
                ra, rb = model_network(a, profile, True), model_network(b, profile, True)
                row["restricted"] = {"astra_throughput": ra["online_throughput"],
                                     "aby3_throughput": rb["online_throughput"],
                                     "ratio": _ratio(ra["online_throughput"], rb["online_throughput"])}
            report["prediction"].append(row)
    if "malicious" in securities:
        for dd in sweep or ():
            for cls in (False, True):
                a = model_network(run_prediction("astra", "malicious", dd, cls), profile)
                b = model_network(run_prediction("aby3", "malicious", dd, cls), profile)
                report["sweep"].append({"d": dd, "task": "classification" if cls else "regression",
                                        "astra_throughput": a["online_throughput"],
                                        "aby3_throughput": b["online_throughput"],
                                        "ratio": _ratio(a["online_throughput"], b["online_throughput"])})
    if micro:
        report["micro"] = micro_kernels()
    if aes:
        report["aes128"] = aes_circuit(profile)
    return report


def _run_servers(body, sec: str, recv_timeout: float) -> dict:
    """Run ``body(ep, role, keys)`` in P0, P1, P2 (in-process) after the key set-up; returns
    each server's meter, or raises the first party's error."""
    from secinfer.protocols.rep3.keys import setup_keys

    def party(role):
        def f(ep):
            with ep.phase("setup"):
                keys = setup_keys(ep, role, PRG.fresh(), sec != "semi-honest")
            body(ep, role, keys)
            return ep.meter
        return f
    res = run_local({r: party(r) for r in SERVERS}, recv_timeout=recv_timeout)
    for v in res.values():
        if isinstance(v, BaseException):
            raise v
    return res


def aes_circuit(profile: str = "lan", securities=("semi-honest", "malicious")) -> dict:
    """One AES-128 block as a boolean circuit [ASTRA Tables 3, 5]: ASTRA vs the replicated
    baseline ([4] semi-honest = ABY3's boolean protocol, [2]-style sacrifice malicious)."""
    from secinfer.crypto.gc.aes import aes128_circuit
    from secinfer.protocols.aby3.engine import Rep3Engine
    from secinfer.protocols.astra.circuits import circuit_stats, eval_offline, eval_online
    from secinfer.protocols.astra.engine import AstraEngine
    from secinfer.protocols.astra.triples import rand_shares
    circ = aes128_circuit()
    out = {"circuit": circuit_stats(circ)}

    def run3(body, sec):
        res = _run_servers(body, sec, recv_timeout=600)
        links: dict = {}
        for s_ in SERVERS:
            for (ph, dirn, peer, _t), c in res[s_].counters.items():
                if dirn == "sent" and peer in SERVERS and ph == "online":
                    links[f"{min(s_, peer)}-{max(s_, peer)}"] = links.get(f"{min(s_, peer)}-{max(s_, peer)}", 0) + c.payload
        r = {"online_rounds": max(m.rounds("online") for m in res.values()), "batch": 1,
             "offline_rounds": max(m.rounds("offline") for m in res.values()),
             "online_links": links, "offline_links": {}}
        r["online_bytes"] = sum(links.values())
        r["offline_bytes"] = sum(m.total("offline") for m in res.values())
        r["online_seconds"] = max(m.seconds["online"] for m in res.values())
        r.update(model_network(r, profile))
        return r

    for sec in securities:
        def astra(ep, role, keys):
            e = AstraEngine(ep, role, keys, sec, 1, prg=PRG.fresh())
            with ep.phase("offline"):
                ins = {k: rand_shares(e, 128, k).map(lambda a: a.reshape(1, 128)) for k in ("key", "pt")}
                st = eval_offline(e, circ, {k: v.map(lambda a: a) for k, v in ins.items()})
            with ep.phase("online"):
                eval_online(e, circ, ins, st)

        def rep3(ep, role, keys):
            e = Rep3Engine(ep, role, keys, sec, 1, prg=PRG.fresh())
            with ep.phase("offline"):
                ins = {k: e.rand((1, 128), k) for k in ("key", "pt")}
                if e.malicious:
                    e.preprocess(circ.and_count)
            with ep.phase("online"):
                e.eval_circuit(circ, ins)
                if e.malicious:
                    e.verify()
        a, b = run3(astra, sec), run3(rep3, sec)
        out[sec] = {"astra": a, "baseline": b,
                    "ratio_online_bytes": _ratio(b["online_bytes"], a["online_bytes"]),
                    "ratio_online_throughput": _ratio(a["online_throughput"], b["online_throughput"]),
                    "ratio_online_latency": _ratio(b["online_latency_s"], a["online_latency_s"])}
    return out


def micro_kernels(n: int = 4096, d: int = 784, cmp_n: int = 64) -> dict:
    """Multiplication, dot product and comparison kernels, ASTRA vs ABY3, per security."""
    from secinfer.protocols.aby3.engine import Rep3Engine
    from secinfer.protocols.astra.bitext import bitext_offline, bitext_online
    from secinfer.protocols.astra.engine import AstraEngine
    from secinfer.protocols.astra.triples import rand_shares
    out = {}

    def run3(body, sec):
        res = _run_servers(body, sec, recv_timeout=300)
        return {"online_bytes": sum(m.total("online") for m in res.values()),
                "online_rounds": max(m.rounds("online") for m in res.values()),
                "offline_bytes": sum(m.total("offline") for m in res.values()),
                "online_seconds": max(m.seconds["online"] for m in res.values())}

    for sec in ("semi-honest", "malicious"):
        def astra_mul(ep, role, keys, shape_x=(n,), shape_y=(n,), mm=False):
            e = AstraEngine(ep, role, keys, sec, 64, prg=PRG.fresh())
            with ep.phase("offline"):
                x = rand_shares(e, int(np.prod(shape_x)), "x").map(lambda a: a.reshape(shape_x))
                y = rand_shares(e, int(np.prod(shape_y)), "y").map(lambda a: a.reshape(shape_y))
                z, p = (e.matmul_offline if mm else e.mul_offline)(x, y)
                e.finish_offline()
            with ep.phase("online"):
                (e.matmul_online if mm else e.mul_online)(x, y, z, p)
                if e.malicious:
                    e.verify()

        def aby3_mul(ep, role, keys, shape_x=(n,), shape_y=(n,), mm=False):
            e = Rep3Engine(ep, role, keys, sec, 64, prg=PRG.fresh())
            with ep.phase("offline"):
                x, y = e.rand(shape_x, "x"), e.rand(shape_y, "y")
                if e.malicious:
                    e.preprocess(int(np.prod(shape_x)) * (shape_y[1] if mm else 1))
            with ep.phase("online"):
                (e.matmul if mm else e.mul)(x, y)
                if e.malicious:
                    e.verify()

        def astra_cmp(ep, role, keys):
            e = AstraEngine(ep, role, keys, sec, 64, prg=PRG.fresh())
            b = AstraEngine(ep, role, keys, sec, 1)
            b.out_h, b.in_h = e.out_h, e.in_h
            with ep.phase("offline"):
                a = rand_shares(e, cmp_n, "a")
                p = bitext_offline(e, a, b)
                if e.malicious:
                    e.verify()
            with ep.phase("online"):
                bitext_online(e, a, p, b)
                if e.malicious:
                    e.verify()

        def aby3_cmp(ep, role, keys):
            from secinfer.crypto.gc.circuit import msb_add3_circuit
            e = Rep3Engine(ep, role, keys, sec, 64, prg=PRG.fresh())
            b = Rep3Engine(ep, role, keys, sec, 1, prg=PRG.fresh())
            b.out_h, b.in_h = e.out_h, e.in_h
            with ep.phase("offline"):
                a = e.rand((cmp_n,), "a")
                if e.malicious:
                    b.preprocess(cmp_n * msb_add3_circuit(64).and_count)
            with ep.phase("online"):
                e.bitext(a, b)
                if e.malicious:
                    b.verify()

        res = {
            "mul": (run3(astra_mul, sec), run3(aby3_mul, sec), n),
            "dot_product": (run3(lambda ep, r, k: astra_mul(ep, r, k, (1, d), (d, 1), True), sec),
                            run3(lambda ep, r, k: aby3_mul(ep, r, k, (1, d), (d, 1), True), sec), 1),
            "comparison": (run3(astra_cmp, sec), run3(aby3_cmp, sec), cmp_n),
        }
        for name, (a, b, count) in res.items():
            out[f"{sec}/{name}"] = {
                "count": count, "astra": a, "aby3": b,
                "astra_online_bits_per_op": 8 * a["online_bytes"] / count,
                "aby3_online_bits_per_op": 8 * b["online_bytes"] / count,
                "ratio_online_bytes": _ratio(b["online_bytes"], a["online_bytes"]),
                "ratio_online_rounds": _ratio(b["online_rounds"], a["online_rounds"]),
                "ratio_online_seconds": _ratio(b["online_seconds"], a["online_seconds"])}
    return out
