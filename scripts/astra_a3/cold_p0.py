"""P0's comparison step of the astra semi-honest direct path (W2 batch 1), the generic bound
evaluator (``gcm.OpenedEvaluator``: labels into its buffer and the wire array, the gate
program) against the circuit's own kernel (``gcm.RippleEvaluator``), each with its input
copies: thread CPU right after a 1 ms sleep, after a cache thrash (4 MB summed, a dict built
and sorted) and a sleep, and warm loops by width and batch. Usage: PYTHONPATH=src python
scripts/astra_a3/cold_p0.py [ROUNDS]"""
import statistics, sys, time

import numpy as np

from secinfer.crypto.gc import garble as gcm
from secinfer.crypto.gc.circuit import msb_sub_ripple

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 150
rng = np.random.default_rng(1)
n, l = 1, 64
circ = msb_sub_ripple(l)
gcm.prepare(circ)
tables = rng.integers(0, 2**64, (n, 63, 2, 2), dtype=np.uint64)
k1, k2, k3 = (rng.integers(0, 2**64, (n, k, 2), dtype=np.uint64) for k in (l, l, 1))
w = np.full((n, circ.n_wires, 2), 0, np.uint64)
w[:, circ.inputs["u3"]] = k3
ev = gcm.OpenedEvaluator(circ, tables, w, "u1")
at = slice(64, 128)
r = gcm.RippleEvaluator(l, tables, k3)


def generic():
    ev.labels[...] = k1
    w[:, at] = k2
    return ev()


def ripple():
    np.copyto(r.u1, k1)
    np.copyto(r.u2, k2)
    return r()


assert (generic() == ripple()).all()
junk = np.ones(4 << 20 >> 3)


def thrash():
    junk.sum()
    d = {i: str(i) for i in range(20000)}
    sorted(d.values())


T = {}


def t(name, fn):
    a = time.thread_time_ns()
    fn()
    T.setdefault(name, []).append((time.thread_time_ns() - a) / 1e3)


for i in range(rounds):
    for name, fn in (("generic", generic), ("ripple", ripple)):
        thrash()
        time.sleep(0.001)
        t(name + " thrash+sleep", fn)
        time.sleep(0.001)
        t(name + " sleep", fn)
for k, v in sorted(T.items()):
    v = v[5:]
    print(f"{k:24s} thread CPU median {statistics.median(v):7.1f} us  p90 {sorted(v)[int(len(v) * .9)]:7.1f}")
for name, fn in (("generic", generic), ("ripple", ripple)):
    for _ in range(100):
        fn()
    a = time.perf_counter()
    for _ in range(3000):
        fn()
    print(f"{name:8s} warm loop (with the copies) {(time.perf_counter() - a) / 3000 * 1e6:6.2f} us")
for l2, b in ((2, 1), (8, 1), (64, 1), (64, 4), (64, 16), (64, 1000)):
    e = gcm.RippleEvaluator(l2, rng.integers(0, 2**64, (b, l2 - 1, 2, 2), dtype=np.uint64),
                            rng.integers(0, 2**64, (b, 1, 2), dtype=np.uint64))
    k = 3000 if b < 100 else 30
    for _ in range(10):
        e()
    a = time.perf_counter()
    for _ in range(k):
        e()
    print(f"ripple kernel alone, width {l2}, batch {b}: {(time.perf_counter() - a) / k * 1e6:8.2f} us")
