"""secinfer.ir: canonical op graph, ONNX import, float and fixed-point reference executors.

Convenience names (imported lazily so that ``import secinfer.ir.graph`` stays light):
``Graph``, ``Node``, ``TensorInfo``, ``load_model``, ``run_float``, ``run_float_all``,
``run_fixed``, ``run_fixed_all``, ``derived_error_bound``.
"""

_EXPORTS = {
    "Graph": "secinfer.ir.graph", "Node": "secinfer.ir.graph", "TensorInfo": "secinfer.ir.graph",
    "load_model": "secinfer.ir.onnx_import",
    "run_float": "secinfer.ir.float_exec", "run_float_all": "secinfer.ir.float_exec",
    "run_fixed": "secinfer.ir.fixed_exec", "run_fixed_all": "secinfer.ir.fixed_exec",
    "derived_error_bound": "secinfer.ir.fixed_exec",
}


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'secinfer.ir' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(mod), name)
