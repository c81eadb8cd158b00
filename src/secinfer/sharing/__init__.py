"""secinfer.sharing layer."""
