# per-transaction timeline of the host <-> LTEE bus (docs/protocols/stamp.md, "Twelfth pass";
# not part of the package), enabled by SDBUS_DIR only:
#   PYTHONPATH=scripts/sd_bus/hooks:src SDBUS_DIR=<folder> python scripts/stamp_ltee/cell.py W3 1
# Both ends log every bus send and receive on the perf_counter
# clock (CLOCK_MONOTONIC: one clock for all processes) with the thread's CPU time and its
# /proc/thread-self/schedstat (run ns, run-queue wait ns, timeslices); scripts/sd_bus/timeline.py
# turns the logs into one line per online transaction.
import os, sys
_D = os.environ.get("SDBUS_DIR")
if _D:
    import atexit, json, threading, time
    _pc, _tt = time.perf_counter, time.thread_time
    EV = []
    _fds = {}

    def _ss():
        tid = threading.get_ident()
        fd = _fds.get(tid)
        if fd is None:
            fd = _fds[tid] = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        return [int(x) for x in os.pread(fd, 100, 0).split()]

    def _stamp():
        return [_pc(), _tt()] + _ss()

    _name = ["x"]

    def _flush():
        if not EV:
            return
        with open(os.path.join(_D, f"{_name[0]}-{os.getpid()}.jsonl"), "a") as f:
            for e in EV:
                f.write(json.dumps(e) + "\n")
        EV.clear()

    atexit.register(_flush)
    from secinfer.protocols.stamp import ltee_bus as _lb
    _recv, _send = _lb.BusPipe.recv, _lb.BusPipe.send
    dev = "secinfer.protocols.stamp.ltee_device" in " ".join(getattr(sys, "orig_argv", []))

    def recv(self, spin=0.0, timeout=None, alive=None):
        a = _stamp()
        h0 = self.spin_hits
        hdr, arr = _recv(self, spin, timeout, alive)
        b = _stamp()
        EV.append(["recv", hdr.tag, hdr.phase, spin, self.spin_hits - h0, a, b])
        if hdr.tag == "shutdown":
            _flush()
        return hdr, arr

    def send(self, tag, arrays, seq, online=False):
        a = _stamp()
        _send(self, tag, arrays, seq, online)
        EV.append(["send", tag, online, a, _stamp()])

    _lb.BusPipe.recv, _lb.BusPipe.send = recv, send
    if dev and os.environ.get("SDBUS_PARTS"):
        # the device's dispatch split: thread CPU (us) in each wrapped function, per request
        _acc = {}

        def _wrap(obj, attr, label):
            f = getattr(obj, attr)

            def w(*a, **k):
                c0 = _tt()
                try:
                    return f(*a, **k)
                finally:
                    _acc[label] = _acc.get(label, 0.0) + (_tt() - c0) * 1e6
            setattr(obj, attr, w)
        from secinfer.protocols.stamp import ltee_counters as _lc, ltee_requests as _lr
        _wrap(_lb, "expand", "expand")
        _wrap(_lb, "seeds_array", "seeds_array")
        _wrap(_lb, "zero_component", "zero_component")
        _codec = {}

        def _wrap_codec(attr):
            f = getattr(_lb, attr)

            def w(*a, **k):
                c0 = _tt()
                try:
                    return f(*a, **k)
                finally:
                    _codec[attr] = _codec.get(attr, 0.0) + (_tt() - c0) * 1e6
            setattr(_lb, attr, w)
        _wrap_codec("decode_frame")
        _wrap_codec("encode_parts")
        from secinfer.arith import ring as _rg
        for _op in ("add", "sub", "reduce"):
            if hasattr(_rg.Ring, _op):
                _wrap(_rg.Ring, _op, "ring." + _op)
        _late = []
        _wrap(_lc.CounterDiscipline, "_begin", "_begin")
        _wrap(_lr, "_parse_spec", "_parse_spec")
        from secinfer.protocols.rep3 import kernels as _k
        _wrap(_k.Chain, "__call__", "chain")
        _recv2, _send2 = _lb.BusPipe.recv, _lb.BusPipe.send

        def recv2(self, *a, **k):
            r = _recv2(self, *a, **k)
            if not _late:       # the device's own module runs as __main__: wrapped once it exists
                _late.append(1)
                m = sys.modules["__main__"]
                for attr in ("_seed", "_elems", "_need_ready", "_chain", "_slot", "_slot_size"):
                    _wrap(m.Device, attr, attr)
                _wrap(m, "serve", "serve")
            _acc.clear()
            _acc["t0"] = _tt()
            return r

        def send2(self, tag, arrays, seq, online=False):
            _acc["dispatch"] = (_tt() - _acc.pop("t0", _tt())) * 1e6
            dec = _codec.pop("decode_frame", 0.0)
            r = _send2(self, tag, arrays, seq, online)
            EV.append(["parts", dict(_acc, decode=dec, encode=_codec.pop("encode_parts", 0.0))])
            return r
        _lb.BusPipe.recv, _lb.BusPipe.send = recv2, send2
    if dev:
        _name[0] = "dev"   # (its dispatch runs in __main__: timed as decoded .. answer written)
    else:
        from secinfer.protocols.stamp import ltee as _lt
        L = _lt.LteeLink
        _init, _close, _rt = L.__init__, L.close, L._round_trip

        def __init__(self, party, *a, **k):
            _init(self, party, *a, **k)
            _name[0] = f"host-{party}-dev{self._proc.pid}"

        def close(self):
            _flush()
            _close(self)

        def _round_trip(self, cmd, arrays):
            a = _stamp()
            r = _rt(self, cmd, arrays)
            EV.append(["rt", cmd, self.online, a, _stamp()])
            return r
        L.__init__, L.close, L._round_trip = __init__, close, _round_trip
