"""Session steps of the three-party graph protocols (STAMP, Falcon+): the public
architecture and batch size, the model owner's weights and the client's input as
replicated shares. Roles: p0 model owner, p1 client (input and output), p2 helper."""

from __future__ import annotations

import numpy as np

from secinfer.errors import ProtocolError
from secinfer.ir.fixed_ops import encode_weights
from secinfer.ir.graph import Graph
from secinfer.net.channel import ArraySpec
from secinfer.protocols.base import PartyJob
from secinfer.protocols.rep3.engine import Engine
from secinfer.protocols.rep3.session import online_phase

NAMES = ("p0", "p1", "p2")
MODEL, CLIENT = 0, 1
_MAX_ARCH = 1 << 24


def exchange_model(ep, me: int, job: PartyJob) -> tuple[Graph, int]:
    """Setup: the model owner publishes the architecture, the client the batch size."""
    if me == MODEL:
        if job.model is None:
            raise ProtocolError("the model owner (p0) needs a model")
        arch = np.frombuffer(job.model.public_bytes(), dtype=np.uint8)
        for p in (1, 2):
            ep.send(NAMES[p], "setup/arch", arch)
    else:
        (arch,) = ep.recv(NAMES[MODEL], "setup/arch", ArraySpec(np.uint8, (None,), max_elems=_MAX_ARCH))
    public = Graph.from_public_bytes(bytes(arch))
    if me == CLIENT:
        if job.input is None:
            raise ProtocolError("the input party (p1) needs an input")
        job.input = public.batch_input(job.input)  # one sample without a batch axis is a batch of one
        batch = int(job.input.shape[0])
        for p in (0, 2):
            ep.send(NAMES[p], "setup/batch", np.array([batch], dtype=np.int64))
    else:
        (b,) = ep.recv(NAMES[CLIENT], "setup/batch", ArraySpec(np.int64, (1,)))
        batch = int(b[0])
    if not 1 <= batch <= 1 << 16:
        raise ProtocolError(f"batch size {batch} out of range")
    g = (job.model if me == MODEL else public).with_batch(batch)
    return g, batch


def share_model_and_input(eng: Engine, graph: Graph, job: PartyJob) -> dict:
    """Offline: weights from p0; online: the input from p1 (``input`` switches phase)."""
    me = eng.me
    env = {}
    weights = encode_weights(graph, eng.cfg) if me == MODEL else {}
    with eng.ep.phase("offline"):
        for name in sorted(graph.weight_info):
            shape = tuple(graph.weight_info[name].shape)
            env[name] = eng.input(MODEL, weights.get(name), shape)
    return env


def online_together(ep, me: int):
    """The online phase of the three parties, entered together: ``with online_together(ep,
    me):`` enters it (``rep3.session.online_phase``: without the cyclic garbage collector)
    and, from inside it, every party tells the two others it is ready and waits for both
    (the messages and their round metered offline). No party starts its online work before
    every party has entered: the online latency runs from the last party's entry
    (``runtime.launcher``), so none of it is left out of the window. The "ready" sent just
    before the entry (the former ``start_together``) let a party descheduled between its
    send and its entry enter after the others had begun -- the client's input sharing and
    the first masked sends ran outside the measured window (the race astra and aby3 closed
    the same way)."""
    def ready():
        for p in range(3):
            if p != me:
                ep.send(NAMES[p], "offline/ready", np.ones(1, dtype=np.uint8))
        for p in range(3):
            if p != me:
                ep.recv(NAMES[p], "offline/ready", ArraySpec(np.uint8, (1,)))
    return online_phase(ep, ready)


def expect_ready(ep, me: int) -> None:
    """Offline: declare ``online_together``'s "ready" frames to the endpoint
    (``Endpoint.expect_send``/``expect_recv``), so that a transport with frame templates builds
    them now and not on the first of them, inside the online window (issue #23)."""
    for p in range(3):
        if p != me:
            ep.expect_send(NAMES[p], "offline/ready", np.uint8, (1,))
            ep.expect_recv(NAMES[p], "offline/ready", np.uint8, (1,))


def input_phase(options: dict) -> str:
    """``options["input_phase"]``: ``online`` (default) shares the client's input in the
    online phase; ``offline`` before it -- the accounting of the paper's measurements,
    whose parties start from shares of the input (benchmarks only: the input must then be
    known before the online phase starts). Both protocols (STAMP, Falcon+) honour it."""
    ph = options.get("input_phase", "online")
    if ph not in ("online", "offline"):
        raise ProtocolError(f"option input_phase must be 'online' or 'offline', got {ph!r}")
    return ph


def share_input(eng: Engine, graph: Graph, job: PartyJob, env: dict, backend=None) -> None:
    """Malicious STAMP, when the input feeds products only: shared through the first
    product's verification mask (``StampBackend.masked_input``); else the replicated
    input sharing (``Engine.input``; Falcon+ calls this without a backend)."""
    info = graph.inputs[0]
    shape = tuple(info.shape)
    x = None
    if eng.me == CLIENT:
        x = np.asarray(job.input, dtype=np.float64)
        graph.check_input(info.name, x)
        x = eng.cfg.encode(x)
    products = backend.can_mask_input(graph, info.name) if backend is not None else 0
    if products:
        env[info.name] = backend.masked_input(CLIENT, x, shape, info.name, products)
    else:
        env[info.name] = eng.input(CLIENT, x, shape)
