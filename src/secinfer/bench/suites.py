"""``secinfer bench SUITE``: reproduce the papers' tables as ratios against in-repo baselines.

Each suite is a function ``(quick: bool, network: str | None) -> dict`` returning
``{"suite", "machine", "rows": [...], "plots": [...]}``; this module writes the JSON and one
PNG per plot under ``<out>/<suite>-<UTC timestamp>/``. Suites live in the protocol packages
(``secinfer.protocols.<p>.bench.run``) or in ``secinfer.bench``; they are imported lazily.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import json
import os
import platform

from secinfer.errors import ConfigError

SUITES = {
    "runtime": ("secinfer.bench.runtime_suite", "run"),
    "he": ("secinfer.crypto.he.bench", "run"),
    "fss": ("secinfer.crypto.fss.bench", "run"),
    "astra": ("secinfer.protocols.astra.bench", "run"),
    "stamp": ("secinfer.protocols.stamp.bench", "run"),
    "crisp": ("secinfer.protocols.crisp.bench", "run"),
}


def machine_info() -> dict:
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()}


def _call_suite(module: str, fn: str, quick: bool, network: str | None) -> dict:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise ConfigError(f"benchmark suite module {module} is not available: {e}") from None
    func = getattr(mod, fn)
    kwargs = {"quick": quick}
    if network:
        kwargs["network"] = network
    try:
        return func(**kwargs)
    except TypeError:
        return func()


def write_plots(result: dict, folder: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for i, p in enumerate(result.get("plots", [])):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        kind = p.get("kind", "line")
        xs = p["x"]
        series = p["series"]
        if kind == "bar":
            width = 0.8 / max(1, len(series))
            pos = list(range(len(xs)))
            for k, (name, ys) in enumerate(series.items()):
                ax.bar([q + k * width for q in pos], ys, width=width, label=name)
            ax.set_xticks([q + 0.4 - width / 2 for q in pos])
            ax.set_xticklabels([str(x) for x in xs], rotation=30, ha="right")
        else:
            for name, ys in series.items():
                ax.plot(xs, ys, marker="o", label=name)
        if p.get("logy"):
            ax.set_yscale("log")
        if p.get("logx"):
            ax.set_xscale("log")
        ax.set_title(p.get("title", ""))
        ax.set_xlabel(p.get("xlabel", ""))
        ax.set_ylabel(p.get("ylabel", ""))
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        name = p.get("file") or f"plot{i}.png"
        path = os.path.join(folder, name)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def run_suite(suite: str, out: str = "results", quick: bool = False, network: str | None = None) -> int:
    if suite == "list":
        for name, (mod, _fn) in SUITES.items():
            print(f"{name:<10} {mod}")
        return 0
    if suite not in SUITES:
        raise ConfigError(f"unknown benchmark suite {suite!r}; suites: {', '.join(SUITES)}")
    module, fn = SUITES[suite]
    result = _call_suite(module, fn, quick, network)
    result.setdefault("suite", suite)
    result["machine"] = machine_info()
    result["quick"] = quick
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    folder = os.path.join(out, f"{suite}-{stamp}")
    os.makedirs(folder, exist_ok=True)
    plots = write_plots(result, folder)
    with open(os.path.join(folder, "results.json"), "w") as f:
        json.dump(result, f, indent=2, default=str)
    for row in result.get("rows", []):
        print("  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    print(f"wrote {os.path.join(folder, 'results.json')}" + (f" and {len(plots)} plot(s)" if plots else ""))
    return 0
