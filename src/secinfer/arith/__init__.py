"""secinfer.arith layer."""

from secinfer.arith.public import public_rng

__all__ = ["public_rng"]
