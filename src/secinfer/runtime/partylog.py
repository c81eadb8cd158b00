"""A party's structured log: one JSON object per line, written and flushed line by line
(so a party killed with SIGKILL leaves every line written so far), mode 0600.

Every line has ``ts`` (UTC, ISO 8601, milliseconds), ``t`` (seconds since the party
started), ``party``, ``role`` and ``event``; progress lines add ``phase``, ``step`` (the
last message: ``sent|recv peer tag``) and the transport's byte counters ``sent`` /
``recv`` (wire bytes). Events: ``start``, ``loaded``, ``connected``, ``phase`` (the
protocol entered another phase), ``progress`` (at most one per ``interval`` while
something changed), ``done`` (per-phase seconds and bytes) or ``error`` (type, message),
``closed`` (how long the final flush took).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import threading
import time
from pathlib import Path


class PartyLog:
    def __init__(self, path: str | os.PathLike, party: str, interval: float = 1.0) -> None:
        self.path = Path(path)
        self.party = party
        self.role: str | None = None
        self.interval = interval
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._f = os.fdopen(fd, "a", buffering=1, encoding="utf-8")   # line-buffered: flushed per line
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None

    def event(self, event: str, **fields) -> None:
        rec = {"ts": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"),
               "t": round(time.monotonic() - self._t0, 3), "party": self.party, "role": self.role,
               "event": event, **fields}
        line = json.dumps(rec, default=str)
        with self._lock:
            if not self._f.closed:
                self._f.write(line + "\n")

    def watch(self, ep) -> None:
        """Log the endpoint's phase changes and progress from a background thread (reads
        only plain attributes the protocol thread sets: no lock on its path)."""
        def loop():
            last = None
            phase = None
            while not self._stop.wait(self.interval):
                stats = getattr(ep, "stats", {})
                step = getattr(ep, "last_step", None)
                ph = ep.current_phase
                state = (ph, step, stats.get("bytes_sent"), stats.get("bytes_recv"))
                if ph != phase:
                    phase = ph
                    self.event("phase", phase=ph)
                if state != last:
                    last = state
                    self.event("progress", phase=ph, step=" ".join(step) if step else None,
                               sent=stats.get("bytes_sent"), recv=stats.get("bytes_recv"))

        self._watch = threading.Thread(target=loop, name=f"secinfer-log-{self.party}", daemon=True)
        self._watch.start()

    def close(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.join(2.0)
        with self._lock:
            self._f.close()
