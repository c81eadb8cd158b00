"""``secinfer bench serve``: long-lived `secinfer serve` processes under load and faults.

Per protocol served (reference, astra, stamp, and the baselines aby3, falcon): every
model-side party is its own `secinfer serve` process on loopback (fresh cluster and keys);
clients run ``secinfer.runtime.serve.ServeClient`` (one per client thread, control sockets
kept across its queries) in threads of this process (16 clients share its interpreter: the
client side is part of what is measured). Rows:

* load: queries per second and latency p50/p99 at 1, 4 and 16 concurrent clients;
* faults: sessions completed / failed / expired / lost on the servers' counters after a
  mix of clients killed mid-session (real processes, SIGKILL after their first frame),
  clients that send garbage frames (authenticated, random bytes), and good clients on
  a shaped client link (``lan``); ``lost`` = opened - completed - failed - expired -
  running (a session the server neither finished nor failed) and must be 0;
* soak: RSS of every server process every few queries over a long run (quick: a few
  hundred; full: 10,000 astra and 1,000 stamp queries), with its duration, queries/s,
  p50/p99 and the prepared-material pool's counters (hits, misses, made, dropped);
* pool: the prepared-material counters of every server after the protocol's rows.

The soak alone (e.g. the full 10,000 astra queries without the other rows)::

    python -m secinfer.bench.serve_suite --protocol astra --queries 10000 --clients 4 --out results/
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

MODEL = "bundled:diabetes-linreg"
X = np.linspace(-0.01, 0.01, 10).reshape(1, 10)   # inside every served protocol's range certificate
_DYING = """
import os, sys, numpy as np
from secinfer.runtime.serve import query
def die(ep):
    real = ep._receive
    def rec(peer, deadline):
        real(peer, deadline)
        os.kill(os.getpid(), 9)
    ep._receive = rec
    return ep
