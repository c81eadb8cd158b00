"""Session helpers of the five-role three-server protocols (astra, aby3): the public
header of a linear model from the model owner, repeated queries over one endpoint, the
online phase without the garbage collector, and the close handshake."""

from __future__ import annotations

import contextlib
import gc
import threading
from dataclasses import replace

import numpy as np

from secinfer.errors import ProtocolError
from secinfer.net.channel import ArraySpec
from secinfer.protocols.base import PartyJob, PartyResult
from secinfer.protocols.rep3 import linear as mdl

SERVERS = ("p0", "p1", "p2")
M, C = "model_owner", "client"
_HDR = ArraySpec(np.int64, (5,))
_CLS = ArraySpec(np.float64, (2,))
_ACK = ArraySpec(np.uint8, (1,))
_MAX_FEATURES = 1 << 20
MAX_QUERIES = 100_000


def header(ep, role, job: PartyJob, to=SERVERS + (C,)):
    """Setup-phase exchange of the public architecture (from the model owner to ``to``).
    Returns (lm or None, K, N, cls, fw, classes, B)."""
    cfg = job.fixed
    if role == M:
        lm = mdl.resolve_wfrac(mdl.to_linear(job.model, job.options), cfg)
        hdr = lm.public_header(cfg)
        classes = lm.classes if lm.classifier else np.zeros(2)
        for p in to:
            ep.send(p, "astra/hdr", hdr, np.asarray(classes, np.float64))
        return (lm, *[int(v) for v in hdr[:3]], (int(hdr[3]), int(hdr[4])), classes, None)
    hdr, classes = ep.recv(M, "astra/hdr", _HDR, _CLS)
    k, n, cls, fw, fx = (int(v) for v in hdr)
    if not (0 < k <= _MAX_FEATURES and 0 < n <= 1 << 16 and cls in (0, 1) and 0 <= fw < 48
            and 0 <= fx < 48 and fx + fw < 62 and fx + fw >= job.fixed.frac_bits):
        raise ProtocolError(f"model owner announced an impossible architecture {hdr.tolist()}")
    if cls and n != 1:
        raise ProtocolError("a classifier must have one output")
    return (None, k, n, cls, (fw, fx), classes, None)


_gc_lock = threading.Lock()
_gc_pauses = [0, False]   # nesting count (parties may share a process in tests), was enabled


@contextlib.contextmanager
def online_phase(ep, ready=None):
    """``ep.phase("online")`` without the cyclic garbage collector: paused during (the online
    step allocates little; a full collection of the interpreter's heap would add milliseconds
    to one query), restored after. Parties collect at the end of their offline phase.

    ``ready()``: a server's last offline message, the "ready" the client waits for before it
    starts its query. It is sent once this party is inside the online phase (metered as
    offline: its bytes and round stay there), so every server enters the online phase
    before the client does. The online latency runs from the last party's entry
    (``runtime.launcher``); sent before the entry, a server descheduled between the two
    entered after the client had begun to share its query, hiding that much of the
    client's work from the window (seen: 0.8-2.2 ms of a 2.5-3 ms W1 / W2 query)."""
    with _gc_lock:
        if _gc_pauses[0] == 0:
            _gc_pauses[1] = gc.isenabled()
            gc.disable()
        _gc_pauses[0] += 1
    try:
        with ep.phase("online"):
            if ready is not None:
                with ep.phase("offline"):
                    ready()
            yield ep
    finally:
        with _gc_lock:
            _gc_pauses[0] -= 1
            if _gc_pauses[0] == 0 and _gc_pauses[1]:
                gc.enable()


def query_count(options: dict) -> int:
    """``options["queries"]``: how many queries one session answers one after the other
    (benchmarks: per-query latency after warm-up). Every party must get the same count."""
    q = options.get("queries", 1)
    if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= MAX_QUERIES:
        raise ProtocolError(f"option queries must be an integer in 1..{MAX_QUERIES}, got {q!r}")
    return q


def repeat_queries(role: str, ep, job: PartyJob, body) -> PartyResult:
    """Run ``body(role, ep, job)`` once per query over the same endpoint.

    Every query is a complete session run (key set-up, header, offline, online, close) with
    its own randomness: query i > 0 uses ``job.prg.derive("query-i")``, so no key, mask or
    label repeats between queries. Round counting restarts with every query (the meter then
    shows one query's rounds; bytes add up over all queries).
    """
    n = query_count(job.options)
    res = None
    for i in range(n):
        ep.restart_rounds()
        res = body(role, ep, job if i == 0 else replace(job, prg=job.prg.derive(f"query-{i}")))
    if n > 1:
        res.info["queries"] = n
    return res


def await_close(ep) -> None:
    """Session close: the client confirms it reconstructed without abort. A party that
    receives the client's (or any relayed) abort instead raises ProtocolAbort, so every
    honest party ends with abort when any check fired, before or after the reveal."""
    with ep.phase("setup"):
        ep.recv_one(C, "astra/close", _ACK)


def close(ep) -> None:
    with ep.phase("setup"):
        for p in SERVERS + (M,):
            ep.send(p, "astra/close", np.ones(1, np.uint8))
