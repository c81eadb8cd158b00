"""``secinfer bench crisp``: CRISP (malicious client) against its semi-honest baseline
[CRISP Table I (FC layer), Tables II-III (offline/online), Table V (MaxPool), Figs. 5-6 (ReLU)].

Adapter over ``secinfer.bench.crisp_paper.run``, which already returns rows and plots;
this adds the paper table each row reproduces and, for each MAC'd (malicious) figure, the
ratio against the semi-honest run of the same invocation. ``--network`` is the shaping
profile of the end-to-end runs (default ``lan``); several profiles run the suite once each.
"""

from __future__ import annotations

from secinfer.bench.common import Progress, ratio, split_profiles

_TABLE = {"relu": "fig5-6", "maxpool": "V", "fc": "I", "e2e": "II-III"}


def run(quick: bool = False, network: str | None = None) -> dict:
    from secinfer.bench import crisp_paper as cb

    profiles = split_profiles(network, ("lan",))
    prog = Progress("crisp", len(profiles))
    rows, plots, raw = [], [], {"runs": {}}
    for prof in profiles:
        prog(f"ReLU/MaxPool gates, FC layers (HE), end to end over {prof}"
             f"{' (quick: 2^10..2^12 ReLUs, digits-mlp)' if quick else ''}; this takes minutes")
        r = cb.run(quick=quick, network=prof)
        raw["runs"][prof] = {k: v for k, v in r.items() if k not in ("rows", "plots")}
        for row in _with_ratios(r.get("rows", [])):
            rows.append({"table": _TABLE.get(row.get("kind"), ""), "profile": prof, **row})
        for p in r.get("plots", []):
            if len(profiles) > 1:
                p = {**p, "title": f"{p['title']} [{prof}]", "file": f"{prof}_{p.get('file', 'plot.png')}"}
            plots.append(p)
    raw["rows"] = rows
    return {"suite": "crisp", "network": ",".join(profiles), "baseline": "CRISP semi-honest (no MACs), same run",
            "rows": rows, "plots": plots, "raw": raw, "seconds": prog.elapsed()}


def _with_ratios(rows: list) -> list:
    out = []
    for r in rows:
        r = dict(r)
        kind = r.get("kind")
        if kind in ("relu", "maxpool") and str(r.get("gate", "")).endswith("-mac"):
            base_gate = r["gate"][:-4]
            key = "count" if kind == "relu" else "outputs"
            b = next((x for x in rows if x.get("kind") == kind and x.get("gate") == base_gate
                      and x.get(key) == r.get(key)), None)
            if b:
                r["ratio_online_s_vs_semi_honest"] = ratio(r.get("online_s"), b.get("online_s"))
                r["ratio_online_lan_model_vs_semi_honest"] = ratio(r.get("online_lan_model_s"),
                                                                  b.get("online_lan_model_s"))
                r["ratio_online_bytes_vs_semi_honest"] = ratio(r.get("online_bytes_per_party"),
                                                              b.get("online_bytes_per_party"))
                if kind == "relu":
                    r["ratio_key_bytes_vs_semi_honest"] = ratio(r.get("key_bytes_both"), b.get("key_bytes_both"))
        if kind == "fc" and r.get("security") == "malicious":
            b = next((x for x in rows if x.get("kind") == "fc" and x.get("security") == "semi-honest"
                      and x.get("layer") == r.get("layer") and x.get("he_params") == r.get("he_params")), None)
            if b:
                r["ratio_online_s_vs_semi_honest"] = ratio(r.get("online_s"), b.get("online_s"))
                r["ratio_online_MB_vs_semi_honest"] = ratio(r.get("online_MB"), b.get("online_MB"))
                r["ratio_offline_s_vs_semi_honest"] = ratio(r.get("server_offline_s"), b.get("server_offline_s"))
        out.append(r)
    return out
