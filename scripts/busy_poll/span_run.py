"""Spans inside each online send/recv (instrumented trees, ``span_probe``): python
scripts/busy_poll/span_run.py NAME=SRC[,NAME=SRC...] PROTO:WL REPS (arms interleaved). Prints per
online call (party, kind+tag) and arm the median [min, max] us between consecutive span points
(the first from the call's entry; "end": to the call's return)."""
import glob, json, os, statistics, subprocess, sys, tempfile
arms = dict(a.split("=", 1) for a in sys.argv[1].split(","))
item, reps = sys.argv[2], int(sys.argv[3])
proto, wl = item.split(":")
here = os.path.dirname(os.path.abspath(__file__))
drv = open(os.path.join(here, "msg_ab.py")).read().split("drv = r'''")[1].split("'''")[0].replace("msg_probe", "span_probe")
acc = {}
for r in range(reps):
  for arm in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
    src = arms[arm]
    out = tempfile.mkdtemp(prefix="sxs-")
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src) + ":" + here, SX_PROBE_OUT=out, SX_PROTO=proto)
    cp = subprocess.run([sys.executable, "-c", drv, proto, wl], env=env, capture_output=True, text=True)
    if cp.returncode:
        sys.exit(cp.stderr[-3000:])
    for f in glob.glob(out + "/*.spans.json"):
        d = json.load(open(f))
        sp = d["spans"]
        cur = None
        for name, t in sp:
            if name[-1:] == ">" or name.startswith(("send>", "recv>")):
                cur = [name, t, []]
                continue
            if cur is None:
                continue
            if name == "<":
                pts = cur[2] + [("end", t)]
                # a receive's Python after its data was read (from the read, or from the inbox pop)
                reads = [t2 for n2, t2 in pts if n2 in ("r2_read", "r5_unlock")]
                if cur[0].startswith("recv>") and reads:
                    acc.setdefault((d["me"], cur[0], arm), {}).setdefault("AFTER_READ", []).append((t - reads[0]) / 1e3)
                prev = cur[1]
                key0 = (d["me"], cur[0], arm)
                seen = {}
                for n2, t2 in pts:
                    seen[n2] = seen.get(n2, 0) + 1
                    acc.setdefault(key0, {}).setdefault(f"{n2}#{seen[n2]}", []).append((t2 - prev) / 1e3)
                    prev = t2
                cur = None
            else:
                cur[2].append((name, t))
print(f"load {os.getloadavg()[0]:.1f}")
for k, v in sorted(acc.items()):
    print("/".join(k))
    for n, xs in v.items():
        print(f"    {n:16s} n={len(xs):2d} {statistics.median(xs):8.1f} [{min(xs):.0f}, {max(xs):.0f}]")
