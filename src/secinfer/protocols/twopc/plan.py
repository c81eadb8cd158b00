"""The public plan of one two-party inference: the model as a list of typed steps.

The server (model owner) compiles the IR graph (``compile_plan``): one step per node, with
tensor shapes from a dry run of the fixed-point reference on zeros. The architecture is
public in every two-party protocol here; the weights are not, so they stay in the
server's ``ServerPlan.weights`` and never enter a step. The public part travels as JSON
(``encode_public``) and the peers rebuild the steps with ``parse_plan``, which validates
every field (kinds, names, shapes and sizes bounded, inputs produced earlier) before
anything is sized by it.

Step kinds (``Step.op``):

    input    the client's input tensor                                    InputStep
    output   the tensor the client learns                                 OutputStep
    lin      an activation times a server weight (Gemm, Conv, MatMul,     LinearStep
             Mul, BatchNormalization as a per-channel affine), bias optional
    avgpool  (Global)AveragePool: a public linear map (sums x 1/count)     Step
    add      sum of two activations (residual connection)                  AddStep
    relu     ReLU                                                          Step
    maxpool  MaxPool                                                       Step
    move     Reshape / Flatten / Identity: data movement only              Step

Who runs which kind is the protocol's choice (CRISP: ``lin`` with HE, ``relu``/``maxpool``
as FSS gates, ``avgpool``/``move`` locally on shares; an HE-hybrid protocol: ``lin``,
``avgpool``, ``add`` on the server's ciphertexts, ``relu``/``maxpool`` at the client in
the clear). A protocol attaches its own public per-step data as ``Step.notes`` (CRISP:
the FSS gate batches) through the ``annotate`` / ``check_notes`` hooks.
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
KIND_OF = {"AveragePool": "avgpool", "GlobalAveragePool": "avgpool", "Relu": "relu", "MaxPool": "maxpool", "Add": "add",
           **{op: "lin" for op in LINEAR_OPS}, **{op: "move" for op in MOVE_OPS}}
MAX_STEPS = 4096
MAX_ELEMS = 1 << 26
_TUPLE_ATTRS = ("kernel_shape", "strides", "pads", "dilations", "shape")


@dataclass
class Step:
    """One node of the model as a public step (kinds avgpool, relu, maxpool, move)."""

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
        """The step as an IR node (attributes with tuple values, as the IR kernels expect)."""
        attrs = {k: tuple(v) if k in _TUPLE_ATTRS and isinstance(v, list) else v
                 for k, v in self.attrs.items()}
        return Node(self.name, self.node_op, list(self.inputs), [self.out], attrs)

    def to_json(self) -> dict:
        d = {"name": self.name, "node_op": self.node_op, "in": self.inp, "out": self.out,
             "in_shape": list(self.in_shape), "out_shape": list(self.out_shape),
             "attrs": self.attrs, "op": self.op, **self.notes}
        for k in self.extra:
            v = getattr(self, k)
            d[k] = list(v) if isinstance(v, tuple) else v
        return d


@dataclass
class LinearStep(Step):
    """An activation times a server weight. ``wbits`` bounds |W| (bit length of the
    largest weight): public, to size HE masking; the only weight-dependent value."""

    bias: bool = False
    wbits: int = 1
    extra: ClassVar[tuple] = ("bias", "wbits")


@dataclass
class AddStep(Step):
    """inp + other (elementwise, same shape): a residual connection."""

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


STEP_TYPES = {"lin": LinearStep, "add": AddStep, "avgpool": Step, "relu": Step, "maxpool": Step,
              "move": Step}


@dataclass
class LinearWeights:
    w: np.ndarray                  # signed fixed-point integers (int64)
    b: np.ndarray | None = None


@dataclass
class ServerPlan:
    """The whole plan, server side: the public steps and, per ``lin`` step index, its weights."""

    steps: list
    weights: dict = field(default_factory=dict)


def maxpool_levels(window: int) -> list[int]:
    """Pairs compared at each level of a max tree over ``window`` elements."""
    levels, m = [], window
    while m > 1:
        levels.append(m // 2)
        m = m - m // 2
    return levels


def _shape(a) -> tuple:
    return tuple(int(d) for d in np.shape(a))


def _jsonable_attrs(attrs: dict) -> dict:
    out = {}
    for k, v in attrs.items():
        if isinstance(v, (tuple, list)):
            out[k] = [int(a) if isinstance(a, (int, np.integer)) else a for a in v]
        elif isinstance(v, np.integer):
            out[k] = int(v)
        elif isinstance(v, (int, float, str, bool)) or v is None:
            out[k] = v
        else:
            out[k] = repr(v)
    return out


def compile_plan(graph, cfg, batch: int, annotate: Callable | None = None) -> ServerPlan:
    """Server side: the graph's steps (shapes from a dry run of the fixed-point reference
    on zeros at this batch size) and the weights of its ``lin`` steps. ``annotate(step)``
    returns the protocol's notes for a step. The protocol checks the graph first."""
    from secinfer.ir.fixed_exec import run_fixed_all
    from secinfer.ir.fixed_ops import encode_weights

    inp = graph.inputs[0]
    in_shape = tuple(batch if (d is None or (isinstance(d, int) and d < 0)) else int(d) for d in inp.shape)
    trace: dict = {}
    run_fixed_all(graph, {inp.name: np.zeros(in_shape)}, cfg, trace=trace, overflow="ignore")
    signed = {k: cfg.ring.to_signed(v) for k, v in encode_weights(graph, cfg).items()}
    steps: list = [InputStep(inp.name, in_shape)]
    weights: dict = {}
    for node in graph.nodes:
        kind = KIND_OF.get(node.op)
        if kind is None:
            raise ProtocolError(f"two-party plan: no step kind for {node.op} ({node.name})")
        x, y = node.inputs[0], node.outputs[0]
        common = dict(op=kind, name=node.name, node_op=node.op, inp=x, out=y, in_shape=_shape(trace[x]),
                      out_shape=_shape(trace[y]), attrs=_jsonable_attrs(node.attrs))
        if kind == "lin":
            w = signed[node.inputs[1]]
            b = signed[node.inputs[2]] if len(node.inputs) > 2 else None
            wmax = int(np.max(np.abs(w), initial=0))
            st = LinearStep(**common, bias=b is not None, wbits=max(1, wmax.bit_length()))
            weights[len(steps)] = LinearWeights(w, b)
        elif kind == "add":
            st = AddStep(**common, other=node.inputs[1], other_shape=_shape(trace[node.inputs[1]]))
        else:
            st = Step(**common)
        if annotate is not None:
            st.notes = annotate(st)
        steps.append(st)
    out = graph.output_names[0]
    steps.append(OutputStep(out, _shape(trace[out])))
    return ServerPlan(steps, weights)


