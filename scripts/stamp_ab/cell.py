# one bench-peers cell (as secinfer bench peers runs it), in its own process; prints one JSON line
import sys, json, tempfile, os
import numpy as np
from secinfer.bench import peers_suite as ps
from secinfer.ir.onnx_import import load_model
from secinfer.arith.fixed import get_config
from secinfer.runtime.launcher import run_local
wl, b = sys.argv[1], int(sys.argv[2])
opts = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
d = tempfile.mkdtemp()
p = os.path.join(d, wl + ".onnx")
open(p, "wb").write(ps.build_workload(wl).SerializeToString())
g = load_model(p)
x = ps.workload_input(wl, b)
res = run_local(protocol="stamp", security="semi-honest", model_path=p, input_array=x, network="none",
                options=opts, timeout=300, model_graph=g)
ref = ps.reference(wl, g, x, get_config("fx32f13"))
infos = {r: (v or {}) for r, v in (res.party_info or {}).items()} if hasattr(res, "party_info") else {}
out = {"wl": wl, "b": b, "to_out_ms": ps._to_output(res.meters, "p1") * 1e3, "online_ms": res.latency_s["online"] * 1e3,
       "bytes_on": res.bytes_by_phase.get("online"), "rounds": res.rounds.get("online"),
       "err": ps._max_err(res.output, ref)}
try:
    inf = {r: res.parties[r]["info"] for r in ("p0", "p1", "p2")}
    out["cpu_ms"] = sum(v["online_cpu_s"] for v in inf.values()) * 1e3
    out["cpu_by"] = [inf[r]["online_cpu_s"] * 1e3 for r in ("p0", "p1", "p2")]
    out["tx"] = [inf[r]["bus"]["online_transactions"] for r in ("p0", "p1", "p2")]
    out["warmed"] = [inf[r].get("warmed") for r in ("p0", "p1", "p2")]
    out["planned"] = [inf[r].get("planned") for r in ("p0", "p1", "p2")]
    out["spin"] = [[inf[r]["bus"].get("spin_hits"), inf[r]["bus"].get("spin_misses")] for r in ("p0", "p1", "p2")]
except Exception as e:
    out["cpu_err"] = repr(e)[:200]
print(json.dumps(out))
