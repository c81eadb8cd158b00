"""The proof responses' bit packing (``popk._pack_field`` / ``_unpack_field``, vectorised)
against an independent reference: numpy's packbits over each value's w low bits."""

from __future__ import annotations

import numpy as np
import pytest

from secinfer.crypto.zk import popk


def _reference(v: np.ndarray, w: int) -> bytes:
    bits = np.unpackbits(v.reshape(-1).astype("<u8").view(np.uint8).reshape(-1, 8), axis=1,
                         bitorder="little")
    return np.packbits(bits[:, :w].reshape(-1), bitorder="little").tobytes()


@pytest.mark.parametrize("w", [1, 5, 8, 26, 30, 39, 40, 41, 63, 64])
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (44, 1000)])
def test_pack_matches_packbits_and_roundtrips(w, shape):
    rng = np.random.default_rng(w * 100 + shape[1])
    v = rng.integers(0, 1 << 63, shape, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    if w < 64:
        v &= np.uint64((1 << w) - 1)
    packed = popk._pack_field(v, w)
    assert packed == _reference(v, w)
    assert len(packed) == -(-v.size * w // 8)
    back = popk._unpack_field(packed, *shape, w)
    np.testing.assert_array_equal(back.astype(np.uint64), v)
