"""online_to_output_ms of astra semi-honest W1/W2 batch 1 (``run_local`` with the checked graph,
as ``bench peers`` runs it: the small run's Python record layer), main vs branch, arms
alternating per repetition, 4 runs per arm and repetition in one process (the fork server
reused). Usage: o2o_ab.py W REPS."""
import json, os, statistics, subprocess, sys
wl, reps = sys.argv[1], int(sys.argv[2])
arms = {"main": os.environ.get("A_SRC", "/tmp/aw_main/src"), "branch": os.environ.get("B_SRC", os.path.abspath("src"))}
code = r'''
import json, sys, tempfile, pathlib
from secinfer.bench import peers_suite as ps
from secinfer.ir.onnx_import import load_model
from secinfer.runtime.launcher import run_local
wl = sys.argv[1]
p = pathlib.Path(tempfile.mkdtemp()) / "m.onnx"; p.write_bytes(ps.build_workload(wl).SerializeToString())
g = load_model(str(p)); x = ps.workload_input(wl, 1)
out = []
for _ in range(4):
    r = run_local(protocol="astra", security="semi-honest", model_path=str(p), input_array=x, network="none",
                  options={}, timeout=300, model_graph=g)
    out.append(ps._to_output(r.meters, "client") * 1e3)
print("RESULT " + json.dumps(out))
'''
res = {a: [] for a in arms}
loads = [os.getloadavg()[0]]
for r in range(reps):
    for a in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
        p = subprocess.run([sys.executable, "-c", code, wl], env=dict(os.environ, PYTHONPATH=arms[a]),
                           capture_output=True, text=True, timeout=600)
        res[a] += json.loads([l for l in p.stdout.splitlines() if l.startswith("RESULT ")][0][7:])
    loads.append(os.getloadavg()[0])
print("load:", [round(x, 1) for x in loads])
for a in arms:
    v = res[a]
    q = statistics.quantiles(v, n=10)
    print(f"{wl} {a:6s} online_to_output_ms median {statistics.median(v):.3f} p10 {q[0]:.3f} p90 {q[-1]:.3f} "
          f"[{min(v):.3f}, {max(v):.3f}] n={len(v)}")
