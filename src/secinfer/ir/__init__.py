"""secinfer.ir layer."""
