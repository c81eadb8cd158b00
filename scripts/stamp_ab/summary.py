# summary of arms.py output: python summary.py OUT -> per (workload, arm): runs, median [min, max]
# of to_out_ms, median of the hosts' online CPU (cpu_ms) and of the cell's CPU, max error
import json, sys
import numpy as np
rows = [json.loads(l) for l in open(sys.argv[1])]
cells = {}
for r in rows:
    cells.setdefault((r["r"].get("wl", r["wl"]), r["arm"]), []).append(r)
for (wl, arm), rs in sorted(cells.items()):
    ok = [r for r in rs if "to_out_ms" in r["r"]]
    t = np.array([r["r"]["to_out_ms"] for r in ok])
    c = np.array([r["r"].get("cpu_ms", np.nan) for r in ok])
    cc = np.array([r["cell_cpu_s"] for r in ok])
    ld = [r["load"] for r in rs]
    err = max((r["r"]["err"] for r in ok), default=None)
    by = np.array([r["r"]["cpu_by"] for r in ok if "cpu_by" in r["r"]])
    per = " per host " + "/".join(f"{v:.2f}" for v in np.median(by, axis=0)) if len(by) else ""
    print(f"{wl} {arm:10s} n={len(ok)}/{len(rs)} to_out {np.median(t):.2f} [{t.min():.2f}, {t.max():.2f}] ms"
          f"  host online CPU {np.median(c):.2f} [{c.min():.2f}, {c.max():.2f}] ms{per}  cell CPU {np.median(cc):.2f} s"
          f"  err {err}  bytes {sorted({r['r']['bytes_on'] for r in ok})}  load {min(ld):.1f}-{max(ld):.1f}")
