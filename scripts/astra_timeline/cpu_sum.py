"""Per arm: the client's query->output span and each party's online main-thread CPU (probe
records from ``steps_ab.sh``; the probe's own cost included equally in every arm).
Usage: cpu_sum.py OUTDIR (holds <arm>/r*/W?-N/)."""
import glob, json, os, statistics, sys
from collections import defaultdict


def st(v):
    return f"{statistics.median(v):7.0f} [{min(v):.0f}, {max(v):.0f}]"


base = sys.argv[1]
for arm in sorted(os.listdir(base)):
    per = defaultdict(lambda: defaultdict(list))
    for d in sorted(glob.glob(os.path.join(base, arm, "r*", "W*-*"))):
        wl = os.path.basename(d).split("-")[0]
        tot = 0.0
        for f in glob.glob(d + "/*.json"):
            j = json.load(open(f))
            a = b = None
            q = o = None
            for t, n, info, cpu, rq in j["rec"]:
                if n == "phase>" and info[0] == "online" and a is None:
                    a = cpu
                if n == "phase<" and info[0] == "online":
                    b = cpu
                if n == "mark" and info[0] == "query":
                    q = t
                if n == "mark" and info[0] == "output":
                    o = t
            if a is not None and b is not None:
                per[wl][j["me"]].append((b - a) / 1e3)
                tot += (b - a) / 1e3
            if q is not None and o is not None:
                per[wl]["span(wall)"].append((o - q) / 1e3)
        per[wl]["sum"].append(tot)
    for wl in sorted(per):
        print(f"{arm:8s} {wl} n={len(per[wl]['sum'])}: " + "; ".join(f"{k} {st(v)}" for k, v in sorted(per[wl].items())))
