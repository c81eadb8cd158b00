"""Preprocessing provider interface: correlated randomness produced ahead of time, used once.

DESIGN.md: preprocessing (triples, FSS keys, masks) comes from a provider (dealer, trusted
device, or a two/three-party protocol), can be produced ahead of time into a store, and is
consumed exactly once. Here:

* ``PreprocessingStore`` -- one party's store. ``put(label, item)`` once per label;
  ``take(label)`` returns the item and wipes it; a second ``take`` of the same label (or a
  ``put`` under a label already used) raises ``PreprocessingReuseError``. The store is
  written to disk as ``.npz`` (numpy arrays plus a JSON manifest stored as bytes; loaded
  with ``allow_pickle=False``) and, by default, ``load`` deletes the file it read, so one
  file cannot feed two sessions. Consumed labels are kept in the manifest so reuse stays
  detectable after a save/load cycle.
* ``Dealer`` -- the offline dealer of [CRISP III-B / Fig. 3]: generates both parties' items
  from an injected PRG and puts them into the two parties' stores (or sends them over an
  ``Endpoint`` with ``send_item``).
* ``PreprocessingProvider`` -- what protocol code asks for its items; ``StoreProvider``
  serves them from a store, ``EndpointProvider`` receives them from a dealer peer online.

Items are objects with ``kind``, ``to_arrays() -> dict[str, ndarray]`` and a registered
``from_arrays`` (``register_kind``); FSS gate keys (``GateKey``) and plain array bundles
(``ArrayItem``) are registered here.
"""

from __future__ import annotations

import abc
import json
import os
import re
import threading
from dataclasses import dataclass, field

import numpy as np

from secinfer.crypto.prg import PRG
from secinfer.errors import PreprocessingReuseError, ProtocolError, SerializationError

STORE_FORMAT = "secinfer-preprocessing-store/v1"
_LABEL_RE = re.compile(r"^[A-Za-z0-9_.:/\-\[\]]{1,200}$")


class PreprocessingMissingError(ProtocolError):
    """A preprocessing item was requested that the store never received."""


# ---- item kinds ----------------------------------------------------------------------

_KINDS: dict = {}


def register_kind(kind: str, from_arrays) -> None:
    """Register how to rebuild (and validate) items of ``kind`` from their named arrays."""
    _KINDS[kind] = from_arrays


@dataclass
class ArrayItem:
    """A bundle of named arrays (triples, masks, shares of mu, ...)."""

    arrays: dict = field(default_factory=dict)
    kind = "arrays"

    def to_arrays(self) -> dict:
        return dict(self.arrays)

    @classmethod
    def from_arrays(cls, arrays: dict) -> "ArrayItem":
        return cls({k: np.asarray(v) for k, v in arrays.items()})


register_kind("arrays", ArrayItem.from_arrays)


def _register_fss() -> None:
    from secinfer.crypto.fss.gates import GateKey
    register_kind(GateKey.kind, GateKey.from_arrays)


_register_fss()


def _check_label(label: str) -> str:
    if not isinstance(label, str) or not _LABEL_RE.match(label):
        raise ProtocolError(f"invalid preprocessing label {label!r}")
    return label


# ---- the store -----------------------------------------------------------------------

class PreprocessingStore:
    """One party's preprocessing, each item usable exactly once."""

    def __init__(self, party: str) -> None:
        self.party = party
        self._items: dict[str, tuple[str, dict]] = {}
        self._used: set[str] = set()
        self._lock = threading.Lock()

    # ---- producing -------------------------------------------------------------------
    def put(self, label: str, item) -> None:
        _check_label(label)
        kind = getattr(item, "kind", None)
        if kind not in _KINDS:
            raise ProtocolError(f"preprocessing item kind {kind!r} is not registered")
        arrays = {k: np.ascontiguousarray(v) for k, v in item.to_arrays().items()}
        with self._lock:
            if label in self._used or label in self._items:
                raise PreprocessingReuseError(
                    f"{self.party}: preprocessing label {label!r} already used; labels are single-use")
            self._items[label] = (kind, arrays)

    # ---- consuming -------------------------------------------------------------------
    def take(self, label: str, kind: str | None = None, **validate):
        """Remove and return the item; ``validate`` kwargs go to the kind's ``from_arrays``."""
        with self._lock:
            if label in self._used:
                raise PreprocessingReuseError(
                    f"{self.party}: preprocessing item {label!r} was already consumed")
            if label not in self._items:
                raise PreprocessingMissingError(f"{self.party}: no preprocessing item {label!r} in the store")
            item_kind, arrays = self._items.pop(label)
            self._used.add(label)
        if kind is not None and kind != item_kind:
            raise SerializationError(f"preprocessing item {label!r} is a {item_kind!r}, expected {kind!r}")
        try:
            return _KINDS[item_kind](arrays, **validate)
        finally:
            del arrays

    def __contains__(self, label: str) -> bool:
        return label in self._items

    def labels(self) -> list:
        return sorted(self._items)

    def consumed(self) -> list:
        return sorted(self._used)

    def nbytes(self) -> int:
        return sum(a.nbytes for _, arrs in self._items.values() for a in arrs.values())

    # ---- persistence -----------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Write the unconsumed items and the consumed labels to ``path`` (.npz, no pickle)."""
        with self._lock:
            entries, payload = [], {}
            for i, (label, (kind, arrays)) in enumerate(sorted(self._items.items())):
                names = sorted(arrays)
                entries.append({"label": label, "kind": kind, "fields": names})
                for j, name in enumerate(names):
                    payload[f"i{i}_f{j}"] = arrays[name]
            manifest = {"format": STORE_FORMAT, "party": self.party, "items": entries,
                        "consumed": sorted(self._used)}
        payload["manifest"] = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
        tmp = f"{os.fspath(path)}.tmp"
        with open(tmp, "wb") as fh:
            np.savez(fh, **payload)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, *, remove: bool = True) -> "PreprocessingStore":
        """Read a store written by ``save``; with ``remove`` (default) the file is deleted so
        the same items cannot be loaded (and used) twice."""
        try:
            with np.load(path, allow_pickle=False) as npz:
                files = {k: npz[k] for k in npz.files}
        except FileNotFoundError:
            raise
        except Exception as e:  # noqa: BLE001 - zip/npy format errors of every kind
            raise SerializationError(f"{path}: not a preprocessing store ({e})") from None
        try:
            manifest = json.loads(bytes(files.pop("manifest")).decode())
            if manifest.get("format") != STORE_FORMAT:
                raise ValueError("unknown format")
            store = cls(str(manifest["party"]))
            store._used = {_check_label(x) for x in manifest["consumed"]}
            for i, ent in enumerate(manifest["items"]):
                label, kind = _check_label(ent["label"]), ent["kind"]
                if kind not in _KINDS or label in store._items or label in store._used:
                    raise ValueError(f"bad item entry {label!r}")
                store._items[label] = (kind, {name: files.pop(f"i{i}_f{j}")
                                              for j, name in enumerate(ent["fields"])})
        except (KeyError, ValueError, TypeError, UnicodeDecodeError, ProtocolError) as e:
            raise SerializationError(f"{path}: malformed preprocessing store manifest ({e})") from None
        if files:
            raise SerializationError(f"{path}: unexpected arrays in preprocessing store")
        if remove:
            os.remove(path)
        return store


