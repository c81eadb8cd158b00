# per-request cost of the three LTEE buses (docs/protocols/stamp.md "Tenth pass"): python
# bus_call.py REPS CALLS -> median [min, max] over REPS rounds (arms interleaved) of the wall
# and host-thread CPU per call of link.call("stats") and of an 8 KiB request ("specs" with a
# 1,024-element JSON list: parsed, validated, refused), per arm: the process emulation (online,
# busy-polling), in-process with frames, in-process with array copies
import json, statistics, sys, time
import numpy as np
from secinfer.protocols.stamp.ltee import LteeLink, LteeRefused
from secinfer.protocols.stamp.ltee_inproc import InProcessLink
reps, calls = int(sys.argv[1]), int(sys.argv[2])
links = {"process": LteeLink("p0"), "frames": InProcessLink("p0", frames=True), "copies": InProcessLink("p0", frames=False)}
for l in links.values():
    l.ready()
links["process"].set_online(True)
big = np.frombuffer(json.dumps(list(range(1800))).encode()[:8192], np.uint8)
def stats(l):
    l.call("stats")
def specs(l):
    try:
        l.call("specs", big)
    except LteeRefused:
        pass
for name, fn in (("stats", stats), ("8 KiB specs", specs)):
    res = {k: [] for k in links}
    for r in range(reps):
        for k, l in (list(links.items()) if r % 2 == 0 else list(links.items())[::-1]):
            t, c = time.perf_counter(), time.thread_time()
            for _ in range(calls):
                fn(l)
            res[k].append(((time.perf_counter() - t) / calls * 1e6, (time.thread_time() - c) / calls * 1e6))
    for k, v in res.items():
        w, c = [a for a, _ in v], [b for _, b in v]
        print(f"{name:12s} {k:8s} wall {statistics.median(w):7.1f} us [{min(w):.1f}, {max(w):.1f}]"
              f"  host thread CPU {statistics.median(c):6.1f} us [{min(c):.1f}, {max(c):.1f}]")
for l in links.values():
    l.close()
