"""Homomorphic encryption for secinfer: a typed Python API over Lattigo v6 (Go, c-shared)."""
