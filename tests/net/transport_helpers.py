"""Set-up shared by the transport tests: a loopback cluster and every party's endpoint."""

import threading

from secinfer.runtime.cluster import load_cluster, write_loopback_cluster


def loopback_cluster(tmp_path, transport: str, roles=("a", "b"), **settings):
    settings.setdefault("connect_timeout", 10.0)
    return load_cluster(write_loopback_cluster(tmp_path / "cluster", roles, transport=transport, **settings))


def all_endpoints(endpoint_cls, c, nonce="n", per_party=None, **kw):
    """Build every party's endpoint concurrently (each waits for the others)."""
    eps, errs = {}, {}
    per_party = per_party or {}

    def mk(pid):
        try:
            eps[pid] = endpoint_cls.from_cluster(c, pid, c.load_secret(pid), c.session_id(nonce),
                                                 **{**kw, **per_party.get(pid, {})})
        except Exception as e:  # noqa: BLE001 - re-raised below
            errs[pid] = e

    ts = [threading.Thread(target=mk, args=(p,)) for p in c.parties]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        for e in eps.values():
            e.close(flush=False)
        raise next(iter(errs.values()))
    return eps
