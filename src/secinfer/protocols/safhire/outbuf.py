"""A round's output LWE ciphertexts at the server, in the client's (shuffled) order, with
bounded memory [SAFHIRE Sec. 4.4 steps 9-10].

The shuffle sigma_r sends any output row to any position of the round's output, so any
destination ciphertext may need a row of the last tile: the server must hold the whole
round's output between the product and the packing. Each row is G + N residues of 8 bytes
(~16 KiB at N = 2^11): ResNet-34's stem round (802,816 outputs) is 13.2 GB.

``RoundOutput`` keeps the rows in memory while the round fits within ``budget_bytes``
(the server option ``out_mb``), and otherwise in a file: created in a fresh private
directory (mode 0700), unlinked (and the directory removed) at once, so only the open
descriptor reaches it and nothing is left on disk whatever way the process ends (abort,
exception, kill). Tiles scatter their rows to their shuffled positions with ``pwrite``;
the packing reads back N consecutive rows per destination ciphertext with ``pread``, and
the pages read are dropped from the page cache. The rows written and read are exactly
the in-memory ones: the shuffle, the packing and the decrypted values do not change.
What the file holds is ciphertexts under the client's key, which the server sends to the
client anyway (no key, no permutation, no weights).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from secinfer.errors import ProtocolError


class RoundOutput:
    """rows x L x cols uint64 residues (an LWE batch: per row and limb, b in the first G
    columns, a in the other N)."""

    def __init__(self, rows: int, L: int, cols: int, G: int, budget_bytes: int | None,
                 pool: dict, spill_dir: str | None = None) -> None:
        self.rows, self.L, self.cols, self.G = int(rows), int(L), int(cols), int(G)
        self.row_bytes = self.L * self.cols * 8
        self.nbytes = self.rows * self.row_bytes
        self.fd = None
        self.mem = None
        if budget_bytes is None or self.nbytes <= budget_bytes:
            need = self.rows * self.L * self.cols
            buf = pool.get("out")
            if buf is None or buf.size < need:
                pool["out"] = None
                buf = pool["out"] = np.empty(need, dtype=np.uint64)   # reused round after round
            self.mem = buf[:need].reshape(self.rows, self.L, self.cols)
            return
        d = tempfile.mkdtemp(prefix="safhire-out-", dir=spill_dir)     # mode 0700
        try:
            path = os.path.join(d, "round.bin")
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            os.unlink(path)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        os.ftruncate(self.fd, self.nbytes)

    @property
    def on_disk(self) -> bool:
        return self.fd is not None

    def __len__(self) -> int:
        return self.rows

    def scatter(self, pos: np.ndarray, data: np.ndarray) -> None:
        """Rows ``data[i]`` to positions ``pos[i]`` (distinct)."""
        if self.mem is not None:
            self.mem[pos] = data
            return
        data = np.ascontiguousarray(data, dtype=np.uint64).reshape(len(pos), -1)
        order = np.argsort(pos, kind="stable")
        ps = np.asarray(pos, dtype=np.int64)[order]
        # runs of consecutive positions in one write each
        cut = np.flatnonzero(np.diff(ps) != 1) + 1
        starts = np.concatenate(([0], cut))
        ends = np.concatenate((cut, [len(ps)]))
        for s, e in zip(starts.tolist(), ends.tolist()):
            block = data[order[s:e]] if e - s > 1 else data[order[s]]
            view = memoryview(np.ascontiguousarray(block)).cast("B")
            off = int(ps[s]) * self.row_bytes
            done = 0
            while done < len(view):
                done += os.pwrite(self.fd, view[done:], off + done)

    def chunk(self, s: int, e: int, pool: dict) -> tuple[np.ndarray, np.ndarray]:
        """(b, a) of rows s..e-1: (e - s, L, G) and (e - s, L, N), contiguous."""
        if self.mem is not None:
            blk = self.mem[s:e]
        else:
            n = (e - s) * self.L * self.cols
            buf = pool.get("chunk")
            if buf is None or buf.size < n:
                buf = pool["chunk"] = np.empty(n, dtype=np.uint64)
            view = memoryview(buf[:n]).cast("B")
            off, done = s * self.row_bytes, 0
            while done < len(view):
                got = os.preadv(self.fd, [view[done:]], off + done)
                if got <= 0:
                    raise ProtocolError("round output file ended early")
                done += got
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(self.fd, off, len(view), os.POSIX_FADV_DONTNEED)
            blk = buf[:n].reshape(e - s, self.L, self.cols)
        return np.ascontiguousarray(blk[:, :, :self.G]), np.ascontiguousarray(blk[:, :, self.G:])

    def whole(self) -> tuple[np.ndarray, np.ndarray]:
        """(b, a) of every row (tests; in memory)."""
        return self.chunk(0, self.rows, {})

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self.mem = None

    def __enter__(self) -> "RoundOutput":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
