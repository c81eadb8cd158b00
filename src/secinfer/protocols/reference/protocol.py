"""``reference``: an explicitly INSECURE plaintext protocol.

The client sends its fixed-point-encoded input to the server in the clear (inside the
authenticated, encrypted channel, but the server sees it), the server runs the bit-exact
fixed-point reference executor and returns the output. It exists to prove the runtime end
to end, to be the template for real protocols, and to be the oracle in conformance tests.
The CLI never selects it by default and says it is insecure whenever it runs.

Messages (all in the ``online`` phase except the shape announcement in ``setup``):

    server -> client  "ref/shape"   int64[(ndim,)]   input shape the model expects
    client -> server  "ref/input"   uint64[shape]    encode(x)
    server -> client  "ref/output"  uint64[out]      run_fixed(model, x)
    server -> client  "ref/oshape"  int64[(k,)]      output shape (sent before the output)
"""

from __future__ import annotations

import numpy as np

from secinfer.errors import ProtocolError, ShapeError
from secinfer.net.channel import ArraySpec
from secinfer.protocols.base import PartyJob, PartyResult, ProtocolSpec, by_role

SERVER, CLIENT = "server", "client"
_MAX_DIMS = 8


def _model_input_shape(graph, batch: int | None = None) -> tuple[int, ...]:
    shape = tuple(graph.inputs[0].shape)
    return tuple(batch if (d is None or (isinstance(d, int) and d < 0)) else int(d) for d in shape)


def _run_server(ep, job: PartyJob) -> PartyResult:
    from secinfer.ir.fixed_exec import run_fixed

    graph = job.model
    cfg = job.fixed
    with ep.phase("setup"):
        shape = np.array([(-1 if (d is None or d < 0) else d) for d in graph.inputs[0].shape], dtype=np.int64)
        ep.send(CLIENT, "ref/shape", shape)
        (batch,) = ep.recv(CLIENT, "ref/batch", ArraySpec(np.int64, (1,)))
        batch = int(batch[0])
        if not 1 <= batch <= 1 << 20:
            raise ProtocolError(f"client asked for batch size {batch}")
    with ep.phase("online"):
        in_shape = _model_input_shape(graph, batch)
        (xr,) = ep.recv(CLIENT, "ref/input", ArraySpec(np.uint64, in_shape))
        y = run_fixed(graph, cfg.decode(xr), cfg)
        y = np.ascontiguousarray(y, dtype=np.uint64)
        ep.send(CLIENT, "ref/oshape", np.array(y.shape, dtype=np.int64))
        ep.send(CLIENT, "ref/output", y)
    return PartyResult(info={"insecure": True})


def _run_client(ep, job: PartyJob) -> PartyResult:
    cfg = job.fixed
    x = np.asarray(job.input, dtype=np.float64)
    with ep.phase("setup"):
        (shape,) = ep.recv(SERVER, "ref/shape", ArraySpec(np.int64, (None,), max_elems=_MAX_DIMS))
        expected = tuple(int(d) for d in shape)
        if len(expected) == x.ndim + 1 and all(e in (-1, s) for e, s in zip(expected[1:], x.shape)):
            x = x[None, ...]  # a single sample for a batched model
        if len(expected) != x.ndim or any(e not in (-1, s) for e, s in zip(expected, x.shape)):
            raise ShapeError(f"input shape {x.shape} does not match the model's input shape "
                             f"{tuple(d if d >= 0 else 'N' for d in expected)}")
        ep.send(SERVER, "ref/batch", np.array([x.shape[0]], dtype=np.int64))
    with ep.phase("online"):
        ep.send(SERVER, "ref/input", cfg.encode(x))
        (oshape,) = ep.recv(SERVER, "ref/oshape", ArraySpec(np.int64, (None,), max_elems=_MAX_DIMS))
        if np.any(oshape < 0) or np.prod(oshape) > 1 << 28:
            raise ProtocolError(f"server announced an impossible output shape {tuple(oshape)}")
        (yr,) = ep.recv(SERVER, "ref/output", ArraySpec(np.uint64, tuple(int(d) for d in oshape)))
    return PartyResult(output=cfg.decode(yr), output_ring=yr, info={"insecure": True})


run_party = by_role("reference protocol", {SERVER: _run_server, CLIENT: _run_client})


def check_model(graph, security: str) -> None:
    """The reference executor runs every op the importer accepts."""
    if security != "semi-honest":
        raise ProtocolError("the reference protocol is insecure; it offers no security level at all "
                            "(run it with --security semi-honest)")


SPEC = ProtocolSpec(
    name="reference",
    description="INSECURE plaintext protocol: the client sends its input to the server (template and oracle)",
    roles=(SERVER, CLIENT),
    model_role=SERVER,
    input_role=CLIENT,
    securities=("semi-honest",),
    default_security="semi-honest",
    run_party=run_party,
    check_model=check_model,
    default_fixed="fx64f13",
    insecure=True,
    paper="none",
)
