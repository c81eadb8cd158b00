"""Test-side probe: a protocol module that registers astra unchanged and profiles the party's
main thread (cProfile, process CPU clock) from the protocol's registration to the party's
result record (``party._write_json_atomic``), dumping to AW_CPROF_OUT/<pid>.prof."""
import cProfile, os, time
from secinfer.protocols.astra.protocol import SPEC  # noqa: F401
from secinfer.runtime import party as _party

_P = cProfile.Profile(time.process_time)
_w = _party._write_json_atomic


def _write(path, data):
    _P.disable()
    out = os.environ.get("AW_CPROF_OUT")
    if out:
        _P.dump_stats(os.path.join(out, f"{data.get('role')}-{os.getpid()}.prof"))
    return _w(path, data)


_party._write_json_atomic = _write
_P.enable()
