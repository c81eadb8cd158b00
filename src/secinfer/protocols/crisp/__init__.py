"""CRISP (Fang, Zheng, Gu): 2PC inference secure against malicious clients. See protocol.py
and docs/protocols/crisp.md."""
