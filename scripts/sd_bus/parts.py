# the device's dispatch split per online request from scripts/sd_bus/hooks' logs taken with SDBUS_PARTS=1
# (docs/protocols/stamp.md "Twelfth pass"): python parts.py DIR -> per request, median thread CPU (us) per wrapped function
import glob, json, os, sys, collections, statistics
acc = collections.defaultdict(lambda: collections.defaultdict(list))
for f in glob.glob(os.path.join(sys.argv[1], "dev-*.jsonl")):
    ev = [json.loads(l) for l in open(f)]
    last = None; n = collections.Counter()
    for e in ev:
        if e[0] == "recv":
            last = e
        if e[0] == "parts" and last is not None and last[2] == "online":
            k = f"{last[1]} #{n[last[1]]}"; n[last[1]] += 1
            for a, v in e[1].items():
                acc[k][a].append(v)
for k in sorted(acc):
    print(k, {a: round(statistics.median(v)) for a, v in acc[k].items()})