# ---- providers -----------------------------------------------------------------------

class PreprocessingProvider(abc.ABC):
    """Where a party's protocol code gets its preprocessing items (each exactly once)."""

    @abc.abstractmethod
    def take(self, label: str, kind: str | None = None, **validate): ...


class StoreProvider(PreprocessingProvider):
    """Serve items from a store the dealer filled ahead of time."""

    def __init__(self, store: PreprocessingStore) -> None:
        self.store = store

    def take(self, label, kind=None, **validate):
        return self.store.take(label, kind, **validate)


class EndpointProvider(PreprocessingProvider):
    """Receive each FSS gate key from a dealer peer when it is needed (``Dealer.send_item``).

    ``take(label, kind, expect=gate, count=n)``: the expected gate and batch size fix every
    array's shape before anything is decoded; a label is accepted once only.
    """

    def __init__(self, ep, dealer: str, party: int) -> None:
        self.ep, self.dealer, self.party = ep, dealer, party
        self._used: set[str] = set()

    def take(self, label, kind=None, *, expect=None, count=None):
        from secinfer.crypto.fss.gates import GateKey
        _check_label(label)
        if label in self._used:
            raise PreprocessingReuseError(f"{self.ep.me}: preprocessing item {label!r} was already consumed")
        if expect is None or count is None:
            raise ProtocolError("EndpointProvider.take needs the expected gate and count")
        arrays = self.ep.recv(self.dealer, f"pre/{label}", *expect.key_specs(count))
        self._used.add(label)
        return GateKey.from_arrays(dict(zip(expect.field_order(), arrays)), expect, self.party)


# ---- the dealer ----------------------------------------------------------------------

class Dealer:
    """Trusted offline dealer [CRISP III-B, Fig. 3]: all randomness from the injected PRG."""

    def __init__(self, prg) -> None:
        self._prg = prg
        self._dealt: set[str] = set()
        self._lock = threading.Lock()

    def mac_key(self, group) -> np.ndarray:
        """A fresh MAC key mu uniform in Z_2^k (one element, shape (L,)) [CRISP Fig. 4 step 1]."""
        return group.random(self._prg, ())

    def gate_keys(self, gate, label: str, count: int, mac_key=None):
        """Both parties' keys for ``count`` instances of ``gate``.

        Each call draws a fresh 128-bit seed from the dealer's stream (so two calls never
        repeat randomness, even under the same label); a label is dealt once per dealer.
        """
        _check_label(label)
        with self._lock:
            if label in self._dealt:
                raise PreprocessingReuseError(f"dealer: label {label!r} was already dealt")
            self._dealt.add(label)
            sub = PRG(self._prg.seed(), f"gate/{label}")
        return gate.gen(sub, count, mac_key=mac_key)

    def produce(self, gate, label: str, count: int, stores, mac_key=None) -> None:
        """Generate and put the two keys into ``stores = (P0's store, P1's store)``."""
        k0, k1 = self.gate_keys(gate, label, count, mac_key)
        stores[0].put(label, k0)
        stores[1].put(label, k1)

    @staticmethod
    def send_item(ep, peer: str, label: str, key) -> None:
        """Send one party's gate key over an Endpoint (received by ``EndpointProvider``)."""
        ep.send(peer, f"pre/{_check_label(label)}", *key.ordered_arrays())
