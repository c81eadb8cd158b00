"""Test-side probe (issue #23, branch tw): wraps TcpEndpoint.send/recv in every party with
perf_counter / thread_time and records whether the call took the templated path."""
import json, os, time
from secinfer.protocols.astra.protocol import SPEC  # noqa: F401  (the protocol itself, unchanged)
from secinfer.net import tcp_transport as _tt

_E = _tt.TcpEndpoint
_send, _recv, _close = _E.send, _E.recv, _E.close
_pc, _tt_ = time.perf_counter, time.thread_time
_REC = []

def send(self, peer, tag, *arrays):
    link = self._fast_out.get(peer) if hasattr(self, "_fast_out") else None
    tmpl = None
    if link is not None and len(arrays) == 1:
        a = arrays[0]
        tmpl = bool(link.tmpls_all.get((tag, a.dtype, a.shape)))
    t0, c0 = _pc(), _tt_()
    r = _send(self, peer, tag, *arrays)
    t1, c1 = _pc(), _tt_()
    _REC.append(("send", self._phase, peer, tag, len(arrays), tmpl, (t1 - t0) * 1e6, (c1 - c0) * 1e6,
                 sum(int(a.nbytes) for a in arrays)))
    return r

def recv(self, peer, tag, *specs, timeout=None):
    c = self._in.get(peer)
    f0 = c.fast if c is not None else None
    had = (tag in c.tin) if c is not None else None
    t0, c0 = _pc(), _tt_()
    r = _recv(self, peer, tag, *specs, timeout=timeout)
    t1, c1 = _pc(), _tt_()
    nat = c is not None and c.native is not None
    fast = (had and len(specs) == 1) if nat else (c is not None and c.fast > f0)
    _REC.append(("recv", self._phase, peer, tag, len(specs), fast, (t1 - t0) * 1e6, (c1 - c0) * 1e6,
                 sum(int(a.nbytes) for a in r)))
    return r

def close(self, *a, **k):
    out = os.environ.get("TW_PROBE_OUT")
    if out and _REC:
        with open(os.path.join(out, f"{self.me}-{os.getpid()}.json"), "w") as f:
            json.dump({"me": self.me, "native": any(getattr(c, "native", None) is not None for c in self._in.values()),
                       "rec": _REC}, f)
    return _close(self, *a, **k)

_E.send, _E.recv, _E.close = send, recv, close
