"""secinfer.protocols.reference layer."""
