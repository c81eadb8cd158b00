# one line per online host <-> LTEE transaction from scripts/sd_bus/hooks' logs (docs/protocols/
# stamp.md, "Twelfth pass"): python timeline.py DIR [DIR...] -> per transaction kind and position,
# median [min, max] over the cells of each segment (us): the host's request (encode + write),
# the device's wake-up and read (its run-queue wait in that span), its dispatch (wall / CPU), its
# answer (encode + write), the host's wake-up and read (its run-queue wait), and the whole round trip
import collections, glob, json, os, statistics, sys
segs = collections.defaultdict(lambda: collections.defaultdict(list))
for D in sys.argv[1:]:
    logs = {}
    for f in glob.glob(os.path.join(D, "*.jsonl")):
        logs[os.path.basename(f)[:-6]] = [json.loads(l) for l in open(f)]
    for name, ev in logs.items():
        if not name.startswith("host-"):
            continue
        _, party, devpid, _pid = name.split("-")
        dv = logs.get("dev-" + devpid[3:])
        if dv is None:
            continue
        # pair the k-th host send with the device's k-th receive, and so on
        hs = [e for e in ev if e[0] == "send"]
        hr = [e for e in ev if e[0] == "recv"]
        rts = [e for e in ev if e[0] == "rt"]
        dr = [e for e in dv if e[0] == "recv"]
        ds = [e for e in dv if e[0] == "send"]
        n = 0
        for k, rt in enumerate(rts):
            if not rt[2] or rt[1] == "stats":
                continue
            s, r, q, a = hs[k], hr[k], dr[k], ds[k]
            assert q[1] == rt[1], (q[1], rt[1])
            key = f"{party} {rt[1]} #{n}"
            n += 1
            us = lambda x, y: (y - x) * 1e6
            g = segs[key]
            g["host: request (rt start .. written)"].append(us(rt[3][0], s[4][0]))
            g["  host CPU / run-queue wait in it"].append(f"{(s[4][1] - rt[3][1]) * 1e6:.0f}/{(s[4][3] - rt[3][3]) / 1e3:.0f}")
            g["device: wake-up + read (written .. decoded)"].append(us(s[4][0], q[6][0]))
            g["  its run-queue wait in the receive"].append((q[6][3] - q[5][3]) / 1e3)
            g["  its CPU in the receive"].append((q[6][1] - q[5][1]) * 1e6)
            g["  device spin hit (1) / blocked (0)"].append(q[4])
            g["device: dispatch wall (decoded .. answer starts)"].append(us(q[6][0], a[3][0]))
            g["device: dispatch CPU"].append((a[3][1] - q[6][1]) * 1e6)
            g["  its run-queue wait in the dispatch"].append((a[3][3] - q[6][3]) / 1e3)
            g["device: answer (encode + write)"].append(us(a[3][0], a[4][0]))
            g["host: wake-up + read (written .. decoded)"].append(us(a[4][0], r[6][0]))
            g["  host run-queue wait in the receive"].append((r[6][3] - r[5][3]) / 1e3)
            g["  host CPU in the receive (spin)"].append((r[6][1] - r[5][1]) * 1e6)
            g["  host spin hit"].append(r[4])
            g["host: round trip wall"].append(us(rt[3][0], rt[4][0]))
            g["host: round trip run-queue wait"].append((rt[4][3] - rt[3][3]) / 1e3)
            g["host: round trip CPU"].append((rt[4][1] - rt[3][1]) * 1e6)
            g["wall - device dispatch"].append(us(rt[3][0], rt[4][0]) - us(q[6][0], a[3][0]))
f = lambda v: f"{statistics.median(v):8.1f} [{min(v):.0f}, {max(v):.0f}]"
for key in sorted(segs):
    g = segs[key]
    print(f"== {key}  (n={len(next(iter(g.values())))})")
    for k, v in g.items():
        if isinstance(v[0], str):
            print(f"  {k:48s} " + " ".join(v))
            continue
        print(f"  {k:48s} {f(v)}")
