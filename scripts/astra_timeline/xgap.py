"""The client's two masked-query writes (probe records, ``run.py`` output dirs): per run, the
time from the query mark to the end of the first write, and from the first write's end to
the second's. Usage: xgap.py DIR... (median [min, max] us per directory)."""
import glob, json, statistics, sys
for d in sys.argv[1:]:
    first, gap = [], []
    for f in glob.glob(d + "/*/client-*.json"):
        rec = json.load(open(f))["rec"]
        q = next(t for t, n, i, *_ in rec if n == "mark" and i[0] == "query")
        w = [t for t, n, i, *_ in rec if n == "sock.send<" and t > q and i and i[0] > 6000]
        if len(w) >= 2:
            first.append((w[0] - q) / 1e3); gap.append((w[1] - w[0]) / 1e3)
    st = lambda v: f"{statistics.median(v):.0f} [{min(v):.0f}, {max(v):.0f}] n={len(v)}" if v else "-"
    print(f"{d}: query -> first write end {st(first)} us; first -> second write end {st(gap)} us")
