"""msg_probe plus tcp_fast.SPANS (an instrumented copy of the tree, branch sx, not committed code)."""
import json, os
from msg_probe import SPEC, REC, _E  # noqa: F401
import msg_probe
from secinfer.net import tcp_fast

_c = _E.close


def close(self, *a, **k):
    out = os.environ.get("SX_PROBE_OUT")
    if out:
        with open(os.path.join(out, f"{self.me}-{os.getpid()}.spans.json"), "w") as f:
            json.dump({"me": self.me, "spans": tcp_fast.SPANS, "rec": REC}, f)
    return _c(self, *a, **k)


_E.close = close
