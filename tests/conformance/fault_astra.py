"""``fault-astra``: protocol astra with the test-side fault proxy of faults.py."""

from conformance.faults import wrap

SPEC = wrap("astra")
