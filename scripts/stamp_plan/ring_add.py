# python scripts/stamp_plan/ring_add.py LABEL: Ring(32).add of two 128-element uint64 arrays, us per call
# (min and median of 7 rounds of 5,000 calls); run it alternately with PYTHONPATH=<base>/src and this tree's src
import sys
import timeit

import numpy as np

from secinfer.arith.ring import Ring

r = Ring(32)
a = np.arange(128, dtype=np.uint64)
b = a.copy()
ts = sorted(timeit.timeit(lambda: r.add(a, b), number=5000) / 5000 * 1e6 for _ in range(7))
print(sys.argv[1] if len(sys.argv) > 1 else "", "Ring.add us per call: min", round(ts[0], 2), "median", round(ts[3], 2))
