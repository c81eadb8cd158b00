"""Live progress of the party processes of one local run (``secinfer run`` on a terminal).

Each party (``--progress-file PATH``) rewrites a one-line JSON status file about twice a
second: its stage (load, connect, then the protocol's phase: setup, offline, online, then
done), the rounds so far in that phase, the bytes it sent, and the protocol's last
``ep.mark`` (e.g. ASTRA's "query", "shared", "output"). The launcher reads every party's
file and shows them on its progress bar. Status only: nothing secret (counts and names of
public phases), and nothing the meter would not report at the end anyway.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path


class PartyStatus:
    """Party side: a daemon thread that writes the status file until ``stop()``."""

    def __init__(self, path: str | os.PathLike, interval: float = 0.5) -> None:
        self.path = Path(path)
        self.interval = interval
        self.stage = "load"
        self.ep = None
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="secinfer-progress", daemon=True)
        self._thread.start()

    def set_stage(self, stage: str, ep=None) -> None:
        self.stage = stage
        if ep is not None:
            self.ep = ep
        self.write()

    def snapshot(self) -> dict:
        st = {"stage": self.stage, "t": round(time.monotonic() - self.t0, 2)}
        ep = self.ep
        if ep is not None and self.stage == "protocol":
            m = ep.meter
            try:
                phase = ep.current_phase        # a property of the Endpoint
                if phase == "setup" and "online" in m.windows:   # back in the outer phase: wrapping up
                    st["phase"] = "finishing"
                else:
                    st["phase"] = phase
                st["rounds"] = int(m.depth.get(phase, 0))
                st["sent"] = sum(c.payload for (_ph, d, _p, _t), c in list(m.counters.items()) if d == "sent")
                if m.marks:
                    st["mark"] = str(m.marks[-1][0])
            except Exception:  # noqa: BLE001 - e.g. a dict resized meanwhile: next tick; never fails a party
                pass
        return st

    def write(self) -> None:
        try:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(self.snapshot()))
            os.replace(tmp, self.path)
        except OSError:
            pass

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.write()

    def stop(self, stage: str = "done") -> None:
        self.stage = stage
        self._stop.set()
        self.write()


def read_status(path: str | os.PathLike) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def describe(statuses: dict) -> str:
    """{role: status or None} -> one short line for the progress bar."""
    parts = []
    for role, st in statuses.items():
        if not st:
            parts.append(f"{role}: starting")
            continue
        stage = st.get("stage", "?")
        if stage == "protocol":
            s = f"{role}: {st.get('phase', '?')}"
            if st.get("rounds"):
                s += f" r{st['rounds']}"
            if st.get("sent"):
                s += f" {_mb(st['sent'])}"
            if st.get("mark"):
                s += f" [{st['mark']}]"
        else:
            s = f"{role}: {stage}"
        parts.append(s)
    return " | ".join(parts)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f}MB" if n >= 1e5 else f"{n / 1e3:.0f}kB"
