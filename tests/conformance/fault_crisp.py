"""``fault-crisp``: protocol crisp with the test-side fault proxy of faults.py."""

from conformance.faults import wrap

SPEC = wrap("crisp")
