"""Function calls (deterministic) and thread CPU of the client's output receive and each
server's online step, main vs branch, interleaved. Usage: calls_ab.py W1|W2 REPS."""
import glob, json, os, statistics, subprocess, sys, tempfile
wl, reps = sys.argv[1], int(sys.argv[2])
here = os.path.dirname(os.path.abspath(__file__))
arms = {"main": os.environ.get("A_SRC", "/tmp/aw_main/src"), "branch": os.environ.get("B_SRC", os.path.abspath("src"))}
code = r'''
import sys
from secinfer.bench import peers_suite as ps
from secinfer.ir.onnx_import import load_model
from secinfer.runtime.launcher import run_local
import tempfile, pathlib
wl = sys.argv[1]
p = pathlib.Path(tempfile.mkdtemp()) / "m.onnx"; p.write_bytes(ps.build_workload(wl).SerializeToString())
run_local(protocol="astra", security="semi-honest", model_path=str(p), input_array=ps.workload_input(wl, 1),
          network="none", options={}, timeout=300, protocol_module="calls", model_graph=load_model(str(p)))
'''
res = {a: {} for a in arms}
for r in range(reps):
    for a in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
        out = tempfile.mkdtemp(prefix="awc-")
        env = dict(os.environ, PYTHONPATH=arms[a] + ":" + here, AW_CALLS_OUT=out)
        subprocess.run([sys.executable, "-c", code, wl], env=env, check=True, capture_output=True)
        for f in glob.glob(out + "/*.json"):
            d = json.load(open(f))
            res[a].setdefault(f"{d['me']} {d['fn']}", []).append((d["calls"], d["cpu_us"]))
for a in arms:
    for k, v in sorted(res[a].items()):
        calls = [c for c, _ in v]; cpu = [u for _, u in v]
        print(f"{wl} {a:6s} {k:28s} calls median {statistics.median(calls):.0f} [{min(calls)}, {max(calls)}]  "
              f"thread CPU us median {statistics.median(cpu):.0f} [{min(cpu):.0f}, {max(cpu):.0f}]")
