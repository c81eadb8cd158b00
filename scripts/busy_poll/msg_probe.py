"""Test-side probe (issue #23, branch sx): a protocol module (``run_local(...,
protocol_module="msg_probe")``) that registers ``SX_PROTO`` (astra or stamp) unchanged and
records, in every party, each online ``send``/``recv`` of the tcp endpoint: its thread CPU
(``thread_time_ns``) and wall time (``perf_counter_ns``), two clock reads per call and
nothing else. Written at close to ``SX_PROBE_OUT``/<party>-<pid>.json. Nothing in protocol code."""
import importlib, json, os, time
SPEC = importlib.import_module(f"secinfer.protocols.{os.environ.get('SX_PROTO', 'astra')}.protocol").SPEC
from secinfer.net import tcp_transport as _tt, tcp_fast as _tf

_E = _tt.TcpEndpoint
_pc, _thr = time.perf_counter_ns, time.thread_time_ns
REC = []
_SP = getattr(_tf, "SPANS", None)   # (an instrumented tree's spans: marked per online call)
_send, _recv, _close = _E.send, _E.recv, _E.close


def send(self, peer, tag, *arrays):
    if self._phase != "online":
        return _send(self, peer, tag, *arrays)
    t0, c0 = _pc(), _thr()
    if _SP is not None:
        _SP.append(("send>" + tag, t0))
    r = _send(self, peer, tag, *arrays)
    c1, t1 = _thr(), _pc()
    if _SP is not None:
        _SP.append(("<", t1))
    REC.append(("send", peer, tag, c1 - c0, t1 - t0))
    return r


def recv(self, peer, tag, *specs, timeout=None):
    if self._phase != "online":
        return _recv(self, peer, tag, *specs, timeout=timeout)
    t0, c0 = _pc(), _thr()
    if _SP is not None:
        _SP.append(("recv>" + tag, t0))
    r = _recv(self, peer, tag, *specs, timeout=timeout)
    c1, t1 = _thr(), _pc()
    if _SP is not None:
        _SP.append(("<", t1))
    REC.append(("recv", peer, tag, c1 - c0, t1 - t0))
    return r


def close(self, *a, **k):
    out = os.environ.get("SX_PROBE_OUT")
    if out and REC:
        # the Python layer's busy-poll counts per incoming stream (whole run: set-up and
        # offline never spin, so these are the online waits that spun)
        spin = {p: [getattr(c, "spin_hits", 0), getattr(c, "spin_misses", 0)] for p, c in self._in.items()
                if c.native is None}
        with open(os.path.join(out, f"{self.me}-{os.getpid()}.json"), "w") as f:
            json.dump({"me": self.me, "rec": REC, "spin": spin}, f)
    return _close(self, *a, **k)


_E.send, _E.recv, _E.close = send, recv, close

if os.environ.get("SX_FIRST") == "1":   # (an experiment: the client's two output parts by recv_first)
    import numpy as np
    from secinfer.protocols.astra import direct as _direct
    _orig_receive_output = _direct.receive_output

    def receive_output(ep, cls, size, extra, spec=None):
        if cls or not hasattr(ep, "recv_first"):
            return _orig_receive_output(ep, cls, size, extra, spec)
        if spec is None:
            spec = _direct.output_spec(cls, size)
        req = {"p2": ("astra/out/y/m2", spec), "p1": ("astra/out/y/m1", spec)}
        peer, (acc,) = ep.recv_first(req)
        acc = acc - extra
        other = "p1" if peer == "p2" else "p2"
        acc += ep.recv(other, req[other][0], spec)[0]
        return acc

    _direct.receive_output = receive_output
