"""secinfer.arith layer."""
