"""Pi_Lin [CRISP Fig. 2, App. C]: the linear layer on the parties' shares.

Input: the server holds (v_0, w_0), the client (v_1, w_1), additive shares over Z_2^k of an
activation v and of its MAC w = mu v (the real and imaginary parts of the paper's complex
share m = v + w j). Output: shares of

    s^Re = W v + b 2^f,   s^Im = W w + mu b 2^f   (= mu s^Re),          [CRISP Fig. 2 Lin, Fig. 8]
    t    = mu^3 (c1 + v_0) - mu^2 (c2 + w_0)     (= 0 when c1 = v_1, c2 = w_1)

where the client supplies c3 = (v_1, w_1) (the complex share), c1 = Re, c2 = Im. The
server samples its output shares uniformly and returns the client's as masked values.
In the semi-honest baseline only s^Re is computed (no MACs, no t).

Engines
-------
An engine (a ``twopc.engine.LinearEngine``) carries the client's inputs to the server and
the results back. The one engine here is ``ckks`` (``ckks_engine.py``): the client's
shares under RLWE encryption. The tests add an insecure stand-in that sends the shares in
the clear and also carries the paper's t tag (tests/crisp/plain_engine.py), so the MAC
algebra and every deviation of Claim 2 run exactly and fast; it is registered in
``ENGINES`` by the test-suite only.
"""

from __future__ import annotations

from secinfer.arith.ring import Ring
from secinfer.errors import ConfigError


def _ckks(g: Ring, frac_bits: int, malicious: bool, options: dict):
    from secinfer.protocols.crisp.ckks_engine import DEFAULT_PARAMS, CKKSLinear  # noqa: PLC0415

    pname = options.get("he_params", options.get("params", DEFAULT_PARAMS))
    # test-only parameter sets need the explicit opt-in (which the CLI refuses)
    return CKKSLinear(g, frac_bits, malicious, pname,
                      allow_insecure="insecure" in pname and options.get("allow_insecure_he") is True)


# name -> factory(g, frac_bits, malicious, options)
ENGINES = {"ckks": _ckks}


def make_engine(name: str, g: Ring, frac_bits: int, malicious: bool, options: dict | None = None):
    try:
        factory = ENGINES[name]
    except KeyError:
        raise ConfigError(f"crisp: unknown linear engine {name!r}; known: {', '.join(ENGINES)}") from None
    return factory(g, frac_bits, malicious, options or {})
