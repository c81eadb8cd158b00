"""``secinfer bench crisp``: CRISP (malicious client) against its semi-honest baseline.

Rows
----
* ``e2e``: whole inferences as separate processes over the shaped loopback network
  (default ``lan``): online / offline latency, bytes split into linear (Pi_Lin) and
  non-linear (FSS gate) messages, rounds -- malicious and semi-honest in the same run
  [CRISP Tables II, III]. Models: digits-mlp (quick), plus digits-cnn and benchmark A
  (``muse-a``) in the full run; benchmark B (``muse-b``) only with
  ``run(include_muse_b=True)``: it takes minutes and ~10 GB (its ~3.7 * 10^5 FSS gates with
  MAC twins hold ~10 KB of key each). Its HE ciphertext counts are always reported.
* ``fc``: one fully connected layer of benchmark A / B through Pi_Lin alone at
  N = 2^13 and 2^14 [CRISP Table I]: ``ckks-n13-q195-128`` (the longest Q the HE Standard
  allows at 2^13 with one small P prime: semi-honest fits, malicious reports the budget
  error -- with the proof slack it needs 280 bits), ``ckks-n14-128``, and the engine's default set.
* ``relu``: the non-linear layer alone, 2^10 .. 2^16 ReLUs (2^10 .. 2^12 quick), with and
  without MACs: online seconds (measured in-process, plus the ``lan`` link model:
  latency per round + bytes / bandwidth), online bytes per party (expected: n bits = 8
  bytes per element per party, one round), dealer key bytes [CRISP Figs. 5-6].
* ``maxpool``: 2x2 MaxPool over benchmark A's first activation (16 x 24 x 24), tree of
  ReLU gates with MACs [CRISP Table V].
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from secinfer.protocols.crisp.ckks_engine import DEFAULT_PARAMS


def _lan():
    from secinfer.net.shaping import parse_profile

    return parse_profile("lan")


def _gate_bench(kind: str, count: int, mac: bool) -> dict:
    from secinfer.crypto.fss.gates import make_gate
    from secinfer.arith.ring import Ring
    from secinfer.crypto.prg import PRG
    from secinfer.net.channel import run_local

    k = 104 if mac else 64
    gate = make_gate(kind, 64, k, mac=mac)
    prg = PRG.fresh("crisp-bench")
    mu = int(Ring(k).to_int(Ring(k).random(prg, (1,)))[0]) if mac else None
    t0 = time.perf_counter()
    k0, k1 = gate.gen(prg, count, mac_key=mu)
    t_gen = time.perf_counter() - t0
    x0 = prg.uint64((count,))
    x1 = prg.uint64((count,))
    times = {}

    def party(name, key, share, peer):
        def fn(ep):
            with ep.phase("online"):
                t = time.perf_counter()
                gate.online(ep, peer, key, share, "bench/relu")
                times[name] = time.perf_counter() - t
            return ep.meter.total("online", "sent")
        return fn

    res = run_local({"server": party("server", k0, x0, "client"), "client": party("client", k1, x1, "server")})
    sent = int(res["server"])
    lan = _lan()
    compute = max(times.values())
    return {"gate": kind + ("-mac" if mac else ""), "count": count, "online_s": compute,
            "online_lan_model_s": compute + lan.latency + sent / lan.bandwidth,
            "online_bytes_per_party": sent, "bytes_per_element_per_party": sent / count,
            "rounds": 1, "offline_keygen_s": t_gen, "key_bytes_both": k0.nbytes() + k1.nbytes()}


def _fc_bench(name: str, k_in: int, n_out: int, params_name: str, malicious: bool) -> dict:
    """One FC layer through Pi_Lin (HE engine) on random shares [CRISP Table I]."""
    from secinfer.arith.ring import Ring
    from secinfer.crypto.prg import PRG
    from secinfer.net.channel import run_local
    from secinfer.protocols.crisp.ckks_engine import CKKSLinear
    from secinfer.protocols.twopc.plan import InputStep, LinearStep, LinearWeights

    grp = Ring(104 if malicious else 64)
    prg = PRG.fresh("crisp-fc-bench")
    w = (prg.uint64((k_in, n_out)) % np.uint64(1 << 14)).astype(np.int64) - (1 << 13)
    step = LinearStep(op="lin", name=name, node_op="Gemm", inp="x", out="y", in_shape=(1, k_in),
                      out_shape=(1, n_out), wbits=14)
    v0, v1, w0, w1 = (grp.random(prg, (1, k_in)) for _ in range(4))
    mu = grp.random(prg, ())
    row = {"kind": "fc", "layer": name, "he_params": params_name,
           "security": "malicious" if malicious else "semi-honest"}
    try:
        eng_c = CKKSLinear(grp, 13, malicious, params_name)
        eng_s = CKKSLinear(grp, 13, malicious, params_name)
    except Exception as e:  # noqa: BLE001 - reported, e.g. a parameter set too small
        return {**row, "error": str(e)}
    times, meters = {}, {}

    def client(ep):
        eng_c.setup_client(ep)
        with ep.phase("online"):
            t = time.perf_counter()
            eng_c.client(ep, 1, step, v1, w1 if malicious else None)
            times["client"] = time.perf_counter() - t
        meters["client"] = ep.meter

    def server(ep):
        eng_s.setup_server(ep)
        with ep.phase("offline"):
            t = time.perf_counter()
            eng_s.prepare_server([InputStep("x", (1, k_in)), step], {1: LinearWeights(w)}, prg.derive("off"))
            times["offline"] = time.perf_counter() - t
        with ep.phase("online"):
            t = time.perf_counter()
            eng_s.server(ep, 1, step, LinearWeights(w), v0, w0 if malicious else None, mu, prg.derive("on"))
            times["server"] = time.perf_counter() - t
        eng_s.release()
        meters["server"] = ep.meter

    try:
        res = run_local({"client": client, "server": server}, timeout=1200)
        for r in res.values():
            if isinstance(r, BaseException):
                raise r
    except Exception as e:  # noqa: BLE001
        return {**row, "error": str(e)}
    online_bytes = sum(m.total("online", "sent") for m in meters.values())
    return {**row, "online_s": max(times["client"], times["server"]), "server_offline_s": times["offline"],
            "online_MB": online_bytes / 1e6}


def _e2e(model_name: str, graph_path: str, x, security: str, network: str, options: dict) -> dict:
    from secinfer.runtime.launcher import run_local

    # default peer timeout for every model: since the dealer's keys travel in pieces of
    # <= 16384 gates (crisp.offline.KEY_PIECE), no party is busy with one frame for seconds
    settings = None
    res = run_local(protocol="crisp", security=security, model_path=graph_path, input_array=x,
                    network=network, fixed=None, options=options, timeout=3600, progress=False,
                    cluster_settings=settings)
    lin = nonlin = 0
    off = {"dealer_to_server_keys": 0, "dealer_to_client_keys": 0, "dealer_input_masks": 0,
           "server_client": 0, "other": 0}
    for role, meter in res.meters.items():
        for key, (payload, _wire, _msgs) in meter.get("by_tag", {}).items():
            ph, d, peer, tag = key.split("|", 3)
            if d != "sent":
                continue
            if ph == "offline":
                off[_offline_item(role, peer, tag)] += payload
            if ph != "online":
                continue
            if tag.startswith("crisp/lin/"):
                lin += payload
            elif tag.startswith("crisp/g/"):
                nonlin += payload
    srv = (res.parties.get("server") or {}).get("info", {}) if isinstance(res.parties, dict) else {}
    dealer = (res.parties.get("dealer") or {}).get("info", {}) if isinstance(res.parties, dict) else {}
    cli = (res.parties.get("client") or {}).get("info", {}) if isinstance(res.parties, dict) else {}
    return {"kind": "e2e", "model": model_name, "security": security, "network": network,
            "batch": int(np.shape(x)[0]), "online_s": res.latency_s.get("online"),
            "offline_s": res.latency_s.get("offline"), "setup_s": res.latency_s.get("setup"),
            "online_bytes": res.bytes_by_phase.get("online", 0), "offline_bytes": res.bytes_by_phase.get("offline", 0),
            "online_linear_bytes": lin, "online_nonlinear_bytes": nonlin,
            "online_linear_s": (srv.get("online_seconds") or {}).get("linear"),
            "online_nonlinear_s": (srv.get("online_seconds") or {}).get("nonlinear"),
            **{f"offline_bytes_{k}": v for k, v in off.items()},
            "offline_dealer_keygen_s": dealer.get("keygen_s"), "offline_dealer_serialise_s": dealer.get("key_serialise_s"),
            **{f"offline_server_{k}_s": v for k, v in (srv.get("offline_seconds") or {}).items()},
            **{f"offline_client_{k}_s": v for k, v in (cli.get("offline_seconds") or {}).items()},
            **{f"offline_key_bytes_per_gate_{g}": round(v["bytes_both"] / 2 / v["gates"], 1)
               for g, v in (dealer.get("key_bytes_by_gate") or {}).items()},
            **{f"offline_gates_{g}": v["gates"] for g, v in (dealer.get("key_bytes_by_gate") or {}).items()},
            "rounds_online": res.rounds.get("online", 0), "linear_engine": srv.get("linear_engine"),
            "he_params": options.get("he_params", DEFAULT_PARAMS)}


def _offline_item(role: str, peer: str, tag: str) -> str:
    """Which part of the offline traffic a message is: the dealer's FSS keys (F_FSS, which
    the paper's Table II may count as ideal) or input masks, or server <-> client bytes."""
    if role == "dealer":
        if tag.startswith("crisp/key/"):
            return "dealer_to_server_keys" if peer == "server" else "dealer_to_client_keys"
        return "dealer_input_masks"
    if {role, peer} == {"server", "client"}:
        return "server_client"
    return "other"


