"""Test-side probe (issue #23 item 2, branch bp): for every online receive of a small
one-array frame on tcp, why the fast receive did or did not take it. Registers the protocol
MISS_PROTO names (default astra) unchanged; wraps TcpEndpoint.recv, _py_next (Python layer) in every party.

Classes: fast; queued (the frame was in the inbox already: the reader thread or another
wait read it); halfread (bytes of it were in the stream's buffer: a record split across
reads or several records in one read, left by an earlier read); read-split (this call's
read was not exactly one whole record); nomatch (one whole record, header not the template);
other (several arrays, closed, ...)."""
import importlib, json, os
SPEC = importlib.import_module(f"secinfer.protocols.{os.environ.get('MISS_PROTO', 'astra')}.protocol").SPEC
from secinfer.net import tcp_transport as _tt
from secinfer.net import tcp_links as _tl

_E = _tt.TcpEndpoint
_recv, _close, _py_next = _E.recv, _E.close, _E._py_next
_REC = []
_last = {}

def _py_next_w(self, peer, c, deadline):
    r = _py_next(self, peer, c, deadline)
    _last["py_next"] = "whole" if r is not None else "split"
    return r

def recv(self, peer, tag, *specs, timeout=None):
    c = self._in.get(peer)
    if c is None or len(specs) != 1:
        return _recv(self, peer, tag, *specs, timeout=timeout)
    nat = c.native is not None
    queued = bool(self._inbox[peer])
    half = (not nat) and bool(c.fill or c.body is not None or c.frame is not None or c.size or c.parts)
    f0 = c.fast
    had = tag in c.tin
    _last.clear()
    chk = []
    if nat:
        orig = _tl.frame_event
    c.checked = None
    r = _recv(self, peer, tag, *specs, timeout=timeout)
    fast = c.fast > f0 or (nat and c.checked is not None)
    if fast:
        why = "fast"
    elif queued:
        why = "queued"
    elif half:
        why = "halfread"
    elif not nat and _last.get("py_next") == "split":
        why = "read-split"
    elif not nat and _last.get("py_next") == "whole":
        why = "nomatch"
    else:
        why = "other" if had or not nat else "notemplate"
    _REC.append((self._phase, peer, tag, why, sum(int(a.nbytes) for a in r)))
    return r

def close(self, *a, **k):
    out = os.environ.get("MISS_PROBE_OUT")
    if out and _REC:
        with open(os.path.join(out, f"{self.me}-{os.getpid()}.json"), "w") as f:
            json.dump({"me": self.me, "native": any(getattr(c, "native", None) is not None for c in self._in.values()),
                       "rec": _REC}, f)
    return _close(self, *a, **k)

_E.recv, _E.close, _E._py_next = recv, close, _py_next_w
