"""The client's two masked-query writes (probe records, ``run.py`` output dirs): per
workload, the time from the query mark to the end of the first write, from the first
write's end to the second's, and the client's thread CPU from the query mark to the second
write's end. Usage: xgap.py ARMDIR...  (each holding r*/W?-N/; median [min, max] us)."""
import glob, json, statistics, sys


def st(v):
    return f"{statistics.median(v):.0f} [{min(v):.0f}, {max(v):.0f}] n={len(v)}" if v else "-"


for d in sys.argv[1:]:
    for wl in ("W1", "W2"):
        first, gap, second, cpu = [], [], [], []
        for f in glob.glob(f"{d}/r*/{wl}-*/client-*.json") + glob.glob(f"{d}/{wl}-*/client-*.json"):
            rec = json.load(open(f))["rec"]
            q = next((t, c) for t, n, i, c, _ in rec if n == "mark" and i[0] == "query")
            w = [(t, c) for t, n, i, c, _ in rec if n == "sock.send<" and t > q[0] and i and i[0] > 6000]
            if len(w) >= 2:
                first.append((w[0][0] - q[0]) / 1e3)
                gap.append((w[1][0] - w[0][0]) / 1e3)
                second.append((w[1][0] - q[0]) / 1e3)
                cpu.append((w[1][1] - q[1]) / 1e3)
        print(f"{d} {wl}: query -> first write end {st(first)}; -> second write end {st(second)}; "
              f"gap {st(gap)}; client CPU to the second write's end {st(cpu)}")
