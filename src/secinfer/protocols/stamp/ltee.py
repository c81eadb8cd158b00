"""Host side of the LTEE EMULATION: spawning the device process, the bus, the
manufacturer CA, and the initialization protocol [STAMP Protocol 1].

``LteeLink`` owns one emulated device (its own OS process, see ``ltee_device``) and is
the only way to reach it: requests and responses are secinfer frames on a local pipe,
the bus of [STAMP Fig. 1] (``ltee_inproc.InProcessLink``: the same device inside the
host's process, option ``stamp_ltee`` "inprocess"; both are a ``BaseLink``). Every byte that crosses the bus and every primitive operation
the device reports is metered, so the cost model (``costmodel``) can charge the
LTEE-chip / LTEE-SoC bus and compute time.

The manufacturer (``Manufacturer``) is an Ed25519 CA: at "manufacture" it certifies each
device's identity key. In this emulation the manufacturer runs in the host process just
before the session (a real device leaves the factory provisioned); parties trust only
the CA *public* key. A party whose device carries a certificate that does not verify
under that key is rejected at set-up.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from secinfer.errors import ConfigError, ProtocolAbort
from secinfer.net.channel import ArraySpec
from secinfer.protocols.stamp.ltee_bus import BATCHABLE, EXPECT_MAX, MAX_BUS_SPIN_US, BusPipe, BusTimeout, cert_message

# the device's plaintext kernels use BLAS on one thread: a pool of its own would spin against
# the three hosts and their transports on the same cores (``rep3.blas``)
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
EMULATION_CA_LABEL = b"secinfer/stamp/EMULATED-LTEE-MANUFACTURER/insecure-demo-ca"
# the bus's busy-poll in the online phase, both ends (option ``stamp_bus_spin_us``; 0 = off;
# the default's measurements: docs/protocols/stamp.md, "Eighth pass")
DEFAULT_BUS_SPIN_US = 1000
# a device that has not answered a request after this long fails the session with
# ``LteeRefused("timeout")`` (option ``stamp_bus_timeout_s``)
DEFAULT_BUS_TIMEOUT_S = 300.0


class LteeRefused(ProtocolAbort):
    """The (emulated) LTEE refused a request: stale counter, policy, bad certificate..."""

    def __init__(self, code: str, detail: str, suspect: str | None = None) -> None:
        super().__init__(f"ltee-{code}", suspect, detail)
        self.code = code


class Manufacturer:
    """The LTEE manufacturer's certificate authority (Ed25519) [STAMP 2.2, Protocol 1 step 2]."""

    def __init__(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise ConfigError("the manufacturer CA seed is 32 bytes")
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        self.public = self._key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @classmethod
    def emulation_default(cls) -> "Manufacturer":
        """The well-known demo CA of the emulation (its key is public: insecure by design)."""
        return cls(hashlib.sha256(EMULATION_CA_LABEL).digest())

    @classmethod
    def from_options(cls, options: dict) -> "Manufacturer":
        seed = options.get("ltee_ca_seed")
        return cls(bytes.fromhex(seed)) if seed else cls.emulation_default()

    def certify(self, identity_pub: bytes) -> bytes:
        return self._key.sign(cert_message(identity_pub))

    def provision(self, link: "BaseLink") -> None:
        (pub,) = link.call("identity")
        link.call("provision", np.frombuffer(self.certify(bytes(pub)), np.uint8),
                  np.frombuffer(self.public, np.uint8))


def trust_anchor(options: dict) -> bytes:
    """The CA public key every party checks certificates against."""
    pub = options.get("ltee_ca_public")
    return bytes.fromhex(pub) if pub else Manufacturer.from_options({}).public


def verify_certificate(ca_pub: bytes, identity_pub: bytes, cert: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(ca_pub).verify(cert, cert_message(identity_pub))
        return True
    except (InvalidSignature, ValueError):
        return False


@dataclass
class BusMeter:
    """Bytes and transactions on one party's host<->LTEE bus, and device operations."""

    to_device: int = 0
    from_device: int = 0
    transactions: int = 0
    emulation_seconds: float = 0.0
    by_kind: dict = field(default_factory=dict)

    def add(self, kind: str, sent: int, received: int) -> None:
        self.to_device += sent
        self.from_device += received
        self.transactions += 1
        e = self.by_kind.setdefault(kind, [0, 0, 0])
        e[0] += sent
        e[1] += received
        e[2] += 1

    def add_batch(self, kinds: list, sent: list, received: list) -> None:
        """One transaction carrying several requests (``LteeLink.call_many``)."""
        self.to_device += sum(sent)
        self.from_device += sum(received)
        self.transactions += 1
        for kind, s, r in zip(kinds, sent, received):
            e = self.by_kind.setdefault(kind, [0, 0, 0])
            e[0] += s
            e[1] += r
            e[2] += 1

    @property
    def total(self) -> int:
        return self.to_device + self.from_device


class BaseLink:
    """The host's side of one emulated LTEE's bus, whatever carries it: requests, their
    metering, the refusal as ``LteeRefused``, the online marker. A subclass carries one
    request to the device and its answer back (``_round_trip``): ``LteeLink`` on a pipe to
    the device's own process, ``ltee_inproc.InProcessLink`` to a device in this process."""

    mode = ""     # the emulation's mode (option ``stamp_ltee``)

    def __init__(self, party: str, spin_us: float = DEFAULT_BUS_SPIN_US,
                 timeout_s: float = DEFAULT_BUS_TIMEOUT_S) -> None:
        if not 0 <= spin_us <= MAX_BUS_SPIN_US:
            raise ConfigError(f"stamp_bus_spin_us is between 0 and {MAX_BUS_SPIN_US}, not {spin_us!r}")
        if not timeout_s > 0:
            raise ConfigError(f"stamp_bus_timeout_s is positive, not {timeout_s!r}")
        self.party = party
        self.meter = BusMeter()
        self._seq = 0
        self.spin_us = spin_us
        self.timeout_s = timeout_s
        self.online = False      # ``set_online``: requests are marked online, both ends busy-poll
        self.stats = np.zeros(5, dtype=np.int64)

    @classmethod
    def from_options(cls, party: str, options: dict) -> "BaseLink":
        try:
            spin = float(options.get("stamp_bus_spin_us", DEFAULT_BUS_SPIN_US))
            timeout = float(options.get("stamp_bus_timeout_s", DEFAULT_BUS_TIMEOUT_S))
        except (TypeError, ValueError):
            raise ConfigError("stamp_bus_spin_us and stamp_bus_timeout_s are numbers") from None
        return cls(party, spin, timeout)

    def set_online(self, on: bool) -> None:
        """Enter or leave the online phase (host-side state, no bus traffic): requests sent
        while on are marked online in their frame header, the host busy-polls for their
        answers, and the device busy-polls for the request after answering one (at most one
        budget per wait: a device never spins longer than one budget after the last online
        request). The device's budget is the one ``ready`` gave it."""
        self.online = bool(on)

    spin_hits = spin_misses = 0

    def call(self, cmd: str, *arrays: np.ndarray, kind: str | None = None) -> list[np.ndarray]:
        arrays = [np.ascontiguousarray(a) for a in arrays]
        res = self._transact(cmd, arrays, kind or cmd)
        self.meter.add(kind or cmd, sum(a.nbytes for a in arrays), sum(a.nbytes for a in res))
        return self._answer(res)

    def call_many(self, requests: list, ahead: bool = False) -> list[list[np.ndarray]]:
        """Several seed requests [(command, meta, kind)] (``ltee_device.BATCHABLE``) in one
        bus transaction, one pipe round trip instead of one each (metered per request, in one
        transaction). Returns each one's results. ``ahead``: requests of future operations,
        served before they run (``ltee_device.cmd_prefetch``)."""
        if len(requests) == 1 and not ahead:
            cmd, meta, kind = requests[0]
            return [self.call(cmd, meta, kind=kind)]
        codes = np.array([BATCHABLE.index(cmd) for cmd, _, _ in requests], dtype=np.int64)
        metas = [np.ascontiguousarray(m) for _, m, _ in requests]
        res = self._answer(self._transact("prefetch" if ahead else "batch", [codes] + metas, "batch"))
        counts, flat, out, k = res[0], res[1:], [], 0
        if counts.shape != (len(requests),) or int(counts.sum()) != len(flat):
            raise LteeRefused("bad-response", "a batch answer of the wrong layout", self.party)
        for c in counts.tolist():
            out.append(flat[k:k + c])
            k += c
        self.meter.add_batch([kind for _, _, kind in requests], [codes.itemsize + m.nbytes for m in metas],
                             [sum(a.nbytes for a in r) for r in out])
        return out

    def _round_trip(self, cmd: str, arrays: list) -> tuple[str, list]:
        """One request to the device and its answer (tag "ok" or "refused", arrays)."""
        raise NotImplementedError

    def _transact(self, cmd: str, arrays: list, kind: str) -> list[np.ndarray]:
        t0 = time.perf_counter()
        tag, res = self._round_trip(cmd, arrays)
        self.meter.emulation_seconds += time.perf_counter() - t0
        if tag == "refused":
            self.meter.add(kind, sum(a.nbytes for a in arrays), sum(a.nbytes for a in res))
            code, _, detail = bytes(res[0]).decode(errors="replace").partition("|")
            raise LteeRefused(code, detail, self.party)
        return res

    @staticmethod
    def _answer(res: list) -> list[np.ndarray]:
        return [a.astype(np.uint64) if a.dtype == np.uint32 else a for a in res]

    def ready(self) -> None:
        """Wait until the device finished its start-up work (``ltee_device.cmd_ready``):
        called before the online phase, so none of it lands there. It also gives the device
        its busy-poll budget for the online phase (``set_online``)."""
        self.call("ready", np.array([int(self.spin_us)], dtype=np.int64), kind="ready")

    def refresh_stats(self) -> np.ndarray:
        (s,) = self.call("stats", kind="stats")
        self.stats = s
        return s

    def close(self) -> None:
        raise NotImplementedError


class LteeLink(BaseLink):
    """One emulated LTEE in its own OS process and the pipe bus to it (option ``stamp_ltee``
    "process", the default)."""

    mode = "process"

    def __init__(self, party: str, spin_us: float = DEFAULT_BUS_SPIN_US,
                 timeout_s: float = DEFAULT_BUS_TIMEOUT_S) -> None:
        super().__init__(party, spin_us, timeout_s)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "secinfer.protocols.stamp.ltee_device"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={**os.environ, **_ONE_THREAD})
        self._bus = BusPipe(self._proc.stdout.fileno(), self._proc.stdin.fileno(), party)

    @property
    def spin_hits(self) -> int:
        return self._bus.spin_hits

    @property
    def spin_misses(self) -> int:
        return self._bus.spin_misses

    def _alive(self) -> None:
        if self._proc.poll() is not None:
            raise LteeRefused("dead", "the LTEE emulation process has exited", self.party)

    def _round_trip(self, cmd: str, arrays: list) -> tuple[str, list]:
        self._alive()
        bus = self._bus
        try:
            bus.send(cmd, arrays, self._seq, self.online)
            self._seq += 1
            hdr, res = bus.recv(self.spin_us * 1e-6 if self.online else 0.0, self.timeout_s, self._alive)
        except (EOFError, BrokenPipeError):
            raise LteeRefused("dead", "the LTEE emulation process closed the bus", self.party) from None
        except BusTimeout:
            raise LteeRefused("timeout", f"the LTEE did not answer {cmd!r} within {self.timeout_s:g} s",
                              self.party) from None
        return hdr.tag, res

    def close(self) -> None:
        if self._proc.poll() is None:
            with contextlib.suppress(Exception):
                self._bus.send("shutdown", [], self._seq)
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for f in (self._proc.stdin, self._proc.stdout):
            with contextlib.suppress(Exception):
                f.close()


# ---- Protocol 1 -------------------------------------------------------------------------------
_U8 = np.uint8


def initialize(ep, names: tuple[str, str, str], me: int, link: BaseLink, options: dict,
               ring_bits: int, frac_bits: int, output_party: int = 1, malicious: bool = False) -> None:
    """Run [STAMP Protocol 1] through the hosts. Raises ProtocolAbort on any failure.
    ``output_party`` (the only party that learns the output; p1 in ``stamp``) and the
    security level are public session parameters the device keeps for its output step."""
    ca_pub = trust_anchor(options)
    nxt, prv = (me + 1) % 3, (me + 2) % 3
    manufacturer = Manufacturer.from_options(options)
    manufacturer.provision(link)   # factory step of the emulation (before the session)
    link.call("init", np.array([me, ring_bits, frac_bits, output_party, int(malicious)], dtype=np.int64),
              np.frombuffer(ep.session_id, dtype=_U8))
    # step 2: publish identity + certificate (inside each signed key-exchange offer);
    # every party validates every other LTEE's certificate against the CA key
    for peer in (nxt, prv):
        o = link.call("dh_offer", np.array([peer], dtype=np.int64))
        ep.send(names[peer], "stamp/init/offer", *o)
    specs = (ArraySpec(_U8, (32,)), ArraySpec(_U8, (64,)), ArraySpec(_U8, (32,)), ArraySpec(_U8, (64,)))
    received = {}
    for peer in (nxt, prv):
        received[peer] = ep.recv(names[peer], "stamp/init/offer", *specs)
    for peer in (nxt, prv):
        _eph, _sig, pid, cert = received[peer]
        ep.require(verify_certificate(ca_pub, bytes(pid), bytes(cert)), "ltee-certificate", names[peer],
                   f"the LTEE of {names[peer]} has no valid manufacturer certificate")
    # step 3: authenticated X25519 inside the devices, then key transport for k_{i+1,i-1}
    for peer in (nxt, prv):
        _device(ep, link, names[peer], "dh_accept", np.array([peer], dtype=np.int64), *received[peer])
    ct, tag = link.call("wrap")
    ep.send(names[prv], "stamp/init/wrap", ct, tag)
    ct2, tag2 = ep.recv(names[nxt], "stamp/init/wrap", ArraySpec(_U8, (16,)), ArraySpec(_U8, (32,)))
    _device(ep, link, names[nxt], "unwrap", ct2, tag2)


def _device(ep, link, suspect: str, cmd: str, *arrays):
    """A device call whose refusal (the device's check failed) is this host's abort."""
    try:
        return link.call(cmd, *arrays)
    except LteeRefused as r:
        refused = r
    ep.require(False, refused.check, suspect, refused.detail)


def expect_arrays(expect: list) -> list:
    """The arguments of ``ltee_device.cmd_expect`` for announced online requests [(code, meta,
    spec bytes)]: their codes, then each one's meta and spec (the first ``EXPECT_MAX``)."""
    expect = expect[:EXPECT_MAX]
    return [np.array([c for c, _, _ in expect], dtype=np.int64)] + [a for _, m, sp in expect for a in (m, sp)]


def spec_bytes(spec: dict) -> np.ndarray:
    return np.frombuffer(json.dumps(spec, sort_keys=True).encode(), dtype=_U8)
