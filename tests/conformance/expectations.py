"""What the conformance suite expects of each registered protocol, as data.

Every protocol in ``secinfer.protocols.registry`` needs an entry here (a test fails for a
protocol without one), so a new protocol states its output budget and its phases when it
registers, instead of inheriting a silent default.

``budget`` (how the input role's output compares with ``secinfer.ir.fixed_exec.run_fixed``
at the fixed-point config ``fixed``):

* ``"exact"``: the ring output equals the oracle bit for bit, and the float output is its
  decoding.
* ``("units", n)``: |output_ring - oracle| < n units of the last place (signed), and the
  predicted classes equal the oracle's. Probabilistic truncation: +-1 unit per truncation,
  a wrap with probability about |x| / 2^(l-1) per element (negligible at l = 64).
* ``"own-oracle"``: the float output equals ``ProtocolSpec.oracle(graph, x, {})`` exactly:
  the protocol computes a declared transformation of the model (SAFHIRE: its quantized
  integer model, run in the clear), not the fixed-point graph.
* ``"derived"``: |output - decode(oracle)| <= 2 x the oracle's derived error bound against
  the float model (``derived_error_bound``): the protocol computes the same function at a
  different precision, and both are within that bound of the float model. This is what
  ``secinfer demo`` allows for a folded standardiser.

``offline``: the protocol sends preprocessing traffic in the ``offline`` phase (at every
security level it offers); ``online`` traffic is required of every protocol.

``bundled: False`` (with ``why``): the protocol runs none of the bundled models by design;
the suite then asserts that ``check_model`` refuses every one of them (so the entry cannot
outlive the reason) and runs no case for it.
"""

from __future__ import annotations

EXPECT = {
    # INSECURE template: the client sends its input in the clear (docs/runtime.md)
    "reference": {"fixed": None, "budget": "exact", "offline": False},
    # [CRISP] FSS non-linear layers and CKKS linear layers reproduce the oracle exactly
    # (docs/protocols/crisp.md, "bit-exact" rows of `secinfer demo`)
    "crisp": {"fixed": None, "budget": "exact", "offline": True},
    # [STAMP] exact truncation on the LTEE (docs/protocols/stamp.md)
    "stamp": {"fixed": None, "budget": "exact", "offline": True},
    # Falcon+ baseline: probabilistic truncation; over Z_2^32 (its default fx32f13) a wrap
    # hits ~2% of the elements and predictions are unreliable (docs/protocols/stamp.md,
    # "Truncation ... Error budget"), so conformance runs it over Z_2^64, where the
    # documented budget is +-1 unit per truncation (tests/stamp/test_stamp_falcon.py: < 64)
    "falcon": {"fixed": "fx64f13", "budget": ("units", 64), "offline": True},
    # [ASTRA 5.3] depth-one models computed at f_x + f_w bits with a folded standardiser:
    # bit-exact against astra.model.oracle, within run_fixed's own bound of run_fixed
    # (docs/protocols/astra.md, "Fixed point and the error budget")
    "astra": {"fixed": None, "budget": "derived", "offline": True},
    "aby3": {"fixed": None, "budget": "derived", "offline": True},
    # computation on certified data: psi is one of its use-case graphs (sum, weighted sum,
    # distance) over signed data points, not an ML model (src/secinfer/protocols/certified)
    # [SAFHIRE Sec. 4.5] the quantized model (b-bit accumulators, per-round requantization)
    # is the oracle; every round decrypts to it exactly (docs/protocols/safhire.md)
    "safhire": {"fixed": None, "budget": "own-oracle", "offline": False},
    "certified": {"bundled": False, "why": "psi is a certified-data use case, not a bundled model"},
}

ROWS = 4  # held-out rows per model (fewer if the protocol's demo_rows is smaller)
