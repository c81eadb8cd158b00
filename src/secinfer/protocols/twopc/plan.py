"""The public plan of one two-party inference: the model as a list of typed steps.

The server (model owner) compiles the IR graph (``compile_plan``): one step per node, shapes
from a dry run of the fixed-point reference on zeros. The architecture is public; the
weights stay in ``ServerPlan.weights`` and never enter a step. The public part travels as
JSON (``encode_public``); every peer rebuilds the steps with ``parse_plan``, which
validates every field (kinds, names, bounded shapes, inputs produced earlier) before
anything is sized by it. Step kinds (``Step.op``):

    input / output   the client's input, the tensor it learns (InputStep, OutputStep)
    lin      activation times server weights: Gemm, Conv, MatMul, Mul, BatchNormalization
             (a per-channel affine), bias optional (LinearStep)
    avgpool  (Global)AveragePool: a public linear map
    add      sum of two activations: a residual connection (AddStep)
    relu, maxpool    non-linear
    move     Reshape / Flatten / Identity: data movement only

Where each kind runs is the protocol's choice (CRISP: ``lin`` under HE, ``relu`` and
``maxpool`` as FSS gates, the rest locally on shares; an HE-hybrid protocol: ``lin``,
``avgpool`` and ``add`` on the server's ciphertexts, ``relu`` and ``maxpool`` at the client
in the clear). A protocol attaches public per-step data as ``Step.notes`` (``annotate``
when compiling, ``check_notes`` when parsing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, ClassVar

import numpy as np

from secinfer.errors import ProtocolError
from secinfer.ir.graph import Node, lift_2d

LINEAR_OPS = ("Gemm", "Conv", "Mul", "MatMul", "BatchNormalization")
MOVE_OPS = ("Reshape", "Flatten", "Identity")
KIND_OF = {"AveragePool": "avgpool", "GlobalAveragePool": "avgpool", "Relu": "relu", "MaxPool": "maxpool",
           "Add": "add", **{op: "lin" for op in LINEAR_OPS}, **{op: "move" for op in MOVE_OPS}}
MAX_STEPS = 4096
MAX_ELEMS = 1 << 26
_TUPLE_ATTRS = ("kernel_shape", "strides", "pads", "dilations", "shape")


@dataclass
class Step:
    """One node of the model (kinds avgpool, relu, maxpool, move; base of the others)."""

    op: str
    name: str
    node_op: str
    inp: str
    out: str
    in_shape: tuple
    out_shape: tuple
    attrs: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)   # the protocol's public annotations
    extra: ClassVar[tuple] = ()                 # kind-specific fields, in JSON order

    @property
    def inputs(self) -> tuple:
        return (self.inp,)

    @property
    def size(self) -> int:
        return int(np.prod(self.out_shape))

    def node(self) -> Node:
        """The step as an IR node (list attributes as tuples, as the IR kernels expect)."""
        attrs = {k: tuple(v) if k in _TUPLE_ATTRS and isinstance(v, list) else v for k, v in self.attrs.items()}
        return Node(self.name, self.node_op, list(self.inputs), [self.out], attrs)

    def to_json(self) -> dict:
        d = {"name": self.name, "node_op": self.node_op, "in": self.inp, "out": self.out,
             "in_shape": list(self.in_shape), "out_shape": list(self.out_shape),
             "attrs": self.attrs, "op": self.op, **self.notes}
        d.update((k, list(v) if isinstance(v, tuple) else v) for k, v in ((k, getattr(self, k)) for k in self.extra))
        return d


@dataclass
class LinearStep(Step):
    """Activation times server weights. ``wbits`` bounds |W| (bit length of the largest
    weight): public, it sizes HE masking; the only weight-dependent value in the plan."""

    bias: bool = False
    wbits: int = 1
    extra: ClassVar[tuple] = ("bias", "wbits")


@dataclass
class AddStep(Step):
    """inp + other, elementwise, same shape: a residual connection."""

    other: str = ""
    other_shape: tuple = ()
    extra: ClassVar[tuple] = ("other", "other_shape")

    @property
    def inputs(self) -> tuple:
        return (self.inp, self.other)


@dataclass
class InputStep:
    out: str
    out_shape: tuple
    op: ClassVar[str] = "input"

    def to_json(self) -> dict:
        return {"op": "input", "out": self.out, "out_shape": list(self.out_shape)}


@dataclass
class OutputStep:
    inp: str
    in_shape: tuple
    op: ClassVar[str] = "output"

    def to_json(self) -> dict:
        return {"op": "output", "in": self.inp, "in_shape": list(self.in_shape)}


STEP_TYPES = {"lin": LinearStep, "add": AddStep, "avgpool": Step, "relu": Step, "maxpool": Step, "move": Step}


@dataclass
class LinearWeights:
    w: np.ndarray                  # signed fixed-point integers (int64)
    b: np.ndarray | None = None


@dataclass
class ServerPlan:
    """Server side: the public steps and, per ``lin`` step index, its weights."""

    steps: list
    weights: dict = field(default_factory=dict)


def maxpool_levels(window: int) -> list[int]:
    """Pairs compared at each level of a max tree over ``window`` elements."""
    levels, m = [], window
    while m > 1:
        levels.append(m // 2)
        m = m - m // 2
    return levels


def _jsonable(v):
    if isinstance(v, (tuple, list)):
        return [int(a) if isinstance(a, (int, np.integer)) else a for a in v]
    if isinstance(v, np.integer):
        return int(v)
    return v if isinstance(v, (int, float, str, bool)) or v is None else repr(v)


def compile_plan(graph, cfg, batch: int, annotate: Callable | None = None) -> ServerPlan:
    """Server side: the graph's steps (shapes from a dry run of the fixed-point reference
    on zeros at this batch size) and the weights of its ``lin`` steps; ``annotate(step)``
    returns the protocol's notes for a step. The protocol checks the graph first."""
    from secinfer.ir.fixed_exec import run_fixed_all
    from secinfer.ir.fixed_ops import encode_weights

    inp = graph.inputs[0]
    in_shape = tuple(batch if (d is None or (isinstance(d, int) and d < 0)) else int(d) for d in inp.shape)
    trace: dict = {}
    run_fixed_all(graph, {inp.name: np.zeros(in_shape)}, cfg, trace=trace, overflow="ignore")
    signed = {k: cfg.ring.to_signed(v) for k, v in encode_weights(graph, cfg).items()}
    shape = lambda name: tuple(int(d) for d in np.shape(trace[name]))   # noqa: E731
    steps: list = [InputStep(inp.name, in_shape)]
    weights: dict = {}
    for node in graph.nodes:
        kind = KIND_OF.get(node.op)
        consts = [n in graph.initializers for n in node.inputs]
        if kind is None or consts[0] or (kind == "lin" and not all(consts[1:])) or (kind == "add" and any(consts)):
            raise ProtocolError(f"two-party plan: no step for {node.op} {node.name} with these operands")
        x, y = node.inputs[0], node.outputs[0]
        common = dict(op=kind, name=node.name, node_op=node.op, inp=x, out=y, in_shape=shape(x), out_shape=shape(y),
                      attrs={k: _jsonable(v) for k, v in node.attrs.items()})
        if kind == "lin":
            w = signed[node.inputs[1]]
            b = signed[node.inputs[2]] if len(node.inputs) > 2 else None
            st = LinearStep(**common, bias=b is not None, wbits=max(1, int(np.max(np.abs(w), initial=0)).bit_length()))
            weights[len(steps)] = LinearWeights(w, b)
        elif kind == "add":
            st = AddStep(**common, other=node.inputs[1], other_shape=shape(node.inputs[1]))
        else:
            st = Step(**common)
        st.notes = annotate(st) if annotate is not None else {}
        steps.append(st)
    out = graph.output_names[0]
    steps.append(OutputStep(out, shape(out)))
    return ServerPlan(steps, weights)


