"""Storage of a quantized SAFHIRE model (``secinfer.ir.quantize.QuantizedModel``) as an .npz
with a JSON header: no pickle, so a cached model file cannot run code when it is read.
"""

from __future__ import annotations

import json

import numpy as np
import scipy.sparse as sp

from secinfer.ir.convmap import ConvMap, Pool
from secinfer.ir.quantize import QRound, QuantizedModel

_QM_SCALARS = ("b", "act_bits", "weight_bits", "in_lo", "in_hi", "softmax")
_QR_SCALARS = {"s_acc": float, "relu": bool, "eta": int, "lo": int, "hi": int, "worst": int}


def _plain(o):
    """numpy scalars in ``calib`` as Python numbers for JSON."""
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"{type(o).__name__} is not storable")


def save_quantized(qm: QuantizedModel, f) -> None:
    """``qm`` as an .npz: scalars, shapes and calibration facts in a JSON header, every
    array (sparse weights as CSR parts) by name; read back with ``load_quantized``."""
    arrays = {"in_scale": np.asarray(qm.in_scale)}
    if qm.in_zero is not None:
        arrays["in_zero"] = np.asarray(qm.in_zero)
    rounds = []
    for r, q in enumerate(qm.rounds):
        arrays[f"r{r}_bias"] = np.asarray(q.bias)
        if q.groups is not None:
            arrays[f"r{r}_groups"] = np.asarray(q.groups)
        for s, w in enumerate(q.weights):
            if isinstance(w, ConvMap):
                arrays[f"r{r}_w{s}_kernel"] = np.asarray(w.kernel, dtype=np.int64)
                if w.pre is not None:
                    arrays[f"r{r}_w{s}_pre"] = np.asarray(w.pre.weight, dtype=np.int64)
                continue
            w = sp.csr_matrix(w)
            arrays.update({f"r{r}_w{s}_data": w.data, f"r{r}_w{s}_indices": w.indices,
                           f"r{r}_w{s}_indptr": w.indptr})
        rounds.append({"sources": [int(s) for s in q.sources], "out_shape": [int(a) for a in q.out_shape],
                       "wshapes": [[int(a) for a in w.shape] for w in q.weights],
                       "wconv": [w.geometry() if isinstance(w, ConvMap) else None for w in q.weights],
                       "groups": q.groups is not None,
                       **{k: t(getattr(q, k)) for k, t in _QR_SCALARS.items()}})
    head = {**{k: getattr(qm, k) for k in _QM_SCALARS}, "in_shape": [int(a) for a in qm.in_shape],
            "out_shape": [int(a) for a in qm.out_shape], "calib": qm.calib, "rounds": rounds}
    np.savez(f, head=np.frombuffer(json.dumps(head, default=_plain).encode(), np.uint8), **arrays)


def load_quantized(path) -> QuantizedModel:
    """The model ``save_quantized`` wrote (read without pickle)."""
    with np.load(path, allow_pickle=False) as z:
        head = json.loads(z["head"].tobytes().decode())
        rounds = []
        for r, d in enumerate(head["rounds"]):
            ws = []
            for s, shape in enumerate(d["wshapes"]):
                geo = d.get("wconv", [None] * len(d["wshapes"]))[s]
                if geo is not None:
                    pg = geo.get("pre")
                    pre = None if pg is None else Pool(z[f"r{r}_w{s}_pre"], pg["stride"], pg["pad"],
                                                       pg["in_shape"], pg["out_shape"])
                    ws.append(ConvMap(z[f"r{r}_w{s}_kernel"], geo["stride"], geo["pad"], geo["in_shape"],
                                      geo["out_shape"], pre))
                else:
                    ws.append(sp.csr_matrix((z[f"r{r}_w{s}_data"], z[f"r{r}_w{s}_indices"],
                                             z[f"r{r}_w{s}_indptr"]), shape=tuple(shape)))
            rounds.append(QRound(d["sources"], ws, z[f"r{r}_bias"], tuple(d["out_shape"]), d["s_acc"],
                                 groups=z[f"r{r}_groups"] if d["groups"] else None,
                                 **{k: d[k] for k in _QR_SCALARS if k != "s_acc"}))
        return QuantizedModel(head["b"], head["act_bits"], head["weight_bits"], tuple(head["in_shape"]),
                              z["in_scale"], head["in_lo"], head["in_hi"], rounds, head["softmax"],
                              tuple(head["out_shape"]), head["calib"],
                              z["in_zero"] if "in_zero" in z.files else None)
