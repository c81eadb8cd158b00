"""An evaluator's W2 batch-1 step (``direct._scalar_step``): the dot product, u on Python
integers and the 64 labels from the per-byte table, as before this branch (``b"".join`` of the
8 slices, ``np.frombuffer``, ``reshape``) and now (8 slice writes into the frame buffer made
offline); thread CPU after a 1 ms sleep and after a cache thrash and a sleep. Usage:
PYTHONPATH=src python scripts/astra_a3/cold_ev.py [ROUNDS]"""
import statistics, sys, time

import numpy as np

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 200
rng = np.random.default_rng(1)
M = (1 << 64) - 1
m_x = np.frombuffer(bytearray(rng.integers(0, 2**64, 784, dtype=np.uint64).tobytes()), np.uint64).reshape(1, 784)
coef = rng.integers(0, 2**64, 784, dtype=np.uint64)
add = 12345
uf = np.zeros(1, np.uint64)
zeros = rng.integers(0, 2**64, (1, 64, 2), dtype=np.uint64)
R = rng.integers(0, 2**64, (2,), dtype=np.uint64)
bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")
tab = zeros.reshape(8, 1, 8, 2) ^ (bits[None, :, :, None].astype(np.uint64) * R.reshape(1, 1, 1, 2))
lab = [[tab[p, v].tobytes() for v in range(256)] for p in range(8)]
labels = np.zeros((1, 64, 2), np.uint64)
mv = memoryview(labels).cast("B")


def before():
    d = int(m_x.reshape(-1).dot(coef))
    u = (add - d) & M
    uf[0] = u
    return np.frombuffer(b"".join([lab[p][(u >> (p << 3)) & 255] for p in range(8)]), np.uint64).reshape(1, 64, 2)


def now():
    d = int(m_x[0].dot(coef))
    u = (add - d) & M
    uf[0] = u
    mv[0:128] = lab[0][u & 255]
    mv[128:256] = lab[1][(u >> 8) & 255]
    mv[256:384] = lab[2][(u >> 16) & 255]
    mv[384:512] = lab[3][(u >> 24) & 255]
    mv[512:640] = lab[4][(u >> 32) & 255]
    mv[640:768] = lab[5][(u >> 40) & 255]
    mv[768:896] = lab[6][(u >> 48) & 255]
    mv[896:1024] = lab[7][u >> 56]
    return labels


def dot_only():
    return int(m_x[0].dot(coef))


assert (before() == now()).all()
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
    for name, fn in (("before", before), ("now", now), ("dot alone", dot_only)):
        thrash()
        time.sleep(0.001)
        t(name + " thrash+sleep", fn)
        time.sleep(0.001)
        t(name + " sleep", fn)
for k, v in sorted(T.items()):
    v = v[5:]
    print(f"{k:24s} thread CPU median {statistics.median(v):7.1f} us  p90 {sorted(v)[int(len(v) * .9)]:7.1f}")
