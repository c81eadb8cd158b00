"""Cold-call cost of P0's bound native evaluation of the 63-AND comparison (``gcm.OpenedEvaluator``)
and its steps: warm, after a 2 ms sleep, after a cache thrash (32 MB summed, a dict built and
sorted), after both. Usage: PYTHONPATH=src python scripts/astra_timeline/cold_gc.py"""
import time, numpy as np, os, sys
from secinfer.crypto.gc import garble as gcm
from secinfer.protocols.astra import direct
circ = direct.msb_sub_ripple(64)
gcm.prepare(circ)
rng = np.random.default_rng(1)
n = 1
r = rng.integers(0, 2**63, (n, 1, 2), dtype=np.uint64) | np.uint64(1)
r_gc, zeros = gcm.input_labels(circ, n, lambda shape: rng.integers(0, 2**63, tuple(shape), dtype=np.uint64))
g = gcm.garble(circ, r_gc, zeros)
wires = np.full((n, circ.n_wires, 2), 0, np.uint64)
rbit = np.zeros((n,1), np.uint8)
wires[:, circ.inputs["u3"]] = gcm.select(zeros["u3"], rbit, r_gc)
ev = gcm.OpenedEvaluator(circ, g.tables, wires, "u1")
ws = [int(i) for i in circ.inputs["u2"]]; u2_at = slice(ws[0], ws[0] + 64)
dec = np.ascontiguousarray(g.decode[:, 0], np.uint8)
k1 = rng.integers(0, 2**63, (n, 64, 2), dtype=np.uint64); k2 = k1.copy()
junk = np.ones(32 << 20 >> 3)
def thrash():
    junk.sum(); d = {i: str(i) for i in range(20000)}; sorted(d.values())
def step_np():
    ev.labels[...] = k1
    wires[:, u2_at] = k2
    out = ev()
    y = out[:, 0, 0].astype(np.uint8); y ^= dec; y &= 1
    return np.packbits(y)
T = {}
def t(name, f):
    a = time.perf_counter_ns(); f(); T.setdefault(name, []).append((time.perf_counter_ns() - a) / 1e3)
for i in range(60):
    thrash(); time.sleep(0.002)
    t("copy k1", lambda: ev.labels.__setitem__(Ellipsis, k1))
    t("copy k2", lambda: wires.__setitem__((slice(None), u2_at), k2))
    t("ev()", ev)
    out = ev.out
    t("decode np", lambda: np.packbits((out[:, 0, 0].astype(np.uint8) ^ dec) & 1))
    thrash(); time.sleep(0.002)
    t("whole step", step_np)
    thrash(); time.sleep(0.002)
    t("ev() only after thrash", ev)
import statistics
for k, v in T.items():
    v = v[5:]
    print(f"{k:25s} median {statistics.median(v):7.1f} us  p90 {sorted(v)[int(len(v)*.9)]:7.1f}")
T.clear()
for i in range(300):
    t("ev warm", ev)
for i in range(60):
    time.sleep(0.002); t("ev after sleep only", ev)
for i in range(60):
    thrash(); t("ev after thrash only", ev)
for i in range(60):
    thrash(); time.sleep(0.002); t("copy after thrash+sleep", lambda: ev.labels.__setitem__(Ellipsis, k1)); t("ev after (copy)", ev)
for k, v in T.items():
    v = v[5:]
    print(f"{k:25s} median {statistics.median(v):7.1f} us  p90 {sorted(v)[int(len(v)*.9)]:7.1f}")
