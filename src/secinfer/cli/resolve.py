"""Turn a model argument (path, ``bundled:NAME``, ``zoo:NAME``) into an ONNX file path."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from secinfer.errors import ModelError


def model_path(spec: str, workdir: str | None = None, batch: int = 1) -> str:
    """``batch``: the batch size a ``zoo:`` network is built for (its input shape is fixed)."""
    if spec.startswith("bundled:"):
        from secinfer.ir import bundled

        name = spec.split(":", 1)[1]
        if name not in bundled.bundled_names():
            raise ModelError(f"no bundled model {name!r}; bundled: {', '.join(bundled.bundled_names())}")
        return str(bundled.bundled_path(name))
    if spec.startswith("zoo:"):
        import onnx

        from secinfer.ir import zoo

        name = spec.split(":", 1)[1]
        if name not in zoo.ZOO:
            raise ModelError(f"no zoo network {name!r}; zoo: {', '.join(zoo.ZOO)}")
        if int(batch) < 1:
            raise ModelError(f"batch size must be >= 1, got {batch}")
        model = zoo.build(name, seed=0, batch=int(batch))
        d = workdir or tempfile.mkdtemp(prefix="secinfer-zoo-")
        out = os.path.join(d, f"{name}-b{int(batch)}.onnx")
        onnx.save(model, out)
        return out
    p = Path(spec)
    if not p.is_file():
        raise ModelError(f"model file {spec!r} does not exist (use a path, bundled:NAME or zoo:NAME)")
    return str(p)
