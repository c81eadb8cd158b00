"""The float activations SAFHIRE's quantizer reads on its calibration data
(``secinfer.ir.quantize``), with bounded memory for large networks [issue 18: ResNet-34]."""

from __future__ import annotations

import numpy as np

from secinfer.ir.float_exec import run_float_all
from secinfer.ir.graph import Graph


CALIB_BATCH = 8     # calibration inputs per float run (only the tensors quantize reads are kept)
CALIB_WHOLE_BYTES = 1 << 31   # below this (every tensor of every input), one float run as before


def _calib_env(graph: Graph, calib: np.ndarray, residual_rounds: bool) -> dict:
    """The float activations the quantizer reads (the input, every round's linear output and
    result under any of its cuts, global pooling inputs, the outputs) on the calibration
    data, run CALIB_BATCH inputs at a time when all tensors of all inputs would exceed
    CALIB_WHOLE_BYTES (smaller models: one run, as before): keeping every intermediate tensor of 64
    ResNet-34 inputs at 224 x 224 would take ~6 GB [issue 18]."""
    from secinfer.ir.pool_rounds import pooling_cuts, residual_cuts
    from secinfer.ir.quantize import CLIENT_OPS, split_rounds

    keep = {graph.inputs[0].name, *graph.output_names}
    keep |= {n.inputs[0] for n in graph.nodes if n.op in ("GlobalAveragePool", "AveragePool")}
    cuts = pooling_cuts(graph) | (residual_cuts(graph, CLIENT_OPS) if residual_rounds else set())
    for rs in (split_rounds(graph)[0], split_rounds(graph, cuts)[0]):
        keep |= {rd.out for rd in rs} | {rd.result for rd in rs}
    per_input = sum(int(np.prod([d for d in shp[1:] if d])) for shp in graph.shapes.values() if shp)
    if len(calib) <= CALIB_BATCH or per_input * 8 * len(calib) <= CALIB_WHOLE_BYTES:
        env = run_float_all(graph, calib, intermediates=True)
        return {k: v for k, v in env.items() if k in keep}
    # whole tensors only where they are read whole (the input, the outputs, global pooling
    # inputs); a round's linear output and result only by their extremes (_Stat)
    whole = {graph.inputs[0].name, *graph.output_names} | \
        {n.inputs[0] for n in graph.nodes if n.op == "GlobalAveragePool"}
    parts: dict[str, list] = {}
    stats: dict[str, _Stat] = {}
    for s in range(0, len(calib), CALIB_BATCH):
        env = run_float_all(graph, calib[s:s + CALIB_BATCH], intermediates=True)
        for k in keep & set(env):
            if k in whole:
                parts.setdefault(k, []).append(env[k])
            else:
                stats.setdefault(k, _Stat(len(calib), env[k].shape[1:])).add(env[k])
        del env
    return {**stats, **{k: np.concatenate(v) for k, v in parts.items()}}


class _Stat:
    """A calibration tensor kept only by its shape and extremes (what ``quantize`` reads of a
    round's linear output and result)."""

    def __init__(self, n: int, shape: tuple) -> None:
        self.shape = (int(n),) + tuple(int(d) for d in shape)
        self.amax, self.amin = 0.0, np.inf

    def add(self, x: np.ndarray) -> None:
        self.amax = max(self.amax, float(np.max(np.abs(x))))
        self.amin = min(self.amin, float(np.min(x)))


def _absmax(t) -> float:
    return t.amax if isinstance(t, _Stat) else float(np.max(np.abs(t)))


def _minimum(t) -> float:
    return t.amin if isinstance(t, _Stat) else float(np.min(t))
