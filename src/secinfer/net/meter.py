"""Exact traffic metering per party, per peer, per tag, per phase.

Bytes are counted twice: ``payload`` (the arrays' bytes, what cost formulas in the papers
count) and ``wire`` (the whole frame, header included). Rounds are the length of the
longest chain of causally dependent messages within a phase: every frame carries the
sender's depth, and a receive sets depth = max(depth, sender_depth + 1).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class Counter:
    payload: int = 0
    wire: int = 0
    messages: int = 0

    def add(self, payload: int, wire: int) -> None:
        self.payload += payload
        self.wire += wire
        self.messages += 1


@dataclass
class Meter:
    party: str
    # (phase, direction "sent"/"recv", peer, tag) -> Counter
    counters: dict = field(default_factory=lambda: defaultdict(Counter))
    depth: dict = field(default_factory=lambda: defaultdict(int))
    seconds: dict = field(default_factory=lambda: defaultdict(float))
    # phase -> [first entry, last exit] in wall-clock seconds (time.time()), so a launcher on
    # one host can measure a phase from the moment the LAST party entered it (as if after a
    # barrier) to the moment the last party left it, without counting a party's wait for
    # the others to finish the previous phase.
    windows: dict = field(default_factory=dict)
    # (name, time.monotonic()) events a protocol marks (e.g. "query", "shared", "output" of
    # every query), so a benchmark can time intervals across parties on one host:
    # CLOCK_MONOTONIC is one system-wide clock on Linux.
    marks: list = field(default_factory=list)

    def enter(self, phase: str, t: float) -> None:
        w = self.windows.setdefault(phase, [t, t])
        w[0] = min(w[0], t)

    def leave(self, phase: str, t: float) -> None:
        w = self.windows.setdefault(phase, [t, t])
        w[1] = max(w[1], t)

    def mark(self, name: str, t: float) -> None:
        self.marks.append((name, t))

    def record(self, phase: str, direction: str, peer: str, tag: str, payload: int, wire: int) -> None:
        self.counters[(phase, direction, peer, tag)].add(payload, wire)

    def total(self, phase: str | None = None, direction: str = "sent", peer: str | None = None,
              tag_prefix: str | None = None, kind: str = "payload") -> int:
        out = 0
        for (ph, d, p, t), c in self.counters.items():
            if d != direction or (phase and ph != phase) or (peer and p != peer):
                continue
            if tag_prefix and not t.startswith(tag_prefix):
                continue
            out += getattr(c, kind)
        return out

    def messages(self, phase: str | None = None, direction: str = "sent", tag_prefix: str | None = None) -> int:
        return sum(c.messages for (ph, d, _p, t), c in self.counters.items()
                   if d == direction and (not phase or ph == phase) and (not tag_prefix or t.startswith(tag_prefix)))

    def rounds(self, phase: str) -> int:
        return self.depth[phase]

    def summary(self) -> dict:
        """A JSON-ready summary (used by the launcher to merge all parties' meters)."""
        by_peer: dict = defaultdict(lambda: defaultdict(dict))
        for (ph, d, p, t), c in sorted(self.counters.items()):
            if t.startswith("__"):
                continue
            by_peer[ph][d].setdefault(p, {"payload": 0, "wire": 0, "messages": 0})
            e = by_peer[ph][d][p]
            e["payload"] += c.payload
            e["wire"] += c.wire
            e["messages"] += c.messages
        return {
            "party": self.party,
            "phases": {ph: {
                "sent_payload": self.total(ph, "sent"), "sent_wire": self.total(ph, "sent", kind="wire"),
                "recv_payload": self.total(ph, "recv"), "messages_sent": self.messages(ph, "sent"),
                "rounds": self.depth[ph], "seconds": self.seconds[ph],
                "window": self.windows.get(ph),
                "by_peer": {d: dict(v) for d, v in by_peer[ph].items()},
            } for ph in ("setup", "offline", "online")},
            "marks": [[n, t] for n, t in self.marks],
            "by_tag": {f"{ph}|{d}|{p}|{t}": [c.payload, c.wire, c.messages]
                       for (ph, d, p, t), c in sorted(self.counters.items()) if not t.startswith("__")},
        }
