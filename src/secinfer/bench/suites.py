"""``secinfer bench SUITE``: reproduce the papers' tables as ratios against in-repo baselines.

Each suite is an adapter ``run(quick: bool, network: str | None) -> dict`` in
``secinfer.bench`` returning ``{"suite", "rows": [flat dicts], "plots": [...], "raw": ...}``
(the protocol or crypto package's own bench dict under ``raw``); this module adds the
machine description and load, writes ``results.json`` and one PNG per plot under
``<out>/<suite>-<UTC timestamp>/``. ``secinfer bench all`` runs every suite in turn.
Adapters are imported lazily (the protocol packages are heavy).
"""

from __future__ import annotations

import datetime as _dt
import importlib
import inspect
import json
import math
import os
import platform
import sys
import time
import traceback

from secinfer.errors import ConfigError

SUITES = {
    "runtime": ("secinfer.bench.runtime_suite", "run"),
    "he": ("secinfer.bench.micro_suites", "run_he"),
    "fss": ("secinfer.bench.micro_suites", "run_fss"),
    "astra": ("secinfer.bench.astra_suite", "run"),
    "astra-real": ("secinfer.bench.astra_suite", "run_real"),
    "stamp": ("secinfer.bench.stamp_suite", "run"),
    "crisp": ("secinfer.bench.crisp_suite", "run"),
    "certified": ("secinfer.bench.certified_suite", "run"),
    "peers": ("secinfer.bench.peers_suite", "run"),
    "safhire": ("secinfer.bench.safhire_suite", "run"),
    "serve": ("secinfer.bench.serve_suite", "run"),
}


# What each suite reproduces, and how long it took on this machine (2 shared vCPUs): only
# measured figures, with where they were recorded; None = not measured.
SUITE_INFO = {
    "runtime": {"reproduces": "none (the runtime itself: latency per network profile and batch)",
                "quick_s": 10.6, "full_s": None, "source": "docs/benchmarks.md, bench all --quick 2026-11-22"},
    "he": {"reproduces": "none (CKKS primitives, the HE layer under CRISP)",
           "quick_s": 19.0, "full_s": None, "source": "docs/benchmarks.md, bench all --quick 2026-11-22"},
    "fss": {"reproduces": "none (FSS ReLU gate of CRISP V-B, MAC'd vs plain)",
            "quick_s": 12.7, "full_s": None, "source": "docs/benchmarks.md, bench all --quick 2026-11-22"},
    "astra": {"reproduces": "ASTRA Tables 3, 5, 6, 7, 8, 9, 10; Figs. 13-14 (vs in-repo ABY3)",
              "quick_s": 5.9, "full_s": None, "source": "docs/benchmarks.md, bench all --quick 2026-11-22"},
    "astra-real": {"reproduces": "ASTRA Tables 6, 8 (LAN latency, real processes); 7, 9 (WAN throughput)",
                   "quick_s": None, "quick_more_than_s": 200.0, "full_s": None,
                   "source": "bench astra-real --quick 2026-11-27 02:54 UTC, load average ~25: stopped at 200 s "
                             "during step 10 of 14 (steps took 16-23 s each)"},
    "stamp": {"reproduces": "STAMP Tables 1, 2, 3, 4 (vs in-repo Falcon+)",
              "quick_s": 265.0, "full_s": None,
              "source": "docs/benchmarks.md, bench stamp --quick 2026-11-24 (6 networks, batch 8); full: "
                        "VGG16 malicious at batch 1 alone took about 23 min"},
    "crisp": {"reproduces": "CRISP Table I, II-III, V; Figs. 5-6 (vs CRISP semi-honest)",
              "quick_s": 21.3, "full_s": None, "source": "docs/benchmarks.md, bench all --quick 2026-11-22"},
    "certified": {"reproduces": "CRISP certified-data Table 1 (three use cases)",
                  "quick_s": 13.2, "full_s": None,
                  "source": "bench certified --quick 2026-11-27 08:15 UTC, load average ~20 (helper certified, "
                            "commit 5e532b7); full not run as one command: its rows were run one by one "
                            "(docs/protocols/certified.md), smart metering alone took 13.7 min at load 16-28"},
    "safhire": {"reproduces": "SAFHIRE Tables 3-5, Figs. 4-8 (digits models, threads sweep; without --quick ResNet-20 "
                              "and the fully encrypted CKKS baseline, extrapolated from per-layer runs; ResNet-18-tiny "
                              "end to end (tens of minutes); ResNet-34 skipped with its reasons and an "
                              "EXTRAPOLATED row)",
                "quick_s": None, "full_s": None, "source": ""},
    "serve": {"reproduces": "none (serving: queries/s, p50/p99 at 1/4/16 clients, lost sessions under faults, "
                            "memory over a soak)",
              "quick_s": 207.0, "full_s": None,
              "source": "bench serve --quick 2026-11-27 05:00 UTC (with aby3 and falcon), load average ~18-27 "
                        "(helper serving's run); full: 10,000 astra soak queries alone take ~45 min at ~4 q/s"},
    "peers": {"reproduces": "none (four workloads beside a mature C++ MPC framework's figures, issue #23)",
              "quick_s": None, "full_s": None, "source": ""},
}


