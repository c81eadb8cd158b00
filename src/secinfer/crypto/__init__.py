"""secinfer.crypto layer."""
