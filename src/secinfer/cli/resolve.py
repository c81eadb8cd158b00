"""Turn a model argument (path, ``bundled:NAME``, ``zoo:NAME``) into an ONNX file path."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from secinfer.errors import ModelError


def zoo_cache_dir() -> Path:
    """One per-user folder for exported zoo networks ($XDG_CACHE_HOME/secinfer/zoo, else
    ~/.cache/secinfer/zoo), instead of a new temporary folder per run."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "secinfer" / "zoo"


def _cached(stem: str, data: bytes) -> Path:
    """``data`` under a name of its content (so a changed network is a new file, and the
    older export of the same network is removed); written atomically."""
    import hashlib

    d = zoo_cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    out = d / f"{stem}-{hashlib.sha256(data).hexdigest()[:16]}.onnx"
    if not (out.is_file() and out.stat().st_size == len(data)):
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{stem}-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, out)
        for old in d.glob(f"{stem}-*.onnx"):
            if old != out:
                old.unlink(missing_ok=True)
    return out


def model_path(spec: str, workdir: str | None = None, batch: int = 1) -> str:
    """``batch``: the batch size a ``zoo:`` network is built for (its input shape is fixed)."""
    if spec.startswith("bundled:"):
        from secinfer.ir import bundled

        name = spec.split(":", 1)[1]
        if name not in bundled.bundled_names():
            raise ModelError(f"no bundled model {name!r}; bundled: {', '.join(bundled.bundled_names())}")
        return str(bundled.bundled_path(name))
    if spec.startswith("zoo:"):
        from secinfer.ir import zoo

        name = spec.split(":", 1)[1]
        if name not in zoo.ZOO:
            raise ModelError(f"no zoo network {name!r}; zoo: {', '.join(zoo.ZOO)}")
        if int(batch) < 1:
            raise ModelError(f"batch size must be >= 1, got {batch}")
        data = zoo.build(name, seed=0, batch=int(batch)).SerializeToString()
        if workdir:
            out = os.path.join(workdir, f"{name}-b{int(batch)}.onnx")
            Path(out).write_bytes(data)
            return out
        return str(_cached(f"{name}-seed0-b{int(batch)}", data))
    p = Path(spec)
    if not p.is_file():
        raise ModelError(f"model file {spec!r} does not exist (use a path, bundled:NAME or zoo:NAME)")
    return str(p)
