"""Alias of :mod:`secinfer.native.build`, kept so ``python -m secinfer.crypto.he.build``
(the command of earlier releases) still builds the native library."""

from __future__ import annotations

from secinfer.native.build import GO_DIR, LIB_DIR, LIB_PATH, build, find_cc, find_go, main, needs_build

__all__ = ["GO_DIR", "LIB_DIR", "LIB_PATH", "build", "find_cc", "find_go", "main", "needs_build"]

if __name__ == "__main__":
    raise SystemExit(main())
