"""``secinfer bench safhire``: SAFHIRE's latency, client/server split, per-operation
breakdown, upload/download bytes and the bandwidth sweep [SAFHIRE Tables 3, 5, Figs. 4-6].

Every measured row is a real run: both parties as their own processes over the
authenticated TCP transport (``secinfer.runtime.launcher.run_local``), one sample, the
secure ring of the accumulator precision (the HE core's SAFHIRE profile, else ``ckks-n13-128``). Per row: end-to-end protocol latency, server time by
operation (extraction, unshuffle, linear, shuffle, packing) and client time (key
generation, encryption, decryption, activations), bytes up (client -> server, of which the
one-time packing keys) and down.

Bandwidth sweep [SAFHIRE Fig. 4] as the paper computes it: measured compute (server + client) plus
online bytes / bandwidth, for 0.1 ... 300 MB/s; one real run through
``--network bw=1.25,lat=10`` checks the model.

Threads [SAFHIRE Figs. 7-8]: digits-cnn b=12 at the best gamma with ``threads`` = 1 and 2
(the machine's two cores); the per-thread packing/product micro-benchmarks and the packing
noise histogram of Fig. 10 are in ``secinfer bench he`` (its SAFHIRE packing part,
bench/he_pack_bench.py).

Every row: CPU seconds per server operation next to wall seconds (a shared machine's wall
time holds the waits for a core), and the run checked against the quantized oracle (final
integers exactly; every round's shuffled values as a multiset).

Without ``--quick``: ResNet-20 (zoo, 1x3x32x32) through SAFHIRE at every b = 8, 12, 16 and
gamma (quantized models cached under the temp dir's ``secinfer-safhire-qcache``), and the
fully encrypted CKKS baseline (bench/ckks_baseline.py, ORION-style) on the same network:
the whole network encrypted at N = 2^16 with Lattigo's bootstrapping when its memory
estimate fits the machine (MEASURED), else EXTRAPOLATED from every distinct layer kind run
once at N = 2^16 and bootstrapping measured at N = 2^12 / 2^13 (the report says which next
to every such number), with speed-ups against SAFHIRE's model at 1.25 MB/s. ResNet-18 (Tiny
ImageNet shape, 1x3x64x64, 200 classes) and ResNet-34 (1x3x224x224, average pooling) run
end to end at every (b, gamma) too, b = 12 at the best gamma first (tens of minutes and
about an hour per run here: the full sweep takes most of a day; the quantized models cached
like ResNet-20's; ResNet-34's large round outputs are held in an unlinked file, the
server's ``out_mb``); a run that fails is listed as skipped with its error. ``extrapolate`` (per-round CPU units times another network's per-round counts)
stays for analysis; no network of the paper needs it now.
"""

from __future__ import annotations

import numpy as np

from secinfer.arith import public_rng
from secinfer.bench.common import Progress

BANDWIDTHS = (0.1, 0.3, 1, 3, 10, 30, 100, 300)       # MB/s [SAFHIRE Fig. 4]
BUDGET_S = 180.0
RESNET20_BS = (8, 12, 16)      # without --quick: ResNet-20 at every (b, gamma) [SAFHIRE Table 3]
# without --quick: end to end at every (b, gamma) too, b = 12 at the best gamma first (each
# run tens of minutes for ResNet-18-tiny, about an hour for ResNet-34 on this machine: the
# whole sweep takes most of a day); ResNet-34's outputs above the server's out_mb go to disk
LARGE_RUNS = (("zoo:resnet18-tiny", (1, 3, 64, 64), (12, 8, 16)), ("zoo:resnet34", (1, 3, 224, 224), (12, 8, 16)))
EXTRAPOLATED: tuple = ()           # none left: every network of the paper runs (issue 18)


def _packed_count(graph) -> int:
    """Values the server packs per inference: every round's output (window layout)."""
    from secinfer.ir.quantize import _groups, batch_free, split_rounds

    g = batch_free(graph)
    rounds, _ = split_rounds(g)
    total = 0
    for rd in rounds:
        shp = tuple(int(d) for d in g.shapes[rd.out][1:])
        grp = _groups(rd.chain, shp) if rd.chain else None
        total += int(np.prod(shp)) if grp is None else int(grp.size)
    return total