query(sys.argv[1], np.zeros((1, 10)), sys.argv[2], endpoint_wrapper=die)
"""


def _src_env() -> dict:
    src = str(Path(__file__).resolve().parents[2])
    return dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class _Fleet:
    def __init__(self, protocol: str, work: Path) -> None:
        from secinfer.protocols import registry
        from secinfer.runtime.cluster import write_loopback_cluster
        from secinfer.runtime.serve import server_status

        spec = registry.get(protocol)
        self.cluster = write_loopback_cluster(work / protocol, spec.roles, session=f"bench-{protocol}",
                                              connect_timeout=10.0, heartbeat_interval=0.5, peer_timeout=5.0)
        self.client = spec.input_role
        self.ids = [r for r in spec.roles if r != spec.input_role]
        self.procs = {}
        for pid in self.ids:
            cmd = [sys.executable, "-m", "secinfer.cli.main", "serve", "--cluster", str(self.cluster), "--id", pid,
                   "--protocol", protocol, "--max-sessions", "32", "--grace", "10"]
            if pid == spec.model_role:
                cmd += ["--model", MODEL]
            self.procs[pid] = subprocess.Popen(cmd, env=_src_env(), stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL, start_new_session=True)
        self._status = server_status
        deadline = time.monotonic() + 90
        for pid in self.ids:
            while True:
                try:
                    self.status(pid, 0.5)
                    break
                except Exception:  # noqa: BLE001 - not up yet
                    if time.monotonic() > deadline or self.procs[pid].poll() is not None:
                        raise
                    time.sleep(0.2)

    def status(self, pid, timeout=5.0, live=False) -> dict:
        return self._status(self.cluster, pid, self.client, timeout=timeout, live=live)

    def live(self) -> dict:
        """Every server's per-session state now (``Server.live_state``): it must not grow."""
        keep = ("sessions", "ports", "endpoints", "jobs", "prgs", "prepared_items", "session_threads", "threads",
                "seen_nonces")
        out = {}
        for pid in self.ids:
            try:
                v = self.status(pid, live=True)["live"]
                out[pid] = {k: v[k] for k in keep}
            except Exception as e:  # noqa: BLE001 - a sample, not a failure of the soak
                out[pid] = {"error": f"{type(e).__name__}: {e}"[:120]}
        return out

    def settled(self, timeout=30.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            st = {pid: self.status(pid) for pid in self.ids}
            if all(v["running"] == 0 and v["pending"] == 0 for v in st.values()) or time.monotonic() > deadline:
                return st
            time.sleep(0.2)

    def rss_kb(self) -> dict:
        return {pid: _rss_kb(p.pid) for pid, p in self.procs.items()}

    def stop(self) -> dict:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes = {}
        for pid, p in self.procs.items():
            try:
                codes[pid] = p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                codes[pid] = p.wait()
        return codes


def _load(fleet: _Fleet, clients: int, n: int, network: str | None = None) -> dict:
    from secinfer.runtime.serve import ServeClient

    lat, errors = [], []
    lock = threading.Lock()
    todo = iter(range(n))

    def worker():
        with ServeClient(fleet.cluster, fleet.client, network=network) as c:
            while True:
                with lock:
                    if next(todo, None) is None:
                        return
                t = time.perf_counter()
                try:
                    c.query(X)
                    with lock:
                        lat.append(time.perf_counter() - t)
                except Exception as e:  # noqa: BLE001 - counted
                    with lock:
                        errors.append(f"{type(e).__name__}: {str(e)[:80]}")
    t0 = time.perf_counter()
    ths = [threading.Thread(target=worker) for _ in range(clients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    wall = time.perf_counter() - t0
    a = np.array(lat) if lat else np.array([np.nan])
    kinds = {k: errors.count(k) for k in sorted(set(errors))}
    return {"clients": clients, "queries": n, "ok": len(lat), "errors": len(errors), "error_types": kinds,
            "wall_s": wall,
            "qps": len(lat) / wall, "p50_s": float(np.percentile(a, 50)), "p99_s": float(np.percentile(a, 99))}


def _faults(fleet: _Fleet, kills: int, network: str) -> dict:
    from secinfer.runtime.serve import query

    before = fleet.settled()
    dying = [subprocess.Popen([sys.executable, "-c", _DYING, str(fleet.cluster), fleet.client], env=_src_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(kills)]

    def garbage(ep):
        def send(peer, tag, *arrays):
            ep._transmit(peer, os.urandom(64))
        ep.send = send
        return ep
    garbage_failed = 0
    for _ in range(kills):
        try:
            query(fleet.cluster, X, fleet.client, endpoint_wrapper=garbage)
        except Exception:  # noqa: BLE001 - expected
            garbage_failed += 1
    shaped = _load(fleet, 4, 4 * kills, network=network)
    for p in dying:
        p.wait(60)
    after = fleet.settled()
    row = {"killed_clients": kills, "garbage_clients": kills, "garbage_sessions_failed": garbage_failed,
           "shaped_network": network, "shaped_ok": shaped["ok"], "shaped_errors": shaped["errors"]}
    lost = 0
    for pid in fleet.ids:
        d = {k: after[pid][k] - before[pid][k] for k in ("opened", "completed", "failed", "expired")}
        l_pid = d["opened"] - d["completed"] - d["failed"] - d["expired"] - after[pid]["running"]
        lost += l_pid
        row[pid] = dict(d, lost=l_pid)
    row["lost"] = lost
    row["servers_alive"] = all(p.poll() is None for p in fleet.procs.values())
    return row


def _soak(fleet: _Fleet, n: int, every: int, clients: int = 4) -> dict:
    before = fleet.settled()
    t0 = time.perf_counter()
    samples = [{"queries": 0, "t_s": 0.0, "rss_kb": fleet.rss_kb(), "load": os.getloadavg()[0]}]
    done = client_errors = 0
    p50, p99 = [], []
    while done < n:
        k = min(every, n - done)
        r = _load(fleet, clients, k)
        client_errors += r["errors"]
        p50.append(r["p50_s"])
        p99.append(r["p99_s"])
        done += k
        samples.append({"queries": done, "t_s": time.perf_counter() - t0, "rss_kb": fleet.rss_kb(),
                        "load": os.getloadavg()[0], "live": fleet.live()})
    wall = time.perf_counter() - t0
    st = fleet.settled()
    delta = {pid: {k: v[k] - before[pid][k] for k in ("opened", "completed", "failed", "expired")}
             for pid, v in st.items()}
    for pid, d in delta.items():
        d["lost"] = d["opened"] - d["completed"] - d["failed"] - d["expired"] - st[pid]["running"]
    rss = {pid: {"start": samples[1]["rss_kb"][pid] if len(samples) > 1 else samples[0]["rss_kb"][pid],
                 "end": samples[-1]["rss_kb"][pid], "max": max(s["rss_kb"][pid] for s in samples[1:] or samples)}
           for pid in fleet.ids}
    return {"queries": n, "clients": clients, "wall_s": wall, "qps": n / wall, "client_errors": client_errors,
            "p50_s_median_of_chunks": float(np.median(p50)), "p99_s_max_of_chunks": float(np.max(p99)),
            "samples": samples, "servers": delta, "rss_kb": rss,
            "load_avg_min_max": [min(x["load"] for x in samples), max(x["load"] for x in samples)],
            "lost": sum(d["lost"] for d in delta.values()),
            "errors": {pid: v["errors"] for pid, v in st.items()},
            "pool": {pid: v["pool"] for pid, v in st.items()}, "prep": {pid: _prep(v) for pid, v in st.items()}}


def _prep(status: dict) -> dict:
    p = dict(status.get("prep") or {})
    p.pop("ids", None)
    return p


def plan(quick: bool) -> dict:
    """protocol -> (queries at 1/4/16 clients, soak queries, killed + garbage clients)."""
    return {"reference": ((8, 8, 32), 60, 3) if quick else ((20, 80, 320), 2000, 10),
            "astra": ((8, 8, 32), 150, 3) if quick else ((20, 80, 320), 10000, 10),
            "aby3": ((4, 4, 16), 16, 1) if quick else ((20, 80, 320), 1000, 10),
            "falcon": ((2, 4, 16), 8, 1) if quick else ((10, 40, 160), 200, 10),
            "stamp": ((1, 4, 16), 12, 1) if quick else ((10, 40, 160), 1000, 10)}


def run(quick: bool = False, network: str | None = None, protocols: dict | None = None) -> dict:
    """Every row of the module doc; ``protocols``: another plan (``plan``), e.g. a smaller one."""
    shaped = (network or "lan").split(",")[0]
    protocols = protocols or plan(quick)
    conc = (1, 4, 16)
    rows, raw, plots = [], {}, []
    lat_series, qps_series = {}, {}
    with tempfile.TemporaryDirectory(prefix="secinfer-bench-serve-") as work:
        for proto, (counts, soak_n, kills) in protocols.items():
            fleet = _Fleet(proto, Path(work))
            try:
                loads = [_load(fleet, c, n) for c, n in zip(conc, counts)]
                for r in loads:
                    rows.append({"protocol": proto, "kind": "load", **{k: v for k, v in r.items() if k != "error_types"},
                                 "error_types": "; ".join(f"{n} x {k}" for k, n in r["error_types"].items())})
                lat_series[f"{proto} p50"] = [r["p50_s"] * 1e3 for r in loads]
                lat_series[f"{proto} p99"] = [r["p99_s"] * 1e3 for r in loads]
                qps_series[proto] = [r["qps"] for r in loads]
                f = _faults(fleet, kills, shaped)
                rows.append({"protocol": proto, "kind": "faults", **{k: v for k, v in f.items()
                                                                      if not isinstance(v, dict)}})
                soak = _soak(fleet, soak_n, max(25, soak_n // 10))
                rows.append(_soak_row(proto, fleet, soak))
                rows.append(_pool_row(proto, soak))
                raw[proto] = {"load": loads, "faults": f, "soak": soak}
            finally:
                raw.setdefault(proto, {})["exit_codes"] = fleet.stop()
            plots.append({"file": f"serve-rss-{proto}.png", "title": f"{proto}: server RSS over the soak",
                          "xlabel": "queries", "ylabel": "RSS (MB)",
                          "x": [s["queries"] for s in soak["samples"]],
                          "series": {pid: [s["rss_kb"][pid] / 1024 for s in soak["samples"]] for pid in fleet.ids}})
    plots.insert(0, {"file": "serve-latency.png", "title": "served query latency", "xlabel": "concurrent clients",
                     "ylabel": "latency (ms)", "x": list(conc), "series": lat_series, "logx": True,
                     "logy": True})
    plots.insert(1, {"file": "serve-throughput.png", "title": "served queries per second",
                     "xlabel": "concurrent clients", "ylabel": "queries/s", "x": list(conc), "series": qps_series,
                     "logx": True})
    return {"suite": "serve", "rows": rows, "plots": plots, "raw": raw,
            "soak_note": "quick: a short soak; the full soak (10,000 astra, 1,000 stamp queries) is "
                         "`secinfer bench serve` without --quick, or the soak alone: "
                         "python -m secinfer.bench.serve_suite --protocol astra --queries 10000",
            "notes": "crisp is served (tests/serve) but not in this suite: ~10 s per query on digits-mlp"}


def _soak_row(proto: str, fleet: _Fleet, soak: dict) -> dict:
    return {"protocol": proto, "kind": "soak", "queries": soak["queries"], "clients": soak["clients"],
            "wall_s": round(soak["wall_s"], 1), "qps": soak["qps"], "client_errors": soak["client_errors"],
            "server_failed": sum(v["failed"] + v["expired"] for v in soak["servers"].values()), "lost": soak["lost"],
            "p50_s": soak["p50_s_median_of_chunks"], "p99_s": soak["p99_s_max_of_chunks"],
            "load_avg": soak.get("load_avg_min_max"),
            **{f"rss_kb_{pid}_{k}": soak["rss_kb"][pid][k] for pid in fleet.ids for k in ("start", "end", "max")}}


def _pool_row(proto: str, soak: dict) -> dict:
    row = {"protocol": proto, "kind": "pool"}
    for pid, p in soak["prep"].items():
        if not p.get("enabled"):
            row[pid] = f"off: {p.get('reason', '')}"
            continue
        row[pid] = {k: p.get(k) for k in ("capacity", "available", "hits", "misses", "made", "failed",
                                          "dropped", "expired")}
    return row


def soak_only(protocol: str, queries: int, clients: int = 4, every: int | None = None) -> dict:
    """Only the soak of one protocol (the full 10,000-query astra soak runs for hours on a
    small shared machine): JSON rows and the RSS plot, as in ``run``."""
    with tempfile.TemporaryDirectory(prefix="secinfer-bench-serve-") as work:
        fleet = _Fleet(protocol, Path(work))
        try:
            soak = _soak(fleet, queries, every or max(25, queries // 20), clients)
        finally:
            codes = fleet.stop()
    plots = [{"file": f"serve-rss-{protocol}.png", "title": f"{protocol}: server RSS over the soak",
              "xlabel": "queries", "ylabel": "RSS (MB)", "x": [s["queries"] for s in soak["samples"]],
              "series": {pid: [s["rss_kb"][pid] / 1024 for s in soak["samples"]] for pid in fleet.ids}}]
    return {"suite": "serve-soak", "rows": [_soak_row(protocol, fleet, soak), _pool_row(protocol, soak)],
            "plots": plots, "raw": {protocol: {"soak": soak, "exit_codes": codes}}}


if __name__ == "__main__":
    import argparse
    import json

    ap = argparse.ArgumentParser(description="secinfer bench serve: the soak of one protocol alone")
    ap.add_argument("--protocol", default="astra")
    ap.add_argument("--queries", type=int, default=10000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--every", type=int, default=None, help="queries between RSS samples")
    ap.add_argument("--out", default="results")
    a = ap.parse_args()
    from secinfer.bench.suites import machine_info, write_plots

    res = soak_only(a.protocol, a.queries, a.clients, a.every)
    res["machine"] = machine_info()
    folder = os.path.join(a.out, f"serve-soak-{a.protocol}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    write_plots(res, folder)
    for r in res["rows"]:
        print(json.dumps(r))
    print(f"wrote {folder}/results.json")
