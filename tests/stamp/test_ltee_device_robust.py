"""A host's malformed commands are refused by the LTEE device process; they never end it
(a fixed list through the real process, and a property-based fuzz of every command's
arguments in-process, issue #22 item 5)."""

import subprocess
import sys

import numpy as np
import pytest

from secinfer.protocols.stamp.ltee_device import COMMANDS, read_frame, write_frame

GARBAGE = [
    [np.zeros(3, np.complex128)],
    [np.zeros((2, 0), np.float32)],
    [np.array([2 ** 62, -1, 7], np.int64), np.zeros(1, np.uint8)],
    [],
    [np.frombuffer(b"\xff" * 40, np.uint8)],
]


def test_malformed_commands_are_refused_and_the_device_stays_up():
    proc = subprocess.Popen([sys.executable, "-m", "secinfer.protocols.stamp.ltee_device"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        seq, refused = 0, 0
        for tag in sorted(COMMANDS) + ["no-such-command"]:
            if tag in ("stats",):
                continue
            for arrays in GARBAGE:
                write_frame(proc.stdin, tag, arrays, seq, "host")
                proc.stdin.flush()
                hdr, _ = read_frame(proc.stdout)   # EOFError here = the device died
                assert hdr.tag in ("ok", "refused"), hdr.tag
                refused += hdr.tag == "refused"
                seq += 1
        write_frame(proc.stdin, "stats", [], seq, "host")
        proc.stdin.flush()
        hdr, _ = read_frame(proc.stdout)
        assert hdr.tag == "ok" and proc.poll() is None
        assert refused >= len(GARBAGE) * len(COMMANDS) // 2
    finally:
        proc.kill()
        proc.wait()


# ---- property-based: any arguments to any command, on a fresh and on a keyed device ----------
import os  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from secinfer.errors import ProtocolError  # noqa: E402
from secinfer.protocols.stamp import ltee_device  # noqa: E402
from secinfer.protocols.stamp.ltee import Manufacturer  # noqa: E402

# what ltee_device.main() turns into a "refused" answer; anything else would end the device
SURVIVED = (ltee_device.Refused, ValueError, IndexError, KeyError, TypeError, OverflowError, AttributeError,
            ArithmeticError, ProtocolError)
_DTYPES = [np.uint8, np.int64, np.uint64, np.uint32, np.float64, np.int32]
arrays_st = st.lists(
    st.tuples(st.sampled_from(range(len(_DTYPES))), st.lists(st.integers(0, 5), max_size=3),
              st.sampled_from([0, 1, 2, 3, 16, 2 ** 31, 2 ** 62, -1])),
    max_size=6).map(lambda specs: [np.full(shape, v, dtype=np.int64).astype(_DTYPES[d])
                                   for d, shape, v in specs])


def _keyed_devices():
    """Three emulated devices, provisioned, initialised and with their pairwise keys (as
    ``ltee.initialize`` makes them), in-process."""
    ca = Manufacturer.emulation_default()
    devs = [ltee_device.Device() for _ in range(3)]
    session = np.frombuffer(b"s" * 16, np.uint8)
    for i, d in enumerate(devs):
        (pub,) = d.cmd_identity([])
        d.cmd_provision([np.frombuffer(ca.certify(bytes(pub)), np.uint8), np.frombuffer(ca.public, np.uint8)])
        d.cmd_init([np.array([i, 32, 13, 1, 1], np.int64), session])
    for i in range(3):
        for j in range(i + 1, 3):
            oi = devs[i].cmd_dh_offer([np.array([j])])
            oj = devs[j].cmd_dh_offer([np.array([i])])
            devs[i].cmd_dh_accept([np.array([j]), *oj])
            devs[j].cmd_dh_accept([np.array([i]), *oi])
    return devs


@settings(max_examples=int(os.environ.get("SECINFER_FUZZ_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(COMMANDS)), arrays_st, st.booleans())
def test_any_arguments_to_any_command_are_refused_never_fatal(cmd, arrays, keyed):
    dev = _keyed_devices()[0] if keyed else ltee_device.Device()
    try:
        COMMANDS[cmd](dev, arrays)
    except SURVIVED:
        pass


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("cmd", sorted(COMMANDS))
def test_a_huge_integer_where_a_byte_string_is_expected_is_refused(cmd, keyed):
    """bytes() of a 0-d integer array allocates that many bytes (MemoryError ended the
    device's loop); byte-string arguments are taken only as 1-d uint8 arrays."""
    dev = _keyed_devices()[0] if keyed else ltee_device.Device()
    big = np.array(2 ** 62, dtype=np.int64)
    for arrays in ([big, big], [np.array([1]), big, big, big, big], [np.zeros(5, np.int64), big]):
        try:
            COMMANDS[cmd](dev, arrays)
        except SURVIVED:
            pass
