"""Issue #23: N local runs of W3 batch 1 (bench peers' model) with PROTOCOL (default stamp);
run with PYTHONPATH=scripts/tcp_stall/site:src to record every send (site/sitecustomize.py)."""
import sys, tempfile, numpy as np
from pathlib import Path
from secinfer.bench.peers_suite import build_workload, workload_input
from secinfer.runtime.launcher import run_local
n = int(sys.argv[1]); proto = sys.argv[2] if len(sys.argv) > 2 else "stamp"
d = Path(tempfile.mkdtemp()); p = d / "W3.onnx"; p.write_bytes(build_workload("W3").SerializeToString())
x = workload_input("W3", 1)
for i in range(n):
    res = run_local(protocol=proto, security="semi-honest", model_path=str(p), input_array=x, network="none", options={}, timeout=300)
    print(proto, "online ms", round(res.latency_s.get("online") * 1e3, 1), flush=True)
