"""Test-side probe: a protocol module that registers astra unchanged and counts the Python
and C function calls (``sys.setprofile``) and the thread CPU of the client's output receive
(``direct.receive_output``) and of a server's online step (``direct.server_online``), written
to AW_CALLS_OUT/<role>-<pid>.json."""
import json, os, sys, time
from secinfer.protocols.astra.protocol import SPEC  # noqa: F401
from secinfer.protocols.astra import direct as _d

_n = [0]
_names = []


def _prof(frame, event, arg):
    if event in ("call", "c_call"):
        _n[0] += 1
        if os.environ.get("AW_CALLS_NAMES"):
            _names.append(f"{frame.f_code.co_name}" if event == "call" else f"C:{getattr(arg, '__qualname__', arg)}")


def _wrap(fn, name):
    def w(ep, *a, **k):
        _n[0] = 0
        _names.clear()
        c0 = time.thread_time_ns()
        sys.setprofile(_prof)
        try:
            return fn(ep, *a, **k)
        finally:
            sys.setprofile(None)
            c1 = time.thread_time_ns()
            out = os.environ.get("AW_CALLS_OUT")
            if out:
                with open(os.path.join(out, f"{ep.me}-{name}-{os.getpid()}.json"), "w") as f:
                    json.dump({"me": ep.me, "fn": name, "calls": _n[0], "cpu_us": (c1 - c0) / 1e3, "names": _names}, f)
    return w


_d.receive_output = _wrap(_d.receive_output, "receive_output")
_d.server_online = _wrap(_d.server_online, "server_online")
