"""secinfer's native library: one Go/cgo c-shared library (Lattigo HE, FSS kernels, garbled
circuits, ZK provers) below the ``crypto`` layer.

- ``go/``: the Go module (sources ship with the package so any install can build).
- :mod:`secinfer.native.build`: ``python -m secinfer.native.build`` builds ``_lib/libsecinferhe.so``.
- :mod:`secinfer.native.lib`: the one loader (finding/building and loading the library, the
  ctypes signature table, call helpers); :mod:`secinfer.native.errors`: its typed errors.

Importing this package does not load or build the library; the first call does.
"""
