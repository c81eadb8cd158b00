"""Issue #23 stall probe (a diagnostic, not project code): with this folder first on
PYTHONPATH, every party process records each tcp send (perf_counter span, the thread's
voluntary / involuntary context switches and CPU time during it) in $STALL_SPANS/<pid>.txt,
and sends inside the native call or wire-lock waits over 3 ms in <pid>.phase."""
import os, resource, time
SPANS = os.environ.get("STALL_SPANS", "/tmp/stall-spans")
os.makedirs(SPANS, exist_ok=True)
try:
    from secinfer.net import tcp_transport as _tt
    _orig = _tt.TcpEndpoint._transmit_parts
    _f = open(f"{SPANS}/{os.getpid()}.txt", "a", buffering=1)
    RT = resource.RUSAGE_THREAD
    def _timed(self, peer, parts, size):
        u0 = resource.getrusage(RT); t0 = time.perf_counter()
        try:
            return _orig(self, peer, parts, size)
        finally:
            d = time.perf_counter() - t0; u1 = resource.getrusage(RT)
            _f.write(f"{self.me} {peer} {size} {d*1e3:.3f} {u1.ru_nvcsw-u0.ru_nvcsw} {u1.ru_nivcsw-u0.ru_nivcsw} "
                     f"{(u1.ru_utime+u1.ru_stime-u0.ru_utime-u0.ru_stime)*1e3:.3f} {int(self.native)} {os.getloadavg()[0]:.2f}\n")
    _tt.TcpEndpoint._transmit_parts = _timed
except Exception as e:  # noqa
    pass
try:
    import threading
    from secinfer.net import native_link as _nl, tcp_links as _tl
    _g = open(f"{SPANS}/{os.getpid()}.phase", "a", buffering=1)
    _ss = _nl.Sealer.send_small
    def _ss_timed(self, stamp, pt):
        u0 = resource.getrusage(RT); t0 = time.perf_counter()
        try:
            return _ss(self, stamp, pt)
        finally:
            d = time.perf_counter() - t0
            if d > 0.003:
                u1 = resource.getrusage(RT)
                _g.write(f"go_send {d*1e3:.3f} {u1.ru_nvcsw-u0.ru_nvcsw} {u1.ru_nivcsw-u0.ru_nivcsw} {threading.active_count()} {os.getloadavg()[0]:.2f}\n")
    _nl.Sealer.send_small = _ss_timed
    class _TLock:
        def __init__(self):
            self._l = threading.Lock(); self.holder = None
        def acquire(self, blocking=True, timeout=-1):
            t0 = time.perf_counter(); ok = self._l.acquire(blocking, timeout)
            d = time.perf_counter() - t0
            if d > 0.003:
                _g.write(f"lock_wait {d*1e3:.3f} held_by={self.holder} me={threading.current_thread().name}\n")
            if ok: self.holder = threading.current_thread().name
            return ok
        def release(self):
            self._l.release()
        __enter__ = acquire
        def __exit__(self, *a): self.release()
    _oi = _tl.OutLink.__init__
    def _oi2(self, *a, **k):
        _oi(self, *a, **k); self.lock = _TLock()
    _tl.OutLink.__init__ = _oi2
except Exception as e:  # noqa
    open(f"{SPANS}/err", "a").write(repr(e))
