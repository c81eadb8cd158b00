# python scripts/stamp_plan/cprof/report.py DIR [N]: per party, the N functions with the most own thread CPU in the
# online phase (summed over the runs in DIR, per run), and the calls per run (see sitecustomize.py)
import glob, os, pstats, sys
d, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
for party in ("p0", "p1", "p2"):
    fs = glob.glob(os.path.join(d, f"{party}-*.prof"))
    if not fs:
        continue
    s = pstats.Stats(*fs)
    calls = sum(v[1] for v in s.stats.values()) / len(fs)
    print(f"== {party}: {len(fs)} runs, {s.total_tt / len(fs) * 1e6:.0f} us profiled CPU and {calls:.0f} calls per run")
    s.sort_stats("tottime").print_stats(n)
