# cProfile of each STAMP host's online phase (branch sp, issue #23; not part of the package), enabled by
# SPPROF_DIR only:   PYTHONPATH=scripts/stamp_plan/cprof:src SPPROF_DIR=<folder> python scripts/stamp_ab/cell.py W3 1
# The profiler (thread CPU clock) starts when the host's LTEE link enters the online phase
# (``BaseLink.set_online(True)``) and stops when it leaves; each host process writes
# <folder>/<party>-<pid>.prof (pstats). `report.py <folder>` prints them per party.
import os

_D = os.environ.get("SPPROF_DIR")
if _D:
    import cProfile
    import time

    try:
        from secinfer.protocols.stamp import ltee as _lt
        ok = True
    except Exception:   # (another package's process)
        ok = False
    if ok:
        _orig = _lt.BaseLink.set_online
        _P: dict = {}

        def set_online(self, on):
            if on:
                _orig(self, on)
                p = cProfile.Profile(time.thread_time)
                _P["p"] = p
                p.enable()
            else:
                p = _P.pop("p", None)
                if p is not None:
                    p.disable()
                    p.dump_stats(os.path.join(_D, f"{getattr(self, 'party', 'x')}-{os.getpid()}.prof"))
                _orig(self, on)
        _lt.BaseLink.set_online = set_online
