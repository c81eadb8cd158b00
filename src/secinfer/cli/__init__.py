"""secinfer.cli layer."""
