# bus transaction round trip alone (host call -> reply), one LteeLink, the "stats" command
# (no device work): python bus_rt.py N SPIN_US [GAP_US]; GAP_US = host work between calls
# (a busy loop), so the device's busy-poll after an answer is exercised too. One JSON line:
# wall per call (median, p10, p90 in us), host thread CPU and device CPU per call (us).
import json, os, sys, time
import numpy as np
from secinfer.protocols.stamp.ltee import LteeLink

n, spin = int(sys.argv[1]), float(sys.argv[2])
gap = float(sys.argv[3]) * 1e-6 if len(sys.argv) > 3 else 0.0
link = LteeLink("p0", spin_us=spin) if "spin_us" in LteeLink.__init__.__code__.co_varnames else LteeLink("p0")
tick = os.sysconf("SC_CLK_TCK")


def dev_cpu():
    f = open(f"/proc/{link._proc.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick


try:
    link.ready()
    if hasattr(link, "set_online"):
        link.set_online(True)
    for _ in range(50):
        link.call("stats")
    ts = []
    c0, d0 = time.thread_time(), dev_cpu()
    for _ in range(n):
        if gap:
            e = time.perf_counter() + gap
            while time.perf_counter() < e:
                pass
        t = time.perf_counter()
        link.call("stats")
        ts.append(time.perf_counter() - t)
    c1, d1 = time.thread_time(), dev_cpu()
    if hasattr(link, "set_online"):
        link.set_online(False)
    link.call("stats")
    time.sleep(0.5)
    idle = dev_cpu() - d1
    ts = np.array(ts) * 1e6
    print(json.dumps({"tree": LteeLink.__module__ and sys.modules[LteeLink.__module__].__file__.rsplit("/src/", 1)[0],
                      "spin_us": spin, "gap_us": gap * 1e6, "n": n, "med_us": round(float(np.median(ts)), 1),
                      "p10_us": round(float(np.percentile(ts, 10)), 1), "p90_us": round(float(np.percentile(ts, 90)), 1),
                      "host_cpu_us": round((c1 - c0) / n * 1e6 - gap * 1e6, 1),
                      "dev_cpu_us": round((d1 - d0) / n * 1e6, 1), "dev_cpu_idle_0.5s_ms": round(idle * 1e3, 1)}))
finally:
    link.close()
