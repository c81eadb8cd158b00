"""secinfer.net layer."""
