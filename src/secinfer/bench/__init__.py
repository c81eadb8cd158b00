"""secinfer.bench layer."""
