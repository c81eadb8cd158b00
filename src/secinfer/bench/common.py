"""Helpers shared by the ``secinfer bench`` suite adapters.

An adapter is ``run(quick: bool = False, network: str | None = None) -> dict`` returning
``{"suite", "rows": [flat dicts], "plots": [plot specs], "raw": <the module's own dict>, ...}``;
``secinfer.bench.suites`` adds the machine description, writes the JSON and the PNGs.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
import threading
import time

from secinfer.errors import ConfigError


_VERBOSITY: contextvars.ContextVar[int] = contextvars.ContextVar("secinfer_bench_verbosity", default=0)
_LIVE: contextvars.ContextVar[list | None] = contextvars.ContextVar("secinfer_bench_live", default=None)


@contextlib.contextmanager
def bench_feedback(verbosity: int = 0):
    """The scope of one suite run (``secinfer.bench.suites.run_one``): the Progress objects
    made inside print at this verbosity (-1: nothing, 0: steps, 1: steps and "still
    running" lines every 15 s instead of 60 s) and their last step is closed at the end."""
    t1 = _VERBOSITY.set(int(verbosity))
    live: list = []
    t2 = _LIVE.set(live)
    try:
        yield
    finally:
        for p in live:
            p.close()
        _VERBOSITY.reset(t1)
        _LIVE.reset(t2)


class Progress:
    """One line on stderr when a step starts, one when it finishes (with its time), the
    suite's elapsed time on each, a "still running" line while a long step runs, and
    ``row(text)`` for a result as soon as it is known."""

    def __init__(self, suite: str, total: int | None = None, stream=None, tick: float | None = None):
        self.suite = suite
        self.total = total
        self.done = 0
        self.t0 = time.perf_counter()
        self.stream = stream if stream is not None else sys.stderr
        self.verbosity = _VERBOSITY.get()
        self.tick = tick if tick is not None else (15.0 if self.verbosity > 0 else 60.0)
        self._step: str | None = None
        self._step_t = 0.0
        self._last = time.perf_counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        live = _LIVE.get()
        if live is not None:
            live.append(self)

    def _print(self, text: str) -> None:
        self._last = time.perf_counter()
        if self.verbosity >= 0:
            print(text, file=self.stream, flush=True)

    def _head(self) -> str:
        count = f"{self.done}/{self.total}" if self.total else f"{self.done}"
        return f"[bench {self.suite} {count} +{time.perf_counter() - self.t0:6.1f}s]"

    def _finish_step(self) -> None:
        if self._step is not None:
            self._print(f"{self._head()} done: {self._step} ({time.perf_counter() - self._step_t:.1f} s)")
            self._step = None

    def __call__(self, msg: str) -> None:
        with self._lock:
            self._finish_step()
            self.done += 1
            self._step, self._step_t = msg, time.perf_counter()
            self._print(f"{self._head()} {msg} ...")
        if self._thread is None and self.verbosity >= 0 and self.tick > 0:
            self._thread = threading.Thread(target=self._ticker, name=f"bench-{self.suite}-progress", daemon=True)
            self._thread.start()

    def row(self, text: str) -> None:
        """A finished result, printed now (not only when the suite ends)."""
        with self._lock:
            self._print(f"{self._head()}   {text}")

    def _ticker(self) -> None:
        """A "still running" line when nothing was printed for ``tick`` seconds."""
        while not self._stop.wait(min(self.tick, 1.0)):
            with self._lock:
                if self._step is not None and time.perf_counter() - self._last >= self.tick:
                    self._print(f"{self._head()} still running: {self._step} "
                                f"({time.perf_counter() - self._step_t:.0f} s so far)")

    def close(self) -> None:
        with self._lock:
            self._finish_step()
        self._stop.set()

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
