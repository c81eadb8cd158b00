"""ONNX import of the data-movement operators (a mixin of the importer in onnx_import.py).

Each handler checks every attribute and emits one canonical op (see docs/ir.md);
structural constants (shapes, axes, split sizes, slice bounds, gather indices) must be
constants and become attributes.
"""

from __future__ import annotations

import numpy as np

from secinfer.errors import ModelError

# A dynamic dimension read by ``Shape`` is folded as this marker (see onnx_import).
_DYN = -(1 << 40) - 7


class MovementImports:
    """op_<Name> handlers for Flatten, Reshape, Transpose, Concat, Split, Slice, Squeeze,
    Unsqueeze, Gather. Uses the importer's helpers (emit, const, operand, ...)."""

    def op_Flatten(self, node, ins, attrs):
        self.check_attrs("Flatten", attrs, {"axis"})
        r = len(self.shapes[ins[0]])
        axis = int(attrs.get("axis", 1))
        axis = axis + r if axis < 0 else axis
        if not 0 <= axis <= r:
            raise ModelError(f"node {self.cur!r} (Flatten): axis {attrs.get('axis')} for rank {r}")
        self.emit("Flatten", [ins[0]], [node.output[0]], {"axis": axis})

    def op_Reshape(self, node, ins, attrs):
        self.check_attrs("Reshape", attrs, {"allowzero", "shape"})
        spec = attrs.get("shape") if self.opset < 5 else self.const(ins[1], "Reshape", "shape",
                                                                      dynamic_ok=True)
        spec = tuple(int(v) for v in np.asarray(spec).reshape(-1))
        if attrs.get("allowzero", 0) and 0 in spec:
            raise self.unsupported("Reshape", "allowzero=1 with a zero in the shape")
        if _DYN in spec:
            # a dynamic dimension read from the same axis of this very input is a 0 (copy)
            src = self.shapes[ins[0]]
            for i, v in enumerate(spec):
                if v == _DYN and not (i < len(src) and src[i] is None):
                    raise self.unsupported("Reshape", "target shape uses the dynamic batch size "
                                                      "on another axis; load with a fixed batch")
            spec = tuple(0 if v == _DYN else v for v in spec)
        self.emit("Reshape", [ins[0]], [node.output[0]], {"shape": spec})

    def op_Transpose(self, node, ins, attrs):
        self.check_attrs("Transpose", attrs, {"perm"})
        r = len(self.shapes[ins[0]])
        perm = tuple(int(p) for p in attrs.get("perm", range(r - 1, -1, -1)))
        if sorted(perm) != list(range(r)):
            raise ModelError(f"node {self.cur!r} (Transpose): perm {perm} for rank {r}")
        self.emit("Transpose", [ins[0]], [node.output[0]], {"perm": perm})

    def op_Concat(self, node, ins, attrs):
        self.check_attrs("Concat", attrs, {"axis"})
        r = len(self.shapes.get(ins[0], self.consts.get(ins[0], np.zeros(0)).shape))
        inputs = [self.operand(i, "Concat") for i in ins if i]
        self.emit("Concat", inputs, [node.output[0]], {"axis": int(attrs["axis"]) % r})

    def _int_list(self, node, ins, attrs, key: str, pos: int, op: str):
        if self.opset >= 13 or key not in attrs:
            if len(ins) > pos and ins[pos]:
                return [int(v) for v in self.const(ins[pos], op, key).reshape(-1)]
            return None
        return [int(v) for v in attrs[key]]

    def op_Split(self, node, ins, attrs):
        self.check_attrs("Split", attrs, {"axis", "split", "num_outputs"})
        shape = self.shapes[ins[0]]
        axis = int(attrs.get("axis", 0)) % len(shape)
        split = self._int_list(node, ins, attrs, "split", 1, "Split")
        if split is None:
            dim = self.static_shape(ins[0], "Split")[axis]
            k = int(attrs.get("num_outputs", len(node.output)))
            size = -(-dim // k)
            split = [min(size, dim - i * size) for i in range(k)]
        if len(split) != len(node.output):
            raise ModelError(f"node {self.cur!r} (Split): {len(split)} sizes for {len(node.output)} outputs")
        outs = [o or self.fresh(f"{self.cur}_unused{k}") for k, o in enumerate(node.output)]
        self.emit("Split", [ins[0]], outs, {"axis": axis, "split": tuple(split)})

    def op_Slice(self, node, ins, attrs):
        self.check_attrs("Slice", attrs, {"starts", "ends", "axes"})
        r = len(self.shapes[ins[0]])
        if self.opset < 10:
            starts, ends = list(attrs["starts"]), list(attrs["ends"])
            axes = list(attrs.get("axes", range(len(starts))))
            steps = [1] * len(starts)
        else:
            starts = [int(v) for v in self.const(ins[1], "Slice", "starts").reshape(-1)]
            ends = [int(v) for v in self.const(ins[2], "Slice", "ends").reshape(-1)]
            axes = ([int(v) for v in self.const(ins[3], "Slice", "axes").reshape(-1)]
                    if len(ins) > 3 and ins[3] else list(range(len(starts))))
            steps = ([int(v) for v in self.const(ins[4], "Slice", "steps").reshape(-1)]
                     if len(ins) > 4 and ins[4] else [1] * len(starts))
        if 0 in steps:
            raise ModelError(f"node {self.cur!r} (Slice): step 0")
        axes = [a % r for a in axes]
        self.emit("Slice", [ins[0]], [node.output[0]],
                  {"starts": tuple(starts), "ends": tuple(ends), "axes": tuple(axes), "steps": tuple(steps)})

    def op_Squeeze(self, node, ins, attrs):
        self.check_attrs("Squeeze", attrs, {"axes"})
        shape = self.shapes[ins[0]]
        axes = self._int_list(node, ins, attrs, "axes", 1, "Squeeze")
        if axes is None:
            axes = [i for i, d in enumerate(self.static_shape(ins[0], "Squeeze")) if d == 1]
        axes = tuple(sorted(a % len(shape) for a in axes))
        self.emit("Squeeze", [ins[0]], [node.output[0]], {"axes": axes})

    def op_Unsqueeze(self, node, ins, attrs):
        self.check_attrs("Unsqueeze", attrs, {"axes"})
        axes = self._int_list(node, ins, attrs, "axes", 1, "Unsqueeze")
        if axes is None:
            raise ModelError(f"node {self.cur!r} (Unsqueeze): axes missing")
        r = len(self.shapes[ins[0]]) + len(axes)
        self.emit("Unsqueeze", [ins[0]], [node.output[0]], {"axes": tuple(sorted(a % r for a in axes))})

    def op_Gather(self, node, ins, attrs):
        self.check_attrs("Gather", attrs, {"axis"})
        idx = self.const(ins[1], "Gather", "indices")
        shape = self.shapes[ins[0]]
        axis = int(attrs.get("axis", 0)) % len(shape)
        dim = self.static_shape(ins[0], "Gather")[axis] if np.any(idx < 0) else shape[axis]
        if dim is not None:
            if np.any(idx >= dim) or np.any(idx < -dim):
                raise ModelError(f"node {self.cur!r} (Gather): index out of range for size {dim}")
            idx = np.where(idx < 0, idx + dim, idx)
        self.emit("Gather", [ins[0]], [node.output[0]],
                  {"axis": axis, "indices": _to_tuple(idx.astype(np.int64))})


def _to_tuple(a: np.ndarray):
    if a.ndim == 0:
        return int(a)
    return tuple(_to_tuple(x) for x in a)
