"""secinfer: private machine-learning inference behind one model format and one runtime.

``secinfer.run(model, x, protocol=...)`` and ``secinfer.inspect(model)`` are the Python API
(``secinfer.api``); they are imported on first use so that ``import secinfer`` stays cheap.
"""

__version__ = "0.1.0"

__all__ = ["run", "inspect", "__version__"]


def run(model, x=None, **kwargs):
    """Private inference of ``model`` on ``x``; see ``secinfer.api.run``."""
    from secinfer.api import run as _run

    return _run(model, x, **kwargs)


def inspect(model, **kwargs):
    """Ops, output meaning, derived bounds and runnable protocols; see ``secinfer.api.inspect``."""
    from secinfer.api import inspect as _inspect

    return _inspect(model, **kwargs)
