"""Data-movement ops, dtype-agnostic: the float, fixed-point and secure paths share them.

They only rearrange elements, so applied to a ring share they give a share of the result.
"""

from __future__ import annotations

import numpy as np

from secinfer.ir.shapes import reshape_shape

MOVEMENT = {}


def _register(name):
    def deco(f):
        MOVEMENT[name] = f
        return f
    return deco


@_register("Identity")
def identity(node, xs):
    return [np.array(xs[0], copy=True)]


@_register("Flatten")
def flatten(node, xs):
    x = xs[0]
    ax = node.attrs["axis"]
    lead = int(np.prod(x.shape[:ax], dtype=np.int64))
    return [x.reshape(lead, int(np.prod(x.shape[ax:], dtype=np.int64)))]


@_register("Reshape")
def reshape(node, xs):
    x = xs[0]
    return [x.reshape(reshape_shape(x.shape, node.attrs["shape"], node.name))]


@_register("Transpose")
def transpose(node, xs):
    return [np.ascontiguousarray(np.transpose(xs[0], node.attrs["perm"]))]


@_register("Concat")
def concat(node, xs):
    return [np.concatenate(xs, axis=node.attrs["axis"])]


@_register("Split")
def split(node, xs):
    cuts = np.cumsum(node.attrs["split"])[:-1]
    return [np.ascontiguousarray(p) for p in np.split(xs[0], cuts, axis=node.attrs["axis"])]


@_register("Slice")
def slice_(node, xs):
    x = xs[0]
    idx = [slice(None)] * x.ndim
    a = node.attrs
    for st, en, ax, sp in zip(a["starts"], a["ends"], a["axes"], a["steps"]):
        idx[ax] = slice(st, en, sp)
    return [np.ascontiguousarray(x[tuple(idx)])]


@_register("Squeeze")
def squeeze(node, xs):
    return [np.squeeze(xs[0], axis=tuple(node.attrs["axes"]))]


@_register("Unsqueeze")
def unsqueeze(node, xs):
    return [np.expand_dims(xs[0], axis=tuple(node.attrs["axes"]))]


@_register("Gather")
def gather(node, xs):
    idx = np.asarray(node.attrs["indices"], dtype=np.int64)
    return [np.take(xs[0], idx, axis=node.attrs["axis"])]
