"""Test-side protocol module (``run_local(protocol_module="spinmode")``): registers astra
unchanged and sets the tcp busy-poll budget per role from AW_SPIN (e.g. ``client=0`` or
``client=0:p0=0``: those roles' endpoints do not spin; the others keep the default), at the
endpoint's first phase. For measuring only."""
import contextlib, os
from secinfer.protocols.astra.protocol import SPEC  # noqa: F401  (the protocol itself, unchanged)
from secinfer.net import channel as _ch

_RULES = dict(kv.split("=", 1) for kv in os.environ.get("AW_SPIN", "").split(":") if kv)
_phase = _ch.Endpoint.phase


@contextlib.contextmanager
def phase(self, name):
    us = _RULES.get(getattr(self, "me", ""))
    if us is not None and hasattr(self, "_spin_s"):
        self.spin_us = float(us)
        self._spin_s = self.spin_us * 1e-6
    with _phase(self, name) as x:
        yield x


_ch.Endpoint.phase = phase