def _round_costs(graph) -> list[dict]:
    """Per round: the product's multiply-adds per LWE column (its convolutions' and average
    pools' kernel taps times output positions; a Gemm head's weights), the values packed
    (window layout) and the values the client sends in (what the server extracts)."""
    from secinfer.ir.quantize import _groups, batch_free, split_rounds

    g = batch_free(graph)
    rounds, lin = split_rounds(g)
    node_of = {o: n for n in lin for o in n.outputs}
    boundary = {rd.result for rd in rounds[:-1]}     # a pooling round's result: the next one's input
    out = []
    for r, rd in enumerate(rounds):
        seen, stack, macs = set(), [rd.out], 0
        while stack:                                  # the round's linear nodes, output backwards
            t = stack.pop()
            n = node_of.get(t)
            if n is None or n.name in seen:
                continue
            seen.add(n.name)
            shp = tuple(int(d) for d in g.shapes[n.outputs[0]][1:])
            if n.op == "Conv":
                macs += int(np.prod(g.initializers[n.inputs[1]].shape)) * int(np.prod(shp[1:]))
            elif n.op in ("Gemm", "MatMul"):
                macs += int(np.prod(g.initializers[n.inputs[1]].shape))
            elif n.op in ("AveragePool", "GlobalAveragePool"):
                src = tuple(int(d) for d in g.shapes[n.inputs[0]][1:])
                macs += int(np.prod(src))
            stack.extend(i for i in n.inputs if i in node_of and i not in boundary)
        shp = tuple(int(d) for d in g.shapes[rd.out][1:])
        grp = _groups(rd.chain, shp) if rd.chain else None
        m = int(np.prod(shp))
        out.append({"round": r, "macs": macs, "outputs": m if grp is None else int(grp.size), "m": m,
                    "next": m if grp is None else int(grp.shape[0]), "sources": list(rd.sources)})
    widths = [int(np.prod(g.inputs[0].shape[1:]))] + [o["next"] for o in out[:-1]]
    for o in out:
        o["inputs"] = sum(widths[c] for c in o["sources"])
        o["sent"] = widths[o["round"]]
    return out


