"""A test-only 3-party protocol for the runtime tests (registered via register_module).

client --x--> server --2x--> helper --2x+1--> client, ``rounds`` times (online phase),
after the helper sent each of the others 1000 random words (offline phase). Options
inject failures at a given round: ``die`` (SIGKILL itself), ``abort`` (a failed check),
``crash`` (a plain bug), ``stall`` (stop talking, stay alive).
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np

from secinfer.net.channel import ArraySpec
from secinfer.protocols.base import PartyResult, ProtocolSpec

ROLES = ("server", "client", "helper")
ANY = ArraySpec(np.float64, (None,))
WORDS = ArraySpec(np.uint64, (1000,))


def _inject(ep, o: dict, role: str, r: int) -> None:
    if r != int(o.get("at_round", 0)):
        return
    if o.get("die") == role:
        os.kill(os.getpid(), signal.SIGKILL)
    if o.get("abort") == role:
        raise ep.abort("test-check", o.get("suspect", "client"), "injected by the test")
    if o.get("crash") == role:
        raise ValueError("injected bug")
    if o.get("stall") == role:
        time.sleep(3600)


def run_party(role: str, ep, job) -> PartyResult:
    o = job.options
    rounds = int(o.get("rounds", 1))
    with ep.phase("offline"):
        if role == "helper":
            ep.send("client", "ring/mask", job.prg.uint64((1000,)))
            ep.send("server", "ring/mask", job.prg.uint64((1000,)))
        else:
            ep.recv("helper", "ring/mask", WORDS)
    out = None
    with ep.phase("online"):
        x = None if job.input is None else np.asarray(job.input, dtype=np.float64)
        cur = None if x is None else x.reshape(-1)
        for r in range(rounds):
            _inject(ep, o, role, r)
            if role == "client":
                ep.send("server", "ring/x", cur)
                (cur,) = ep.recv("helper", "ring/z", ANY)
            elif role == "server":
                (v,) = ep.recv("client", "ring/x", ANY)
                ep.send("helper", "ring/y", 2 * v)
            else:
                (v,) = ep.recv("server", "ring/y", ANY)
                ep.send("client", "ring/z", v + 1)
        if role == "client":
            out = cur.reshape(x.shape)
    return PartyResult(output=out, info={"role": role, "rounds": rounds})


def check_model(graph, security: str) -> None:
    return None


SPEC = ProtocolSpec(
    name="test-ring", description="runtime test protocol", roles=ROLES,
    model_role="(none)",  # no role loads a model in this test protocol
    input_role="client", securities=("semi-honest",), default_security="semi-honest",
    run_party=run_party, check_model=check_model, insecure=True, paper="none")
