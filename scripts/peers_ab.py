"""Interleaved A/B of the batch-1 rows of `secinfer bench peers` between source trees:
python scripts/peers_ab.py REPS LABEL=SRC ... (per repetition and arm, one
``peers_suite.run(plan=[W1..W4 batch 1], protocols=["astra", "stamp"], reps=1)`` in a fresh process
with PYTHONPATH=SRC, the arm order alternating; astra for W1/W2, stamp for W3/W4)."""
import json, os, statistics, subprocess, sys
reps = int(sys.argv[1]); arms = dict(a.split("=", 1) for a in sys.argv[2:])
code = r'''
import json
from secinfer.bench import peers_suite as ps
r = ps.run(plan=[("W1",1),("W2",1),("W3",1),("W4",1)], protocols=["astra","stamp"], reps=1)
out = {}
for row in r["rows"]:
    if row.get("online_to_output_ms") is None: continue
    if (row["workload"] in ("W1","W2")) != (row["protocol"] == "astra"): continue
    key = row["workload"] + ("i" if row.get("ltee") == "inprocess" else "")   # (the LTEE in process: its own key)
    out[key] = {k: row.get(k) for k in ("online_to_output_ms","bytes_online","rounds_online","max_abs_err_vs_reference")}
print("RESULT " + json.dumps(out))
'''
res = {a: [] for a in arms}; loads = [os.getloadavg()[0]]
for r in range(reps):
    order = list(arms) if r % 2 == 0 else list(arms)[::-1]
    for a in order:
        p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=arms[a]), capture_output=True, text=True, timeout=600)
        line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if not line: print(a, "failed", p.stderr[-1500:]); continue
        res[a].append(json.loads(line[0][7:]))
    loads.append(os.getloadavg()[0])
print("load 1-min:", [round(x, 1) for x in loads])
for wl in ("W1","W2","W3","W4","W3i","W4i"):
    for a in arms:
        v = [x[wl]["online_to_output_ms"] for x in res[a] if wl in x]
        if not v: continue
        b = sorted({x[wl]["bytes_online"] for x in res[a] if wl in x}); e = sorted({x[wl]["max_abs_err_vs_reference"] for x in res[a] if wl in x})
        print(f"{wl} {a:5s} {statistics.median(v):7.3f} [{min(v):.3f}, {max(v):.3f}] n={len(v)} bytes {b} err {e}")
