"""The shared three-party layer below astra, aby3, stamp and falcon (DESIGN.md ``rep3/``):
``digest`` (the one domain-separated hash, running hashes), ``wire`` (ring elements on the
wire), ``triples`` (the one triple factory), ``keys``, ``session`` and ``graph`` (set-up,
inputs, close), ``engine`` (the 2-out-of-3 replicated engine over ``sharing.replicated.Pair``),
``executor`` and ``kernels`` (an IR graph over a replicated backend). A paper's package
imports this layer, never another paper's package."""
