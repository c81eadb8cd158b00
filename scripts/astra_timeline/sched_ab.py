"""Interleaved A/B of scheduling modes (probe.py's AW_SCHED) on astra semi-honest batch 1:
client span (query -> output) and online_to_output per mode. Usage: sched_ab.py W1 REPS mode,mode,..."""
import os, statistics, subprocess, sys, json
wl, reps, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
res = {m: [] for m in modes}
here = os.path.dirname(os.path.abspath(__file__))
for r in range(reps):
    for m in (modes if r % 2 == 0 else modes[::-1]):
        env = dict(os.environ, AW_SCHED="" if m == "none" else m)
        o = subprocess.run([sys.executable, os.path.join(here, "run.py"), wl, "1"], env=env, capture_output=True,
                           text=True, check=True).stdout.splitlines()[0]
        span = float(o.split("median ")[1].split()[0])
        res[m].append(span)
for m in modes:
    v = res[m]
    print(f"{wl} {m:14s} span us median {statistics.median(v):7.0f} [{min(v):.0f}, {max(v):.0f}] all={[round(x) for x in v]}")
