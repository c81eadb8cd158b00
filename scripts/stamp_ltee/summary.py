# python summary.py OUT -> per (cell, arm): runs, median [min, max] of to_out_ms, of the hosts'
# online CPU summed, of the devices' online busy time summed, the cell's CPU, error, bytes, load
import json, sys
import numpy as np
rows = [json.loads(l) for l in open(sys.argv[1])]
cells = {}
for r in rows:
    cells.setdefault((r["wl"], r["arm"]), []).append(r)
f = lambda a: f"{np.median(a):.2f} [{np.min(a):.2f}, {np.max(a):.2f}]"
for (wl, arm), rs in sorted(cells.items(), key=lambda k: (int(k[0][0].split("/")[1]), k[0][0], k[0][1])):
    ok = [r for r in rs if "to_out_ms" in r["r"]]
    t = np.array([r["r"]["to_out_ms"] for r in ok])
    c = np.array([sum(r["r"]["host_cpu_ms"]) for r in ok])
    d = np.array([sum(r["r"]["dev_busy_ms"]) for r in ok])
    cc = np.array([r["cell_cpu_s"] for r in ok])
    ld = [r["load"] for r in rs]
    print(f"{wl:7s} {arm:10s} n={len(ok)}/{len(rs)} to_out {f(t)} ms | hosts' online CPU {f(c)} ms | devices' busy {f(d)} ms"
          f" | cell CPU {np.median(cc):.2f} s | err {max((r['r']['err'] for r in ok), default=None)}"
          f" bytes {sorted({r['r']['bytes_on'] for r in ok})} | load {min(ld):.1f}-{max(ld):.1f}")
