"""One astra semi-honest batch-1 query of W1 or W2 (issue #23's workloads) with the probe
(``probe.py``) in every party; prints every party's online timeline on one clock (zero:
the client's "query" mark). Usage: python scripts/astra_timeline/run.py W1|W2 [reps] [outdir]
(reps: runs; AW_OPTIONS: the job's options as JSON; the timeline of the run whose client span is the median is printed, and a
summary of the spans of all runs). Run with PYTHONPATH=<src>:scripts/astra_timeline."""
import glob, json, os, statistics, sys, tempfile
from pathlib import Path
from secinfer.bench import peers_suite as ps
from secinfer.ir.onnx_import import load_model
from secinfer.runtime.launcher import run_local

wl, reps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1
base = sys.argv[3] if len(sys.argv) > 3 else tempfile.mkdtemp(prefix="awp-")
tmp = Path(tempfile.mkdtemp()); p = tmp / f"{wl}.onnx"; p.write_bytes(ps.build_workload(wl).SerializeToString())
x = ps.workload_input(wl, 1)
g = load_model(str(p))
runs = []
for r in range(reps):
    out = os.path.join(base, f"{wl}-{r}"); os.makedirs(out, exist_ok=True)
    os.environ["AW_PROBE_OUT"] = out
    res = run_local(protocol="astra", security="semi-honest", model_path=str(p), input_array=x, network="none",
                    options=json.loads(os.environ.get("AW_OPTIONS", "{}")), timeout=300, protocol_module="probe", model_graph=g)
    parties = {}
    for f in glob.glob(out + "/*.json"):
        d = json.load(open(f)); parties[d["me"]] = d["rec"]
    cl = parties["client"]
    q = next(t for t, n, i, *_ in cl if n == "mark" and i[0] == "query")
    o = next(t for t, n, i, *_ in cl if n == "mark" and i[0] == "output")
    runs.append({"span_us": (o - q) / 1e3, "parties": parties, "q": q,
                 "o2o_ms": ps._to_output(res.meters, "client") * 1e3, "bytes": res.bytes_by_phase.get("online")})
spans = [r["span_us"] for r in runs]
print(f"{wl}: client query->output span us median {statistics.median(spans):.0f} [{min(spans):.0f}, {max(spans):.0f}]"
      f" all={[round(s) for s in spans]}; o2o ms {[round(r['o2o_ms'], 3) for r in runs]}")
def online_cpu(rec):
    """main-thread CPU (us) between the party's entry into the online phase and its exit"""
    a = b = None
    for t, n, info, cpu, rq in rec:
        if n == "phase>" and info[0] == "online" and a is None:
            a = cpu
        if n == "phase<" and info[0] == "online":
            b = cpu
    return None if a is None or b is None else (b - a) / 1e3
cpus = {}
for r in runs:
    for me, rec in r["parties"].items():
        c = online_cpu(rec)
        if c is not None:
            cpus.setdefault(me, []).append(c)
print("online main-thread CPU us (median [min, max]):", "; ".join(
    f"{me} {statistics.median(v):.0f} [{min(v):.0f}, {max(v):.0f}]" for me, v in sorted(cpus.items())),
    "; sum of medians", round(sum(statistics.median(v) for v in cpus.values())))
order = sorted(range(len(runs)), key=lambda i: spans[i])
show = [order[len(order) // 2]] if os.environ.get("AW_ALL") is None else order
for i in show:
    r = runs[i]
    print(f"--- run {i}: span {spans[i]:.0f} us, bytes {r['bytes']}")
    rows = []
    for me, rec in r["parties"].items():
        on = False
        prev_cpu, prev_rq = None, None
        for t, n, info, cpu, rq in rec:
            if (n == "phase>" and info[0] == "online") or (n == "send>" and info[1] == "astra/ready"):
                on = True
            if not on:
                continue
            rows.append((t, me, n, info, cpu, rq))
            if n == "phase<" and info[0] == "online":
                on = False
    rows.sort()
    last = {}
    for t, me, n, info, cpu, rq in rows:
        lc = last.get(me)
        dcpu = "" if lc is None or not cpu else f"cpu+{(cpu - lc[0]) / 1e3:6.1f}"
        drq = "" if lc is None or not rq or not lc[1] else f"rq+{(rq - lc[1]) / 1e3:6.1f}"
        print(f"{(t - r['q']) / 1e3:9.1f} us {me:7s} {n:11s} {' '.join(map(str, info)):40s} {dcpu:12s} {drq}")
        if cpu:
            last[me] = (cpu, rq if rq else (lc[1] if lc else 0))
