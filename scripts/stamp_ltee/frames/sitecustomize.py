# measuring arm only (scripts/stamp_ltee/ab.py "@frames"; not part of the package): the in-process
# LTEE bus encodes and decodes secinfer frames instead of passing array copies
# (``InProcessLink(frames=True)``)
try:
    from secinfer.protocols.stamp import ltee_inproc as _li
    _init = _li.InProcessLink.__init__
    def __init__(self, party, spin_us=0.0, timeout_s=300.0, frames=False):
        _init(self, party, spin_us, timeout_s, frames=True)
    _li.InProcessLink.__init__ = __init__
except ImportError:
    pass
