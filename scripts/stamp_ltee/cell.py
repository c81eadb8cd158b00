# one stamp cell of `secinfer bench peers` in its own process (docs/protocols/stamp.md "Tenth
# pass"): python cell.py WORKLOAD BATCH [OPTIONS_JSON] -> one JSON line: to_out_ms (the peer's
# online_to_output), online_ms, per-party online CPU of the host thread (ms; with
# stamp_ltee=inprocess it includes the device's work) and the device's busy time in the online
# phase (ms), online bytes, rounds, bus transactions, max error against the reference
import sys, json, tempfile, os
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
inf = {r: res.parties[r]["info"] for r in ("p0", "p1", "p2")}
print(json.dumps({"wl": wl, "b": b, "to_out_ms": ps._to_output(res.meters, "p1") * 1e3,
                  "online_ms": res.latency_s["online"] * 1e3, "bytes_on": res.bytes_by_phase.get("online"),
                  "rounds": res.rounds.get("online"), "err": ps._max_err(res.output, ref),
                  "mode": inf["p0"].get("ltee_mode"),
                  "host_cpu_ms": [inf[r]["online_cpu_s"] * 1e3 for r in ("p0", "p1", "p2")],
                  "dev_busy_ms": [inf[r]["device_ops"]["emulation_busy_s"] * 1e3 for r in ("p0", "p1", "p2")],
                  "tx": [inf[r]["bus"]["online_transactions"] for r in ("p0", "p1", "p2")]}))