def _model_file(name: str, tmp: str) -> tuple[str, np.ndarray]:
    from secinfer.ir import bundled

    if name.startswith("digits"):
        X, _ = bundled.bundled_testset(name)
        return str(bundled.bundled_path(name)), X[:1]
    import onnx

    from secinfer.ir import zoo

    path = os.path.join(tmp, name + ".onnx")
    onnx.save(zoo.build(name, seed=0), path)
    info = {m.name: m for m in zoo.list_models()}[name]
    x = np.linspace(-1.0, 1.0, int(np.prod(info.input_shape))).reshape(info.input_shape)
    return path, x


def muse_b_he_counts(params_name: str = DEFAULT_PARAMS) -> list:
    """Ciphertexts the HE engine sends for each linear layer of benchmark B (batch 1)."""
    from secinfer.arith.fixed import FX64
    from secinfer.crypto.he.params import get_params
    from secinfer.ir import zoo
    from secinfer.ir.onnx_import import load_model
    from secinfer.protocols.crisp.budget import LayerBudget
    from secinfer.protocols.crisp.he_conv import conv_layout
    from secinfer.protocols.crisp.he_rows import rows_and_mats, rows_of
    from secinfer.protocols.crisp.plan import compile_plan

    g = load_model(zoo.build("muse-b", seed=0))
    plan = compile_plan(g, FX64, 1)
    prm = get_params(params_name)
    out = []
    for i, st in enumerate(plan.steps):
        if st.op != "lin":
            continue
        lay = conv_layout(st, prm, 104, 40)
        if lay is not None:
            out.append({"layer": st.name, "op": st.node_op, "layout": "channel-packed",
                        "client_cts": lay.T * lay.n_cg, "server_cts": lay.T * lay.n_mb,
                        "digits": lay.T, "plaintext_modulus_bits": lay.t_bits, "level": lay.level})
            continue
        groups, _ = rows_and_mats(st, plan.weights[i].w, None, None)
        n_ct_in = n_ct_out = 0
        for (_, _, k_in, n_out) in groups:
            n_rows = rows_of(st, k_in, len(groups))
            bud = LayerBudget(prm, 104, k_in, n_out, st.wbits, 40, n_rows)   # as the engine (malicious span)
            rgs = -(-n_rows // bud.rows_per)
            n_ct_in += bud.T * rgs * bud.n_chunks
            n_ct_out += bud.T * rgs * bud.n_blocks
        out.append({"layer": st.name, "op": st.node_op, "layout": "rows",
                    "client_cts": n_ct_in, "server_cts": n_ct_out})
    return out


def run(quick: bool = False, network: str | None = None, include_muse_b: bool = False) -> dict:
    network = network or "lan"
    rows: list = []
    counts = [1 << e for e in (range(10, 13) if quick else range(10, 17))]
    for c in counts:
        for mac in (False, True):
            rows.append({"kind": "relu", **_gate_bench("relu", c, mac)})
    # MaxPool 2x2 over 16 x 24 x 24 (benchmark A's first activation): 3 tree levels
    mp = 16 * 12 * 12
    for mac in (False, True):
        lv = [_gate_bench("relu", mp * p, mac) for p in (2, 1)]
        rows.append({"kind": "maxpool", "gate": "maxpool2x2" + ("-mac" if mac else ""), "outputs": mp,
                     "online_s": sum(r["online_s"] for r in lv),
                     "online_lan_model_s": sum(r["online_lan_model_s"] for r in lv),
                     "online_bytes_per_party": sum(r["online_bytes_per_party"] for r in lv),
                     "rounds": len(lv)})
    # the paper's ring sizes, then the engine's default set (the one the end-to-end rows use)
    sets = ["ckks-n14-128"] if quick else ["ckks-n13-q195-128", "ckks-n14-128"]
    for params_name in sets + ([DEFAULT_PARAMS] if DEFAULT_PARAMS not in sets else []):
        for name, k_in, n_out in (("benchmark-A fc 256x100", 256, 100), ("benchmark-B fc 1024x10", 1024, 10)):
            for mal in (False, True):
                rows.append(_fc_bench(name, k_in, n_out, params_name, mal))
    models = ["digits-mlp"] if quick else ["digits-mlp", "digits-cnn", "muse-a"]
    if include_muse_b:
        models.append("muse-b")
    opts = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            path, x = _model_file(name, tmp)
            for sec in ("semi-honest", "malicious"):
                rows.append(_e2e(name, path, x, sec, network, opts))
    try:
        he_counts = muse_b_he_counts()
    except Exception as e:  # noqa: BLE001 - a report line, not a failure
        he_counts = [{"error": str(e)}]
    e2e = [r for r in rows if r["kind"] == "e2e"]
    for r in e2e:
        if r["security"] == "malicious":
            base = next(b for b in e2e if b["model"] == r["model"] and b["security"] == "semi-honest")
            r["online_ratio_vs_semi_honest"] = r["online_s"] / base["online_s"] if base["online_s"] else None
            r["bytes_ratio_vs_semi_honest"] = (r["online_bytes"] / base["online_bytes"]
                                              if base["online_bytes"] else None)
    relu = [r for r in rows if r["kind"] == "relu"]
    plots = [
        {"title": "CRISP non-linear layer: online time (lan link model)", "kind": "line", "logx": True,
         "logy": True, "x": counts, "xlabel": "ReLUs", "ylabel": "seconds", "file": "crisp_relu_time.png",
         "series": {g: [r["online_lan_model_s"] for r in relu if r["gate"] == g] for g in ("relu", "relu-mac")}},
        {"title": "CRISP non-linear layer: online bytes per party", "kind": "line", "logx": True, "logy": True,
         "x": counts, "xlabel": "ReLUs", "ylabel": "bytes", "file": "crisp_relu_bytes.png",
         "series": {g: [r["online_bytes_per_party"] for r in relu if r["gate"] == g] for g in ("relu", "relu-mac")}},
        {"title": f"CRISP end to end ({network}): online seconds", "kind": "bar",
         "x": models, "xlabel": "model", "ylabel": "online seconds", "file": "crisp_e2e.png",
         "series": {s: [r["online_s"] for r in e2e if r["security"] == s] for s in ("semi-honest", "malicious")}},
    ]
    return {"suite": "crisp", "network": network, "rows": rows, "plots": plots, "muse_b_he_ciphertexts": he_counts,
            "notes": ("ReLU online bytes are n = 64 bits per element per party in one round with or without "
                      "MACs; the paper's '2 KB for 2^18 ReLUs' cannot hold for any protocol that opens x + r. "
                      f"HE linear layers: exact coefficient packing, {DEFAULT_PARAMS} (Table I rows also at the paper's "
                      "ring sizes); proof of plaintext "
                      "knowledge included in the malicious online figures (see docs/protocols/crisp.md). "
                      "Offline bytes are the dealer's FSS keys (rows offline_bytes_dealer_to_*_keys); any DCF key "
                      "is >= n (lambda + 2) bits per party, >= 26.5 MB per party for benchmark A's gates, so a "
                      "5 MB offline figure cannot include F_FSS keys; the server<->client offline bytes are "
                      "offline_bytes_server_client.")}
