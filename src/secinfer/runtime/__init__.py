"""secinfer.runtime layer."""
