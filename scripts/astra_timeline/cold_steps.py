"""Cold-call costs (issue #23, sixth pass): each step of the astra semi-honest direct path as numpy
calls and as the small-query version, timed right after a 1 ms sleep and a cache thrash (a 4 MB
array summed, a 20,000-entry dict built and sorted), 100 times each (the first 5 dropped);
medians and p90 in us. Usage: PYTHONPATH=src python scripts/astra_timeline/cold_steps.py"""
import time, numpy as np, statistics
rng = np.random.default_rng(1)
junk = np.ones(4 << 20 >> 3)
def thrash():
    junk.sum(); d = {i: str(i) for i in range(20000)}; sorted(d.values())
T = {}
def t(name, f):
    a = time.perf_counter_ns(); r = f(); T.setdefault(name, []).append((time.perf_counter_ns() - a) / 1e3); return r
out = rng.integers(0, 2**63, (1, 1, 2), dtype=np.uint64); dec = np.array([1], np.uint8)
decmask = int(np.packbits(dec)[0]); ybuf = np.zeros(1, np.uint8)
def dec_np():
    y = out[:, 0, 0].astype(np.uint8); y ^= dec; y &= 1; return np.packbits(y)
def dec_py():
    ybuf[0] = ((out.item(0) & 1) << 7) ^ decmask; return ybuf
a = rng.integers(0, 2**63, (1,), dtype=np.uint64); b = a.copy(); extra = a.copy(); acc = np.zeros(1, np.uint64)
M = (1 << 64) - 1; ex = extra.item(0)
def comb_np():
    np.subtract(a, extra, out=acc); np.add(acc, b, out=acc); return acc
def comb_py():
    acc[0] = (a.item(0) - ex + b.item(0)) & M; return acc
m_x = rng.integers(0, 2**63, (1, 784), dtype=np.uint64); coef = rng.integers(0, 2**63, (784, 1), dtype=np.uint64)
cv = np.ascontiguousarray(coef[:, 0]); u = np.zeros((1, 1), np.uint64); uf = u.reshape(-1); off = rng.integers(0, 2**63, (1, 1), dtype=np.uint64); offi = off.item(0)
def ev_np():
    np.dot(m_x, coef, out=u); np.add(u, off, out=u); return uf
def ev_py():
    uf[0] = (int(np.dot(m_x[0], cv)) + offi) & M; return uf
m0 = m_x[0]
def ev_py2():
    uf[0] = (int(m0.dot(cv)) + offi) & M; return uf
zeros = rng.integers(0, 2**63, (1, 64, 2), dtype=np.uint64); R = rng.integers(0, 2**63, (1, 1, 2), dtype=np.uint64)
bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")
TT = zeros.reshape(8, 8, 2)[:, None] ^ (bits[None, :, :, None].astype(np.uint64) * R.reshape(1, 1, 1, 2))
LBB = [[TT[p, v].tobytes() for v in range(256)] for p in range(8)]
labels = np.zeros((1, 64, 2), np.uint64); ub = uf.view(np.uint8).reshape(-1, 8)
def lab_np():
    bb = np.unpackbits(ub, axis=1, bitorder="little"); np.multiply(bb[:, :, None], R, out=labels); labels[...] ^= zeros; return labels
def lab_py():
    v = uf.item(0)
    return np.frombuffer(b"".join([LBB[p][(v >> (8 * p)) & 255] for p in range(8)]), np.uint64).reshape(1, 64, 2)
uf[0] = 0x0123456789abcdef
assert (lab_np() == lab_py()).all()
for i in range(100):
    for name, f in (("dec np", dec_np), ("dec py", dec_py), ("comb np", comb_np), ("comb py", comb_py),
                    ("ev np", ev_np), ("ev py", ev_py), ("ev py2", ev_py2), ("lab np", lab_np), ("lab py", lab_py)):
        thrash(); time.sleep(0.001); t(name, f)
for k, v in T.items():
    v = v[5:]
    print(f"{k:12s} median {statistics.median(v):7.1f} us  p90 {sorted(v)[int(len(v)*.9)]:7.1f}")