def encode_public(steps: list) -> np.ndarray:
    """The public steps as the JSON bytes the server sends (uint8 array)."""
    return np.frombuffer(json.dumps([s.to_json() for s in steps], separators=(",", ":")).encode(),
                         dtype=np.uint8)


def parse_plan(raw: np.ndarray, who: str, check_notes: Callable | None = None,
               kinds: tuple = tuple(STEP_TYPES)) -> list:
    """Client side (and any other peer of the server): decode and validate the public plan.

    ``who`` prefixes errors; ``kinds`` are the node-step kinds this protocol runs;
    ``check_notes(step_dict, kind)`` validates the protocol's notes and returns them as a
    dict (or raises ProtocolError). Any malformed field is a ProtocolError."""
    try:
        items = json.loads(bytes(raw).decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"{who}: plan from the server does not decode: {e}") from None
    if not isinstance(items, list) or not 2 <= len(items) <= MAX_STEPS or not all(isinstance(d, dict) for d in items):
        raise ProtocolError(f"{who}: plan must be a list of steps")
    if items[0].get("op") != "input" or items[-1].get("op") != "output":
        raise ProtocolError(f"{who}: plan must start with the input and end with the output")
    first = InputStep(_name(items[0], "out", who), _shape_field(items[0], "out_shape", who))
    known = {first.out: first.out_shape}
    steps: list = [first]
    for d in items[1:-1]:
        kind = d.get("op")
        if kind not in kinds or kind not in STEP_TYPES:
            raise ProtocolError(f"{who}: unknown plan step {d!r:.80}")
        st = _node_step(d, kind, who)
        for name in st.inputs:
            if name not in known:
                raise ProtocolError(f"{who}: step {st.name!r} reads {name!r}, which no earlier step produces")
        if st.in_shape != known[st.inp] or (isinstance(st, AddStep) and st.other_shape != known[st.other]):
            raise ProtocolError(f"{who}: step {st.name!r} disagrees with the shapes of its inputs")
        if check_notes is not None:
            st.notes = check_notes(d, kind)
        known[st.out] = st.out_shape
        steps.append(st)
    last = OutputStep(_name(items[-1], "in", who), _shape_field(items[-1], "in_shape", who))
    if known.get(last.inp) != last.in_shape:
        raise ProtocolError(f"{who}: the plan's output is not a tensor of the plan")
    steps.append(last)
    return steps


def _node_step(d: dict, kind: str, who: str) -> Step:
    cls = STEP_TYPES[kind]
    node_op = d.get("node_op")
    if KIND_OF.get(node_op) != kind:
        raise ProtocolError(f"{who}: plan step of kind {kind} with op {node_op!r:.40}")
    if not isinstance(d.get("attrs"), dict) or not isinstance(d.get("name"), str):
        raise ProtocolError(f"{who}: plan step without name or attributes")
    st = cls(op=kind, name=d["name"], node_op=node_op, inp=_name(d, "in", who), out=_name(d, "out", who),
             in_shape=_shape_field(d, "in_shape", who), out_shape=_shape_field(d, "out_shape", who),
             attrs=d["attrs"])
    if kind == "lin":
        if not isinstance(d.get("bias"), bool) or not (isinstance(d.get("wbits"), int) and 1 <= d["wbits"] <= 62):
            raise ProtocolError(f"{who}: linear step without a valid weight bound")
        st.bias, st.wbits = d["bias"], d["wbits"]
    elif kind == "add":
        st.other, st.other_shape = _name(d, "other", who), _shape_field(d, "other_shape", who)
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


def _shape_field(d: dict, key: str, who: str) -> tuple:
    shp = d.get(key)
    if (not isinstance(shp, list) or not all(isinstance(x, int) and not isinstance(x, bool) and 0 < x for x in shp)
            or int(np.prod(shp)) > MAX_ELEMS):
        raise ProtocolError(f"{who}: bad shape {shp!r:.80} in the plan")
    return tuple(shp)
