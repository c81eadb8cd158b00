"""A test-only 3-party protocol that reports, per party, what the fork-server tests check:
its process identity (pid, parent, process group, session), fresh randomness (a PRG seed
draw and an X25519 key: forked parties must not share any) and whether the ONNX importer
was already imported when the party began (it was preloaded by the fork server), and
which tcp record layer its endpoint uses.
The client's output is its input."""

from __future__ import annotations

import os
import sys

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from secinfer.protocols.base import PartyResult, ProtocolSpec

ROLES = ("server", "client", "helper")


def run_party(role: str, ep, job) -> PartyResult:
    key = X25519PrivateKey.generate().public_key().public_bytes_raw().hex()
    info = {"pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
            "prg": job.prg.uint64((4,)).tolist(), "x25519": key,
            "model_loaded": job.model is not None, "onnx_imported": "onnx" in sys.modules,
            "record_native": getattr(ep, "native", None), "env_native": os.environ.get("SECINFER_TCP_NATIVE")}
    out = None if job.input is None else np.asarray(job.input, dtype=np.float64)
    return PartyResult(output=out, info=info)


def check_model(graph, security: str) -> None:
    return None


SPEC = ProtocolSpec(
    name="test-fork", description="fork server test protocol", roles=ROLES, model_role="server",
    input_role="client", securities=("semi-honest",), default_security="semi-honest",
    run_party=run_party, check_model=check_model, insecure=True, paper="none")
