"""Build secinfer's native c-shared library (``python -m secinfer.native.build``; the old
command ``python -m secinfer.native.build`` is an alias).

One library serves every layer that needs native code: Lattigo HE (``secinfer.crypto.he``),
the FSS kernels (``go/fss_*.go``, ``go/fss_dcf.c`` and the AES-NI hash ``go/fss_aes.c``,
compiled by cgo with the system C compiler that c-shared builds need anyway; bound in
``secinfer.crypto.fss.native``), garbled circuits (``secinfer.crypto.gc``) and the ZK
provers (``secinfer.crypto.zk``). All of them load it through :mod:`secinfer.native.lib`,
except the tcp transport's record layer (``go/reclayer``), which ``secinfer.net.native_link``
loads only if it is already built (never building it inside a party), falling back to the
Python record layer.

The Go module lives in ``go/`` next to this file and is pinned to Lattigo v6.1.1; its
dependencies come from the Go module proxy (``GOPROXY`` default) and are checked against
the committed ``go.sum``. The library is written to ``_lib/libsecinferhe.so``; the cgo
header that ``go build`` emits is discarded (it is build output, never committed).

The library is rebuilt when it is missing or older than any Go or C source, both here and
lazily on first import (see ``secinfer.native.lib.load``). A missing Go toolchain or C compiler raises
:class:`HENativeBuildError` with instructions.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from secinfer.native.errors import HENativeBuildError

HERE = Path(__file__).resolve().parent
GO_DIR = HERE / "go"
LIB_DIR = HERE / "_lib"
LIB_PATH = LIB_DIR / "libsecinferhe.so"
_GO_INPUTS = ("*.go", "*.c", "*.h", "go.mod", "go.sum", "*/*.go")  # */: Go sub-packages (zkbpp/)


def _go_sources() -> list[Path]:
    files: list[Path] = []
    for pattern in _GO_INPUTS:
        # rglob: Go sub-packages of the module (e.g. go/fastpack/) are sources too
        files.extend(GO_DIR.rglob(pattern))
    # Go test files (benchmarks) are not part of the library.
    return [f for f in files if not f.name.endswith("_test.go")]


def needs_build() -> bool:
    """True when the library is missing or older than one of the Go sources."""
    if not LIB_PATH.exists():
        return True
    lib_mtime = LIB_PATH.stat().st_mtime
    return any(src.stat().st_mtime > lib_mtime for src in _go_sources())


def find_go() -> str:
    go = shutil.which("go")
    if go is None:
        for cand in ("/usr/local/go/bin/go", str(Path.home() / "go" / "bin" / "go")):
            if os.access(cand, os.X_OK):
                go = cand
                break
    if go is None:
        raise HENativeBuildError(
            "the Go toolchain (>= 1.23) is needed to build secinfer's native library "
            "(Lattigo v6 HE and the FSS kernels) but `go` was not found on PATH; install Go from "
            "https://go.dev/dl/ and run `python -m secinfer.native.build`")
    return go


def find_cc() -> str:
    """The C compiler cgo will use (``$CC``, else Go's default: clang on macOS and the BSDs,
    gcc elsewhere): c-shared builds and the FSS kernels (``go/fss_*.c``) need one."""
    cc = os.environ.get("CC", "").split()
    default = "clang" if sys.platform == "darwin" or "bsd" in sys.platform else "gcc"
    name = cc[0] if cc else default
    path = shutil.which(name)
    if path is None:
        raise HENativeBuildError(
            f"a C compiler is needed to build secinfer's native library (cgo: c-shared library, "
            f"FSS kernels) but {name!r} was not found on PATH; install gcc (e.g. `apt-get install "
            f"gcc`) or set CC to clang, then run `python -m secinfer.native.build`")
    return path


def build(force: bool = False, quiet: bool = False) -> Path:
    """Build the shared library if needed; return its path. Concurrent callers (e.g. test
    workers) serialise on a lock file, and the later ones find the library fresh."""
    if not force and not needs_build():
        return LIB_PATH
    go = find_go()
    find_cc()
    LIB_DIR.mkdir(exist_ok=True)
    tag = hashlib.sha256(str(LIB_DIR).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"secinfer-he-build-{tag}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and not needs_build():
            return LIB_PATH
        return _build_locked(go, quiet)


def _build_locked(go: str, quiet: bool) -> Path:
    env = dict(os.environ)
    flags = env.get("GOFLAGS", "")
    if "-mod=" not in flags:
        env["GOFLAGS"] = (flags + " -mod=mod").strip()
    env["CGO_ENABLED"] = "1"
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="secinfer-he-build-") as tmp:
        tmp_lib = Path(tmp) / "libsecinferhe.so"
        cmd = [go, "build", "-trimpath", "-buildmode=c-shared", "-o", str(tmp_lib), "."]
        if not quiet:
            print(f"[secinfer.native] building the native library: {' '.join(cmd)} (in {GO_DIR})",
                  file=sys.stderr)
        proc = subprocess.run(cmd, cwd=GO_DIR, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise HENativeBuildError(
                f"building the native library failed (exit {proc.returncode}):\n"
                f"{proc.stderr.strip()[-4000:]}")
        # Atomic replace: a concurrently running process never sees a half-written file.
        staged = LIB_DIR / f".libsecinferhe.{os.getpid()}.so"
        shutil.copyfile(tmp_lib, staged)
        os.replace(staged, LIB_PATH)
    if not quiet:
        print(f"[secinfer.native] built {LIB_PATH} in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)
    return LIB_PATH


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        build(force="--force" in args)
    except HENativeBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
