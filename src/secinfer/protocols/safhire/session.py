"""Sessions, round counters and resumption [SAFHIRE Sec. 3 "Clients", Sec. 4.6].

Every SAFHIRE message carries the client's 16-byte session id and a header
``[t, sample, round, kind]`` where t is the session's monotonic round counter
(t = sample * R + round + 1 for R rounds per sample). A receiver refuses, with a typed
error, a message of another session (``SessionMismatchError``), the round it already
processed (``ReplayedRoundError``), an older one (``StaleRoundError``) or one from the
future (``SkippedRoundError``).

The server keeps a session's state (its secret shuffling seed, the round it expects next,
the client's ciphertexts of the inputs later rounds still read for residual additions, as
sent, and its last answer) in a session store: a directory given by the server's ``sessions`` option, one
file per session (mode 0600: the seed is secret). A client that reconnects with the same
session id resumes at the round it reached: the round the server expects, or the one just
before it, whose answer the server sends again from the store without recomputing it (a
client cannot get two answers under one permutation). The client keeps its own
checkpoint (its secret key, session id, round counter and current activations) in the
file given by its ``checkpoint`` option.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from secinfer.crypto.prg import PRG
from secinfer.errors import ProtocolError

HELLO, RESUME, KEYS, X, Y, BYE, META = 1, 2, 3, 4, 5, 6, 7
SID_BYTES = 16


class SafhireSessionError(ProtocolError):
    """A SAFHIRE message that does not belong to the expected session and round."""


class SessionMismatchError(SafhireSessionError):
    pass


class StaleRoundError(SafhireSessionError):
    pass


class ReplayedRoundError(StaleRoundError):
    pass


class SkippedRoundError(SafhireSessionError):
    pass


class UnknownSessionError(SafhireSessionError):
    pass


def header(t: int, sample: int, rnd: int, kind: int) -> np.ndarray:
    return np.array([t, sample, rnd, kind], dtype=np.int64)


def sid_array(sid: bytes) -> np.ndarray:
    return np.frombuffer(bytes(sid), dtype=np.uint8).copy()


def check_message(hdr: np.ndarray, sid: np.ndarray, expected_sid: bytes, expected_t: int, kind: int,
                  rounds: int, where: str) -> None:
    """Refuse anything but the expected session, round counter and message kind."""
    got_sid = bytes(np.asarray(sid, dtype=np.uint8))
    if got_sid != expected_sid:
        raise SessionMismatchError(f"{where}: message of session {got_sid.hex()[:12]}..., "
                                   f"this is session {expected_sid.hex()[:12]}...")
    t = int(hdr[0])
    if t == expected_t - 1:
        raise ReplayedRoundError(f"{where}: round {t} again (replayed); expected round {expected_t}")
    if t < expected_t:
        raise StaleRoundError(f"{where}: stale round {t}; expected round {expected_t}")
    if t > expected_t:
        raise SkippedRoundError(f"{where}: round {t} skips ahead; expected round {expected_t}")
    if int(hdr[3]) != kind:
        raise ProtocolError(f"{where}: message kind {int(hdr[3])}, expected {kind}")
    if rounds and (int(hdr[1]), int(hdr[2])) != divmod(t - 1, rounds):
        raise ProtocolError(f"{where}: round {t} labelled sample {int(hdr[1])} round {int(hdr[2])}")


def round_permutation(seed: bytes, sample: int, rnd: int, n: int) -> np.ndarray:
    """sigma for (sample, round): a fresh uniform permutation from the session's secret seed
    and the round number [SAFHIRE Sec. 4.4 "Shuffle"]."""
    return PRG(seed, "safhire/shuffle").derive(f"{sample}/{rnd}").permutation(n)


# ---------------------------------------------------------------- server state
@dataclass
class ServerSession:
    sid: bytes
    seed: bytes
    next_t: int = 1
    samples: int = 0
    saved: dict = field(default_factory=dict)     # cid -> that input's ciphertexts as sent (wire blobs)
    last_reply: list = field(default_factory=list)  # blobs of the last "sh/y"
    config: dict = field(default_factory=dict)    # b, gamma, he params, shuffle (must match on resume)


class SessionStore:
    """Server sessions in a directory (``None``: kept only for this connection)."""

    def __init__(self, root: str | None) -> None:
        self.root = Path(root) if root else None
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _path(self, sid: bytes) -> Path:
        return self.root / f"{sid.hex()}.npz"

    def save(self, s: ServerSession) -> None:
        if self.root is None:
            return
        arrays = {"seed": np.frombuffer(s.seed, np.uint8)}
        for cid, blobs in s.saved.items():
            for i, blob in enumerate(blobs):
                arrays[f"s{cid}_{i}"] = blob
        for i, blob in enumerate(s.last_reply):
            arrays[f"r{i}"] = blob
        meta = {"next_t": s.next_t, "samples": s.samples,
                "saved": {str(c): len(v) for c, v in sorted(s.saved.items())},
                "replies": len(s.last_reply), "config": s.config}
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
        fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
            os.replace(tmp, self._path(s.sid))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def load(self, sid: bytes) -> ServerSession:
        p = None if self.root is None else self._path(sid)
        if p is None or not p.exists():
            raise UnknownSessionError(f"no state for session {sid.hex()[:12]}... at this server "
                                      "(resumption needs the server's 'sessions' store)")
        with np.load(p) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            s = ServerSession(sid, bytes(z["seed"]), meta["next_t"], meta["samples"],
                              config=meta["config"])
            s.saved = {int(c): [z[f"s{c}_{i}"] for i in range(k)] for c, k in meta["saved"].items()}
            s.last_reply = [z[f"r{i}"] for i in range(meta["replies"])]
        return s

    def drop(self, sid: bytes) -> None:
        if self.root is not None:
            self._path(sid).unlink(missing_ok=True)


# ---------------------------------------------------------------- client checkpoint
def save_checkpoint(path: str | None, state: dict) -> None:
    if not path:
        return
    p = Path(path)
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    meta = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    fd, tmp = tempfile.mkstemp(dir=p.parent, suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: str | None) -> dict | None:
    if not path or not Path(path).exists():
        return None
    with np.load(path) as z:
        state = json.loads(bytes(z["meta"]).decode())
        for k in z.files:
            if k != "meta":
                state[k] = z[k]
    return state
