"""``secinfer bench he`` and ``secinfer bench fss``: adapters over the crypto layers'
micro-benchmarks (``secinfer.bench.he_bench``, ``he_pack_bench``, ``fss_bench``).

Neither paper has a table for these primitives alone; the in-run baselines are
* he: the first parameter set measured (``ckks-n13-128``), so larger sets show as a
  slow-down factor; hoisted rotation is also given against a plain rotation;
* fss: the semi-honest ReLU gate in Z_2^n of the same run, so the MAC'd gate of
  [CRISP V-B] (lifted ring Z_2^(n+40)) shows as its overhead factor; and, for the
  native kernels, the numpy reference of the same gate in the same run
  (``ratio_*_native_vs_numpy``). ``--network`` adds a link model of the one online round
  (one-way latency + bytes / bandwidth).
"""

from __future__ import annotations

from secinfer.bench.common import Progress, num, ratio, split_profiles



def run_he(quick: bool = False, network: str | None = None, sets=None, repeats: int | None = None,
           packing_sets=None, packing_noise=None) -> dict:
    from secinfer.bench import he_bench
    from secinfer.bench import he_pack_bench as bench_pack

    sets = tuple(sets or he_bench.CKKS_SETS)   # quick: the same 128-bit sets, fewer repeats
    repeats = int(repeats or (2 if quick else 5))
    prog = Progress("he", len(sets) + 1)
    raw = {"sets": {}}
    for name in sets:
        prog(f"parameter set {name}, {repeats} repeats")
        r = he_bench.run(sets=(name,), repeats=repeats)
        raw.setdefault("machine", r.get("machine"))
        raw.setdefault("library", r.get("library"))
        raw["sets"].update(r["sets"])
    base_name = sets[0]
    base = raw["sets"][base_name]
    rows = []
    for name, s in raw["sets"].items():
        for op, ms in s["ms"].items():
            row = {"params": name, "log_n": s["log_n"], "metric": op, "ms": ms}
            if name != base_name:
                row[f"ratio_vs_{base_name}"] = ratio(ms, base["ms"].get(op))
            if op == "rotate_hoisted_per_rotation":
                row["ratio_vs_plain_rotate"] = ratio(ms, s["ms"].get("rotate"))
            rows.append(row)
        for what, nbytes in s["bytes"].items():
            row = {"params": name, "log_n": s["log_n"], "metric": f"bytes/{what}", "bytes": nbytes}
            if name != base_name:
                row[f"ratio_vs_{base_name}"] = ratio(nbytes, base["bytes"].get(what))
            rows.append(row)
        if "matvec_max_abs_error" in s:
            rows.append({"params": name, "log_n": s["log_n"], "metric": "matvec_max_abs_error",
                         "value": s["matvec_max_abs_error"]})
        if "skipped" in s:
            rows.append({"params": name, "log_n": s["log_n"], "metric": "skipped", "value": s["skipped"]})
        for check, ok in s.get("checks", {}).items():
            if isinstance(ok, bool):
                rows.append({"params": name, "log_n": s["log_n"], "metric": f"check/{check}",
                             "value": "ok" if ok else "FAILED"})
    # SAFHIRE packing [SAFHIRE Table 1, Table 2, Fig. 10]: see secinfer.bench.he_pack_bench
    prog("SAFHIRE packing: key switches, time per packed coefficient, noise after packing")
    packing = bench_pack.run(quick=quick, sets=packing_sets, noise_profiles=packing_noise)
    raw["packing"] = packing
    rows += [{"suite_part": "safhire-packing", **r} for r in packing["rows"]]
    for c in packing["checks"]:
        rows.append({"suite_part": "safhire-packing", "metric": f"check/{c['check']}",
                     "value": "ok" if c["ok"] else "FAILED"})
    for b, per_gamma in packing["noise"].items():
        for gamma, nz in per_gamma.items():
            rows.append({"suite_part": "safhire-packing", "metric": "noise_after_packing", "b": b,
                         "gamma": gamma, "params": nz["params"], "samples": nz["samples"],
                         "log2_std": nz["log2_std"], "max_abs": nz["max_abs"],
                         "log2_bound_delta_half": nz["log2_bound"], "log2_margin": nz["log2_margin_max"]})
    ops = list(base["ms"])
    byte_keys = list(base["bytes"])
    plots = [
        {"title": "CKKS operations (median ms, this machine)", "kind": "bar", "x": ops, "xlabel": "operation",
         "ylabel": "milliseconds", "logy": True, "file": "he_ops_ms.png",
         "series": {n: [num(s["ms"].get(o)) for o in ops] for n, s in raw["sets"].items()}},
        {"title": "CKKS object sizes", "kind": "bar", "x": byte_keys, "xlabel": "object", "ylabel": "bytes",
         "logy": True, "file": "he_sizes.png",
         "series": {n: [num(s["bytes"].get(k)) for k in byte_keys] for n, s in raw["sets"].items()}},
    ]
    plots += _packing_plots(packing)
    return {"suite": "he", "network": "n/a (local computation)", "baseline": base_name, "rows": rows,
            "plots": plots, "raw": raw, "seconds": prog.elapsed()}


