"""Whole astra semi-honest batch-1 queries (W1, W2), arms interleaved, each run in a fresh
process (``one.py`` here, i.e. ``run_local`` with the checked graph as ``bench
peers`` runs it). Usage: env_ab.py REPS ITEMS NAME=SRC[,VAR=VALUE...] ...  (ITEMS as in
query_ab.py, e.g. astra:W1,astra:W2; the VAR=VALUE pairs go into the parties' environment,
e.g. SECINFER_TCP_NATIVE=1, SECINFER_TCP_SPIN_US=0, AW_MODULE=spinmode with AW_SPIN=client=0
(a comma in a value: not supported), AW_OPTIONS as JSON; an arm without them gets none).
Prints online_to_output_ms and the parties' CPU (median [min, max]), load before and after."""
import json, os, statistics, subprocess, sys

reps, items = int(sys.argv[1]), sys.argv[2]
arms = {}
for a in sys.argv[3:]:
    name, spec = a.split("=", 1)
    src, *kv = spec.split(",")
    arms[name] = (os.path.abspath(src), dict(x.split("=", 1) for x in kv))
here = os.path.dirname(os.path.abspath(__file__))
one = os.path.join(here, "one.py")
res = {a: [] for a in arms}
load = [os.getloadavg()[0]]
outs = {}
for r in range(reps):
    for a in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
        src, extra = arms[a]
        env = dict(os.environ, PYTHONPATH=src + os.pathsep + here)
        for k in ("SECINFER_TCP_SPIN_US", "SECINFER_TCP_SPIN_YIELD", "SECINFER_TCP_NATIVE", "AW_MODULE", "AW_SPIN", "AW_OPTIONS"):
            env.pop(k, None)
        env.update(extra)
        p = subprocess.run([sys.executable, one, items], env=env, capture_output=True, text=True)
        if p.returncode:
            print(a, "failed", p.stderr[-1500:]); continue
        o = json.loads(p.stdout.strip().splitlines()[-1])
        res[a].append(o)
        for k, v in o.items():
            outs.setdefault(k, set()).add((json.dumps(v["y"]), v["bytes"], v["rounds"]))
    load.append(os.getloadavg()[0])
print(f"reps={reps} load {min(load):.1f}-{max(load):.1f} {[round(x, 1) for x in load]}")
for k in items.split(","):
    for a in arms:
        o2o = [r[k]["o2o"] for r in res[a]]
        cpu = [r[k]["cpu"] for r in res[a]]
        if not o2o:
            continue
        print(f"{k:12s} {a:8s} o2o_ms {statistics.median(o2o):.3f} [{min(o2o):.3f}, {max(o2o):.3f}] "
              f"parties_cpu_s {statistics.median(cpu):.3f} [{min(cpu):.3f}, {max(cpu):.3f}] "
              f"all={sorted(round(x, 2) for x in o2o)}")
for k, v in outs.items():
    print(k, "distinct (output, bytes, rounds):", len(v), [(b, r) for _, b, r in v])
