"""The shared three-party layer below astra, aby3, stamp and falcon (DESIGN.md ``rep3/``).

``digest``   the one domain-separated hash (tag, dtype, shape and bytes of every array) and
             the running hashes that amortise many checks into one message;
``wire``     ring elements on the wire (packed to the ring's width);
``triples``  the one triple factory: coin toss, bucket parameters, permutation, cut and
             bucket layout, and the cut-and-bucket driver [ASTRA App. A.1, Araki et al.];
``session``  set-up and close of a session with outside roles (header, close handshake);
``engine``   the 2-out-of-3 replicated engine over ``sharing.replicated.Pair`` (host keys,
             reshare, malicious openings and multiplication checks);
``executor`` the graph executor over a replicated backend; ``kernels`` its local kernels.

A paper's package imports this layer, never another paper's package.
"""
