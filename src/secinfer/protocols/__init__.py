"""secinfer.protocols layer."""
