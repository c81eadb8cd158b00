"""W2: which evaluator's labels reach P0 first (the end of its socket write), and P0's main-thread
CPU from its first receive's start to its send of y (both label receives, the evaluation, the
decoding). Usage: p0_order.py DIR... (each holding r*/W2-N/ probe records)."""
import glob, json, os, statistics, sys

for base in sys.argv[1:]:
    first, cpu = [], []
    for d in sorted(glob.glob(os.path.join(base, "r*", "W2-*"))):
        P = {}
        for f in glob.glob(d + "/*.json"):
            j = json.load(open(f)); P[j["me"]] = j["rec"]
        w = {}
        for ev in ("p1", "p2"):
            cur = None
            for t, n, info, c, rq in P[ev]:
                if n == "send>" and info[0] == "p0" and info[2] == "online":
                    cur = True
                elif n == "sock.send<" and cur:
                    w[ev] = t; cur = None
        if len(w) == 2:
            first.append(min(w, key=w.get))
        a = b = None
        for t, n, info, c, rq in P["p0"]:
            if n == "recv>" and info[2] == "online" and a is None:
                a = c
            if n == "send>" and info[2] == "online":
                b = c
        if a is not None and b is not None:
            cpu.append((b - a) / 1e3)
    print(f"{base}: labels first from {dict((p, first.count(p)) for p in ('p1', 'p2'))} of {len(first)}; "
          f"P0 CPU recv..send y us median {statistics.median(cpu):.0f} [{min(cpu):.0f}, {max(cpu):.0f}] n={len(cpu)}")
