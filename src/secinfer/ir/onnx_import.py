"""ONNX -> canonical ``Graph`` (see docs/ir.md for what each op looks like afterwards).

Steps: parse (``ModelError`` on malformed bytes), ``onnx.checker``, ONNX shape inference,
then one pass over the (topologically sorted) nodes that

* folds every node whose inputs are all constants (ONNX's reference evaluator),
* folds ``Shape`` of tensors whose shape is static,
* drops Identity / Dropout / float-to-float Cast (aliases),
* rewrites each remaining node into a canonical op, checking every attribute: an
  attribute value secinfer does not implement raises ``UnsupportedOpError`` rather than
  being ignored,

followed by the graph passes in ``secinfer.ir.passes`` (bias fusion, BatchNorm folding,
dead-code removal) and a cross-check of our shapes against ONNX's shape inference.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from secinfer.errors import ModelError, ShapeError, UnsupportedOpError
from secinfer.ir.graph import Graph, Node, TensorInfo
from secinfer.ir.onnx_ml import ML_DOMAIN, MODELS_DOC, MLImports, ml_refusal_hint
from secinfer.ir.onnx_movement import _DYN, MovementImports
from secinfer.ir.shapes import infer_node

_FLOAT_TYPES = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.DOUBLE: "float64",
                onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16"}
_NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                     "Multinomial", "Bernoulli"}
# ops whose first input may be a constant (they register constants with ``operand``)
_ANY_OPERAND = {"Add", "Sub", "Mul", "Div", "MatMul", "Concat", "Sum"}
# A dynamic dimension read by ``Shape`` is folded as the marker _DYN; only these data
# movements may carry it, and only a Reshape may consume it (as a 0 copying that axis).
_DYN_MOVES = {"Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Identity", "Cast"}


def _read_model(src) -> onnx.ModelProto:
    if isinstance(src, onnx.ModelProto):
        return src
    if isinstance(src, (bytes, bytearray, memoryview)):
        data = bytes(src)
        where = "<bytes>"
    elif isinstance(src, (str, os.PathLike)):
        where = os.fspath(src)
        try:
            with open(where, "rb") as fh:
                data = fh.read()
        except OSError as e:
            raise ModelError(f"cannot read model file {where!r}: {e.strerror or e}") from None
    else:
        raise ModelError(f"load_model expects a path, bytes or onnx.ModelProto, got {type(src).__name__}")
    m = onnx.ModelProto()
    try:
        m.ParseFromString(data)
    except Exception as e:  # protobuf raises DecodeError (and sometimes others)
        raise ModelError(f"{where}: not a valid ONNX model (protobuf decode failed: {e})") from None
    if not m.HasField("graph") or len(m.graph.node) == 0:
        raise ModelError(f"{where}: not a valid ONNX model (no graph or no nodes)")
    return m


def _attr_dict(node: onnx.NodeProto) -> dict[str, Any]:
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, list):
            v = [x.decode() if isinstance(x, bytes) else x for x in v]
        out[a.name] = v
    return out


def _dims(vi: onnx.ValueInfoProto) -> tuple | None:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)


class _Importer(MovementImports, MLImports):
    def __init__(self, model: onnx.ModelProto, batch: int | None, input_shapes: dict | None):
        self.model = model
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.ml_init()
        self.batch = batch
        self.input_shapes = dict(input_shapes or {})
        self.consts: dict[str, np.ndarray] = {}
        self.dynamic: set[str] = set()  # constants that hold the _DYN marker
        # zero Pad outputs waiting to be merged into the Conv that reads them:
        # name -> (padded tensor, spatial pads as begins + ends)
        self.pending_pads: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.weights: dict[str, np.ndarray] = {}
        self.shapes: dict[str, tuple] = {}
        self.alias: dict[str, str] = {}
        self.nodes: list[Node] = []
        self.names: set[str] = set()
        self.cur = "-"

    # ---- helpers ------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.names or name in self.shapes or name in self.consts:
            name, i = f"{base}_{i}", i + 1
        self.names.add(name)
        return name

    def real(self, name: str) -> str:
        while name in self.alias:
            name = self.alias[name]
        return name

    def unsupported(self, op: str, detail: str):
        return UnsupportedOpError(op, self.cur, detail)

    def const(self, name: str, op: str, what: str, dynamic_ok: bool = False) -> np.ndarray:
        if name not in self.consts:
            raise self.unsupported(op, f"{what} must be a constant (initializer)")
        if name in self.dynamic and not dynamic_ok:
            raise self.unsupported(op, f"{what} depends on the dynamic batch size; load the "
                                       f"model with a fixed batch (load_model(..., batch=n))")
        return self.consts[name]

    def weight(self, arr: np.ndarray, base: str, op: str) -> str:
        arr = np.asarray(arr)
        if arr.dtype.kind != "f":
            raise self.unsupported(op, f"constant {base!r} has non-float dtype {arr.dtype}")
        name = self.fresh(base)
        self.weights[name] = arr.astype(np.float64)
        self.shapes[name] = tuple(arr.shape)
        return name

    def operand(self, name: str, op: str) -> str:
        """Name of a tensor as a canonical input: activations as is, constants as weights."""
        if name in self.consts:
            if name in self.weights:
                return name
            arr = self.const(name, op, f"constant {name!r}")
            if arr.dtype.kind != "f":
                raise self.unsupported(op, f"constant {name!r} has non-float dtype {arr.dtype}")
            self.weights[name] = arr.astype(np.float64)
            self.shapes[name] = tuple(arr.shape)
            return name
        return name

    def emit(self, op: str, inputs: list[str], outputs: list[str], attrs: dict | None = None,
             name: str | None = None) -> Node:
        n = Node(self.fresh(name or self.cur), op, list(inputs), list(outputs), dict(attrs or {}))
        try:
            outs = infer_node(n, [self.shapes[i] for i in n.inputs])
        except ShapeError as e:
            raise ModelError(f"node {self.cur!r} ({op}): {e}") from None
        for o, s in zip(outputs, outs):
            self.shapes[o] = tuple(s)
        self.nodes.append(n)
        return n

    def check_attrs(self, op: str, attrs: dict, allowed: set[str]) -> None:
        extra = set(attrs) - allowed
        if extra:
            raise self.unsupported(op, f"attribute(s) {sorted(extra)} not supported")

    def static_shape(self, name: str, op: str) -> tuple:
        s = self.shapes[name]
        if any(d is None for d in s):
            raise self.unsupported(op, f"needs the static shape of {name!r} but it is {s}; "
                                        f"load the model with a fixed batch")
        return s

    # ---- driver -------------------------------------------------------------------------
    def run(self) -> Graph:
        g = self.model.graph
        for init in g.initializer:
            self.consts[init.name] = numpy_helper.to_array(init)
        inputs = []
        for vi in g.input:
            if vi.name in self.consts:
                continue  # old-style models list initializers as inputs too
            elem = vi.type.tensor_type.elem_type
            if elem not in _FLOAT_TYPES:
                raise UnsupportedOpError("<graph input>", vi.name, f"input dtype "
                                         f"{onnx.TensorProto.DataType.Name(elem)} (only float inputs)")
            shape = self.input_shapes.get(vi.name)
            if shape is None:
                shape = _dims(vi)
                if shape is None:
                    raise ModelError(f"input {vi.name!r} has no shape; pass input_shapes")
                if shape and shape[0] is None and self.batch is not None:
                    shape = (int(self.batch),) + shape[1:]
                if shape and shape[0] == 0:
                    shape = (None,) + shape[1:]
                bad = [i for i, d in enumerate(shape) if d is None and i > 0]
                if bad:
                    raise ModelError(f"input {vi.name!r}: dimension {bad[0]} is symbolic; only the "
                                     f"batch dimension may be (pass input_shapes)")
            shape = tuple(None if d is None else int(d) for d in shape)
            self.shapes[vi.name] = shape
            inputs.append(TensorInfo(vi.name, shape, _FLOAT_TYPES[elem]))
        if not inputs:
            raise ModelError("the model has no (non-constant) input")
        unknown = set(self.input_shapes) - {t.name for t in inputs}
        if unknown:
            raise ModelError(f"input_shapes names unknown input(s) {sorted(unknown)}; "
                             f"inputs: {[t.name for t in inputs]}")
        self.refuse_unknown_ops()
        for node in g.node:
            self.cur = node.name or f"{node.op_type}_{len(self.nodes)}"
            self.import_node(node)
        return self.finish(inputs)

    def refuse_unknown_ops(self) -> None:
        """Name every node whose operator secinfer does not import, all at once.

        A default-domain node without a handler passes when all its inputs are constants
        (it is folded); other domains than ai.onnx.ml are refused whole."""
        g = self.model.graph
        const = {i.name for i in g.initializer}
        refused: list[tuple[str, str, str]] = []
        for k, node in enumerate(g.node):
            op, name = node.op_type, node.name or f"{node.op_type}_{k}"
            present = [i for i in node.input if i]
            if node.domain in ("", "ai.onnx"):
                if op == "Shape" or (all(i in const for i in present) and op not in _NONDETERMINISTIC):
                    const.update(o for o in node.output if o)
                    continue
                ok = op in ("Shape",) or hasattr(self, f"op_{op}")
                hint = "operator not implemented"
            elif node.domain == ML_DOMAIN:
                ok = self.ml_handler(op) is not None
                hint = ml_refusal_hint(op)
            else:
                ok, hint = False, f"domain {node.domain!r} (only the default ONNX domain and ai.onnx.ml)"
            if not ok:
                refused.append((op, name, hint))
        if refused:
            listed = ", ".join(f"{op} {name!r}" for op, name, _ in refused)
            op, name, hint = refused[0]
            raise UnsupportedOpError(op, name, f"{hint}. Refused node(s): {listed}. See {MODELS_DOC} "
                                               f"for what is supported and how to export a model")

    def finish(self, inputs: list[TensorInfo]) -> Graph:
        from secinfer.ir.passes import optimize

        g = self.model.graph
        outputs = []
        renames: dict[str, str] = {}
        taken = {t.name for t in inputs}
        kept, meaning = self.ml_outputs([vi.name for vi in g.output])
        onnx_names = {vi.name for vi in g.output}
        for onnx_name, src, same_name in kept:
            src = self.real(src)
            name = onnx_name if same_name else src
            if src in self.pending_pads:
                raise UnsupportedOpError("Pad", src, "a padded tensor as a graph output")
            if src in self.consts:
                raise ModelError(f"output {onnx_name!r} does not depend on the input (constant)")
            if src not in self.shapes:
                raise ModelError(f"output {onnx_name!r} is never computed")
            if src != name:
                producer_out = src not in taken and src not in renames and src not in self.weights
                if producer_out and src not in onnx_names:
                    renames[src] = name
                else:
                    self.cur = f"output_{name}"
                    self.emit("Identity", [src], [name])
            taken.add(name)
            outputs.append(name)
        if meaning is not None and outputs:
            meaning["output"] = outputs[0]
        if renames:
            for n in self.nodes:
                n.inputs = [renames.get(i, i) for i in n.inputs]
                n.outputs = [renames.get(o, o) for o in n.outputs]
            for a, b in renames.items():
                self.shapes[b] = self.shapes.pop(a)
        name = g.name or "model"
        graph = Graph(name, self.nodes, inputs, [], self.weights, self.shapes)
        graph = optimize(graph, outputs)
        elem = {vi.name: vi.type.tensor_type.elem_type for vi in g.output}
        graph.outputs = [TensorInfo(o, graph.shapes[o], _FLOAT_TYPES.get(elem.get(o), "float32"))
                         for o in outputs]
        graph.meaning = meaning
        graph.validate()
        return graph

    # ---- one node -----------------------------------------------------------------------
    def import_node(self, node: onnx.NodeProto) -> None:
        op = node.op_type
        ins = [self.real(i) if i else "" for i in node.input]
        attrs = _attr_dict(node)
        if any(i in self.labels for i in ins if i):
            self.import_label_step(node, ins, attrs)
            return
        if node.domain == ML_DOMAIN:
            handler = self.ml_handler(op)
            if handler is None:
                raise self.unsupported(op, ml_refusal_hint(op))
            if op not in ("Normalizer", "ZipMap", "ArrayFeatureExtractor"):
                ins = [self.materialize_pair(i) if i in self.pairs else i for i in ins]
            handler(node, ins, attrs)
            return
        if node.domain not in ("", "ai.onnx"):
            raise self.unsupported(op, f"domain {node.domain!r}")
        if self.binary_pair_step(node, ins, attrs):
            return
        ins = [self.materialize_pair(i) if i in self.pairs else i for i in ins]
        if op in _NONDETERMINISTIC:
            raise self.unsupported(op, "random operators are not supported")
        present = [i for i in ins if i]
        if all(i in self.consts for i in present) and op not in ("Identity",):
            self.fold(node, ins)
            return
        if op == "Shape":
            self.fold_shape(node, ins[0], attrs)
            return
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            raise self.unsupported(op, "operator not implemented")
        if op not in _ANY_OPERAND and ins[0] in self.consts:
            raise self.unsupported(op, "the first input is a constant while another input is not")
        for k, i in enumerate(ins):
            if i in self.pending_pads and not (op == "Conv" and k == 0):
                raise self.unsupported("Pad", "zero padding is supported only when a Conv reads it")
        handler(node, ins, attrs)

    def fold(self, node: onnx.NodeProto, ins: list[str]) -> None:
        feeds = {}
        for orig, r in zip(node.input, ins):
            if orig:
                feeds[orig] = self.consts[r]
        dyn = any(r in self.dynamic for r in ins if r)
        if dyn and node.op_type not in _DYN_MOVES:
            raise self.unsupported(node.op_type, "computes with the dynamic batch size; load the "
                                                 "model with a fixed batch (load_model(..., batch=n))")
        try:
            res = _evaluate(node, self.opset, feeds)
        except Exception as e:  # the reference evaluator reports bad models many ways
            raise ModelError(f"node {self.cur!r} ({node.op_type}): constant folding failed: {e}") from None
        for o, v in zip(node.output, res):
            if o:
                v = np.asarray(v)
                self.consts[o] = v
                if dyn and v.dtype.kind in "iu" and np.any(v == _DYN):
                    self.dynamic.add(o)

    def fold_shape(self, node, x: str, attrs) -> None:
        self.check_attrs("Shape", attrs, {"start", "end"})
        s = self.shapes[x]
        start, end = attrs.get("start", 0), attrs.get("end", len(s))
        part = s[slice(start, end)]
        self.consts[node.output[0]] = np.array([_DYN if d is None else d for d in part], dtype=np.int64)
        if any(d is None for d in part):
            self.dynamic.add(node.output[0])

    # ---- handlers -------------------------------------------------------------------------
    def op_Identity(self, node, ins, attrs):
        if ins[0] in self.consts:
            self.consts[node.output[0]] = self.consts[ins[0]]
        else:
            self.alias[node.output[0]] = ins[0]

    def op_Dropout(self, node, ins, attrs):
        self.check_attrs("Dropout", attrs, {"ratio", "seed", "is_test"})
        if len(ins) > 2 and ins[2]:
            if ins[2] not in self.consts or bool(self.consts[ins[2]]):
                raise self.unsupported("Dropout", "training_mode must be a constant false")
        if len(node.output) > 1 and node.output[1]:
            raise self.unsupported("Dropout", "the mask output is not supported")
        self.alias[node.output[0]] = ins[0]

    def op_Cast(self, node, ins, attrs):
        self.check_attrs("Cast", attrs, {"to", "saturate", "round_mode"})
        if attrs["to"] not in _FLOAT_TYPES:
            raise self.unsupported("Cast", "only casts between float types are supported")
        self.alias[node.output[0]] = ins[0]

    def _unary(self, node, ins, attrs):
        self.check_attrs(node.op_type, attrs, set())
        self.emit(node.op_type, [ins[0]], [node.output[0]])

    op_Relu = op_Sigmoid = op_Tanh = op_Erf = op_Exp = op_Sqrt = op_Neg = _unary

    def op_Gelu(self, node, ins, attrs):
        self.check_attrs("Gelu", attrs, {"approximate"})
        appr = attrs.get("approximate", "none")
        if appr not in ("none", "tanh"):
            raise self.unsupported("Gelu", f"approximate={appr!r}")
        self.emit("Gelu", [ins[0]], [node.output[0]], {"approximate": appr})

    def _binary(self, node, ins, attrs):
        self.check_attrs(node.op_type, attrs, set())
        a, b = (self.operand(i, node.op_type) for i in ins[:2])
        self.emit(node.op_type, [a, b], [node.output[0]])

    op_Add = op_Sub = op_Mul = _binary

    def op_Div(self, node, ins, attrs):
        self.check_attrs("Div", attrs, set())
        if ins[1] not in self.consts:
            raise self.unsupported("Div", "the divisor must be a constant")
        c = self.consts[ins[1]]
        if c.dtype.kind != "f":
            raise self.unsupported("Div", f"integer divisor {c.dtype}")
        if np.any(c == 0):
            raise ModelError(f"node {self.cur!r} (Div): division by a constant zero")
        recip = self.weight(1.0 / c.astype(np.float64), f"{ins[1]}_recip", "Div")
        self.emit("Mul", [self.operand(ins[0], "Div"), recip], [node.output[0]])

    def op_Sum(self, node, ins, attrs):
        self.check_attrs("Sum", attrs, set())
        acc = self.operand(ins[0], "Sum")
        for k, i in enumerate(ins[1:]):
            out = node.output[0] if k == len(ins) - 2 else self.fresh(f"{self.cur}_acc{k}")
            self.emit("Add", [acc, self.operand(i, "Sum")], [out])
            acc = out
        if len(ins) == 1:
            self.emit("Identity", [acc], [node.output[0]])

    # -- linear ---------------------------------------------------------------------------
    def _window_attrs(self, op, attrs, x, kernel, defaults_pads=True):
        nsp = len(kernel)
        if nsp not in (1, 2):
            raise self.unsupported(op, f"{nsp}-D windows (only 1-D and 2-D)")
        strides = tuple(attrs.get("strides", (1,) * nsp))
        dil = tuple(attrs.get("dilations", (1,) * nsp))
        pads = tuple(attrs.get("pads", (0,) * (2 * nsp)))
        if len(strides) != nsp or len(dil) != nsp or len(pads) != 2 * nsp:
            raise ModelError(f"node {self.cur!r} ({op}): strides/dilations/pads lengths do not "
                             f"match a {nsp}-D kernel")
        if min(strides) < 1 or min(dil) < 1 or min(pads) < 0:
            raise self.unsupported(op, f"strides {strides}, dilations {dil}, pads {pads}")
        auto = attrs.get("auto_pad", "NOTSET")
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            sp = self.static_shape(x, op)[2:]
            begins, ends = [], []
            for i in range(nsp):
                out = -(-sp[i] // strides[i])
                tot = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - sp[i])
                small, big = tot // 2, tot - tot // 2
                begins.append(small if auto == "SAME_UPPER" else big)
                ends.append(big if auto == "SAME_UPPER" else small)
            pads = tuple(begins + ends)
        elif auto == "VALID":
            pads = (0,) * (2 * nsp)
        elif auto != "NOTSET":
            raise self.unsupported(op, f"auto_pad={auto!r}")
        return {"kernel_shape": tuple(int(k) for k in kernel), "strides": strides,
                "pads": pads, "dilations": dil}

    def op_Conv(self, node, ins, attrs):
        self.check_attrs("Conv", attrs, {"auto_pad", "dilations", "group", "kernel_shape",
                                         "pads", "strides"})
        w = self.const(ins[1], "Conv", "the weight W")
        if "kernel_shape" in attrs and tuple(attrs["kernel_shape"]) != tuple(w.shape[2:]):
            raise ModelError(f"node {self.cur!r} (Conv): kernel_shape {attrs['kernel_shape']} "
                             f"does not match the weight shape {w.shape}")
        a = self._window_attrs("Conv", attrs, ins[0], w.shape[2:])
        a["group"] = int(attrs.get("group", 1))
        x = ins[0]
        if x in self.pending_pads:  # Conv(Pad(x)) = Conv(x) with larger pads
            if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
                raise self.unsupported("Pad", "a Pad before a Conv with auto_pad SAME_*")
            x, extra = self.pending_pads[x]
            a["pads"] = tuple(int(p) + int(e) for p, e in zip(a["pads"], extra))
        inputs = [x, self.operand(ins[1], "Conv")]
        if len(ins) > 2 and ins[2]:
            self.const(ins[2], "Conv", "the bias B")
            inputs.append(self.operand(ins[2], "Conv"))
        self.emit("Conv", inputs, [node.output[0]], a)

    def op_Pad(self, node, ins, attrs):
        self.check_attrs("Pad", attrs, {"mode", "pads", "value"})
        if attrs.get("mode", "constant") != "constant":
            raise self.unsupported("Pad", f"mode={attrs.get('mode')!r}")
        shape = self.shapes[ins[0]]
        r = len(shape)
        if self.opset < 11:
            pads, value = list(attrs["pads"]), float(attrs.get("value", 0.0))
            axes = list(range(r))
        else:
            pads = [int(v) for v in self.const(ins[1], "Pad", "pads").reshape(-1)]
            value = float(self.const(ins[2], "Pad", "constant_value").reshape(-1)[0]) \
                if len(ins) > 2 and ins[2] else 0.0
            axes = ([int(v) % r for v in self.const(ins[3], "Pad", "axes").reshape(-1)]
                    if len(ins) > 3 and ins[3] else list(range(r)))
        if value != 0.0:
            raise self.unsupported("Pad", f"constant value {value} (only zero padding)")
        full = [0] * (2 * r)
        for k, ax in enumerate(axes):
            full[ax], full[ax + r] = pads[k], pads[k + len(axes)]
        if min(full) < 0 or full[0] or full[1] or full[r] or full[r + 1] or r not in (3, 4):
            raise self.unsupported("Pad", f"pads {tuple(full)}: only non-negative spatial zero "
                                          f"padding of 1-D/2-D activations")
        spatial = tuple(full[2:r]) + tuple(full[r + 2:])
        self.pending_pads[node.output[0]] = (ins[0], spatial)
        self.shapes[node.output[0]] = shape[:2] + tuple(
            d + full[i] + full[i + r] for i, d in enumerate(shape) if i >= 2)

    def op_Clip(self, node, ins, attrs):
        self.check_attrs("Clip", attrs, {"min", "max"})
        if self.opset < 11:
            lo, hi = attrs.get("min"), attrs.get("max")
        else:
            lo = float(self.const(ins[1], "Clip", "min")) if len(ins) > 1 and ins[1] else None
            hi = float(self.const(ins[2], "Clip", "max")) if len(ins) > 2 and ins[2] else None
        if lo != 0.0 or (hi is not None and hi != float("inf")):
            raise self.unsupported("Clip", f"min={lo}, max={hi} (only Clip(min=0) = Relu)")
        self.emit("Relu", [ins[0]], [node.output[0]])

    def op_Pow(self, node, ins, attrs):
        self.check_attrs("Pow", attrs, set())
        e = self.const(ins[1], "Pow", "the exponent")
        if e.size != 1 or float(e.reshape(-1)[0]) not in (0.5, 1.0, 2.0):
            raise self.unsupported("Pow", "only the constant exponents 0.5, 1 and 2")
        p = float(e.reshape(-1)[0])
        if p == 1.0:
            self.alias[node.output[0]] = ins[0]
        elif p == 2.0:
            self.emit("Mul", [ins[0], ins[0]], [node.output[0]])
        else:
            self.emit("Sqrt", [ins[0]], [node.output[0]])

    def op_ReduceMean(self, node, ins, attrs):
        self.check_attrs("ReduceMean", attrs, {"axes", "keepdims", "noop_with_empty_axes"})
        r = len(self.shapes[ins[0]])
        axes = (self._int_list(node, ins, attrs, "axes", 1, "ReduceMean")
                if self.opset >= 18 else attrs.get("axes"))
        if axes is None or r < 3 or sorted(a % r for a in axes) != list(range(2, r)):
            raise self.unsupported("ReduceMean", "only the mean over all spatial axes "
                                                 "(= GlobalAveragePool)")
        if attrs.get("keepdims", 1):
            self.emit("GlobalAveragePool", [ins[0]], [node.output[0]])
            return
        mid = self.fresh(f"{self.cur}_gap")
        self.emit("GlobalAveragePool", [ins[0]], [mid])
        self.emit("Flatten", [mid], [node.output[0]], {"axis": 1}, name=f"{self.cur}_squeeze")

    def op_Gemm(self, node, ins, attrs):
        self.check_attrs("Gemm", attrs, {"alpha", "beta", "transA", "transB"})
        alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
        b = self.const(ins[1], "Gemm", "operand B").astype(np.float64)
        if ins[0] in self.consts:
            raise self.unsupported("Gemm", "a constant operand A")
        if b.ndim != 2:
            raise ModelError(f"node {self.cur!r} (Gemm): B must be 2-D, got {b.shape}")
        if attrs.get("transB", 0):
            b = b.T
        w = self.weight(b * alpha if alpha != 1.0 else b, f"{ins[1]}_W", "Gemm")
        x = ins[0]
        if len(self.shapes[x]) != 2:
            raise ModelError(f"node {self.cur!r} (Gemm): A must be 2-D, got {self.shapes[x]}")
        if attrs.get("transA", 0):
            xt = self.fresh(f"{self.cur}_At")
            self.emit("Transpose", [x], [xt], {"perm": (1, 0)}, name=f"{self.cur}_transA")
            x = xt
        n = b.shape[1]
        m = self.shapes[x][0]
        c = None
        if len(ins) > 2 and ins[2] and beta != 0.0:
            c = self.const(ins[2], "Gemm", "operand C").astype(np.float64) * beta
        if c is None:
            self.emit("Gemm", [x, w], [node.output[0]])
            return
        if c.size == 1 or (c.ndim >= 1 and c.shape[-1] == n and c.size == n):
            bias = np.broadcast_to(c.reshape(-1), (n,)).copy()
            self.emit("Gemm", [x, w, self.weight(bias, f"{ins[2]}_b", "Gemm")], [node.output[0]])
            return
        if c.shape[-1] not in (1, n) or (c.ndim == 2 and c.shape[0] not in (1, m)):
            raise ModelError(f"node {self.cur!r} (Gemm): C of shape {c.shape} does not broadcast")
        mid = self.fresh(f"{self.cur}_xw")
        self.emit("Gemm", [x, w], [mid])
        self.emit("Add", [mid, self.weight(c, f"{ins[2]}_C", "Gemm")], [node.output[0]],
                  name=f"{self.cur}_addC")

    def op_MatMul(self, node, ins, attrs):
        self.check_attrs("MatMul", attrs, set())
        a, b = ins[0], ins[1]
        if b in self.consts and self.consts[b].ndim == 2 and len(self.shapes[a]) >= 1:
            self.emit("Gemm", [a, self.operand(b, "MatMul")], [node.output[0]])
            return
        self.emit("MatMul", [self.operand(a, "MatMul"), self.operand(b, "MatMul")], [node.output[0]])

    # -- pooling / normalisation ------------------------------------------------------------
    def _pool(self, node, ins, attrs, extra: set[str]):
        op = node.op_type
        self.check_attrs(op, attrs, {"auto_pad", "ceil_mode", "dilations", "kernel_shape",
                                     "pads", "strides"} | extra)
        if "kernel_shape" not in attrs:
            raise ModelError(f"node {self.cur!r} ({op}): kernel_shape is required")
        if len(node.output) > 1 and node.output[1]:
            raise self.unsupported(op, "the Indices output is not supported")
        if attrs.get("storage_order", 0) not in (0, 1):
            raise self.unsupported(op, "storage_order")
        a = self._window_attrs(op, attrs, ins[0], tuple(attrs["kernel_shape"]))
        a["ceil_mode"] = int(attrs.get("ceil_mode", 0))
        if a["ceil_mode"] not in (0, 1):
            raise self.unsupported(op, f"ceil_mode={a['ceil_mode']}")
        return a

    def op_MaxPool(self, node, ins, attrs):
        a = self._pool(node, ins, attrs, {"storage_order"})
        self.emit("MaxPool", [ins[0]], [node.output[0]], a)

    def op_AveragePool(self, node, ins, attrs):
        a = self._pool(node, ins, attrs, {"count_include_pad"})
        a["count_include_pad"] = int(attrs.get("count_include_pad", 0))
        self.emit("AveragePool", [ins[0]], [node.output[0]], a)

    def op_GlobalAveragePool(self, node, ins, attrs):
        self.check_attrs(node.op_type, attrs, set())
        if len(self.shapes[ins[0]]) < 3:
            raise ModelError(f"node {self.cur!r}: {node.op_type} needs rank >= 3")
        self.emit(node.op_type, [ins[0]], [node.output[0]])

    op_GlobalMaxPool = op_GlobalAveragePool

    def op_BatchNormalization(self, node, ins, attrs):
        self.check_attrs("BatchNormalization", attrs, {"epsilon", "momentum", "spatial",
                                                       "training_mode", "is_test", "consumed_inputs"})
        if attrs.get("training_mode", 0):
            raise self.unsupported("BatchNormalization", "training_mode=1")
        if attrs.get("spatial", 1) != 1:
            raise self.unsupported("BatchNormalization", "spatial=0")
        if any(o for o in node.output[1:]):
            raise self.unsupported("BatchNormalization", "running mean/var outputs (training)")
        scale, bias, mean, var = (self.const(i, "BatchNormalization", "scale/B/mean/var")
                                  .astype(np.float64) for i in ins[1:5])
        eps = float(attrs.get("epsilon", 1e-5))
        s = scale / np.sqrt(var + eps)
        t = bias - mean * s
        self.emit("BatchNormalization", [ins[0], self.weight(s, f"{self.cur}_scale", "BatchNormalization"),
                                         self.weight(t, f"{self.cur}_shift", "BatchNormalization")],
                  [node.output[0]])

    def op_LayerNormalization(self, node, ins, attrs):
        self.check_attrs("LayerNormalization", attrs, {"axis", "epsilon", "stash_type"})
        if any(o for o in node.output[1:]):
            raise self.unsupported("LayerNormalization", "Mean/InvStdDev outputs")
        r = len(self.shapes[ins[0]])
        axis = int(attrs.get("axis", -1)) % r
        inputs = [ins[0], self.operand(ins[1], "LayerNormalization")]
        self.const(ins[1], "LayerNormalization", "Scale")
        if len(ins) > 2 and ins[2]:
            self.const(ins[2], "LayerNormalization", "B")
            inputs.append(self.operand(ins[2], "LayerNormalization"))
        self.emit("LayerNormalization", inputs, [node.output[0]],
                  {"axis": axis, "epsilon": float(attrs.get("epsilon", 1e-5))})

    def op_Softmax(self, node, ins, attrs):
        self.check_attrs("Softmax", attrs, {"axis"})
        shape = self.shapes[ins[0]]
        r = len(shape)
        if self.opset >= 13:
            self.emit("Softmax", [ins[0]], [node.output[0]], {"axis": int(attrs.get("axis", -1)) % r})
            return
        axis = int(attrs.get("axis", 1)) % r
        if axis == r - 1:
            self.emit("Softmax", [ins[0]], [node.output[0]], {"axis": axis})
            return
        # opset < 13: softmax over the flattened trailing axes [axis:]
        flat, sm = self.fresh(f"{self.cur}_flat"), self.fresh(f"{self.cur}_sm")
        self.emit("Reshape", [ins[0]], [flat], {"shape": (0,) * axis + (-1,)}, name=f"{self.cur}_flat")
        self.emit("Softmax", [flat], [sm], {"axis": axis})
        back = (0,) * axis + tuple(self.static_shape(ins[0], "Softmax")[axis:]) if None in shape[axis:] \
            else (0,) * axis + tuple(shape[axis:])
        self.emit("Reshape", [sm], [node.output[0]], {"shape": back}, name=f"{self.cur}_unflat")

def _evaluate(node: onnx.NodeProto, opset: int, feeds: dict) -> list:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(node, opsets={"": opset}).run(None, feeds)


def load_model(src, batch: int | None = None, input_shapes: dict | None = None,
               check: bool = True) -> Graph:
    """Import an ONNX model (path, bytes or ModelProto) as a canonical ``Graph``.

    ``batch`` fixes a symbolic batch dimension (otherwise it stays ``None``);
    ``input_shapes`` overrides input shapes by name.
    """
    model = _read_model(src)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as e:  # InferenceError and friends
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"ONNX shape inference failed: {msg}") from None
    if check:
        # checked after inference so that graph outputs declared without a shape pass
        try:
            onnx.checker.check_model(inferred)
        except Exception as e:  # ValidationError, and UnicodeDecodeError on corrupt strings
            first = str(e).strip().splitlines()[0] if str(e).strip() else "invalid model"
            raise ModelError(f"ONNX checker rejected the model: {first}") from None
    imp = _Importer(model, batch, input_shapes)
    try:
        graph = imp.run()
    except UnsupportedOpError as e:
        if "docs/models.md" in str(e):
            raise
        raise UnsupportedOpError(e.op, e.node, (e.detail + "; " if e.detail else "")
                                 + f"see {MODELS_DOC}") from None
    except (KeyError, IndexError, ValueError, TypeError) as e:
        # inconsistent models that passed ONNX's checks; never a raw exception
        raise ModelError(f"malformed model near node {imp.cur!r}: {type(e).__name__}: {e}") from None
    if not input_shapes:
        _cross_check(graph, inferred)
    return graph


def _cross_check(graph: Graph, inferred: onnx.ModelProto) -> None:
    """Our shapes must agree with ONNX's wherever both are static."""
    known = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        d = _dims(vi)
        if d is not None:
            known[vi.name] = d
    for name, s in graph.shapes.items():
        o = known.get(name)
        if o is None or len(o) != len(s):
            if o is not None and len(o) != len(s) and name in graph.output_names:
                raise ModelError(f"tensor {name!r}: rank {len(s)} but ONNX infers {o}")
            continue
        for a, b in zip(s, o):
            if a is not None and b is not None and a != b:
                raise ModelError(f"tensor {name!r}: shape {s} but ONNX infers {o}")
