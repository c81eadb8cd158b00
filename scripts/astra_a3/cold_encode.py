"""The client's encode-and-mask of a 1 x 784 query (W1 / W2 batch 1): the four numpy calls of
``direct.encode_masked`` against the one bound native call (``encode_native.BoundEncode``);
thread CPU after a 1 ms sleep and after a cache thrash and a sleep, and warm. Usage:
PYTHONPATH=src python scripts/astra_a3/cold_encode.py [ROUNDS]"""
import statistics, sys, time

import numpy as np

from secinfer.protocols.astra import direct
from secinfer.protocols.astra.encode_native import BoundEncode

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 200
rng = np.random.default_rng(1)
x = rng.normal(0, 1, (1, 784))
lam = rng.integers(0, 2**64, (1, 784), dtype=np.uint64)
lam2 = lam.copy()
bufs = direct.encode_buffers(x.shape)
b = BoundEncode(x, 13, lam2)
assert b.ok and np.array_equal(direct.encode_masked(x, 13, lam.copy(), bufs), b())
fs = {"numpy (4 calls)": lambda: direct.encode_masked(x, 13, lam, bufs), "bound native": b}
junk = np.ones(4 << 20 >> 3)


def thrash():
    junk.sum()
    d = {i: str(i) for i in range(20000)}
    sorted(d.values())


T = {}
for i in range(rounds):
    for k, f in fs.items():
        thrash()
        time.sleep(0.001)
        a = time.thread_time_ns()
        f()
        T.setdefault(k + " thrash+sleep", []).append((time.thread_time_ns() - a) / 1e3)
        time.sleep(0.001)
        a = time.thread_time_ns()
        f()
        T.setdefault(k + " sleep", []).append((time.thread_time_ns() - a) / 1e3)
for k, v in sorted(T.items()):
    v = v[5:]
    print(f"{k:30s} thread CPU median {statistics.median(v):6.1f} us  p90 {sorted(v)[int(len(v) * .9)]:6.1f}")
for k, f in fs.items():
    for _ in range(100):
        f()
    a = time.perf_counter()
    for _ in range(5000):
        f()
    print(f"{k:30s} warm {(time.perf_counter() - a) / 5000 * 1e6:6.2f} us")
