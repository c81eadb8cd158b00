"""The differential-privacy bound of Theorem 2 [SAFHIRE Sec. 5, App. C], per layer, from the
measured packing noise.

Local randomizer: each output the client decrypts carries the packing noise, Gaussian with
standard deviation ``sigma`` in units of one accumulator step [SAFHIRE Rem. 3, Fig. 10].
Taking the sensitivity as one accumulator step (neighbouring models whose output differs by
one unit; the paper leaves it implicit), the Gaussian mechanism gives (eps0, delta0)-local
DP with eps0 = sqrt(2 ln(1.25 / delta0)) / sigma. Theorem 2 (shuffling amplification,
Feldman et al. Th. 3.8) then applies when eps0 <= ln(n / (16 ln(2 / delta))) for the n
shuffled outputs, and gives

    eps <= ln(1 + (e^eps0 - 1)/(e^eps0 + 1) (8 sqrt(e^eps0 ln(4/delta)) / sqrt(n) + 8 e^eps0 / n))
    delta_total = delta + (e^eps + 1)(e^-eps0 / 2 + 1) n delta0.

With a Delta far above the noise (our parameter choice, for exact decryption) sigma is a
tiny fraction of one unit, eps0 is huge and the theorem does not apply; the report says so
rather than printing a meaningless number.
"""

from __future__ import annotations

import math

DELTA0 = 1e-6
DELTA = 1e-6


def theorem2(sigma: float, n: int, delta0: float = DELTA0, delta: float = DELTA) -> dict:
    out = {"sigma_units": sigma, "n": int(n), "delta0": delta0, "delta": delta}
    if sigma <= 0 or n < 2:
        out.update(eps0=None, applicable=False, why="no noise measured" if sigma <= 0 else "n < 2")
        return out
    eps0 = math.sqrt(2.0 * math.log(1.25 / delta0)) / sigma
    out["eps0"] = eps0
    arg = n / (16.0 * math.log(2.0 / delta))
    limit = math.log(arg) if arg > 0 else float("-inf")
    out["eps0_limit"] = limit
    # the smallest noise (in accumulator units) for which the theorem would apply
    out["sigma_needed_units"] = (math.sqrt(2.0 * math.log(1.25 / delta0)) / limit) if limit > 0 else None
    if eps0 > limit:
        need = out["sigma_needed_units"]
        out.update(applicable=False, why=f"eps0 = {eps0:.3g} exceeds ln(n / (16 ln(2/delta))) = {limit:.3g}"
                   + (f"; it would need noise std >= {need:.3g} units" if need else "; n too small"))
        return out
    e0 = math.exp(eps0)
    eps = math.log(1.0 + (e0 - 1.0) / (e0 + 1.0) * (8.0 * math.sqrt(e0 * math.log(4.0 / delta)) / math.sqrt(n)
                                                      + 8.0 * e0 / n))
    out.update(applicable=True, eps=eps,
               delta_total=delta + (math.exp(eps) + 1.0) * (math.exp(-eps0) / 2.0 + 1.0) * n * delta0)
    return out
