"""The server's side of one SAFHIRE round [SAFHIRE Sec. 4.4 steps 6-10]: extraction,
unshuffling, the exact product, window layout and shuffle, in tiles of bounded memory,
into the round's output (``outbuf.RoundOutput``: in memory, or in an unlinked private file
above the ``out_mb`` budget) that the packing reads back ciphertext by ciphertext."""

from __future__ import annotations

import time

import numpy as np

from secinfer.protocols.safhire.session import round_permutation


def source_shape(qm, cid: int) -> tuple | None:
    """The image shape (C, H, W) of the vector ``cid`` the server reads (the model input, or
    round cid-1's result after the client's window max), or None when not known: a pooled
    result is taken as square (the product then only uses it to find convolutions, checked)."""
    if cid == 0:
        return tuple(qm.in_shape)
    rd = qm.rounds[cid - 1]
    if rd.groups is None:
        return tuple(rd.out_shape)
    if len(rd.out_shape) != 3:
        return None
    hw = rd.n_next // int(rd.out_shape[0])
    side = int(round(hw ** 0.5))
    return (int(rd.out_shape[0]), side, side) if side * side == hw and hw * rd.out_shape[0] == rd.n_next else None


class ServerRound:
    """Steps 6-10 of one round on the server [SAFHIRE Sec. 4.4], streamed in tiles: per tile
    of output rows, extract only the LWE ciphertexts it reads (through the previous round's
    permutation: unshuffling is a choice of positions), the exact product, and the shuffle
    as a scatter into the round's output, which is then packed. The peak holds one tile's
    LWE ciphertexts and the output being packed (``tile_mb``: the tile's budget; None: one
    tile per round)."""

    def __init__(self, qm, params, ld: int, shuffle: bool, threads: int = 1, tile_mb: float | None = None,
                 out_mb: float | None = None, spill_dir: str | None = None) -> None:
        from secinfer.protocols.safhire import linprod as LP

        self.qm, self.params, self.ld, self.shuffle, self.threads = qm, params, ld, shuffle, threads
        self.tile_bytes = None if tile_mb is None else int(float(tile_mb) * (1 << 20))
        # a round output above this many bytes goes to an unlinked private file (outbuf)
        self.out_bytes = None if out_mb is None else int(float(out_mb) * (1 << 20))
        self.spill_dir = spill_dir
        self.spilled: list[int] = []    # rounds whose output went to disk
        # the product plan per round (convolutions as dense GEMMs)
        self.plans = [LP.plan(rd.weights, [source_shape(qm, c) for c in rd.sources], rd.out_shape)
                      for rd in qm.rounds]
        self._tiles: dict = {}
        self._work: dict = {}           # the tiles' work buffers, reused (fresh ones cost a page fault per 4 KiB)
        self._cur = None                # the round output being filled

    def tiles(self, r: int, cols: int) -> list:
        from secinfer.protocols.safhire import linprod as LP

        if (r, cols) not in self._tiles:
            self._tiles[(r, cols)] = LP.tiles(self.plans[r], self.qm.rounds[r].out_shape, cols, self.tile_bytes)
        return self._tiles[(r, cols)]

    def tile_counts(self) -> list[int]:
        """Tiles per round (as run so far)."""
        return [len(v) for (r, _), v in sorted(self._tiles.items())]

    def positions(self, seed: bytes, sample: int, c: int) -> np.ndarray | None:
        """Where true value i of input vector c sits in what the client sent (None: in place):
        vector c (c >= 1) arrives shuffled by sigma_{c-1} [SAFHIRE Sec. 4.4 step 7]."""
        if c == 0 or not self.shuffle:
            return None                                   # sigma_0 = id
        return np.argsort(round_permutation(seed, sample, c - 1, self.qm.rounds[c - 1].n_next))

    def out_rows(self, seed: bytes, sample: int, r: int) -> np.ndarray:
        """Rows of y the client gets, in order: window layout, windows shuffled (step 9)."""
        rd = self.qm.rounds[r]
        last = r == len(self.qm.rounds) - 1
        g = np.arange(rd.m, dtype=np.int64)[:, None] if rd.groups is None else rd.groups
        if not last and self.shuffle:
            g = g[round_permutation(seed, sample, r, g.shape[0])]
        return g.reshape(-1)

    def run(self, cts: dict, seed: bytes, sample: int, r: int, gamma: int, clock: "OpClock"):
        """Round r's output LWE batch in the client's order (shuffled window layout), from
        ``cts`` (source -> that vector's ciphertexts as sent): an ``outbuf.RoundOutput``
        (close it after packing)."""
        from secinfer.protocols.safhire import lwe as L

        rd = self.qm.rounds[r]
        G, n = L.cts_per_chunk(gamma), self.params.n
        with clock("unshuffle"):
            rows = self.out_rows(seed, sample, r)
            pos = {c: self.positions(seed, sample, c) for c in rd.sources}
        self._cols = G + n
        tiles = self.tiles(r, G + n)
        with clock("shuffle"):
            tid = np.empty(rd.m, dtype=np.int64)
            local = np.empty(rd.m, dtype=np.int64)
            for k, t in enumerate(tiles):
                tid[t.rows] = k
                local[t.rows] = np.arange(len(t.rows))
            by_tile = np.argsort(tid[rows], kind="stable")             # output positions, tile by tile
            cuts = np.searchsorted(tid[rows][by_tile], np.arange(len(tiles) + 1))
        bias = np.asarray(rd.bias, dtype=np.int64)
        try:
            self._tiles_into(tiles, rd, cts, pos, rows, by_tile, cuts, local, gamma, clock, bias)
        except BaseException:
            if self._cur is not None:
                self._cur.close()
            raise
        out, self._cur = self._cur, None
        if out.on_disk:
            self.spilled.append(r)
        return out

    def _tiles_into(self, tiles, rd, cts, pos, rows, by_tile, cuts, local, gamma, clock, bias) -> None:
        from secinfer.protocols.safhire import lwe as L
        from secinfer.protocols.safhire.outbuf import RoundOutput

        G = L.cts_per_chunk(gamma)
        out = self._cur = None
        for k, t in enumerate(tiles):
            xs = []
            with clock("extract"):
                for c, need in zip(rd.sources, t.needs):
                    if not len(need):
                        xs.append(None)
                        continue
                    at = need if pos[c] is None else pos[c][need]
                    xs.append(L.extract_at(self.params, cts[c], at, gamma, self.threads))
            with clock("linear"):
                acc = self._product(t, xs, bias[t.rows])
            with clock("shuffle"):
                if out is None:
                    out = self._cur = RoundOutput(len(rows), acc.shape[1], acc.shape[2], G, self.out_bytes,
                                                  self._work, self.spill_dir)
                p = by_tile[cuts[k]:cuts[k + 1]]
                tmp = self._scratch("gather", (len(p),) + acc.shape[1:], np.uint64)
                np.take(acc, local[rows[p]], axis=0, out=tmp, mode="clip")   # indices valid by construction
                out.scatter(p, tmp)
            del xs, acc

    def pack(self, ev, out, gamma: int) -> tuple[list, int]:
        """The round's output packed into RLWE ciphertexts, N rows (one destination
        ciphertext) read at a time [SAFHIRE Sec. 4.4 step 10]; and the key switches made."""
        from secinfer.protocols.safhire import lwe as L

        cts, ks = [], 0
        n = self.params.n
        for s in range(0, len(out), n):
            b, a = out.chunk(s, min(len(out), s + n), self._work)
            c, k = L.pack(self.params, ev, L.Lwe(b, a), self.ld, gamma, self.threads)
            cts.extend(c)
            ks += k
        return cts, ks

    def _product(self, t, xs: list, bias: np.ndarray) -> np.ndarray:
        """(W x + Delta bias) mod q for one tile, (rows, L, G + N) uint64."""
        from secinfer.protocols.safhire import linprod as LP
        from secinfer.protocols.safhire.lwe import _mul_pow2

        some = next((x for x in xs if x is not None), None)
        if some is None:                  # the tile reads no input: bias only (level-0 cts)
            acc = np.zeros((len(t.rows), 1, self._cols), dtype=np.uint64)
            q = int(self.params.q[0])
            acc[:, 0, 0] = _mul_pow2(np.mod(bias, np.int64(q)).astype(np.uint64), self.ld, q)
            return acc
        nl, g, n = some.b.shape[1], some.b.shape[2], some.a.shape[2]
        acc = None if nl == 1 else np.empty((len(t.rows), nl, g + n), dtype=np.uint64)
        for lvl in range(nl):
            q = int(self.params.q[lvl])
            srcs = [[x.b[:, lvl, :], x.a[:, lvl, :]] if x is not None else
                    [np.zeros((0, g), np.uint64), np.zeros((0, n), np.uint64)] for x in xs]
            buf = self._scratch("y", (len(t.rows), g + n), np.int64)     # reused tile to tile
            y = LP.product_mod(t.plan, srcs, q, self.threads, out=buf, work=self._work).view(np.uint64)
            bb = np.mod(bias, np.int64(q)).astype(np.uint64)
            y[:, 0] = (y[:, 0] + _mul_pow2(bb, self.ld, q)) % np.uint64(q)
            if nl == 1:
                return y.reshape(len(t.rows), 1, g + n)
            acc[:, lvl, :] = y
        return acc

    def _scratch(self, name: str, shape: tuple, dtype) -> np.ndarray:
        """A buffer of this shape on storage kept under ``name`` (grown when too small):
        one per name, whatever the tiles' shapes."""
        need = int(np.prod(shape))
        b = self._work.get(name)
        if b is None or b.size < need or b.dtype != np.dtype(dtype):
            self._work[name] = None
            b = self._work[name] = np.empty(need, dtype)
        return b[:need].reshape(shape)


class OpClock:
    """Wall and CPU seconds per operation (``with clock("linear"): ...``). CPU is the whole
    process's (all its threads: BLAS, Go workers): on a shared machine wall time also holds
    the waits for a core; CPU time does not."""

    def __init__(self, ops) -> None:
        self.wall = dict.fromkeys(ops, 0.0)
        self.cpu = dict.fromkeys(ops, 0.0)
        self._op = None

    def __call__(self, op: str) -> "OpClock":
        self._op = op
        return self

    def __enter__(self) -> None:
        self._t = (self._op, time.perf_counter(), time.process_time())

    def __exit__(self, *exc) -> None:
        op, w, c = self._t
        self.wall[op] = self.wall.get(op, 0.0) + time.perf_counter() - w
        self.cpu[op] = self.cpu.get(op, 0.0) + time.process_time() - c
