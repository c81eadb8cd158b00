# Interleaved arms of STAMP batch-1 cells: python arms.py N OUT LABEL=SRC[@OPTIONS_JSON] ...
# Per repetition, per workload (WLS, default "W3,W4"; "W3:128" = batch 128), each arm in turn (order rotated per repetition):
# one cell.py process with PYTHONPATH=SRC; appends one JSON line per cell to OUT, with the
# load average and the CPU of the whole cell (its processes and the six it started, set-up
# included: RUSAGE_CHILDREN) beside cell.py's own figures.
import json, os, resource, subprocess, sys
n, out, arms = int(sys.argv[1]), sys.argv[2], []
for a in sys.argv[3:]:
    label, rest = a.split("=", 1)
    src, _, opts = rest.partition("@")
    arms.append((label, src, opts or "{}"))
here = os.path.dirname(os.path.abspath(__file__))
wls = os.environ.get("WLS", "W3,W4").split(",")
for i in range(n):
    for wl in wls:
        order = arms[i % len(arms):] + arms[:i % len(arms)]
        for label, src, opts in order:
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            w, _, b = wl.partition(":")
            p = subprocess.run([sys.executable, os.path.join(here, "cell.py"), w, b or "1", opts], capture_output=True,
                               text=True, timeout=150, env={**os.environ, "PYTHONPATH": src})
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            try:
                r = json.loads(p.stdout.strip().splitlines()[-1])
            except Exception:
                r = {"fail": (p.stderr or p.stdout)[-500:]}
            rec = {"arm": label, "rep": i, "wl": wl, "load": os.getloadavg()[0],
                   "cell_cpu_s": round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 3), "r": r}
            with open(out, "a") as f:
                f.write(json.dumps(rec) + "\n")
