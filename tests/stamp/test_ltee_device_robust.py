"""A host's malformed commands are refused by the LTEE device process; they never end it."""

import subprocess
import sys

import numpy as np

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