def encode_public(steps: list) -> np.ndarray:
    """The public steps as the JSON bytes the server sends (uint8 array)."""
    return np.frombuffer(json.dumps([s.to_json() for s in steps], separators=(",", ":")).encode(), np.uint8)


def parse_plan(raw: np.ndarray, who: str, check_notes: Callable | None = None,
               kinds: tuple = tuple(STEP_TYPES)) -> list:
    """A peer of the server: decode and validate the public plan. ``who`` prefixes errors;
    ``kinds``: the node-step kinds this protocol runs; ``check_notes(step_dict, kind)``
    validates the protocol's notes and returns them. Anything malformed: ProtocolError."""
    try:
        items = json.loads(bytes(raw).decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"{who}: plan from the server does not decode: {e}") from None
    if not isinstance(items, list) or not 2 <= len(items) <= MAX_STEPS or not all(isinstance(d, dict) for d in items):
        raise ProtocolError(f"{who}: plan must be a list of steps")
    if items[0].get("op") != "input" or items[-1].get("op") != "output":
        raise ProtocolError(f"{who}: plan must start with the input and end with the output")
    steps: list = [InputStep(_name(items[0], "out", who), _shape(items[0], "out_shape", who))]
    known = {steps[0].out: steps[0].out_shape}
    for d in items[1:-1]:
        st = _node_step(d, kinds, who)
        if any(known.get(n) != s for n, s in zip(st.inputs, (st.in_shape, getattr(st, "other_shape", None)))):
            raise ProtocolError(f"{who}: step {st.name!r} reads a tensor no earlier step produces, or disagrees "
                                "with its shape")
        st.notes = check_notes(d, st.op) if check_notes is not None else {}
        known[st.out] = st.out_shape
        steps.append(st)
    steps.append(OutputStep(_name(items[-1], "in", who), _shape(items[-1], "in_shape", who)))
    if known.get(steps[-1].inp) != steps[-1].in_shape:
        raise ProtocolError(f"{who}: the plan's output is not a tensor of the plan")
    return steps


