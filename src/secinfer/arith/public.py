"""Public, non-secret, deterministic data: the one helper for it.

Cryptographic randomness always comes from the injected PRG (``secinfer.crypto.prg``).
What is left is data that is public by construction and must be reproducible: probe and
calibration inputs of a model analysis, benchmark weights and inputs. ``public_rng`` names
such a stream so that a reader (and a grep for ``np.random``) sees at once that nothing
secret is drawn from it.
"""

from __future__ import annotations

import numpy as np

from secinfer.errors import ConfigError


def public_rng(label: str, seed: int = 0) -> np.random.Generator:
    """A numpy generator for PUBLIC, NON-SECRET, DETERMINISTIC data (never keys, masks,
    shares or anything a party must not predict). ``label`` names the use (e.g.
    ``"bench/peers/weights"``); the stream depends on ``seed`` alone, so that data drawn
    with a fixed seed stays what it was."""
    if not isinstance(label, str) or not label:
        raise ConfigError("public_rng needs a non-empty label naming the public data it draws")
    return np.random.default_rng(seed)
