"""Helpers shared by the ``secinfer bench`` suite adapters.

An adapter is ``run(quick: bool = False, network: str | None = None) -> dict`` returning
``{"suite", "rows": [flat dicts], "plots": [plot specs], "raw": <the module's own dict>, ...}``;
``secinfer.bench.suites`` adds the machine description, writes the JSON and the PNGs.
"""

from __future__ import annotations

import math
import sys
import time

from secinfer.errors import ConfigError


class Progress:
    """One line per step on stderr, with the elapsed time of the suite so far."""

    def __init__(self, suite: str, total: int | None = None, stream=None):
        self.suite = suite
        self.total = total
        self.done = 0
        self.t0 = time.perf_counter()
        self.stream = stream if stream is not None else sys.stderr

    def __call__(self, msg: str) -> None:
        self.done += 1
        count = f"{self.done}/{self.total}" if self.total else f"{self.done}"
        print(f"[bench {self.suite} {count} +{time.perf_counter() - self.t0:6.1f}s] {msg}",
              file=self.stream, flush=True)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def ratio(num, den):
    """``num / den``, or None when either is missing, zero-divided or not finite."""
    if num is None or den is None:
        return None
    try:
        num, den = float(num), float(den)
    except (TypeError, ValueError):
        return None
    if den == 0 or not math.isfinite(num) or not math.isfinite(den):
        return None
    return num / den


def parse_networks(network: str | None, allowed, default) -> list[str]:
    """Comma-separated ``--network`` value -> list of profiles from ``allowed``."""
    if not network:
        return list(default)
    out = [p.strip() for p in network.split(",") if p.strip()]
    bad = [p for p in out if p not in allowed]
    if bad or not out:
        raise ConfigError(f"network profile(s) {bad or network!r} not supported by this suite; "
                          f"choose from {', '.join(allowed)}")
    return out


def num(v):
    """A plot value: float, or NaN when missing (matplotlib leaves a gap)."""
    if v is None:
        return float("nan")
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def split_profiles(network: str | None, default) -> list[str]:
    """``--network`` for suites that use the transport's shaping profiles
    (``none|lan|wan|bw=<MB/s>,lat=<ms>``): a comma list of named profiles, or one custom one."""
    from secinfer.net.shaping import parse_profile

    if not network:
        return list(default)
    parts = [network] if "=" in network else [p.strip() for p in network.split(",") if p.strip()]
    for p in parts:
        parse_profile(p)   # ConfigError on a bad profile, before any work is done
    return parts