def extrapolate(target: str, measured: dict, n: int, gamma: int, per_round: list | None = None,
                rounds_of: str | None = None) -> dict:
    """EXTRAPOLATED server time, bytes and memory of a network from measured rounds:
    ``per_round`` (default: the measured row's ``server_per_round``) of network ``rounds_of``
    (default: the row's model), each with CPU seconds by operation. Linear: CPU = a MACs +
    c outputs, least squares over the measured rounds (the GEMMs scale with the
    multiply-adds, limb splitting and recombination with the outputs; a only when every
    measured round has the same ratio); packing and the shuffle's scatter per packed value;
    extraction per input value (the tiles' halos included). Bytes per ciphertext from the
    measured row (a whole run); the server's peak from the largest round output
    ((N + 2^gamma) residues of 8 bytes per LWE ciphertext, held whole for packing)."""
    from secinfer.cli.resolve import model_path
    from secinfer.ir.onnx_import import load_model

    pr = per_round if per_round is not None else measured["server_per_round"]
    src = _round_costs(load_model(model_path(rounds_of or measured["model"])))
    full = _round_costs(load_model(model_path(measured["model"])))
    theirs = _round_costs(load_model(model_path(target)))
    got = [(src[p["round"]], p["cpu_s"]) for p in pr]
    A = np.array([[c["macs"], c["outputs"]] for c, _ in got], dtype=np.float64)
    y = np.array([t.get("linear", 0.0) for _, t in got])
    if np.linalg.matrix_rank(A) >= 2:
        a_mac, c_out = (max(0.0, float(v)) for v in np.linalg.lstsq(A, y, rcond=None)[0])
    else:
        a_mac, c_out = float(y.sum() / A[:, 0].sum()), 0.0
    tot = lambda rows, k: sum(x[k] for x in rows)                    # noqa: E731
    cpu = lambda op: sum(t.get(op, 0.0) for _, t in got)              # noqa: E731
    outs = sum(c["outputs"] for c, _ in got)
    unit = {"linear_per_mac": a_mac, "linear_per_output": c_out, "pack_per_value": cpu("pack") / outs,
            "shuffle_per_value": (cpu("shuffle") + cpu("unshuffle")) / outs,
            "extract_per_input": cpu("extract") / sum(c["inputs"] for c, _ in got)}
    rows = []
    for t in theirs:
        rows.append({"round": t["round"], "macs": t["macs"], "outputs": t["outputs"],
                     "linear_s": t["macs"] * a_mac + t["outputs"] * c_out,
                     "pack_s": t["outputs"] * unit["pack_per_value"],
                     "extract_s": t["inputs"] * unit["extract_per_input"],
                     "shuffle_s": t["outputs"] * unit["shuffle_per_value"]})
    chunks = lambda k: -(-k // n)                                      # noqa: E731
    ct_down = measured["bytes_down"] / sum(chunks(x["outputs"]) for x in full)
    ct_up = (measured["bytes_up"] - measured["bytes_up_keys"]) / sum(chunks(x["sent"]) << gamma for x in full)
    down = sum(chunks(x["outputs"]) for x in theirs) * ct_down
    up = sum(chunks(x["sent"]) << gamma for x in theirs) * ct_up
    server = sum(sum(v for k, v in r.items() if k.endswith("_s")) for r in rows)
    client = (measured.get("client_cpu_s") or 0.0) * tot(theirs, "outputs") / tot(full, "outputs")
    big = max(x["outputs"] for x in theirs)
    by_op = {op: sum(r[f"{op}_s"] for r in rows) for op in ("extract", "linear", "shuffle", "pack")}
    return {"model": target, "EXTRAPOLATED": True,
            "from": f"{rounds_of or measured['model']} rounds {[p['round'] for p in pr]} (measured CPU), "
                    f"bytes per ciphertext from {measured['model']} b={measured['b']} gamma={measured['gamma']}",
            "unit_cpu_s": unit, "per_round": rows, "server_cpu_s": server, "server_cpu_s_by_op": by_op,
            "client_cpu_s": client, "bytes_up": up + measured["bytes_up_keys"],
            "bytes_up_keys": measured["bytes_up_keys"], "bytes_down": down,
            "model_s_at_1.25MBps": server + client + (up + down) / 1.25e6,
            "largest_round_outputs": big, "output_buffer_GB": big * (n + (1 << gamma)) * 8 / 1e9,
            "macs": tot(theirs, "macs"), "packed_values": tot(theirs, "outputs")}


def _measure(model: str, b: int, gamma: int, network: str, x: np.ndarray, threads: int = 1,
             qcache: str | None = None, log_dir: str | None = None) -> dict:
    from secinfer.ir.onnx_import import load_model
    from secinfer.cli.resolve import model_path
    from secinfer.runtime.launcher import run_local

    path = model_path(model)
    # a shaped link carries the 16 MB of packing keys for many seconds: heartbeats wait too
    # a shaped link carries the 16 MB of packing keys for many seconds, and a ResNet's server
    # quantizes (or loads from qcache) and packs for long stretches: heartbeats wait too
    big = model.startswith("zoo:")
    settings = None if network == "none" and not big else {"peer_timeout": 120.0}   # TCP_KEEPCNT caps it at 127
    opts = {"b": b, "gamma": gamma, "threads": threads, "trace": 1}   # trace: the per-round oracle check
    if qcache:
        opts["qcache"] = qcache
    if log_dir:                     # the server logs every round's seconds as it ends
        opts["log_rounds"] = 1
    res = run_local(protocol="safhire", model_path=path, input_array=x, network=network,
                    options=opts, timeout=3600 * 3, cluster_settings=settings, log_dir=log_dir)
    srv = res.parties["server"]["info"]
    cli = res.parties["client"]["info"]
    st, ct = srv["timing_s"], cli["timing_s"]
    by_tag = res.meters["client"]["by_tag"]
    keys = sum(v[0] for k, v in by_tag.items() if k.endswith("|sh/keys") and "|sent|" in k)
    up = res.bytes["client"]["payload"]
    down = res.bytes["server"]["payload"]
    server_s = sum(st.values())
    client_s = sum(ct.values())
    graph = load_model(path)
    packed = _packed_count(graph)
    scpu = srv.get("cpu_s", {})
    oracle = _oracle_check(graph, b, x, cli.get("finals"), qcache, cli.get("trace"))
    row = {"model": model, "b": b, "gamma": gamma, "network": network, "samples": int(len(x)),
           "threads": threads, "setup_s": res.latency_s.get("setup"),
           "e2e_s": res.latency_s["total"], "messages": res.messages, "online_s": res.latency_s["online"],
           "server_s": server_s, "client_s": client_s,
           **{f"server_{k}_s": v for k, v in st.items()}, **{f"client_{k}_s": v for k, v in ct.items()},
           "bytes_up": up, "bytes_up_keys": keys, "bytes_down": down, "packed_values": packed,
           "pack_ms_per_value": 1000.0 * st["pack"] / max(1, packed * len(x)),
           "log_delta": cli["log_delta"], "he_params": srv["he_params"], "backend": srv.get("backend"),
           "key_switches": srv.get("key_switches"),
           "key_switches_per_value": (srv.get("key_switches") or 0) / max(1, packed * len(x)),
           "noise_log2_std": [n.get("log2_std_abs") for n in cli["noise"]],
           "dp": [n.get("dp") for n in cli["noise"]],
           # CPU seconds of the processes (wall time on a shared machine also holds the waits
           # for a core): per server operation, the server's set-up and plan, the client
           **{f"server_{k}_cpu_s": v for k, v in scpu.items()},
           "server_cpu_s": sum(scpu.values()), "client_cpu_s": cli.get("cpu_s_total"),
           "server_setup_cpu_s": srv.get("setup_cpu_s"), "server_plan_s": srv.get("plan_s"),
           "product_plan": _plan_summary(srv.get("product_plan")), "tiles": srv.get("tiles"),
           "server_per_round": srv.get("per_round"), **oracle}
    for bw in BANDWIDTHS + (1.25,):
        row[f"model_s_at_{bw}MBps"] = server_s + client_s + (up - keys + down) / (bw * 1e6)
    if scpu and cli.get("cpu_s_total") is not None:
        row["model_cpu_s_at_1.25MBps"] = row["server_cpu_s"] + cli["cpu_s_total"] + (up - keys + down) / 1.25e6
    return row


def _plan_summary(plans) -> dict | None:
    """How the rounds' products ran: blocks by kind (conv: dense GEMMs; sparse; dense)."""
    if not plans:
        return None
    out: dict = {}
    for kinds in plans:
        for k in kinds:
            out[k] = out.get(k, 0) + 1
    return out


def _oracle_check(graph, b: int, x: np.ndarray, finals, qcache: str | None, trace=None) -> dict:
    """The run's final integers against the quantized cleartext model (the oracle) on the
    same input: {"oracle_equal": bool, ...} [issue #18: the output equals the oracle]; and
    every round's decrypted values (the client's trace, shuffled by the server's secret
    permutations) as a multiset against the oracle's round result in window layout
    ("oracle_rounds_equal"): a wrong product would change them, a permutation does not."""
    from secinfer.protocols.safhire.protocol import quantized_model

    if finals is None:
        return {"oracle_equal": None, "oracle_note": "the client reported no final integers"}
    try:
        qm = quantized_model(graph, {"b": b}, {"qcache": qcache} if qcache else {})
        xq = qm.quantize_input(np.asarray(x, dtype=np.float64))
        traces = [[] for _ in xq]
        want = [qm.run_int(v, t) for v, t in zip(xq, traces)]
        got = [np.asarray(f, dtype=np.int64) for f in finals]
        eq = len(got) == len(want) and all(np.array_equal(a, w) for a, w in zip(got, want))
        diff = None if eq else int(sum(int(np.sum(a != w)) for a, w in zip(got, want) if a.shape == w.shape))
        res = {"oracle_equal": bool(eq), "oracle_mismatches": diff, **_degeneracy_fields(qm)}
        if trace is not None:
            R = len(qm.rounds)
            bad = [k for k, t in enumerate(trace)
                   if not np.array_equal(np.sort(np.asarray(t, dtype=np.int64)),
                                         np.sort(qm.rounds[k % R].layout(traces[k // R][k % R])))]
            res.update(oracle_rounds_equal=not bad and len(trace) == R * len(xq), oracle_rounds_checked=len(trace),
                       oracle_rounds_differing=bad)
        return res
    except Exception as e:  # noqa: BLE001 - report, keep the row
        return {"oracle_equal": None, "oracle_note": f"oracle not computed: {type(e).__name__}: {e}"}


def _degeneracy_fields(qm) -> dict:
    """Does the quantized model compute anything [issue 18]: its zero-weight report, so a
    row for a model that answers nothing says so next to its timings."""
    from secinfer.ir.degeneracy import degeneracy, degeneracy_warnings

    d = degeneracy(qm)
    return {"quantized_degenerate": d["degenerate"], "quantized_zero_blocks": d.get("zero_blocks"),
            "quantized_zero_weight_frac": d.get("zero_weight_frac"),
            "quantized_distinct_outputs": d.get("distinct_outputs"),
            "quantized_max_acc_use": qm.calib.get("max_acc_use"),
            "quantized_wrapped_accumulators": qm.calib.get("wrapped_accumulators"),
            "quantized_wrapped_inputs": qm.calib.get("wrapped_inputs"),
            "quantized_warnings": degeneracy_warnings(qm)}


def _warn(r: dict) -> str:
    w = list(r.get("quantized_warnings") or [])
    if r.get("quantized_wrapped_accumulators"):       # a calibration input overflowed [issue 18]
        w.append(f"{r['quantized_wrapped_accumulators']} accumulators wrapped on "
                 f"{r.get('quantized_wrapped_inputs')} calibration inputs")
    return ("; WARNING: " + "; ".join(w)) if w else ""


def run(quick: bool = False, network: str | None = None) -> dict:
    from secinfer.ir import bundled

    from secinfer.protocols.safhire.lwe import fast_available

    x_d, _ = bundled.bundled_testset("digits-cnn")
    gammas = (0, 1, 2) if fast_available() else (0,)
    configs = [("bundled:digits-mlp", b, g) for b in (8, 12, 16) for g in gammas]
    configs += [("bundled:digits-cnn", 12, g) for g in gammas]
    if not quick:
        configs += [("bundled:digits-cnn", b, g) for b in (8, 16) for g in gammas]
    best_gamma = max(gammas)
    sweep = _gamma_order(gammas)       # the large networks' gammas, the best first
    configs += [("bundled:digits-cnn", 12, best_gamma, 2)]          # the threads sweep [SAFHIRE Figs. 7-8]
    prog = Progress("safhire", len(configs) + (4 + len(gammas) * (len(RESNET20_BS) + sum(len(b) for *_, b in LARGE_RUNS))
                                                + len(EXTRAPOLATED) if not quick else 3))
    rows, skipped = [], []
    qcache = _qcache_dir()        # the server's quantized models, also read by the oracle check
    for model, b, g, *th in configs:
        r = _measure(model, b, g, "none", x_d[300:301], threads=th[0] if th else 1, qcache=qcache)
        rows.append(r)
        prog(f"{model} b={b} gamma={g} threads={r['threads']} ({r['he_params']}): e2e {r['e2e_s']:.2f}s, "
             f"server {r['server_s']:.2f}s (pack {r['server_pack_s']:.2f}s), up {r['bytes_up'] / 1e6:.2f} MB, "
             f"down {r['bytes_down'] / 1e6:.2f} MB, output equals the oracle: {r['oracle_equal']}{_warn(r)}")
    big, baseline = [], None
    if not quick:
        big, baseline = _resnet20_rows(sweep, prog, skipped)
        rows += big
    # the bandwidth model against one real shaped run [SAFHIRE Fig. 4]
    prof = network or "bw=1.25,lat=10"
    base = next(r for r in rows if r["model"] == "bundled:digits-mlp" and r["b"] == 12 and r["gamma"] == 0)
    bw = _bandwidth(prof)
    try:
        real = _measure("bundled:digits-mlp", 12, 0, prof, x_d[300:301])
        lat = _latency(prof)
        predicted = base["e2e_s"] + (real["bytes_up"] + real["bytes_down"]) / (bw * 1e6) \
            + real["messages"] * lat if bw else None
        check = {"profile": prof, "measured_e2e_s": real["e2e_s"], "predicted_e2e_s": predicted,
                 "unshaped_e2e_s": base["e2e_s"],
                 "note": "prediction: the unshaped run's end-to-end time + all bytes (keys included: "
                         "they cross the shaped link too) / bandwidth + one latency per message "
                         "(the protocol strictly alternates)"}
        prog(f"shaped run {prof}: measured {real['e2e_s']:.2f}s, model {predicted:.2f}s" if predicted
             else f"shaped run {prof}: measured {real['e2e_s']:.2f}s")
    except Exception as e:  # noqa: BLE001 - keep the measured rows
        check = {"profile": prof, "error": f"{type(e).__name__}: {e}"}
        prog(f"shaped run {prof} failed: {e}")
    # what did not run, and why
    from secinfer.protocols.safhire.lwe import default_params

    chunk = {g: _full_chunk_pack_cost(default_params(8, g), g) for g in gammas}
    best_g = min(chunk, key=lambda g: chunk[g]["s_per_value"])
    per_value = chunk[best_g]["s_per_value"]
    prog("full-chunk packing: " + ", ".join(f"gamma={g}: {c['s_per_value'] * 1e3:.3f} ms/value "
                                             f"({c['key_switches_per_value']:.2f} key switches/value, "
                                             f"{c['params']})" for g, c in chunk.items()))
    large = [] if quick else _large_rows(sweep, prog, skipped)
    rows += large
    ran = {r["model"] for r in large}
    listed = (("resnet20",) if quick else ()) + tuple(m.split(":")[1] for m, *_ in LARGE_RUNS if m not in ran)
    for zoo_name in listed:
        try:
            from secinfer.ir import zoo
            from secinfer.ir.onnx_import import load_model

            n = _packed_count(load_model(zoo.build(zoo_name, seed=0).SerializeToString()))
            why = (f"packing alone is predicted at {n * per_value:.0f}s (full-chunk packing, b=8, gamma={best_g}: "
                   f"{per_value * 1000:.3f} ms per value)")
            if quick:
                why += "; runs only without --quick" + {"resnet20": "", "resnet18-tiny": " (tens of minutes)",
                                                        "resnet34": " (about an hour)"}.get(zoo_name, "")
            else:
                why += "; its end-to-end run failed (see the skipped row with its error)"
            skipped.append({"model": f"zoo:{zoo_name}", "packed_values": n, "predicted_pack_s": n * per_value,
                            "why": why})
        except Exception as e:  # noqa: BLE001 - report, do not stop the suite
            skipped.append({"model": f"zoo:{zoo_name}", "why": f"could not analyse: {e}"})
    extrapolated = []
    src = next((r for r in reversed(rows) if str(r["model"]).startswith("zoo:") and r.get("server_per_round")), None)
    if src is not None:
        from secinfer.crypto import he

        n_ring = he.get_params(src["he_params"]).n
        for target in EXTRAPOLATED:
            try:
                ex = extrapolate(target, src, n_ring, src["gamma"])
                extrapolated.append(ex)
                prog(f"{target} EXTRAPOLATED from {ex['from']}: server {ex['server_cpu_s']:.0f}s CPU, model at "
                     f"1.25 MB/s {ex['model_s_at_1.25MBps']:.0f}s, largest round output {ex['output_buffer_GB']:.1f} GB")
            except Exception as e:  # noqa: BLE001
                skipped.append({"model": target, "why": f"extrapolation failed: {type(e).__name__}: {e}"})
    if not fast_available():
        skipped.append({"model": "*", "gamma": "1, 2", "why": "partial trace extraction not in the HE core yet"})
    if quick:
        skipped.append({"model": "zoo:resnet20", "baseline": "fully encrypted CKKS (bench/ckks_baseline.py)",
                        "why": "runs only without --quick (bootstrapping measurements and every layer kind "
                               "at N = 2^16 take tens of minutes on a shared machine)"})
    else:
        if baseline is not None and "server_estimated" in baseline:     # [ckbase] measured when it fits
            skipped.append({"model": "zoo:resnet20", "baseline": "fully encrypted CKKS, whole network at N = 2^16",
                            "why": "did not fit in memory now (" + baseline.get("fit", {}).get("why", "?") +
                                   "): the total is an EXTRAPOLATION (see 'baseline')"})
        skipped.append({"model": "zoo:resnet18-tiny, zoo:resnet34", "baseline": "fully encrypted CKKS",
                        "why": "not run: their activations (64x32x32 after the stem and up) exceed one "
                               "2^15-slot ciphertext, which this baseline's layout assumes"})
    prog("skipped rows listed")
    plots = [
        {"title": "SAFHIRE end-to-end time vs bandwidth (model: compute + bytes / bandwidth) [SAFHIRE Fig. 4]",
         "x": list(BANDWIDTHS), "xlabel": "MB/s", "ylabel": "seconds", "logx": True, "logy": True,
         "series": {f"{r['model'].split(':')[1]} b={r['b']} g={r['gamma']}": [r[f"model_s_at_{bw}MBps"]
                                                                            for bw in BANDWIDTHS]
                    for r in rows}, "file": "bandwidth.png"},
        {"title": "SAFHIRE server time by operation [SAFHIRE Fig. 5]", "kind": "bar",
         "x": [f"{r['model'].split(':')[1]} b={r['b']} g={r['gamma']}" for r in rows], "ylabel": "seconds",
         "series": {op: [r[f"server_{op}_s"] for r in rows] for op in ("extract", "linear", "shuffle", "pack")},
         "file": "server_ops.png"},
    ]
    th_rows = [r for r in rows if r["model"] == "bundled:digits-cnn" and r["b"] == 12 and r["gamma"] == best_gamma]
    plots.append({"title": "SAFHIRE server time vs threads, digits-cnn b=12 [SAFHIRE Figs. 7-8]", "kind": "bar",
                  "x": [f"threads={r['threads']}" for r in th_rows], "ylabel": "seconds",
                  "series": {op: [r[f"server_{op}_s"] for r in th_rows] for op in ("extract", "linear", "pack")},
                  "file": "threads.png"})
    speedups = []
    if baseline is not None and ("server_measured" in baseline or "server_estimated" in baseline):
        est = baseline.get("server_measured") or baseline["server_estimated"]      # [ckbase]
        for r in big:
            speedups.append({"b": r["b"], "gamma": r["gamma"], "safhire_s_at_1.25MBps": r["model_s_at_1.25MBps"],
                             "baseline_s": est["wall_s"], "baseline_cpu_s": est["cpu_s"],
                             "speedup_wall": est["wall_s"] / r["model_s_at_1.25MBps"],
                             "safhire_cpu_s": r.get("server_cpu_s", 0) + (r.get("client_cpu_s") or 0),
                             "speedup_cpu": est["cpu_s"] / max(1e-9, r.get("server_cpu_s", 0) + (r.get("client_cpu_s") or 0)),
                             "note": "baseline " + ("EXTRAPOLATED" if est.get("extrapolated", True)
                                                    else "MEASURED whole network") + " (see baseline.note)"})
    return {"suite": "safhire", "rows": rows, "plots": plots, "skipped": skipped, "full_chunk_packing": chunk,
            "extrapolated": extrapolated,
            "baseline": baseline, "speedups": speedups,
            "bandwidth_check": check, "raw": {"bandwidths_MBps": list(BANDWIDTHS)},
            "seconds": prog.elapsed()}


def _gamma_order(gammas) -> tuple:
    """The extraction levels, the best (the largest: fewest key switches) first."""
    return tuple(sorted(gammas, reverse=True))


def _resnet20_rows(gammas: tuple, prog, skipped: list) -> tuple[list, dict | None]:
    """ResNet-20 through SAFHIRE at every (b, gamma) and the fully encrypted baseline
    (bench/ckks_baseline.py: the whole network measured when it fits in memory, else per
    layer kind with an EXTRAPOLATED total)."""
    rows, baseline = [], None
    x = public_rng("bench/safhire/resnet20-input", 0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    qcache = _qcache_dir()
    for gamma, b in [(g, b) for g in gammas for b in RESNET20_BS]:
        try:
            r = _measure("zoo:resnet20", b, gamma, "none", x, qcache=qcache)
            rows.append(r)
            prog(f"zoo:resnet20 b={b} gamma={gamma}: e2e {r['e2e_s']:.1f}s (setup {r['setup_s']:.1f}s), server "
                 f"{r['server_s']:.1f}s wall / {r['server_cpu_s']:.1f}s CPU (linear {r['server_linear_s']:.1f}s / "
                 f"{r.get('server_linear_cpu_s', 0):.1f}s), client {r['client_s']:.1f}s, model at 1.25 MB/s "
                 f"{r['model_s_at_1.25MBps']:.1f}s, output equals the oracle: {r['oracle_equal']}{_warn(r)}")
        except Exception as e:  # noqa: BLE001 - report, keep the rest
            skipped.append({"model": "zoo:resnet20", "b": b, "gamma": gamma, "why": f"run failed: {type(e).__name__}: {e}"})
            prog(f"zoo:resnet20 b={b} failed: {e}")
    try:
        from secinfer.bench.ckks_baseline import baseline_rows

        baseline = baseline_rows("resnet20", log=lambda m: None)
        est = baseline.get("server_measured") or baseline["server_estimated"]      # [ckbase]
        how = "EXTRAPOLATED" if est.get("extrapolated", True) else "MEASURED, whole network"
        prog(f"CKKS baseline resnet20 ({how}): {est['wall_s']:.0f}s wall, {est['cpu_s']:.0f}s CPU")
    except Exception as e:  # noqa: BLE001
        skipped.append({"model": "zoo:resnet20", "baseline": "fully encrypted CKKS", "why": f"failed: {type(e).__name__}: {e}"})
        prog(f"CKKS baseline failed: {e}")
    return rows, baseline


def _large_rows(gammas: tuple, prog, skipped: list) -> list:
    """ResNet-18 (Tiny ImageNet shape) and ResNet-34 end to end through SAFHIRE at every
    (b, gamma), b = 12 at the best gamma first [SAFHIRE Tables 3, 5]."""
    rows = []
    for model, shape, bs in LARGE_RUNS:
        x = public_rng(f"bench/safhire/{model}-input", 0).standard_normal(shape).astype(np.float32)
        for gamma, b in [(g, b) for g in gammas for b in bs]:
            try:
                r = _measure(model, b, gamma, "none", x, qcache=_qcache_dir())
                rows.append(r)
                prog(f"{model} b={b} gamma={gamma}: e2e {r['e2e_s']:.0f}s (setup {r['setup_s']:.0f}s), server "
                     f"{r['server_s']:.0f}s wall / {r['server_cpu_s']:.0f}s CPU, model at 1.25 MB/s "
                     f"{r['model_s_at_1.25MBps']:.0f}s, output equals the oracle: {r['oracle_equal']}")
            except Exception as e:  # noqa: BLE001 - report, keep the rest
                skipped.append({"model": model, "b": b, "gamma": gamma, "why": f"run failed: {type(e).__name__}: {e}"})
                prog(f"{model} b={b} failed: {e}")
    return rows


def _qcache_dir() -> str:
    import tempfile
    from pathlib import Path

    return str(Path(tempfile.gettempdir()) / "secinfer-safhire-qcache")


def _bandwidth(profile: str) -> float | None:
    from secinfer.net.shaping import parse_profile

    p = parse_profile(profile)
    return None if p.bandwidth is None else p.bandwidth / 1e6       # bytes/s -> MB/s


def _latency(profile: str) -> float:
    from secinfer.net.shaping import parse_profile

    return float(parse_profile(profile).latency)


def _full_chunk_pack_cost(params_name: str, gamma: int) -> dict:
    """Seconds and key switches per value to pack one full ciphertext (N values) at
    ``gamma`` [SAFHIRE Table 1's role]: what a large layer pays per value."""
    import time

    from secinfer.crypto import he
    from secinfer.protocols.safhire import lwe as L

    P = he.get_params(params_name)
    kp = P.keygen()
    evk = L.eval_keys(P, kp.sk, gamma)
    ev = he.Evaluator(P, evk)
    v = (np.arange(P.n, dtype=np.int64) * 7) % 31 - 15
    ld = int(P.q[0]).bit_length() - 3 - 8
    cts = L.encrypt(P, v, kp.sk, ld, gamma)
    x = L.extract(P, cts, P.n, gamma)
    t0 = time.perf_counter()
    out, ks = L.pack(P, ev, x, ld, gamma)
    dt = time.perf_counter() - t0
    got, _ = L.decrypt(P, out, kp.sk, ld, P.n)
    ok = bool(np.array_equal(got, v))
    L.close_all(cts + out)
    ev.close()
    evk.close()
    return {"params": params_name, "n": P.n, "s_per_value": dt / P.n, "key_switches_per_value": ks / P.n,
            "exact": ok}
