# Ninth pass: the LTEE's eval/output handler CPU per call, in process (no bus), for W3's and
# W4's batch-1 device specs: python dev_eval.py [WARM_CALLS]; PYTHONPATH selects the tree.
# A Device with test keys (Protocol 1 skipped: the handler's work after it is the same), the
# specs shipped first (``cmd_specs``: parsed and warmed as the host does before its online
# phase), then the first call of each spec and WARM_CALLS more; thread CPU per call (us),
# the handler and the chain within it. One JSON line.
import json, os, statistics, sys, time
import numpy as np
from secinfer.arith.fixed import FixedPointConfig
from secinfer.crypto.prg import PRF
from secinfer.protocols.stamp import ltee_device as ld
from secinfer.protocols.rep3 import kernels as K

W3 = {"out_shape": [1, 128], "params": [[128]], "shape": [1, 128], "steps": [
    {"op": "trunc"}, {"axis": -1, "op": "bias", "param": 0},
    {"node": {"attrs": {}, "inputs": ["g0"], "name": "relu0", "op": "Relu", "outputs": ["h0"]}, "op": "node", "params": []}]}
W4 = {"out_shape": [1, 16, 12, 12], "params": [[16]], "shape": [1, 16, 24, 24], "steps": [
    {"op": "trunc"}, {"axis": 1, "op": "bias", "param": 0},
    {"node": {"attrs": {}, "inputs": ["c"], "name": "relu", "op": "Relu", "outputs": ["r"]}, "op": "node", "params": []},
    {"node": {"attrs": {"ceil_mode": 0, "dilations": [1, 1], "kernel_shape": [2, 2], "pads": [0, 0, 0, 0],
                        "strides": [2, 2]}, "inputs": ["r"], "name": "pool", "op": "MaxPool", "outputs": ["p"]},
     "op": "node", "params": []}]}
OUT = {"out_shape": [1, 10], "params": [[10]], "shape": [1, 10], "steps": [{"op": "trunc"},
       {"axis": -1, "op": "bias", "param": 0}]}
warm = int(sys.argv[1]) if len(sys.argv) > 1 else 200
tt = time.thread_time_ns
chain_ns = [0]
def timed(f):
    def g(*a, **k):
        t0 = tt()
        try:
            return f(*a, **k)
        finally:
            chain_ns[0] += tt() - t0
    return g
K.run_chain = timed(K.run_chain)
if hasattr(K, "Chain"):
    K.Chain.__call__ = timed(K.Chain.__call__)

def device(index):
    d = ld.Device()
    d.cmd_ready([])
    d.index, d.out_party, d.malicious, d.session = index, 1, False, bytes(16)
    d.cfg = FixedPointConfig("device", 32, 13)
    for j in range(3):
        d._keys[j] = bytes([j + 1]) * 16
        d._prf[j] = PRF(d._keys[j])
    return d

u8 = lambda s: np.frombuffer(json.dumps(s, sort_keys=True).encode(), dtype=np.uint8)
rng = np.random.default_rng(1)
res = {"tree": os.path.dirname(ld.__file__).split("/src/")[0]}
dev = device(0)
outdev = device(1)
dev.cmd_specs([u8(W3), u8(W4)])
outdev.cmd_specs([u8(OUT)])
op, ctr = 0, 0
def call(d, spec, cmd):
    global op, ctr
    n_in = K.n_params(spec) + int(np.prod(spec["shape"]))
    n_op = ld.SLOTS * max(n_in, int(np.prod(spec["out_shape"])))
    s = rng.integers(0, 1 << 32, n_in, dtype=np.uint64)
    if cmd == "eval":
        meta = np.array([op, n_op, ctr, 0, 0, 0], dtype=np.int64)
        args = [meta, u8(spec), s]
    else:
        d.output_done = False
        meta = np.array([op, n_op, ctr, 0, 0], dtype=np.int64)
        args = [meta, u8(spec), s]
    op += 1
    ctr += n_op
    chain_ns[0] = 0
    t0 = tt()
    getattr(d, "cmd_" + cmd)(args)
    return (tt() - t0) / 1e3, chain_ns[0] / 1e3
for name, d, spec, cmd in (("W3_eval", dev, W3, "eval"), ("W4_eval", dev, W4, "eval"), ("out", outdev, OUT, "output")):
    first = call(d, spec, cmd)
    rest = [call(d, spec, cmd) for _ in range(warm)]
    res[name] = {"first_us": round(first[0], 1), "first_chain_us": round(first[1], 1),
                 "warm_us": round(statistics.median(r[0] for r in rest), 1),
                 "warm_chain_us": round(statistics.median(r[1] for r in rest), 1)}
print(json.dumps(res))
