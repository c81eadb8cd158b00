# profiling hooks (docs/protocols/stamp.md "Sixth pass"; not part of the package): a per-process
# event log on the perf_counter clock (CLOCK_MONOTONIC on Linux), enabled by STPROF_DIR only:
# PYTHONPATH=scripts/stamp_ab/profile:src STPROF_DIR=<folder> python scripts/stamp_ab/cell.py W4 1
import os, sys
_D = os.environ.get("STPROF_DIR")
if _D:
    import time, json, contextlib
    _pc, _tt = time.perf_counter, time.thread_time
    EV = []
    def _flush(who):
        if not EV:
            return
        with open(os.path.join(_D, f"{who}-{os.getpid()}.jsonl"), "a") as f:
            for e in EV:
                f.write(json.dumps(e) + "\n")
        EV.clear()
    dev = "secinfer.protocols.stamp.ltee_device" in " ".join(getattr(sys, "orig_argv", []))
    if dev:
        from secinfer.protocols.stamp import ltee_bus as _lb
        _rf, _wf = _lb.read_frame, _lb.write_frame
        _who = ["dev"]
        def read_frame(stream):
            t0 = _pc()
            try:
                hdr, arr = _rf(stream)
            except EOFError:
                _flush(_who[0]); raise
            t1 = _pc()
            _who[0] = "dev-" + hdr.sender
            EV.append(["dread", hdr.tag, t0, t1, _tt()])
            if os.environ.get("STPROF_CPROF") and hdr.tag in ("eval", "output"):
                import cProfile
                _prof[0] = cProfile.Profile(); _prof[0].enable()
            if hdr.tag == "shutdown":
                _flush(_who[0])
            return hdr, arr
        _prof = [None]
        def write_frame(stream, tag, arrays, seq, sender):
            if _prof[0] is not None:
                _prof[0].disable(); _prof[0].dump_stats(os.path.join(_D, f"prof-{os.getpid()}-{_pc()}.prof")); _prof[0] = None
            t0 = _pc()
            _wf(stream, tag, arrays, seq, sender)
            EV.append(["dwrite", tag, t0, _pc(), _tt()])
        _lb.read_frame, _lb.write_frame = read_frame, write_frame
        if hasattr(_lb, "BusPipe"):     # (the eighth pass's bus: the same events from BusPipe)
            _brecv, _bsend = _lb.BusPipe.recv, _lb.BusPipe.send
            def brecv(self, spin=0.0, timeout=None, alive=None):
                t0 = _pc()
                try:
                    hdr, arr = _brecv(self, spin, timeout, alive)
                except EOFError:
                    _flush(_who[0]); raise
                _who[0] = "dev-" + hdr.sender
                EV.append(["dread", hdr.tag, t0, _pc(), _tt()])
                if os.environ.get("STPROF_CPROF") and hdr.tag in ("eval", "output"):
                    import cProfile
                    _prof[0] = cProfile.Profile(); _prof[0].enable()
                if hdr.tag == "shutdown":
                    _flush(_who[0])
                return hdr, arr
            def bsend(self, tag, arrays, seq, online=False):
                if _prof[0] is not None:
                    _prof[0].disable(); _prof[0].dump_stats(os.path.join(_D, f"prof-{os.getpid()}-{_pc()}.prof")); _prof[0] = None
                t0 = _pc()
                _bsend(self, tag, arrays, seq, online)
                EV.append(["dwrite", tag, t0, _pc(), _tt()])
            _lb.BusPipe.recv, _lb.BusPipe.send = brecv, bsend
    else:
        try:
            from secinfer.net import channel as _ch, tcp_transport as _tt_mod
            from secinfer.protocols.stamp import ltee as _lt
        except Exception:
            _ch = None
        if _ch is not None:
            E = _tt_mod.TcpEndpoint
            _send, _recv = E.send, E.recv
            def send(self, peer, tag, *arrays):
                t0, c0 = _pc(), _tt()
                _send(self, peer, tag, *arrays)
                EV.append(["send", self.me, peer, tag, t0, _pc(), c0, _tt(), sum(a.nbytes for a in arrays), self._phase])
            def recv(self, peer, tag, *specs, timeout=None):
                t0, c0 = _pc(), _tt()
                r = _recv(self, peer, tag, *specs, timeout=timeout)
                EV.append(["recv", self.me, peer, tag, t0, _pc(), c0, _tt(), 0, self._phase])
                return r
            E.send, E.recv = send, recv
            _phase = _ch.Endpoint.phase
            @contextlib.contextmanager
            def phase(self, name):
                EV.append(["enter", self.me, name, _pc(), _tt()])
                prof = None
                if name == "online" and os.environ.get("STPROF_HPROF"):
                    import cProfile
                    prof = cProfile.Profile(time.thread_time); prof.enable()
                with _phase(self, name) as x:
                    yield x
                if prof is not None:
                    prof.disable(); prof.dump_stats(os.path.join(_D, f"hprof-{self.me}-{os.getpid()}.prof"))
                EV.append(["leave", self.me, name, _pc(), _tt()])
            _ch.Endpoint.phase = phase
            L = getattr(_lt, "BaseLink", _lt.LteeLink)   # (the tenth pass: both LTEE modes' host side)
            _tr = L._transact
            def _transact(self, cmd, arrays, kind):
                t0, c0 = _pc(), _tt()
                r = _tr(self, cmd, arrays, kind)
                EV.append(["dev", self.party, cmd, t0, _pc(), c0, _tt(), sum(a.nbytes for a in arrays)])
                return r
            L._transact = _transact
            def _closer(cls):
                _close = cls.close
                def close(self):
                    _flush("host-" + self.party)
                    _close(self)
                cls.close = close
            _closer(_lt.LteeLink)
            try:
                from secinfer.protocols.stamp import ltee_inproc as _li
                _closer(_li.InProcessLink)
            except ImportError:
                pass
