"""Interleaved A/B, main vs branch, with the suites' own code: per repetition and arm, one
``peers_suite.run(plan=[("W1", 1), ("W2", 1)], protocols=["astra"], reps=1)`` (online_to_output,
bytes, rounds, error, command wall) and one ``runtime_suite.command_row(1)`` (command wall and
the CPU of all its processes; SUITE_CMD=0 leaves it out). Usage: suite_ab.py REPS (A_SRC, B_SRC as in
cpu_ab.py)."""
import json, os, statistics, subprocess, sys
reps = int(sys.argv[1])
arms = {"main": os.environ.get("A_SRC", "/tmp/aw_main/src"), "branch": os.environ.get("B_SRC", os.path.abspath("src"))}
code = r'''
import json, sys
from secinfer.bench import peers_suite as ps, runtime_suite as rs
r = ps.run(plan=[("W1", 1), ("W2", 1)], protocols=["astra"], reps=1)
out = {row["workload"]: {k: row[k] for k in ("online_to_output_ms", "online_ms", "bytes_online", "rounds_online",
       "max_abs_err_vs_reference", "command_s")} for row in r["rows"]}
import os
if os.environ.get("SUITE_CMD", "1") != "0":
    c = rs.command_row(1)
    out["cmd"] = {"command_s": c.get("command_s"), "cpu": c.get("command_cpu_s_median")}
print("RESULT " + json.dumps(out))
'''
res = {a: [] for a in arms}
loads = [os.getloadavg()[0]]
for r in range(reps):
    for a in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
        env = dict(os.environ, PYTHONPATH=arms[a])
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if not line:
            print(a, "failed", p.stderr[-2000:]); continue
        res[a].append(json.loads(line[0][7:]))
    loads.append(os.getloadavg()[0])
print("load average 1-min during:", [round(x, 1) for x in loads])
def st(v):
    v = [x for x in v if x is not None]
    return f"{statistics.median(v):.3f} [{min(v):.3f}, {max(v):.3f}] n={len(v)}"
for a in arms:
    R = res[a]
    for wl in ("W1", "W2"):
        print(f"{a:6s} {wl} online_to_output_ms {st([x[wl]['online_to_output_ms'] for x in R])}; online_ms "
              f"{st([x[wl]['online_ms'] for x in R])}; bytes {sorted({x[wl]['bytes_online'] for x in R})} rounds "
              f"{sorted({x[wl]['rounds_online'] for x in R})} err {sorted({x[wl]['max_abs_err_vs_reference'] for x in R})}"
              f"; command_s {st([x[wl]['command_s'] for x in R])}")
    if all("cmd" in x for x in R):
      print(f"{a:6s} command_row command_s {st([x['cmd']['command_s'] for x in R])}; CPU all processes s {st([x['cmd']['cpu'] for x in R])}")
