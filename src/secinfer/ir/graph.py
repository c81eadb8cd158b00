"""The canonical op graph every executor and protocol walks.

A ``Graph`` is a topologically sorted list of ``Node``s over named tensors. Tensors are
either graph inputs (the client's data), weights (``initializers``, the model owner's
secret; their shapes are public) or node outputs. ``shapes`` maps every tensor name to
its shape; ``None`` marks the symbolic batch dimension.

Canonical ops and their exact form after ``secinfer.ir.onnx_import.load_model`` are in
``OP_SPECS`` below and in docs/ir.md. Structural constants (shapes, axes, perms, split
sizes, slice bounds, gather indices) are attributes and public; every numeric constant
an op computes with is an initializer and secret.

``public_bytes`` / ``from_public_bytes`` carry the architecture (nodes, attributes,
shapes, weight shapes) as JSON, without weight values and without pickle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from secinfer.errors import ModelError, ShapeError

Shape = tuple  # of int | None

# op -> (allowed attribute names, description). The importer produces nothing else.
OP_SPECS: dict[str, tuple[tuple[str, ...], str]] = {
    "Conv": (("kernel_shape", "strides", "pads", "dilations", "group"),
             "inputs [x, W(M, C/group, *k), b(M) optional]; 1-D or 2-D; pads = begins+ends"),
    "Gemm": ((), "inputs [x(..., K), W(K, N), b(N) optional] constants W, b: y = x @ W + b"),
    "MatMul": ((), "numpy.matmul semantics (batched); at most one operand constant"),
    "Add": ((), "elementwise, numpy broadcasting; either operand may be constant"),
    "Sub": ((), "elementwise, numpy broadcasting; either operand may be constant"),
    "Mul": ((), "elementwise, numpy broadcasting; Div by a constant c is Mul by 1/c"),
    "Neg": ((), "elementwise negation"),
    "Relu": ((), "max(x, 0)"),
    "MaxPool": (("kernel_shape", "strides", "pads", "dilations", "ceil_mode"),
                "1-D or 2-D; padding never wins the max"),
    "AveragePool": (("kernel_shape", "strides", "pads", "dilations", "ceil_mode",
                     "count_include_pad"), "1-D or 2-D window mean"),
    "GlobalAveragePool": ((), "mean over all spatial axes, keepdims"),
    "GlobalMaxPool": ((), "max over all spatial axes, keepdims"),
    "BatchNormalization": ((), "inputs [x, scale(C), shift(C)], y = x*scale + shift on axis 1"),
    "Flatten": (("axis",), "to 2-D (prod(shape[:axis]), prod(shape[axis:]))"),
    "Reshape": (("shape",), "ONNX Reshape with allowzero=0: 0 copies, -1 infers"),
    "Transpose": (("perm",), "axes permutation"),
    "Softmax": (("axis",), "softmax along one axis (opset-13 semantics)"),
    "Sigmoid": ((), "1/(1+exp(-x))"),
    "Tanh": ((), "tanh"),
    "Erf": ((), "erf"),
    "Gelu": (("approximate",), "Gelu, approximate 'none' or 'tanh'"),
    "Exp": ((), "exp"),
    "Sqrt": ((), "sqrt"),
    "LayerNormalization": (("axis", "epsilon"),
                           "inputs [x, scale, bias optional], normalise over axes >= axis"),
    "Identity": ((), "copy (kept only where it defines a graph output)"),
    "Concat": (("axis",), "concatenate along axis; inputs may be constants"),
    "Split": (("axis", "split"), "split along axis into the given sizes"),
    "Slice": (("starts", "ends", "axes", "steps"), "python slice semantics per listed axis"),
    "Squeeze": (("axes",), "remove the listed size-1 axes"),
    "Unsqueeze": (("axes",), "insert size-1 axes at the listed output positions"),
    "Gather": (("axis", "indices"), "take constant integer indices along axis"),
}

LINEAR_OPS = ("Conv", "Gemm", "MatMul")
FLOAT_FUNCTION_OPS = ("Softmax", "Sigmoid", "Tanh", "Erf", "Gelu", "Exp", "Sqrt",
                      "LayerNormalization")
MOVEMENT_OPS = ("Flatten", "Reshape", "Transpose", "Identity", "Concat", "Split", "Slice",
                "Squeeze", "Unsqueeze", "Gather")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: Shape
    dtype: str = "float32"

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @staticmethod
    def from_json(d: dict) -> "TensorInfo":
        return TensorInfo(str(d["name"]), tuple(d["shape"]), str(d["dtype"]))


@dataclass
class Node:
    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"name": self.name, "op": self.op, "inputs": list(self.inputs),
                "outputs": list(self.outputs), "attrs": {k: _jsonable(v) for k, v in self.attrs.items()}}

    @staticmethod
    def from_json(d: dict) -> "Node":
        return Node(str(d["name"]), str(d["op"]), [str(a) for a in d["inputs"]],
                    [str(a) for a in d["outputs"]], {k: _tupled(v) for k, v in d["attrs"].items()})


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _int_tuple(v) -> bool:
    return isinstance(v, tuple) and all(_is_int(a) for a in v)


def _nested_ints(v) -> bool:
    return _is_int(v) or (isinstance(v, tuple) and all(_nested_ints(a) for a in v))


_ATTR_CHECKS = {
    **{k: _int_tuple for k in ("kernel_shape", "strides", "pads", "dilations", "perm", "shape",
                               "split", "axes", "starts", "ends", "steps")},
    **{k: _is_int for k in ("group", "axis", "ceil_mode", "count_include_pad")},
    "epsilon": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0,
    "approximate": lambda v: v in ("none", "tanh"),
    "indices": _nested_ints,
}

# (min, max) number of inputs; ops not listed take exactly one
_ARITY = {"Conv": (2, 3), "Gemm": (2, 3), "MatMul": (2, 2), "Add": (2, 2), "Sub": (2, 2),
          "Mul": (2, 2), "BatchNormalization": (3, 3), "LayerNormalization": (2, 3),
          "Concat": (1, 1 << 16)}


def _jsonable(v):
    if isinstance(v, (tuple, list)):
        return [_jsonable(a) for a in v]
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def _tupled(v):
    if isinstance(v, list):
        return tuple(_tupled(a) for a in v)
    return v


def _prod(shape: Iterable) -> int:
    p = 1
    for d in shape:
        p *= int(d)
    return p


def lift_2d(node: Node) -> dict:
    """Conv/pool attributes as 2-D parameters (1-D ops get a leading size-1 axis).

    Returns kernel (kh, kw), strides (sh, sw), pads (top, left, bottom, right),
    dilations (dh, dw), and ``spatial`` (1 or 2).
    """
    k = tuple(node.attrs["kernel_shape"])
    s = tuple(node.attrs["strides"])
    d = tuple(node.attrs["dilations"])
    p = tuple(node.attrs["pads"])
    if len(k) == 1:
        return {"kernel": (1, k[0]), "strides": (1, s[0]), "dilations": (1, d[0]),
                "pads": (0, p[0], 0, p[1]), "spatial": 1}
    return {"kernel": k, "strides": s, "dilations": d, "pads": (p[0], p[1], p[2], p[3]),
            "spatial": 2}


@dataclass
class Graph:
    name: str
    nodes: list[Node]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    initializers: dict[str, np.ndarray]
    shapes: dict[str, Shape]
    # Shapes of the weights; filled from ``initializers`` when not given. A graph read
    # with ``from_public_bytes`` has weight_info but no initializer values.
    weight_info: dict[str, TensorInfo] | None = None
    # What the first output means and how the ONNX graph's own outputs are rebuilt from it
    # (classes, decision rule, label outputs, ZipMap): set by the importer for models with
    # ai.onnx.ml steps, None otherwise; see secinfer.ir.outputs. Not part of the public bytes.
    meaning: dict | None = None

    def __post_init__(self) -> None:
        if self.weight_info is None:
            self.weight_info = {k: TensorInfo(k, tuple(v.shape), str(v.dtype))
                                for k, v in self.initializers.items()}

    # ---- structure --------------------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    def is_weight(self, name: str) -> bool:
        return name in self.weight_info

    @property
    def has_weights(self) -> bool:
        return all(k in self.initializers for k in self.weight_info)

    def require_weights(self) -> None:
        missing = [k for k in self.weight_info if k not in self.initializers]
        if missing:
            raise ModelError(f"graph {self.name!r} has no weight values (public architecture "
                             f"only); missing e.g. {missing[0]!r}")

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                out.setdefault(i, []).append(n)
        return out

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def validate(self) -> None:
        """Check topological order, known ops/attributes, and that every shape is known."""
        defined = set(self.input_names) | set(self.weight_info)
        for n in self.nodes:
            spec = OP_SPECS.get(n.op)
            if spec is None:
                raise ModelError(f"node {n.name!r}: {n.op!r} is not a canonical op")
            if set(n.attrs) != set(spec[0]):
                raise ModelError(f"node {n.name!r} ({n.op}): attributes {sorted(n.attrs)}, "
                                 f"expected {sorted(spec[0])}")
            for k, v in n.attrs.items():
                if not _ATTR_CHECKS[k](v):
                    raise ModelError(f"node {n.name!r} ({n.op}): bad value for attribute {k!r}: {v!r}")
            lo, hi = _ARITY.get(n.op, (1, 1))
            if not lo <= len(n.inputs) <= hi or not n.outputs:
                raise ModelError(f"node {n.name!r} ({n.op}): {len(n.inputs)} inputs, expected "
                                 f"{lo}..{hi}")
            if n.op in ("Conv", "Gemm", "BatchNormalization", "LayerNormalization"):
                if any(i not in self.weight_info for i in n.inputs[1:]):
                    raise ModelError(f"node {n.name!r} ({n.op}): parameters must be weights")
            for i in n.inputs:
                if i not in defined:
                    raise ModelError(f"node {n.name!r} reads {i!r} before it is defined")
            for o in n.outputs:
                if o in defined:
                    raise ModelError(f"tensor {o!r} is defined twice")
                defined.add(o)
        for t in list(self.outputs) + [TensorInfo(o, ()) for n in self.nodes for o in n.outputs]:
            if t.name not in defined or t.name not in self.shapes:
                raise ModelError(f"tensor {t.name!r} has no definition or no shape")

    # ---- batch ------------------------------------------------------------------------
    def with_batch(self, n: int) -> "Graph":
        """A copy whose symbolic (None) input dimensions are fixed to ``n``."""
        from secinfer.ir.shapes import infer_shapes

        if int(n) < 1:
            raise ShapeError(f"batch size must be >= 1, got {n}")
        inputs = [TensorInfo(t.name, tuple(int(n) if d is None else d for d in t.shape), t.dtype)
                  for t in self.inputs]
        g = Graph(self.name, [Node(x.name, x.op, list(x.inputs), list(x.outputs), dict(x.attrs))
                              for x in self.nodes],
                  inputs, [], dict(self.initializers), {}, dict(self.weight_info))
        g.shapes = infer_shapes(g)
        g.outputs = [TensorInfo(t.name, g.shapes[t.name], t.dtype) for t in self.outputs]
        g.meaning = None if self.meaning is None else dict(self.meaning)
        return g

    def batch_input(self, x) -> np.ndarray:
        """One sample without its batch axis becomes a batch of one; a batch stays as it is.
        (Single-input models; the shape itself is checked by ``check_input``.)"""
        x = np.asarray(x)
        exp = self.inputs[0].shape if len(self.inputs) == 1 else None
        if exp is not None and x.ndim == len(exp) - 1 and all(
                e is None or e == g for e, g in zip(exp[1:], x.shape)):
            return x[None, ...]
        return x

    def check_input(self, name: str, x: np.ndarray) -> None:
        info = next((t for t in self.inputs if t.name == name), None)
        if info is None:
            raise ShapeError(f"model {self.name!r} has no input {name!r}; inputs: {self.input_names}")
        got = tuple(np.shape(x))
        exp = info.shape
        if len(got) != len(exp) or any(e is not None and e != g for e, g in zip(exp, got)):
            shown = "(" + ", ".join("N" if e is None else str(e) for e in exp) + ")"
            raise ShapeError(f"input {name!r} of model {self.name!r}: expected shape {shown}, "
                             f"got {got}")

    def resolve_feeds(self, x) -> dict[str, np.ndarray]:
        """Accept one array (single-input models) or a name->array dict; check shapes."""
        if isinstance(x, dict):
            feeds = dict(x)
        else:
            if len(self.inputs) != 1:
                raise ShapeError(f"model {self.name!r} has {len(self.inputs)} inputs "
                                 f"{self.input_names}; pass a dict")
            feeds = {self.inputs[0].name: x}
        for t in self.inputs:
            if t.name not in feeds:
                raise ShapeError(f"missing input {t.name!r} for model {self.name!r}")
        for k, v in feeds.items():
            self.check_input(k, v)
        return feeds

    # ---- public architecture ------------------------------------------------------------
    def public_dict(self) -> dict:
        return {
            "format": "secinfer-ir/1", "name": self.name,
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
            "weights": [t.to_json() for t in self.weight_info.values()],
            "nodes": [n.to_json() for n in self.nodes],
            "shapes": {k: list(v) for k, v in self.shapes.items()},
        }

    def public_bytes(self) -> bytes:
        """The architecture without weight values (JSON, UTF-8)."""
        return json.dumps(self.public_dict(), sort_keys=True, separators=(",", ":")).encode()

    @staticmethod
    def from_public_bytes(b: bytes) -> "Graph":
        try:
            d = json.loads(bytes(b).decode("utf-8"))
            if d.get("format") != "secinfer-ir/1":
                raise ModelError(f"unknown architecture format {d.get('format')!r}")
            g = Graph(str(d["name"]), [Node.from_json(n) for n in d["nodes"]],
                      [TensorInfo.from_json(t) for t in d["inputs"]],
                      [TensorInfo.from_json(t) for t in d["outputs"]], {},
                      {str(k): tuple(v) for k, v in d["shapes"].items()},
                      {t["name"]: TensorInfo.from_json(t) for t in d["weights"]})
        except ModelError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelError(f"malformed public architecture bytes: {e}") from None
        g.validate()
        g.check_shapes()
        return g

    def check_shapes(self) -> None:
        """Recompute every shape from the inputs and attributes; they must agree."""
        from secinfer.ir.shapes import infer_shapes

        try:
            inferred = infer_shapes(self)
        except ShapeError as e:
            raise ModelError(f"inconsistent architecture: {e}") from None
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise ModelError(f"inconsistent architecture: bad attribute or tensor ({e!r})") from None
        for k, v in inferred.items():
            if tuple(self.shapes.get(k, ())) != tuple(v):
                raise ModelError(f"inconsistent architecture: tensor {k!r} has shape "
                                 f"{self.shapes.get(k)} but its inputs give {v}")

    # ---- statistics ---------------------------------------------------------------------
    def node_stats(self, n: Node) -> dict:
        out_shape = self.shapes[n.outputs[0]]
        params = sum(_prod(self.weight_info[i].shape) for i in n.inputs if i in self.weight_info)
        concrete = tuple(1 if d is None else d for d in out_shape)
        macs = 0
        if n.op == "Conv":
            w = self.weight_info[n.inputs[1]].shape
            macs = _prod(concrete) * _prod(w[1:])
        elif n.op in ("Gemm", "MatMul"):
            a = self.shapes[n.inputs[0]]
            macs = _prod(concrete) * int(a[-1] if a[-1] is not None else 1)
        return {"name": n.name, "op": n.op, "output": out_shape, "params": params, "macs": macs}

    def stats(self) -> dict:
        rows = [self.node_stats(n) for n in self.nodes]
        ops: dict[str, int] = {}
        for r in rows:
            ops[r["op"]] = ops.get(r["op"], 0) + 1
        return {"name": self.name, "nodes": len(rows), "ops": ops,
                "params": sum(_prod(t.shape) for t in self.weight_info.values()),
                "macs": sum(r["macs"] for r in rows), "layers": rows,
                "inputs": [(t.name, t.shape) for t in self.inputs],
                "outputs": [(t.name, t.shape) for t in self.outputs]}

    def summary(self) -> str:
        """Human-readable table: every node, its output shape, params and MACs."""
        st = self.stats()
        fmt = lambda s: "(" + ", ".join("N" if d is None else str(d) for d in s) + ")"  # noqa: E731
        lines = [f"model {self.name}",
                 "inputs:  " + ", ".join(f"{n} {fmt(s)}" for n, s in st["inputs"]),
                 "outputs: " + ", ".join(f"{n} {fmt(s)}" for n, s in st["outputs"]),
                 f"{'node':<28} {'op':<20} {'output':<22} {'params':>10} {'MACs':>14}"]
        for r in st["layers"]:
            lines.append(f"{r['name'][:28]:<28} {r['op']:<20} {fmt(r['output']):<22} "
                         f"{r['params']:>10,} {r['macs']:>14,}")
        b0 = self.inputs[0].shape[0] if self.inputs and self.inputs[0].shape else None
        per = "per example" if b0 is None else f"for the batch of {b0}"
        lines.append(f"total: {st['nodes']} nodes, {st['params']:,} parameters, "
                     f"{st['macs']:,} MACs {per}")
        lines.append("ops: " + ", ".join(f"{k} x{v}" for k, v in sorted(st["ops"].items())))
        return "\n".join(lines)
