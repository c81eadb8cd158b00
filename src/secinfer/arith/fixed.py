"""Named fixed-point configurations over Z_2^l with derived bounds, and the quantizer.

Semantics (the oracle every protocol matches; see docs/fixed-point.md):

* encode(x) = floor(x * 2^f + 1/2) mod 2^l (round half up), refused when out of range;
* decode(v) = signed(v) / 2^f;
* a product of two encoded values carries 2f fractional bits and is brought back by
  ``trunc``: an arithmetic (flooring) right shift by f of the signed value;
* additions are exact ring additions (they wrap mod 2^l like every protocol does).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secinfer.arith.ring import Ring
from secinfer.errors import ConfigError, FixedPointRangeError


@dataclass(frozen=True)
class FixedPointConfig:
    name: str
    ring_bits: int
    frac_bits: int

    def __post_init__(self) -> None:
        if self.ring_bits not in (32, 64):
            raise ConfigError(f"fixed-point ring must be Z_2^32 or Z_2^64, got Z_2^{self.ring_bits}")
        if not 0 <= self.frac_bits < self.ring_bits // 2:
            raise ConfigError(
                f"fractional bits must be in 0..{self.ring_bits // 2 - 1} for Z_2^{self.ring_bits},"
                f" got {self.frac_bits}")

    # ---- derived bounds -------------------------------------------------------------
    @property
    def ring(self) -> Ring:
        return Ring(self.ring_bits)

    @property
    def scale(self) -> int:
        return 1 << self.frac_bits

    @property
    def resolution(self) -> float:
        """Smallest representable step, 2^-f."""
        return 1.0 / self.scale

    @property
    def max_abs(self) -> float:
        """Largest magnitude representable: values lie in [-2^(l-1-f), 2^(l-1-f))."""
        return float(2 ** (self.ring_bits - 1 - self.frac_bits))

    @property
    def product_max_abs(self) -> float:
        """Bound on |sum of products| (before truncation) so it does not wrap: 2^(l-1-2f)."""
        return float(2 ** (self.ring_bits - 1 - 2 * self.frac_bits))

    @property
    def encode_error(self) -> float:
        """Worst-case quantization error of encode: half a step."""
        return 0.5 * self.resolution

    def describe(self) -> dict:
        return {
            "name": self.name, "ring_bits": self.ring_bits, "frac_bits": self.frac_bits,
            "resolution": self.resolution, "max_abs": self.max_abs,
            "product_max_abs": self.product_max_abs,
        }

    # ---- quantizer ---------------------------------------------------------------------
    def encode(self, x: np.ndarray | float, check: bool = True) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if check:
            if not np.all(np.isfinite(x)):
                raise FixedPointRangeError(f"{self.name}: cannot encode NaN or infinity")
            big = np.abs(x) >= self.max_abs
            if np.any(big):
                raise FixedPointRangeError(
                    f"{self.name}: value {float(x[big].flat[0]):g} outside the representable range "
                    f"+-{self.max_abs:g}")
        v = np.floor(x * self.scale + 0.5).astype(np.int64)
        return self.ring.from_signed(v)

    def decode(self, v: np.ndarray) -> np.ndarray:
        return self.ring.to_signed(v).astype(np.float64) / self.scale

    def trunc(self, v: np.ndarray, bits: int | None = None) -> np.ndarray:
        return self.ring.arshift(v, self.frac_bits if bits is None else bits)

    def mul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.trunc(self.ring.mul(a, b))

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.trunc(self.ring.matmul(a, b))


FX64 = FixedPointConfig("fx64f13", 64, 13)   # [ASTRA 5.3]: l = 64, 13 fractional bits
FX32 = FixedPointConfig("fx32f13", 32, 13)   # STAMP / Falcon [STAMP 3.1]: Z_2^32, 13 fractional bits
FX64_F16 = FixedPointConfig("fx64f16", 64, 16)

NAMED_CONFIGS = {c.name: c for c in (FX64, FX32, FX64_F16)}


def get_config(name: str) -> FixedPointConfig:
    try:
        return NAMED_CONFIGS[name]
    except KeyError:
        raise ConfigError(f"unknown fixed-point config {name!r}; known: {sorted(NAMED_CONFIGS)}") from None
