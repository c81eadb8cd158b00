"""One run of each PROTO:WL (batch 1, semi-honest) in this process's environment, as
``scripts/busy_poll/one.py``, with ``run_local(protocol_module=$AW_MODULE)`` when that is set
(a test-side module on PYTHONPATH, e.g. ``spinmode``): JSON of online_to_output_ms, online ms,
bytes, rounds, the parties' CPU seconds and the output."""
import json, os, sys, tempfile
from pathlib import Path
from secinfer.bench import peers_suite as ps
from secinfer.protocols import registry
from secinfer.runtime.launcher import run_local
from secinfer.ir.onnx_import import load_model
tmp = Path(tempfile.mkdtemp())
out = {}
for item in sys.argv[1].split(","):
    proto, wl = item.split(":")
    p = tmp / f"{wl}.onnx"
    if not p.exists():
        p.write_bytes(ps.build_workload(wl).SerializeToString())
    x = ps.workload_input(wl, 1)
    res = run_local(protocol=proto, security="semi-honest", model_path=str(p), input_array=x, network="none",
                    options=json.loads(os.environ.get("AW_OPTIONS", "{}")), timeout=300,
                    model_graph=load_model(str(p)), protocol_module=os.environ.get("AW_MODULE") or None)
    cpu = (res.startup or {}).get("cpu_s", {}).get("parties") or {}
    out[item] = {"o2o": ps._to_output(res.meters, registry.get(proto).input_role) * 1e3,
                 "on": res.latency_s.get("online") * 1e3,
                 "bytes": res.bytes_by_phase.get("online"), "rounds": res.rounds.get("online"),
                 "cpu": sum(v for v in cpu.values() if v), "y": res.output.tolist()}
print(json.dumps(out))