def _dur(v) -> str:
    if v is None:
        return "not measured"
    return f"{v:.0f} s" if v < 120 else f"{v / 60:.1f} min"


def list_suites(as_json: bool = False) -> str:
    """``secinfer bench list``: suite, what it reproduces, measured --quick and full time."""
    if as_json:
        return json.dumps({k: {**SUITE_INFO.get(k, {}), "module": f"{m}.{f}"} for k, (m, f) in SUITES.items()})
    lines = [f"{'suite':<11} {'--quick':<13} {'full':<13} reproduces"]
    for name in SUITES:
        i = SUITE_INFO.get(name, {})
        quick = _dur(i.get("quick_s")) if i.get("quick_s") or not i.get("quick_more_than_s") else \
            "> " + _dur(i["quick_more_than_s"])
        lines.append(f"{name:<11} {quick:<13} {_dur(i.get('full_s')):<13} "
                     f"{i.get('reproduces', '')}")
    lines.append(f"{'all':<11} every suite above, in turn")
    lines.append("times: wall clock measured on this 2-core shared machine (sources in "
                 "secinfer.bench.suites.SUITE_INFO and docs/benchmarks.md); they grow with load")
    return "\n".join(lines)


def machine_info() -> dict:
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}


def _call_suite(module: str, fn: str, quick: bool, network: str | None, partial: str | None = None) -> dict:
    """``partial``: passed to suites that can append each finished result to a file (long
    runs keep what finished if they are stopped or killed)."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise ConfigError(f"benchmark suite module {module} is not available: {e}") from None
    run = getattr(mod, fn)
    extra = {"partial": partial} if partial and "partial" in inspect.signature(run).parameters else {}
    return run(quick=quick, network=network, **extra)


def _num(v) -> float:
    try:
        return float(v) if v is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def _plain_log_ticks(axis, lim) -> None:
    """Plain numbers on a log axis (1, 2, 5, 0.3, 4096 ...) rather than 2x10^0; minor ticks
    labelled too when the axis spans less than two decades."""
    import matplotlib.ticker

    fmt = matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:g}")

    def minor(v, _pos):   # only 2x, 3x and 5x a power of ten, so labels do not collide
        m = f"{v:.0e}"[0] if v > 0 else ""
        return f"{v:g}" if m in ("2", "3", "5") else ""
    axis.set_major_formatter(fmt)
    lo, hi = lim
    axis.set_minor_formatter(matplotlib.ticker.FuncFormatter(minor) if lo > 0 and hi / lo < 1000
                             else matplotlib.ticker.NullFormatter())


def write_plots(result: dict, folder: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for i, p in enumerate(result.get("plots", [])):
        fig, ax = plt.subplots(figsize=(8, 4.8))
        kind = p.get("kind", "line")
        xs = p["x"]
        series = p["series"]
        if kind == "bar":
            width = 0.8 / max(1, len(series))
            pos = list(range(len(xs)))
            for k, (name, ys) in enumerate(series.items()):
                ax.bar([q + k * width for q in pos], [_num(y) for y in ys], width=width, label=name)
            ax.set_xticks([q + 0.4 - width / 2 for q in pos])
            ax.set_xticklabels([str(x) for x in xs], rotation=30, ha="right")
        else:
            for name, ys in series.items():
                ax.plot(xs, [_num(y) for y in ys], marker="o", label=name)
        if p.get("hline") is not None:
            ax.axhline(float(p["hline"]), color="black", linewidth=0.8, linestyle="--")
        if p.get("logy"):
            ax.set_yscale("log")
            _plain_log_ticks(ax.yaxis, ax.get_ylim())
        if p.get("logx"):
            ax.set_xscale("log")
            _plain_log_ticks(ax.xaxis, ax.get_xlim())
        ax.set_title(p.get("title", ""))
        ax.set_xlabel(p.get("xlabel", ""))
        ax.set_ylabel(p.get("ylabel", ""))
        if series:
            ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        name = p.get("file") or f"plot{i}.png"
        path = os.path.join(folder, name)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def run_suite(suite: str, out: str = "results", quick: bool = False, network: str | None = None,
              verbosity: int = 0) -> int:
    """``verbosity``: -1 quiet (no progress lines, no rows echoed), 0 default, 1 more
    frequent "still running" lines."""
    if suite == "list":
        print(list_suites())
        return 0
    if suite == "all":
        return run_all(out=out, quick=quick, network=network, verbosity=verbosity)
    if suite not in SUITES:
        raise ConfigError(f"unknown benchmark suite {suite!r}; suites: {', '.join(SUITES)}, all, list")
    folder = run_one(suite, out=out, quick=quick, network=network, echo=verbosity >= 0, verbosity=verbosity)
    print(f"wrote {os.path.join(folder, 'results.json')}")
    return 0


def run_one(suite: str, out: str = "results", quick: bool = False, network: str | None = None,
            echo: bool = True, verbosity: int = 0) -> str:
    """Run one suite, write its JSON and PNGs; returns the folder (named at the start)."""
    from secinfer.bench.common import bench_feedback

    if suite not in SUITES:
        raise ConfigError(f"unknown benchmark suite {suite!r}; suites: {', '.join(SUITES)}, all, list")
    module, fn = SUITES[suite]
    load0 = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    t0 = time.perf_counter()
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    folder = os.path.join(out, f"{suite}-{stamp}")          # named after the start
    os.makedirs(folder, exist_ok=True)
    if verbosity >= 0:
        took = SUITE_INFO.get(suite, {}).get("quick_s" if quick else "full_s")
        print(f"[bench {suite}] results folder: {folder} (partial.jsonl there as steps finish; measured "
              f"{'--quick' if quick else 'full'} time: {_dur(took)})", file=sys.stderr, flush=True)
    with bench_feedback(verbosity):
        result = _call_suite(module, fn, quick, network, partial=os.path.join(folder, "partial.jsonl"))
    result.setdefault("suite", suite)
    result["machine"] = {**machine_info(), "load_avg_at_start": load0}
    result["quick"] = quick
    result["command"] = f"secinfer bench {suite}" + (" --quick" if quick else "") + \
        (f" --network {network}" if network else "")
    result["wall_seconds"] = time.perf_counter() - t0
    os.makedirs(folder, exist_ok=True)
    plots = write_plots(result, folder)
    result["plot_files"] = [os.path.basename(p) for p in plots]
    with open(os.path.join(folder, "results.json"), "w") as f:
        json.dump(result, f, indent=2, default=str)
    if echo:
        for row in result.get("rows", []):
            print("  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
                            if v is not None))
    print(f"[bench {suite}] {result['wall_seconds']:.1f} s, {len(result.get('rows', []))} rows, "
          f"{len(plots)} plot(s) in {folder}", file=sys.stderr, flush=True)
    return folder


def run_all(out: str = "results", quick: bool = False, network: str | None = None, verbosity: int = 0) -> int:
    """Every suite in turn; a suite that fails is reported and the others still run."""
    done, failed = {}, {}
    for suite in SUITES:
        print(f"[bench all] {suite} ...", file=sys.stderr, flush=True)
        try:
            done[suite] = run_one(suite, out=out, quick=quick, network=network, echo=False, verbosity=verbosity)
        except Exception as e:  # noqa: BLE001 - one broken suite must not hide the others
            failed[suite] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
            print(f"[bench all] {suite} FAILED:\n{failed[suite]['traceback']}", file=sys.stderr, flush=True)
    os.makedirs(out, exist_ok=True)
    index = os.path.join(out, "all-" + _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + ".json")
    with open(index, "w") as f:
        json.dump({"quick": quick, "network": network, "machine": machine_info(), "folders": done,
                   "failed": failed}, f, indent=2)
    for suite, folder in done.items():
        print(f"{suite:<8} {os.path.join(folder, 'results.json')}")
    for suite, err in failed.items():
        print(f"{suite:<8} FAILED {err['error']}")
    print(f"wrote {index}")
    return 1 if failed else 0
