"""Whole queries of several arms, interleaved: python scripts/busy_poll/query_ab.py REPS ITEMS ARM [ARM ...]
ITEMS: PROTO:WL[,PROTO:WL...] (batch 1, semi-honest); ARM as in hop_ab.py. LAYER env: SECINFER_TCP_NATIVE
for the parties (unset: the launcher's choice, the Python layer for small runs)."""
import json, os, statistics, subprocess, sys

reps, items = int(sys.argv[1]), sys.argv[2]
arms = {}
for a in sys.argv[3:]:
    name, spec = a.split("=", 1)
    src, *rest = spec.split(":")
    arms[name] = (os.path.abspath(src), rest[0] if rest else None, rest[1] if len(rest) > 1 else None)
here = os.path.dirname(os.path.abspath(__file__))
res = {a: [] for a in arms}
load = [os.getloadavg()[0]]
outs = {}
for r in range(reps):
    for a in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
        src, spin, yld = arms[a]
        env = dict(os.environ, PYTHONPATH=src)
        for k in ("SECINFER_TCP_SPIN_US", "SECINFER_TCP_SPIN_YIELD"):
            env.pop(k, None)
        if spin is not None:
            env["SECINFER_TCP_SPIN_US"] = spin
        if yld is not None:
            env["SECINFER_TCP_SPIN_YIELD"] = yld
        o = json.loads(subprocess.run([sys.executable, os.path.join(here, "one.py"), items], env=env, check=True,
                                      capture_output=True, text=True).stdout.strip().splitlines()[-1])
        res[a].append(o)
        for k, v in o.items():
            outs.setdefault(k, set()).add((json.dumps(v["y"]), v["bytes"], v["rounds"]))
    load.append(os.getloadavg()[0])
print(f"reps={reps} layer={os.environ.get('SECINFER_TCP_NATIVE', 'launcher')} load {min(load):.1f}-{max(load):.1f}")
for k in items.split(","):
    for a in arms:
        o2o = [r[k]["o2o"] for r in res[a]]
        cpu = [r[k]["cpu"] for r in res[a]]
        print(f"{k:12s} {a:8s} o2o_ms {statistics.median(o2o):.3f} [{min(o2o):.3f}, {max(o2o):.3f}] "
              f"parties_cpu_s {statistics.median(cpu):.3f} [{min(cpu):.3f}, {max(cpu):.3f}] all={sorted(round(x, 2) for x in o2o)}")
for k, v in outs.items():
    print(k, "distinct (output, bytes, rounds):", len(v), [(b, r) for _, b, r in v])
