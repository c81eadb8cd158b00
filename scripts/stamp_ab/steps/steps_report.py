# sums the spans of steps/sitecustomize.py: steps_report.py DIR [DIR ...] [--timeline]
# per party and label: calls, wall and thread CPU (us) -- total and self (children subtracted) --
# medians over the runs (one DIR per run); --timeline prints the first run's spans of depth <= 1
import json, os, statistics, sys
from collections import defaultdict

args = [a for a in sys.argv[1:] if not a.startswith("--")]
timeline = "--timeline" in sys.argv


def load(d):
    runs = {}
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".jsonl"):
            continue
        party = fn.split("-")[0]
        ev = [json.loads(x) for x in open(os.path.join(d, fn))]
        runs[party] = ev
    return runs


def summarize(ev):
    start = next(e for e in ev if e[0] == "<online>")
    end = next(e for e in ev if e[0] == "</online>")
    spans = [e for e in ev if e[1] >= 0]
    spans.sort(key=lambda e: (e[2], e[1]))
    # self time: subtract direct children
    child_w, child_c = defaultdict(float), defaultdict(float)
    stack = []
    for k, e in enumerate(spans):
        while stack and spans[stack[-1]][3] <= e[2]:
            stack.pop()
        if stack:
            p = stack[-1]
            child_w[p] += e[3] - e[2]
            child_c[p] += e[5] - e[4]
        stack.append(k)
    tot = defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0])
    for k, e in enumerate(spans):
        t = tot[e[0].split(" ")[0] if e[0].startswith("Ring") else e[0]]
        t[0] += 1
        t[1] += (e[3] - e[2]) * 1e6
        t[2] += (e[5] - e[4]) * 1e6
        t[3] += (e[3] - e[2] - child_w[k]) * 1e6
        t[4] += (e[5] - e[4] - child_c[k]) * 1e6
    top_c = sum(e[5] - e[4] for e in spans if e[1] == 0)
    return {"wall": (end[2] - start[2]) * 1e6, "cpu": (end[4] - start[4]) * 1e6,
            "outside": ((end[4] - start[4]) - top_c) * 1e6, "tot": tot, "start": start, "spans": spans}


runs = [load(d) for d in args]
parties = sorted({p for r in runs for p in r})
for p in parties:
    ss = [summarize(r[p]) for r in runs if p in r]
    med = lambda xs: statistics.median(xs) if xs else 0.0
    print(f"== {p}: online wall {med([s['wall'] for s in ss]):.0f} us, thread CPU {med([s['cpu'] for s in ss]):.0f} us "
          f"(outside any top-level span {med([s['outside'] for s in ss]):.0f}); {len(ss)} runs")
    labels = sorted({k for s in ss for k in s["tot"]}, key=lambda k: -med([s["tot"].get(k, [0, 0, 0, 0, 0])[4] for s in ss]))
    print(f"  {'label':52s} calls  wall    cpu   self-wall self-cpu (us, medians)")
    for k in labels:
        vals = [s["tot"].get(k, [0, 0, 0, 0, 0]) for s in ss]
        print(f"  {k[:52]:52s} {med([v[0] for v in vals]):5.0f} {med([v[1] for v in vals]):7.0f} {med([v[2] for v in vals]):6.0f}"
              f" {med([v[3] for v in vals]):8.0f} {med([v[4] for v in vals]):8.0f}")
if timeline and runs:
    r = runs[0]
    t0 = max(r[p] and next(e for e in r[p] if e[0] == "<online>")[2] for p in r)
    rows = []
    for p in r:
        for e in r[p]:
            if 0 <= e[1] <= 1:
                rows.append((e[2] - t0, p, e))
    rows.sort(key=lambda x: x[0])
    for t, p, e in rows:
        print(f"{t * 1e3:8.3f} ms {p} {'  ' * e[1]}{e[0]}: wall {(e[3] - e[2]) * 1e6:.0f} us, cpu {(e[5] - e[4]) * 1e6:.0f} us")
