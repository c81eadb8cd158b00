# Interleaved arms of stamp cells: python ab.py N OUT CELLS LABEL=OPTIONS_JSON[@frames] ...
# CELLS = "W3:1,W4:1,W3:128". Per repetition, per cell, each arm in turn (order rotated per
# repetition): one cell.py process; "@frames" runs that arm with scripts/stamp_ltee/frames on
# the path (the in-process bus encodes frames instead of passing array copies); "@/a/src" runs
# it with PYTHONPATH=/a/src (another tree, e.g. main's). Appends one JSON line
# per cell to OUT with the 1-min load average and the cell process tree's CPU (RUSAGE_CHILDREN).
import json, os, resource, subprocess, sys
n, out, cells = int(sys.argv[1]), sys.argv[2], [c.split(":") for c in sys.argv[3].split(",")]
here = os.path.dirname(os.path.abspath(__file__))
src = os.environ["PYTHONPATH"]
arms = []
for a in sys.argv[4:]:
    label, rest = a.split("=", 1)
    opts, _, extra = rest.partition("@")
    arms.append((label, opts, extra))
for i in range(n):
    for wl, b in cells:
        order = arms[i % len(arms):] + arms[:i % len(arms)]
        for label, opts, extra in order:
            path = (os.path.join(here, "frames") + ":" + src) if extra == "frames" else (extra or src)
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            p = subprocess.run([sys.executable, os.path.join(here, "cell.py"), wl, b, opts], capture_output=True,
                               text=True, timeout=170, env={**os.environ, "PYTHONPATH": path})
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            try:
                r = json.loads(p.stdout.strip().splitlines()[-1])
            except Exception:
                r = {"fail": (p.stderr or p.stdout)[-800:]}
            rec = {"arm": label, "rep": i, "wl": f"{wl}/{b}", "load": os.getloadavg()[0],
                   "cell_cpu_s": round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 3), "r": r}
            with open(out, "a") as f:
                f.write(json.dumps(rec) + "\n")
