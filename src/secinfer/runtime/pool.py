"""A bounded pool of per-session material produced ahead of time and handed out once.

``MaterialPool(produce, capacity)`` keeps up to ``capacity`` items made by ``produce()`` in
a background thread; ``take()`` removes one item and returns it (never the same item
twice: it is gone from the pool once taken, and the pool keeps no reference to it), or
makes one on the spot when the pool is empty. The pool never holds more than
``capacity`` items, so its memory is bounded whatever the load.

What the serving runtime (``secinfer.runtime.serve``) puts in it is each session's fresh
PRG seed (``SessionSeed``). The protocols' own offline material (``ProtocolSpec.prepare``:
e.g. astra's masks, products' preprocessing and model shares) is made by all model-side
parties together, so it lives in a ``PrepStore``: items under an id the parties agree on,
each taken once by id (docs/runtime.md "Serving").
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from secinfer.crypto.prg import fresh_seed
from secinfer.errors import ConfigError


@dataclass
class SessionSeed:
    """A fresh 128-bit seed from the OS CSPRNG for one session's ``PartyJob.prg``."""

    seed: bytes

    def wipe(self) -> None:
        self.seed = b""


def make_session_seed() -> SessionSeed:
    return SessionSeed(fresh_seed())


class MaterialPool:
    """Up to ``capacity`` items from ``produce()``, made ahead, each handed out once."""

    def __init__(self, produce: Callable[[], Any], capacity: int = 8) -> None:
        if not isinstance(capacity, int) or capacity < 0:
            raise ConfigError(f"pool capacity must be a non-negative integer, got {capacity!r}")
        self.capacity = capacity
        self._produce = produce
        self._items: collections.deque = collections.deque()
        self._cv = threading.Condition()
        self._stop = False
        self.produced = 0         # items made by the background thread
        self.taken = 0            # items handed out (from the pool or made on the spot)
        self.made_on_demand = 0   # takes that found the pool empty
        self._thread = None
        if capacity:
            self._thread = threading.Thread(target=self._fill, name="serve-pool", daemon=True)
            self._thread.start()

    def _fill(self) -> None:
        while True:
            with self._cv:
                while not self._stop and len(self._items) >= self.capacity:
                    self._cv.wait()
                if self._stop:
                    return
            item = self._produce()
            with self._cv:
                if self._stop:
                    return
                self._items.append(item)
                self.produced += 1
                self._cv.notify_all()

    def __len__(self) -> int:
        with self._cv:
            return len(self._items)

    def take(self):
        """One item, removed from the pool (made now if the pool is empty)."""
        with self._cv:
            item = self._items.popleft() if self._items else None
            self.taken += 1
            if item is None:
                self.made_on_demand += 1
            self._cv.notify_all()
        return self._produce() if item is None else item

    def wait_full(self, timeout: float = 10.0) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: len(self._items) >= self.capacity or self._stop, timeout)

    def close(self) -> None:
        """Stop producing and wipe what is left."""
        with self._cv:
            self._stop = True
            left = list(self._items)
            self._items.clear()
            self._cv.notify_all()
        for it in left:
            wipe = getattr(it, "wipe", None)
            if wipe is not None:
                wipe()

    def stats(self) -> dict:
        with self._cv:
            return {"capacity": self.capacity, "available": len(self._items), "produced": self.produced,
                    "taken": self.taken, "made_on_demand": self.made_on_demand}


class PrepStore:
    """Prepared items (``ProtocolSpec.prepare``) by id: at most ``capacity``, each taken once.

    ``put`` adds an item (the oldest is dropped and wiped past the bound), ``take(id)``
    removes and returns that item or None if it is not here (never made, dropped, or taken
    already: under the lock, so two sessions can never both get it), ``take_oldest()`` the
    leader's choice for a new session. The store keeps no reference to a taken item."""

    def __init__(self, capacity: int) -> None:
        if not isinstance(capacity, int) or capacity < 0:
            raise ConfigError(f"pool capacity must be a non-negative integer, got {capacity!r}")
        self.capacity = capacity
        self._items: collections.OrderedDict = collections.OrderedDict()
        self._cv = threading.Condition()
        self.stored = self.taken = self.dropped = 0
        self._closed = False

    def put(self, pid: bytes, item) -> None:
        drop = []
        with self._cv:
            if self._closed or pid in self._items:
                drop.append(item)
            else:
                self._items[pid] = item
                self.stored += 1
                while len(self._items) > self.capacity:
                    drop.append(self._items.popitem(last=False)[1])
                    self.dropped += 1
            self._cv.notify_all()
        for it in drop:
            _wipe(it)

    def take(self, pid: bytes):
        with self._cv:
            item = self._items.pop(pid, None)
            if item is not None:
                self.taken += 1
                self._cv.notify_all()
            return item

    def take_oldest(self):
        """(id, item) of the oldest item, removed; None when empty."""
        with self._cv:
            if not self._items:
                return None
            self.taken += 1
            self._cv.notify_all()
            return self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._cv:
            return len(self._items)

    def ids(self) -> list:
        with self._cv:
            return [k.hex() for k in self._items]

    def wait_below(self, n: int, timeout: float) -> bool:
        """Wait until fewer than ``n`` items are held (True) or ``timeout`` passes."""
        end = time.monotonic() + timeout
        with self._cv:
            while len(self._items) >= n and not self._closed:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return not self._closed

    def close(self) -> None:
        with self._cv:
            self._closed = True
            left = list(self._items.values())
            self._items.clear()
            self._cv.notify_all()
        for it in left:
            _wipe(it)

    def stats(self) -> dict:
        with self._cv:
            return {"capacity": self.capacity, "available": len(self._items), "stored": self.stored,
                    "taken": self.taken, "dropped": self.dropped}


def _wipe(item) -> None:
    wipe = getattr(item, "wipe", None)
    if wipe is not None:
        wipe()
