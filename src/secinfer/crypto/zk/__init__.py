"""Zero-knowledge proofs (``popk``: proof of plaintext knowledge for RLWE ciphertexts)."""