def _node_step(d: dict, kinds: tuple, who: str) -> Step:
    kind, node_op = d.get("op"), d.get("node_op")
    if kind not in kinds or kind not in STEP_TYPES:
        raise ProtocolError(f"{who}: unknown plan step {d!r:.80}")
    if KIND_OF.get(node_op) != kind or not isinstance(d.get("attrs"), dict) or not isinstance(d.get("name"), str):
        raise ProtocolError(f"{who}: plan step {d!r:.80} with a bad op, name or attributes")
    st = STEP_TYPES[kind](op=kind, name=d["name"], node_op=node_op, inp=_name(d, "in", who), out=_name(d, "out", who),
                          in_shape=_shape(d, "in_shape", who), out_shape=_shape(d, "out_shape", who), attrs=d["attrs"])
    if kind == "lin":
        if not isinstance(d.get("bias"), bool) or not (isinstance(d.get("wbits"), int) and 1 <= d["wbits"] <= 62):
            raise ProtocolError(f"{who}: linear step without a valid weight bound")
        st.bias, st.wbits = d["bias"], d["wbits"]
    elif kind == "add":
        st.other, st.other_shape = _name(d, "other", who), _shape(d, "other_shape", who)
    if node_op in ("AveragePool", "MaxPool"):
        try:
            lift_2d(st.node())
        except Exception as e:  # noqa: BLE001 - any malformed pooling attribute
            raise ProtocolError(f"{who}: pooling step {st.name!r} has bad attributes: {e}") from None
    return st


def _name(d: dict, key: str, who: str) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not 0 < len(v) <= 256:
        raise ProtocolError(f"{who}: plan step with a bad tensor name in {key!r}")
    return v


def _shape(d: dict, key: str, who: str) -> tuple:
    shp = d.get(key)
    if (not isinstance(shp, list) or not all(isinstance(x, int) and not isinstance(x, bool) and 0 < x for x in shp)
            or int(np.prod(shp)) > MAX_ELEMS):
        raise ProtocolError(f"{who}: bad shape {shp!r:.80} in the plan")
    return tuple(shp)
