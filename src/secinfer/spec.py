"""``ArraySpec``: what one received array must look like (bottom layer, beside errors.py).

Any layer that validates arrays from another party uses it: the channel checks every
received message against the step's specs, and the FSS gates describe their keys with it.
``secinfer.net.channel`` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secinfer.errors import FrameError


@dataclass(frozen=True)
class ArraySpec:
    """What a protocol step expects: dtype and exact shape (``None`` = any length)."""

    dtype: np.dtype | type | str
    shape: tuple
    max_elems: int = 1 << 28

    def check(self, a: np.ndarray, where: str) -> np.ndarray:
        if a.dtype != np.dtype(self.dtype):
            raise FrameError(f"{where}: expected dtype {np.dtype(self.dtype)}, got {a.dtype}")
        if len(a.shape) != len(self.shape) or any(
                s is not None and s != d for s, d in zip(self.shape, a.shape)):
            raise FrameError(f"{where}: expected shape {self.shape}, got {a.shape}")
        if a.size > self.max_elems:
            raise FrameError(f"{where}: {a.size} elements exceed the limit {self.max_elems}")
        return a
