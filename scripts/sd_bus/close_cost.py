# the cost of a device's end (docs/protocols/stamp.md "Twelfth pass"): python close_cost.py -> per link,
# the wall time of LteeLink.close and the device process's CPU before it and in all (RUSAGE_CHILDREN)
import time, resource, os
from secinfer.protocols.stamp.ltee import LteeLink
for i in range(5):
    l = LteeLink("p0")
    l.ready(); l.refresh_stats()
    time.sleep(0.2)
    pid = l._proc.pid
    run0 = int(open(f"/proc/{pid}/schedstat").read().split()[0])
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN); t0 = time.perf_counter()
    l.close()
    t1 = time.perf_counter(); r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    tot = (r1.ru_utime+r1.ru_stime-r0.ru_utime-r0.ru_stime)*1e3
    print("close wall %.2f ms; device CPU before close %.1f ms, whole %.1f ms -> exit ~%.1f ms" % ((t1-t0)*1e3, run0/1e6, tot, tot-run0/1e6))
