"""An endpoint wrapper for tests that compare two runs message by message: it records what its
party sends, in order, as (peer, tag, the arrays' bytes), and passes everything else through
to the endpoint it wraps."""

from __future__ import annotations

import numpy as np


class RecordingEndpoint:
    def __init__(self, ep, log: list) -> None:
        object.__setattr__(self, "_ep", ep)
        object.__setattr__(self, "_log", log)

    def send(self, peer, tag, *arrays):
        self._log.append((peer, tag, tuple(np.ascontiguousarray(a).tobytes() for a in arrays)))
        return self._ep.send(peer, tag, *arrays)

    def send_to_all(self, tag, *arrays):
        for p in self._ep.peers:
            self.send(p, tag, *arrays)

    def __getattr__(self, name):
        return getattr(self._ep, name)

    def __setattr__(self, name, value):
        setattr(self._ep, name, value)
