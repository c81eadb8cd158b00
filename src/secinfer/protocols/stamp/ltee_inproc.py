"""The LTEE emulation inside its host's process (option ``stamp_ltee`` = "inprocess").

A real LTEE is a device on its host's bus (PCIe, LPC or on-chip: microseconds per request,
``costmodel``); the default emulation (``ltee.LteeLink``, "process") runs the device as its
own OS process behind a pipe, so every device request costs two process wake-ups that no
real bus has. ``InProcessLink`` runs the very same firmware -- ``ltee_device.start``'s
``Device`` and ``ltee_device.serve``'s dispatch of one request, with its keys, counters,
refusals and release policy -- in the host's process, called synchronously.

The device boundary stays a bus: what crosses it is a copy. Each request's arrays reach the
device as new arrays of their own (``_across``: C-contiguous, little-endian, a dtype the
frame codec carries -- anything else is the codec's ``FrameError``), and the answer's reach
the host the same way, so host and device never share memory; the ``Device`` object is
private to the link (the host's protocol code holds the link, never the device). The device
checks every argument itself (``ltee_requests``), as on the pipe. ``frames=True`` instead
encodes each request and answer as the pipe's secinfer frame and decodes it on the other
side: the same arrays, ~15-25 us more host CPU a request (measured in
docs/protocols/stamp.md, "Tenth pass"), kept as the measured alternative.

What this mode gives up: the emulation's process boundary. The device's keys then live in
the host process's own memory, where the host's code could read them; in both modes the host
OS can read them (the emulation gives no hardware protection; SECURITY.md). The protocol's
messages, the parties' views and the outputs are the same in both modes.
"""

from __future__ import annotations

import numpy as np

from secinfer.errors import ConfigError, FrameError
from secinfer.net.codec import DTYPES, Header, decode_frame, encode_parts
from secinfer.protocols.stamp import ltee_device
from secinfer.protocols.stamp.ltee import BaseLink, LteeLink, LteeRefused
from secinfer.protocols.stamp.ltee_bus import BUS_SESSION, MAX_BUS_FRAME

LTEE_MODES = ("process", "inprocess")
_PHASE = ("offline", "online")
_EMPTY = bytearray()
_BUS_DTYPES = {dt: dt for dt in DTYPES.values()}     # what a bus frame can carry, little-endian


def _across(arrays: list) -> list:
    """The arrays as the other end of the bus gets them without the codec: each a new,
    C-contiguous, little-endian plain ``numpy.ndarray`` of a dtype the frame codec carries
    (anything else, e.g. an object array, is the codec's ``FrameError``): its own memory,
    never a view of the sender's."""
    out = []
    for a in arrays:
        dt = _BUS_DTYPES.get(np.dtype(a.dtype).newbyteorder("<"))
        if dt is None:
            raise FrameError(f"dtype {a.dtype} cannot be sent")
        out.append(np.array(a, dtype=dt, order="C", copy=True))
    return out


class InProcessLink(BaseLink):
    """One emulated LTEE in this process, called through an in-memory bus (``BaseLink``'s
    interface: ``call``, ``call_many``, the meter, ``set_online``, ``stats``, ``close``).
    ``stamp_bus_spin_us`` and ``stamp_bus_timeout_s`` are validated as for the pipe, but a
    synchronous call neither waits nor polls (``spin_hits`` = ``spin_misses`` = 0)."""

    mode = "inprocess"

    def __init__(self, party: str, spin_us: float = 0.0, timeout_s: float = 300.0, frames: bool = False) -> None:
        super().__init__(party, spin_us, timeout_s)
        self._frames = bool(frames)
        self.__dev = ltee_device.start()
        # the codec's layout caches, one per direction (as ``ltee_bus.BusPipe`` keeps per end)
        self._enc_req: dict = {}
        self._enc_res: dict = {}
        self._dec_req: dict = {}
        self._dec_res: dict = {}

    def _round_trip(self, cmd: str, arrays: list) -> tuple[str, list]:
        dev = self.__dev
        if dev is None:
            raise LteeRefused("dead", "the in-process LTEE emulation is closed", self.party)
        if self._frames:
            seq, self._seq = self._seq, self._seq + 1
            hdr, req = self._carry(self.party, cmd, arrays, seq, self._enc_req, self._dec_req)
            cmd, arrays = hdr.tag, req
        else:
            arrays = _across(arrays)
        try:
            tag, res = ltee_device.serve(dev, cmd, arrays)
        except Exception as e:  # noqa: BLE001 - what would end the device's process ends the device
            self.__dev = None
            raise LteeRefused("dead", f"the in-process LTEE emulation failed: {type(e).__name__}: {e}"[:2000],
                              self.party) from None
        if self._frames:
            hdr, res = self._carry("ltee", tag, res, seq, self._enc_res, self._dec_res)
            return hdr.tag, res
        return tag, _across(res)

    def _carry(self, sender: str, tag: str, arrays: list, seq: int, enc: dict, dec: dict):
        """One frame across the in-memory bus: encoded as the pipe's, decoded from a buffer
        of its own (the receiver's arrays are views of that buffer, of nothing else)."""
        parts = encode_parts(Header(BUS_SESSION, sender, tag, seq, _PHASE[self.online], 0), arrays,
                             MAX_BUS_FRAME, enc)[0]
        return decode_frame(_EMPTY.join(parts), MAX_BUS_FRAME, None, dec)

    def close(self) -> None:
        self.__dev = None


def open_link(party: str, options: dict) -> BaseLink:
    """The party's LTEE emulation as option ``stamp_ltee`` names it: "process" (the default:
    its own OS process behind a pipe, ``LteeLink``) or "inprocess" (``InProcessLink``)."""
    mode = options.get("stamp_ltee", "process")
    if mode not in LTEE_MODES:
        raise ConfigError(f"option stamp_ltee is \"process\" or \"inprocess\", not {mode!r}")
    return (LteeLink if mode == "process" else InProcessLink).from_options(party, options)
