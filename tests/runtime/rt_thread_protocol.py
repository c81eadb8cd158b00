"""The ``rt_ring_protocol`` test protocol, but importing it starts a thread: a process that
imported it must not fork parties (the fork server then reports itself unsafe)."""

import threading

from rt_ring_protocol import SPEC  # noqa: F401 - the registry reads SPEC from this module

_stop = threading.Event()
threading.Thread(target=_stop.wait, args=(60.0,), daemon=True, name="rt-thread-protocol").start()
