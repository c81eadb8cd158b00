# the online bus transactions of one profiled cell (sitecustomize.py's logs in DIR), split:
# host -> LTEE (the host's call to the device's read returning), the LTEE's work, LTEE ->
# host (the device's write to the host's call returning), in ms: python bus_split.py DIR
import glob, json, sys
d = sys.argv[1]
hosts, devs = {}, {}
for f in glob.glob(d + "/*.jsonl"):
    ev = [json.loads(l) for l in open(f)]
    name = f.rsplit("/", 1)[1].rsplit("-", 1)[0]
    if name.startswith("host-"):
        hosts[name[5:]] = ev
    elif name.startswith("dev-"):
        devs[name[4:]] = ev
for party, ev in sorted(hosts.items()):
    on = [e for e in ev if e[0] == "enter" and e[2] == "online"]
    if not on:
        continue
    t_on = on[0][3]
    off = [e for e in ev if e[0] == "leave" and e[2] == "online"][0][3]
    tx = [e for e in ev if e[0] == "dev" and t_on <= e[3] <= off]
    dv = devs.get(party, [])
    for e in tx:
        reads = [r for r in dv if r[0] == "dread" and r[1] == e[2] and e[3] <= r[3] <= e[4]]
        writes = [w for w in dv if w[0] == "dwrite" and e[3] <= w[2] <= e[4]]
        if reads and writes:
            r, w = reads[0], writes[0]
            print(f"{party} {e[2]:7s} total {1e3 * (e[4] - e[3]):.3f}  host->LTEE {1e3 * (r[3] - e[3]):.3f}"
                  f"  LTEE work {1e3 * (w[2] - r[3]):.3f}  LTEE->host {1e3 * (e[4] - w[3]):.3f}"
                  f"  (device wait began {1e3 * (e[3] - r[2]):.3f} ms before the call)")