def _packing_plots(packing: dict) -> list:
    """Key switches per packed coefficient next to the paper's Table 1, time per packed
    coefficient, and the noise histograms against delta/2 (the paper's Fig. 10)."""
    rows = [r for r in packing["rows"] if r["metric"] == "pack_per_coeff" and r["threads"] == 1]
    full = [r for r in rows if r["n_packed"] == 2 ** r["log_n"]]
    gammas = ["gamma=0", "gamma=1", "gamma=2"]
    ks = {f"ours N=2^{r['log_n']}": [None] * 3 for r in full}
    for r in full:      # the same count for every set of a ring size
        ks[f"ours N=2^{r['log_n']}"][r["gamma"]] = r["key_switches_per_coeff"]
    for ring, vals in packing["paper_table1"].items():
        ks[f"paper M={ring}"] = list(vals)
    tm = {}
    for r in full:
        tm.setdefault(f"{r['params']} CPU", [None] * 3)[r["gamma"]] = r["ms_cpu"]
        tm.setdefault(f"{r['params']} wall", [None] * 3)[r["gamma"]] = r["ms_wall"]
    plots = [
        {"title": "Key switches per packed coefficient [SAFHIRE Table 1]", "kind": "bar", "x": gammas,
         "xlabel": "extraction level", "ylabel": "key switches / coefficient", "file": "he_pack_keyswitches.png",
         "series": ks},
        {"title": "Packing time per coefficient (n = N, 1 thread)", "kind": "bar", "x": gammas,
         "xlabel": "extraction level", "ylabel": "ms", "file": "he_pack_ms.png", "series": tm},
    ]
    for b, per_gamma in packing["noise"].items():
        nz0 = next(iter(per_gamma.values()))
        centers = [0.5 * (lo + hi) for lo, hi in zip(nz0["hist_edges"][:-1], nz0["hist_edges"][1:])]
        plots.append({"title": f"Packing noise, b = {b}, bound delta/2 = 2^{nz0['log2_bound']:.0f} "
                               f"[SAFHIRE Fig. 10]",
                      "kind": "line", "x": [round(c) for c in centers], "xlabel": "noise (integer units)",
                      "ylabel": "count", "file": f"he_pack_noise_b{b}.png",
                      "series": {f"gamma={g}": nz["hist"] for g, nz in per_gamma.items()}})
    return plots


FSS_QUICK_SIZES = (10**3, 10**4, 10**5)
FSS_FULL_SIZES = (10**3, 10**4, 10**5, 10**6)


