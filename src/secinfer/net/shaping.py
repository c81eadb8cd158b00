"""Network profiles applied to real traffic by the transport (these hosts have no netem).

A profile is a bandwidth (bytes per second, ``None`` = unlimited) and a one-way latency.
The socket transport applies it per directed link, on real frames:

* the **sender** paces each link with a ``TokenBucket``: a frame of ``n`` bytes (the
  whole wire frame) is handed to the socket only when the bucket holds ``n`` tokens,
  refilled at the link's bandwidth (burst ``BURST_BYTES``); frames queue behind each other
  per link and links are independent, as on separate wires;
* the **receiver** releases each frame to the protocol one-way latency after it was sent:
  the sender stamps the time the frame may leave; on a loopback link (one clock) the
  release is stamp + latency clamped to [arrival, arrival + latency], so the real loopback
  time is part of the modelled latency rather than added to it; from another host,
  arrival + latency.

So a frame of n bytes costs ~ n / bandwidth + max(latency, real loopback time), and a
protocol with r sequential rounds pays r * latency. Control traffic (heartbeats,
close handshakes) is neither paced nor delayed.

Named profiles (MB = 10^6 bytes):

=========  ==================  ==================
name       bandwidth           one-way latency
=========  ==================  ==================
``none``   unlimited           0
``lan``    1 Gbit/s (125 MB/s) 0.25 ms
``wan``    40 MB/s             35 ms
custom     ``bw=<MB/s>,lat=<ms>`` (either part may be left out)
=========  ==================  ==================
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from secinfer.errors import ConfigError

MB = 1_000_000
BURST_BYTES = 64 * 1024


@dataclass(frozen=True)
class LinkProfile:
    name: str
    bandwidth: float | None  # bytes per second; None = unlimited
    latency: float           # one-way, seconds

    @property
    def is_null(self) -> bool:
        return self.bandwidth is None and self.latency == 0.0

    def describe(self) -> str:
        bw = "unlimited" if self.bandwidth is None else f"{self.bandwidth / MB:g} MB/s"
        return f"{self.name} ({bw}, {self.latency * 1e3:g} ms one way)"

    def transfer_time(self, nbytes: int) -> float:
        """Ideal time for one frame of ``nbytes`` on an idle link (for docs and estimates)."""
        return self.latency + (0.0 if self.bandwidth is None else nbytes / self.bandwidth)


NONE = LinkProfile("none", None, 0.0)
LAN = LinkProfile("lan", 1e9 / 8, 0.25e-3)
WAN = LinkProfile("wan", 40 * MB, 35e-3)
NAMED = {p.name: p for p in (NONE, LAN, WAN)}


def parse_profile(spec: "str | LinkProfile | None") -> LinkProfile:
    """``none`` | ``lan`` | ``wan`` | ``bw=<MB/s>,lat=<ms>`` -> LinkProfile."""
    if spec is None:
        return NONE
    if isinstance(spec, LinkProfile):
        return spec
    if not isinstance(spec, str):
        raise ConfigError(f"network profile must be a string, got {type(spec).__name__}")
    s = spec.strip().lower()
    if s in NAMED:
        return NAMED[s]
    bw: float | None = None
    lat = 0.0
    seen = set()
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        key, eq, val = part.partition("=")
        key = key.strip()
        if not eq or key not in ("bw", "lat") or key in seen:
            raise ConfigError(f"network profile {spec!r}: expected none | lan | wan | bw=<MB/s>,lat=<ms>")
        seen.add(key)
        try:
            x = float(val)
        except ValueError:
            raise ConfigError(f"network profile {spec!r}: {key} must be a number, got {val!r}") from None
        if not math.isfinite(x) or x < 0 or (key == "bw" and x == 0):
            raise ConfigError(f"network profile {spec!r}: {key} must be finite and "
                              f"{'positive' if key == 'bw' else 'non-negative'}")
        if key == "bw":
            bw = x * MB
        else:
            lat = x / 1e3
    if not seen:
        raise ConfigError(f"network profile {spec!r}: expected none | lan | wan | bw=<MB/s>,lat=<ms>")
    return LinkProfile(spec.strip(), bw, lat)


def combine(a: LinkProfile, b: LinkProfile) -> LinkProfile:
    """The profile of a path through both: the smaller bandwidth, the larger latency."""
    if a.is_null:
        return b
    if b.is_null:
        return a
    bws = [x for x in (a.bandwidth, b.bandwidth) if x is not None]
    bw = min(bws) if bws else None
    if a == b:
        return a
    return LinkProfile(f"{a.name}+{b.name}", bw, max(a.latency, b.latency))


class TokenBucket:
    """Bandwidth pacing for one link, with explicit time (no clock inside: easy to test).

    Tokens (bytes) refill at ``rate`` per second up to ``burst``. ``reserve(n, now)``
    takes ``n`` tokens, going into debt if needed, and returns the time at which the
    debt is repaid, i.e. when the frame may leave. Successive frames queue: each one's
    ready time is after the previous one's.
    """

    def __init__(self, rate: float | None, burst: float = BURST_BYTES) -> None:
        if rate is not None and rate <= 0:
            raise ConfigError("token bucket rate must be positive")
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.last = None  # time of the last refill

    def reserve(self, nbytes: int, now: float) -> float:
        if self.rate is None:
            return now
        if self.last is None:
            self.last = now
        if now > self.last:
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
        self.tokens -= nbytes
        if self.tokens >= 0:
            return now
        return now + (-self.tokens) / self.rate


def link_profile(default: LinkProfile, sender: LinkProfile | None, receiver: LinkProfile | None,
                 explicit: LinkProfile | None = None) -> LinkProfile:
    """Effective profile of the directed link sender -> receiver.

    An explicit per-link profile (cluster file ``[[link]]``) wins; otherwise the path
    through both parties' own access links (``link = ...`` on a party), each falling back
    to the session default.
    """
    if explicit is not None:
        return explicit
    return combine(sender if sender is not None else default, receiver if receiver is not None else default)


_PR_SET_TIMERSLACK = 29


def fine_timer_slack() -> bool:
    """Linux: wake the calling thread within ~1 us of a timed wait's deadline instead of the
    default 50 us timer slack (per thread; threads it starts inherit it). A transport that
    releases frames at modelled arrival times calls it in the threads that wait for them.
    Returns whether it took effect."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
