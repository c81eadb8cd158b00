import json, sys, tempfile
from pathlib import Path
from secinfer.bench import peers_suite as ps
from secinfer.protocols import registry
from secinfer.runtime.launcher import run_local
wls = sys.argv[1].split(",")
tmp = Path(tempfile.mkdtemp())
out = {}
for wl in wls:
    p = tmp / f"{wl}.onnx"; p.write_bytes(ps.build_workload(wl).SerializeToString())
    x = ps.workload_input(wl, 1)
    res = run_local(protocol="astra", security="semi-honest", model_path=str(p), input_array=x, network="none",
                    options={}, timeout=300)
    out[wl] = {"on": res.latency_s.get("online") * 1e3,
               "o2o": ps._to_output(res.meters, registry.get("astra").input_role) * 1e3,
               "bytes": res.bytes_by_phase.get("online"), "rounds": res.rounds.get("online"),
               "y": res.output.tolist()}
print(json.dumps(out))
