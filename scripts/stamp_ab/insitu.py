# W4 batch 1 in-process (tests' run_model: the parties as threads); thread CPU of p0's online first-layer step
import sys, time, tempfile
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "stamp"))
from test_stamp_models import run_model
from secinfer.protocols.stamp import input_offline as io
from secinfer.bench.peers_suite import build_workload, workload_input
from secinfer.ir.onnx_import import load_model
rec = []
orig = io.InputPlan.product
def timed(self, name, x):
    t0 = time.thread_time(); y = orig(self, name, x); dt = time.thread_time() - t0
    if self.halves.get(name) is not None and self.halves[name].w is not None:
        rec.append(dt)
    return y
io.InputPlan.product = timed
d = tempfile.mkdtemp(); p = Path(d) / "w4.onnx"; p.write_bytes(build_workload("W4").SerializeToString())
g = load_model(str(p)); x = workload_input("W4", 1)
for _ in range(int(sys.argv[1])):
    run_model(g, x, "semi-honest")
print(io.__file__.rsplit("/src/", 1)[0], " ".join(f"{v*1e6:.0f}" for v in rec))
