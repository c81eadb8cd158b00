"""certified: computation on certified data (Chatel et al., CRISP, USENIX Security 2021)."""
