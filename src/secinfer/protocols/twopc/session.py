"""Session helpers for a server/client protocol built on ``twopc.plan``: the setup
exchange (batch size, public plan), the offline worker, and the walk over the plan.

Setup messages (tags under the protocol's prefix ``p``):

    client -> server   p/batch    int64[1]   the number of inputs in the client's batch
    server -> peers    p/plan     uint8[]    the public plan (``plan.encode_public``)
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from secinfer.errors import ProtocolError
from secinfer.net.channel import ArraySpec
from secinfer.protocols.twopc import plan as twoplan

SERVER, CLIENT = "server", "client"
MAX_BATCH = 1 << 16
MAX_PLAN_BYTES = 1 << 22


def send_batch(ep, prefix: str, x: np.ndarray) -> None:
    """Client: announce the batch size of its input (rows of x, or 1 for one sample)."""
    ep.send(SERVER, f"{prefix}/batch", np.array([x.shape[0] if x.ndim > 1 else 1], np.int64))


def recv_batch(ep, prefix: str) -> int:
    """Server: the client's batch size, bounded."""
    (batch,) = ep.recv(CLIENT, f"{prefix}/batch", ArraySpec(np.int64, (1,)))
    batch = int(batch[0])
    if not 1 <= batch <= MAX_BATCH:
        raise ProtocolError(f"client asked for batch size {batch}")
    return batch


def send_plan(ep, prefix: str, steps: list, peers=(CLIENT,)) -> None:
    """Server: the public plan to every peer that sizes its work by it."""
    for p in peers:
        ep.send(p, f"{prefix}/plan", twoplan.encode_public(steps))


def recv_plan(ep, prefix: str, **parse) -> list:
    """Peer of the server: receive and validate the plan (``plan.parse_plan`` keywords)."""
    (raw,) = ep.recv(SERVER, f"{prefix}/plan", ArraySpec(np.uint8, (None,), max_elems=MAX_PLAN_BYTES))
    return twoplan.parse_plan(raw, prefix, **parse)


def fit_input(x: np.ndarray, steps: list, who: str) -> np.ndarray:
    """Client: its input reshaped to the plan's input shape (or a typed error)."""
    shape = tuple(steps[0].out_shape)
    if x.size != int(np.prod(shape)):
        raise ProtocolError(f"{who}: input of {x.size} values, the model expects {shape}")
    return x.reshape(shape)


def timed(fn, *args) -> tuple:
    """(fn(*args), seconds)."""
    t0 = time.perf_counter()
    return fn(*args), time.perf_counter() - t0


def offline_worker():
    """One thread for input-independent HE work (native calls release the GIL) while the
    party receives other offline material; leaving the ``with`` block joins it."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="twopc-offline")


def walk(steps: list, env: dict, run_step) -> object:
    """Evaluate the plan's node steps in order: ``env`` maps tensor names to this party's
    values (the input already in it); ``run_step(idx, step, *values)`` returns the value of
    ``step.out`` from the values of ``step.inputs``. Returns the output tensor's value."""
    for i, st in enumerate(steps[1:-1], start=1):
        env[st.out] = run_step(i, st, *(env[name] for name in st.inputs))
    return env[steps[-1].inp]
