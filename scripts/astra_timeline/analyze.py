"""Per-hop decomposition of probe timelines (``run.py``'s folders): for every online message,
sender's Python before the socket write, the write, the receiver's wake-up (from the write's
end to the receiver's read), the receiver's Python after the read, and the receiver's
run-queue delay during the receive; plus each party's compute steps (between a receive's end
and the next send's start). Usage: analyze.py DIR [DIR...] (each DIR holds W?-N/ folders)."""
import glob, json, os, statistics, sys
from collections import defaultdict

rows = defaultdict(lambda: defaultdict(list))
for base in sys.argv[1:]:
    for d in sorted(glob.glob(os.path.join(base, "W*-*"))):
        wl = os.path.basename(d).split("-")[0]
        parties = {}
        for f in glob.glob(d + "/*.json"):
            j = json.load(open(f)); parties[j["me"]] = j["rec"]
        sends, recvs = {}, {}
        for me, rec in parties.items():
            cur = None
            for k, (t, n, info, cpu, rq) in enumerate(rec):
                if n == "send>" and info[2] == "online":
                    cur = {"t0": t, "cpu0": cpu, "peer": info[0], "tag": info[1]}
                elif n == "sock.send>" and cur is not None and "w0" not in cur:
                    cur["w0"] = t
                elif n == "sock.send<" and cur is not None:
                    cur["w1"] = t
                elif n == "send<" and cur is not None and info[1] == cur["tag"]:
                    cur["t1"], cur["cpu1"] = t, cpu
                    sends[(me, cur["peer"], cur["tag"])] = cur
                    cur = None
            cur = None
            for t, n, info, cpu, rq in rec:
                if n == "recv>" and info[2] == "online":
                    cur = {"t0": t, "rq0": rq, "peer": info[0], "tag": info[1], "reads": []}
                elif n in ("woke", "sock.read") and cur is not None:
                    cur["reads"].append((t, n))
                elif n == "recv<" and cur is not None and info[1] == cur["tag"]:
                    cur["t1"], cur["rq1"] = t, rq
                    recvs[(cur["peer"], me, cur["tag"])] = cur
                    cur = None
        for me, rec in parties.items():
            last = None
            for t, n, info, cpu, rq in rec:
                if n == "mark" and info[0] == "query":
                    last = (t, cpu, "query")
                elif n == "recv<":
                    last = (t, cpu, info[1].split("/")[-1])
                elif n == "send>" and info[2] == "online" and last is not None:
                    rows[f"{wl} {me} compute"][f"after {last[2]} until send {info[1].split('/')[-1]} (wall)"].append((t - last[0]) / 1e3)
                    rows[f"{wl} {me} compute"][f"after {last[2]} until send {info[1].split('/')[-1]} (cpu)"].append((cpu - last[1]) / 1e3)
                    last = None
                elif n == "mark" and info[0] == "output" and last is not None:
                    rows[f"{wl} {me} compute"][f"after {last[2]} until output (wall)"].append((t - last[0]) / 1e3)
                    rows[f"{wl} {me} compute"][f"after {last[2]} until output (cpu)"].append((cpu - last[1]) / 1e3)
        for key, s in sends.items():
            r = recvs.get(key)
            name = f"{wl} {key[0]}->{key[1]} {key[2].split('/')[-1]}"
            R = rows[name]
            R["send py before write"].append((s.get("w0", s["t1"]) - s["t0"]) / 1e3)
            if "w0" in s and "w1" in s:
                R["socket write"].append((s["w1"] - s["w0"]) / 1e3)
            R["send total"].append((s["t1"] - s["t0"]) / 1e3)
            if r is None:
                continue
            sent = s.get("w1", s["t1"])
            reads = [t for t, n in r["reads"] if t >= sent - 5e3]
            first = min(reads) if reads else None
            R["write end -> recv end (hop)"].append((r["t1"] - sent) / 1e3)
            if first is not None and r["t0"] < sent:
                R["receiver wake (write end -> first read/wake)"].append((first - sent) / 1e3)
                R["receiver py after wake"].append((r["t1"] - first) / 1e3)
            if r["t0"] >= sent:
                R["receiver late (recv called after write)"].append((r["t0"] - sent) / 1e3)
            R["receiver run-queue during recv"].append((r["rq1"] - r["rq0"]) / 1e3)
for name in sorted(rows):
    print(name)
    for k, v in rows[name].items():
        print(f"    {k:48s} n={len(v):3d} median {statistics.median(v):8.1f} us  [{min(v):.0f}, {max(v):.0f}]")
