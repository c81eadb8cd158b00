"""Test-side protocol module (``run_local(protocol_module="variant")``, e.g. through
``env_ab.py ... AW_MODULE=variant,AW_VARIANT=...``): registers astra and, per AW_VARIANT
(``:``-separated), undoes one change of the sixth pass in every party, for measuring only:
``no_send_many`` (the client's query with one ``send`` per evaluator), ``no_small`` (the
numpy steps instead of the small-query ones)."""
import os
from secinfer.protocols.astra import direct
from secinfer.protocols.astra.protocol import SPEC  # noqa: F401  (the protocol itself)

_V = set(filter(None, os.environ.get("AW_VARIANT", "").split(":")))
if "no_send_many" in _V:
    def _send_query(ep, peers, m):
        for p in peers:
            ep.send(p, "astra/sh/X", m)
    direct.send_query = _send_query
if "no_small" in _V:
    direct._scalar_prep = lambda fast: fast.__setitem__("scalar", None)
    direct._p0_small_prep = lambda fast, size: fast.__setitem__("ybuf", None)
    direct.output_small = lambda cls, size, extra: None