def run_fss(quick: bool = False, network: str | None = None, sizes=None, n_bits: int = 32) -> dict:
    from secinfer.bench import fss_bench
    from secinfer.net.shaping import parse_profile

    sizes = tuple(int(s) for s in (sizes or (FSS_QUICK_SIZES if quick else FSS_FULL_SIZES)))
    profiles = split_profiles(network, ("lan", "wan"))
    prog = Progress("fss", len(sizes))
    raw = {"results": []}
    for count in sizes:
        prog(f"ReLU gate, {count} elements, n = {n_bits} (MAC'd and plain)")
        r = fss_bench.run(sizes=(count,), n_bits=n_bits)
        raw.setdefault("machine", r.get("machine"))
        raw.setdefault("benchmark", r.get("benchmark"))
        raw["results"].extend(r["results"])
    rows = []
    by = {}
    for r in raw["results"]:
        variant = "mac" if r["out_bits"] != r["n_bits"] else "plain"
        by[(variant, r["count"], r.get("backend", "numpy"))] = r
    primary = raw["results"][0].get("backend", "numpy") if raw["results"] else "numpy"
    for r in raw["results"]:
        variant = "mac" if r["out_bits"] != r["n_bits"] else "plain"
        if r.get("backend", "numpy") != primary:
            continue
        row = {"gate": r["gate"], "variant": variant, "backend": primary, "n_bits": r["n_bits"],
               "out_bits": r["out_bits"], "count": r["count"], "keygen_us_per_relu": r["keygen_us_per_relu"],
               "eval_us_per_relu": r["eval_us_per_relu"],
               "eval_cpu_us_per_relu": 1e6 * r["eval_cpu_seconds_per_party"] / r["count"],
               "key_bytes_per_relu": r["key_bytes_measured"],
               "online_bits_per_relu": r["online_bits_per_relu_per_party"], "online_rounds": r["online_rounds"]}
        ref = by.get((variant, r["count"], "numpy")) if primary != "numpy" else None
        if ref:
            # same-run numpy reference of the same gate: native time / numpy time (< 1 is faster)
            row["keygen_us_per_relu_numpy"] = ref["keygen_us_per_relu"]
            row["eval_us_per_relu_numpy"] = ref["eval_us_per_relu"]
            row["ratio_keygen_native_vs_numpy"] = ratio(r["keygen_seconds"], ref["keygen_seconds"])
            row["ratio_eval_native_vs_numpy"] = ratio(r["eval_seconds_per_party"], ref["eval_seconds_per_party"])
            row["ratio_keygen_cpu_native_vs_numpy"] = ratio(r["keygen_cpu_seconds"], ref["keygen_cpu_seconds"])
            row["ratio_eval_cpu_native_vs_numpy"] = ratio(r["eval_cpu_seconds_per_party"],
                                                          ref["eval_cpu_seconds_per_party"])
        for prof in profiles:
            link = parse_profile(prof)
            nbytes = r["online_bits_per_relu_per_party"] * r["count"] / 8
            row[f"online_{link.name}_model_s"] = (r["eval_seconds_per_party"] + r["online_rounds"] * link.latency
                                                  + (nbytes / link.bandwidth if link.bandwidth else 0.0))
        if variant == "mac":
            p = by.get(("plain", r["count"], primary))
            if p:
                row["ratio_eval_vs_plain"] = ratio(r["eval_seconds_per_party"], p["eval_seconds_per_party"])
                row["ratio_keygen_vs_plain"] = ratio(r["keygen_seconds"], p["keygen_seconds"])
                row["ratio_key_bytes_vs_plain"] = ratio(r["key_bytes_measured"], p["key_bytes_measured"])
                row["ratio_online_bits_vs_plain"] = ratio(r["online_bits_per_relu_per_party"],
                                                          p["online_bits_per_relu_per_party"])
        rows.append(row)
    x = list(sizes)

    def series(key):
        tag = " (native)" if primary == "native" else ""
        out = {v + tag: [num(next((rw[key] for rw in rows if rw["variant"] == v and rw["count"] == c), None))
                         for c in x] for v in ("plain", "mac")}
        if any(key + "_numpy" in rw for rw in rows):
            out.update({f"{v} (numpy)": [num(next((rw.get(key + "_numpy") for rw in rows
                                                   if rw["variant"] == v and rw["count"] == c), None)) for c in x]
                        for v in ("plain", "mac")})
        return out
    plots = [
        {"title": f"FSS ReLU gate: one party's evaluation (n = {n_bits})", "kind": "line", "x": x, "logx": True,
         "xlabel": "ReLUs in the batch", "ylabel": "microseconds per ReLU", "logy": False,
         "file": "fss_eval_us.png", "series": series("eval_us_per_relu")},
        {"title": f"FSS ReLU gate: dealer key generation (n = {n_bits})", "kind": "line", "x": x, "logx": True,
         "xlabel": "ReLUs in the batch", "ylabel": "microseconds per ReLU", "logy": False,
         "file": "fss_keygen_us.png", "series": series("keygen_us_per_relu")},
        {"title": "FSS ReLU gate: key bytes per ReLU per party", "kind": "bar", "x": [str(c) for c in x],
         "xlabel": "ReLUs in the batch", "ylabel": "bytes", "logy": False, "file": "fss_key_bytes.png",
         "series": series("key_bytes_per_relu")},
    ]
    return {"suite": "fss", "network": ",".join(profiles),
            "baseline": "plain semi-honest ReLU gate, same run; numpy FSS reference (same run) for the native rows",
            "rows": rows, "plots": plots, "raw": raw, "seconds": prog.elapsed()}
