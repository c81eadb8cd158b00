"""``secinfer run``'s cache of imported models: a model file is imported from ONNX once.

Importing an ONNX file (parse, ``onnx.checker``, shape inference, conversion to the IR) needs
the ``onnx`` package, whose import alone is a large part of a short command's start-up.
``load_model_cached(path)`` keeps the imported IR (``secinfer.ir.graph.Graph``: its public
architecture, output meaning and weights, in the launcher's model format
``launcher.save_model_ir``) under a name derived from the file's bytes, and on the next run
of the same file reads that instead of importing it again. Only the import is cached: every
check that depends on the protocol, the security, the fixed-point configuration or the
input still runs on every run (``secinfer.api.prepare``).

Why it is sound:

* The entry's name and key are hashes of the model file's exact bytes *and* of the
  importer (every source file of ``secinfer.ir``, the ``onnx`` version and the numpy
  version): a changed file or a changed importer never finds an old entry. The file is
  read before the import and again after it; a file changed meanwhile is not cached. A model that refers to external data files (whose
  bytes the name would not cover) is not cached.
* Entries are encrypted (AES-256-GCM) under a key derived from the model file's bytes
  (another hash than the name's): the cache holds no readable copy of the weights; who
  does not have the model file cannot read them, and after the model file is deleted its
  entry is undecryptable. The name is authenticated as associated data.
* Anything that does not decrypt, parse and validate like the launcher's model file (as a
  peer's architecture: ``Graph.from_public_bytes`` validates and re-infers every shape) is
  removed and the model imported again. A model that fails to import is never cached, so
  a bad model is refused with the importer's error every time.
* The folder is per user (``$XDG_CACHE_HOME/secinfer/models``, else
  ``~/.cache/secinfer/models``), created 0700; files 0600, written atomically; a folder
  that is not ours or is open to others is not used. It keeps at most ``MAX_ENTRIES``
  entries (the oldest used go first); models over ``MAX_MODEL_BYTES`` are not cached.
  ``secinfer run --no-model-cache`` bypasses it.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tempfile
from pathlib import Path

from secinfer.errors import ModelError

FORMAT = b"secinfer-model-cache/1"
MAX_ENTRIES = 32
MAX_MODEL_BYTES = 64 << 20
SUFFIX = ".ir"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "secinfer" / "models"


def importer_fingerprint() -> bytes:
    """A hash of what the imported IR depends on besides the model file: the sources of
    ``secinfer.ir``, the ``onnx`` version (read from its version file, without importing
    it) and numpy's version."""
    import importlib.util

    import numpy as np

    import secinfer.ir

    h = hashlib.sha256(FORMAT)
    ir_dir = Path(secinfer.ir.__file__).parent
    for f in sorted(ir_dir.rglob("*.py")):
        h.update(b"\0" + str(f.relative_to(ir_dir)).encode() + b"\0" + f.read_bytes())
    spec = importlib.util.find_spec("onnx")
    if spec is None or spec.origin is None:
        raise ModelError("the onnx package is not installed")
    onnx_dir = Path(spec.origin).parent
    for name in ("version.py", "__init__.py"):
        p = onnx_dir / name
        h.update(b"\0onnx/" + name.encode() + b"\0" + (p.read_bytes() if p.is_file() else b"-"))
    h.update(b"\0numpy\0" + np.__version__.encode())
    return h.digest()


def _usable(d: Path) -> bool:
    """The cache folder exists (created 0700 if not), is ours and closed to others."""
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = d.stat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not stat.S_IMODE(st.st_mode) & 0o077


def _names(fp: bytes, data: bytes) -> tuple[str, bytes]:
    name = hashlib.sha256(FORMAT + b"/name\0" + fp + data).hexdigest()[:48]
    key = hashlib.sha256(FORMAT + b"/key\0" + fp + data).digest()
    return name, key


def _decode(blob: bytes, name: str, key: bytes):
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from secinfer.runtime.party import read_model_ir

    if len(blob) < 12 + 16:
        raise ValueError("truncated")
    plain = AESGCM(key).decrypt(blob[:12], blob[12:], name.encode())
    return read_model_ir(io.BytesIO(plain))


def _encode(graph, name: str, key: bytes) -> bytes:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from secinfer.runtime.launcher import save_model_ir

    buf = io.BytesIO()
    save_model_ir(buf, graph)
    nonce = os.urandom(12)
    return nonce + AESGCM(key).encrypt(nonce, buf.getvalue(), name.encode())


def _same(a, b) -> bool:
    import numpy as np

    return (a.public_bytes() == b.public_bytes() and a.meaning == b.meaning
            and list(a.initializers) == list(b.initializers)
            and all(np.array_equal(a.initializers[k], v) and a.initializers[k].dtype == v.dtype
                    for k, v in b.initializers.items()))


def load_model_cached(path: str | os.PathLike, folder: str | os.PathLike | None = None):
    """``secinfer.ir.onnx_import.load_model(path)``, from the cache when this exact file was
    imported before by this importer (see the module docstring). ``folder``: the cache
    folder (default ``cache_dir()``)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_MODEL_BYTES + 1)
    except OSError as e:
        raise ModelError(f"cannot read model file {path!r}: {e.strerror or e}") from None
    d = Path(folder) if folder is not None else cache_dir()
    if len(data) > MAX_MODEL_BYTES or b"location" in data or not _usable(d):
        return _import(path)
    name, key = _names(importer_fingerprint(), data)
    entry = d / (name + SUFFIX)
    try:
        blob = entry.read_bytes()
    except OSError:
        blob = None
    if blob is not None:
        try:
            graph = _decode(blob, name, key)
            os.utime(entry)          # (most recently used: pruned last)
            return graph
        except Exception:  # noqa: BLE001 - a damaged or foreign entry: removed, the model imported again
            entry.unlink(missing_ok=True)
    graph = _import(path)
    try:
        with open(path, "rb") as fh:
            if fh.read(MAX_MODEL_BYTES + 1) != data:   # changed meanwhile: what was imported is not `data`
                return graph
        _store(d, entry, graph, name, key)
    except (OSError, ValueError, TypeError, ModelError):
        pass   # (the cache is an optimisation: a full disk or an unusual model only costs time)
    return graph


def _import(path: str):
    from secinfer.ir.onnx_import import load_model

    return load_model(path)


def _store(d: Path, entry: Path, graph, name: str, key: bytes) -> None:
    blob = _encode(graph, name, key)
    if not _same(_decode(blob, name, key), graph):   # only what reads back exactly is kept
        return
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, entry)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _prune(d)


def _prune(d: Path) -> None:
    entries = []
    for p in d.glob("*" + SUFFIX):
        try:
            entries.append((p.stat().st_mtime, p))
        except OSError:
            continue
    entries.sort(reverse=True)
    for _, p in entries[MAX_ENTRIES:]:
        p.unlink(missing_ok=True)
