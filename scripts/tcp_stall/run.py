"""Issue #23 stall probe: python scripts/tcp_stall/run.py PARTIES K ROUNDS WORK_MS NATIVE(0|1)
(PYTHONPATH=src). Party a sends K small frames back to back to every peer, then waits for
each one's reply (the peers receive the K frames, busy-compute WORK_MS, reply); then one
frame per round as the baseline. Prints send spans, round times, one-way latencies,
TCP_NODELAY of both ends, and the slow sends with their context switches."""
import json, subprocess, sys, tempfile, os
from pathlib import Path
import numpy as np
from secinfer.runtime.cluster import write_loopback_cluster
n, K, R, W, nat = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
roles = ["a", "b", "c"][:n]
d = tempfile.mkdtemp()
path = write_loopback_cluster(d + "/cl", roles, connect_timeout=20.0)
ps = [subprocess.Popen([sys.executable, str(Path(__file__).with_name("party.py")), str(path), r, K, R, W, nat], stdout=subprocess.PIPE, text=True) for r in roles]
outs = [p.communicate(timeout=170)[0] for p in ps]
a = json.loads(outs[0])
s, rd, b = np.array(a["sends"]) * 1e3, np.array(a["rounds"]) * 1e3, np.array(a["base"]) * 1e3
print(f"native={a['native']} parties={n} K={K} R={R} W={W}ms nodelay(out,in)={a['nodelay']}")
print(f" sends: n={len(s)} median={np.median(s)*1e3:.1f}us p99={np.percentile(s,99)*1e3:.1f}us max={s.max():.2f}ms >5ms={int((s>5).sum())} >20ms={int((s>20).sum())}")
print(f" base sends: median={np.median(b)*1e3:.1f}us max={b.max():.2f}ms >20ms={int((b>20).sum())}")
print(f" rounds: median={np.median(rd):.3f}ms p99={np.percentile(rd,99):.2f}ms max={rd.max():.2f}ms >20ms={int((rd>20).sum())}")
for o in outs[1:]:
    l = np.array(json.loads(o)["lat"]); print(f" one-way a->peer: median={np.median(l)*1e3:.0f}us p99={np.percentile(l,99):.2f}ms max={l.max():.2f}ms >20ms={int((l>20).sum())}")
    print("  slow recvs (one-way ms, recv call ms, recv started after send ms, vol, invol, i):", json.loads(o)["rslow"][:12])
print(" slow sends (ms, vol cs, invol cs, cpu ms, index in burst):", a["slow"])
print(" tcpinfo a->b:", a["infos"][:3], a["infos"][-1])
