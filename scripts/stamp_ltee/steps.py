# per-step timeline of stamp W3/W4 batch-1 cells from scripts/stamp_ab/profile's event logs
# (docs/protocols/stamp.md "Tenth pass"): python steps.py DIR -> per step, the median [min, max]
# over the cells of its wall span and its host-thread CPU (ms), t = 0 at the last party's entry
# into the online phase. Run the cells first with
# PYTHONPATH=scripts/stamp_ab/profile:src STPROF_DIR=DIR python scripts/stamp_ltee/cell.py W3 1 OPTS
import collections, glob, json, os, statistics, sys
D = sys.argv[1]
runs = collections.defaultdict(dict)
for f in glob.glob(os.path.join(D, "host-*.jsonl")):
    who, pid = os.path.basename(f)[5:-6].split("-")
    runs[int(pid)][who] = [json.loads(l) for l in open(f)]
cells = []   # group the three parties of one cell: consecutive pids
pids = sorted(runs)
i = 0
while i < len(pids):
    grp = {}
    for p in pids[i:i + 3]:
        grp.update(runs[p])
    if set(grp) == {"p0", "p1", "p2"}:
        cells.append(grp)
        i += 3
    else:
        i += 1
steps = collections.defaultdict(list)
for ev in cells:
    t0 = max(e[3] for w in ev.values() for e in w if e[0] == "enter" and e[2] == "online")
    on = {w: [e for e in ev[w] if (e[0] in ("send", "recv", "dev") and e[4 if e[0] != "dev" else 3] >= t0 - 1e-3)
              or (e[0] == "leave" and e[2] == "online")] for w in ev}
    def find(w, kind, name, k=0, peer=None):
        xs = [e for e in on[w] if e[0] == kind and (e[3] if kind != "dev" else e[2]) == name
              and (peer is None or e[2] == peer)]
        return xs[k] if len(xs) > k else None
    p1_in = find("p1", "send", "rss/input")
    p0_in = find("p0", "recv", "rss/input")
    devs = [e for e in on["p0"] if e[0] == "dev" and e[2] == "eval"]
    p0_out = find("p0", "send", "stamp/out'")
    p1_rcv = find("p1", "recv", "stamp/out'", peer="p0")
    p1_dev = find("p1", "dev", "output")
    p1_leave = [e for e in on["p1"] if e[0] == "leave"]
    if not (p1_in and p0_in and len(devs) == 2 and p0_out and p1_rcv and p1_dev and p1_leave):
        continue
    ms = lambda a, b: (b - a) * 1e3
    steps["p1: online entry .. input sent"].append((ms(t0, p1_in[5]), None))
    steps["p0: input received (end)"].append((ms(t0, p0_in[5]), None))
    steps["p0: first layer, host (recv end .. eval 1)"].append((ms(p0_in[5], devs[0][3]), None))
    steps["p0: LTEE eval 1"].append((ms(devs[0][3], devs[0][4]), ms(devs[0][5], devs[0][6])))
    steps["p0: second layer, host (eval 1 .. eval 2)"].append((ms(devs[0][4], devs[1][3]), None))
    steps["p0: LTEE eval 2"].append((ms(devs[1][3], devs[1][4]), ms(devs[1][5], devs[1][6])))
    steps["p0: eval 2 .. out' send starts"].append((ms(devs[1][4], p0_out[4]), None))
    steps["p0: out' send"].append((ms(p0_out[4], p0_out[5]), ms(p0_out[6], p0_out[7])))
    steps["p1: out' send starts (p0) .. received (p1)"].append((ms(p0_out[4], p1_rcv[5]), ms(p1_rcv[6], p1_rcv[7])))
    steps["p1: its recv of p0's out' (wait + read)"].append((ms(p1_rcv[4], p1_rcv[5]), None))
    steps["p1: received .. LTEE output"].append((ms(p1_rcv[5], p1_dev[3]), None))
    steps["p1: LTEE output"].append((ms(p1_dev[3], p1_dev[4]), ms(p1_dev[5], p1_dev[6])))
    steps["p1: output .. leaves online (to_out)"].append((ms(p1_dev[4], p1_leave[0][3]), None))
    steps["= to_out (p1 leaves online)"].append((ms(t0, p1_leave[0][3]), None))
f = lambda v: f"{statistics.median(v):6.2f} [{min(v):.2f}, {max(v):.2f}]"
print(f"{len(cells)} cells")
for k, v in steps.items():
    w = [a for a, _ in v]; c = [b for _, b in v if b is not None]
    print(f"{k:45s} wall {f(w)}" + (f"  CPU {f(c)}" if c else ""))
