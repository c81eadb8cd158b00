"""Process-tree helpers for the launcher and abort tests (Linux /proc)."""

import os
from pathlib import Path


def descendants_of(pid: int) -> list[int]:
    """Every process below ``pid`` (children, grandchildren, ...): the launcher's parties are
    its children when spawned, its grandchildren when forked by its fork server."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                parent[int(d)] = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], {pid}
    while frontier:
        kids = {k for k, pp in parent.items() if pp in frontier}
        found += sorted(kids)
        frontier = kids
    return found


def alive(pids) -> list[int]:
    """Those of ``pids`` that still run (zombies count as gone)."""
    out = []
    for k in pids:
        try:
            if Path(f"/proc/{k}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.append(k)
        except OSError:
            pass
    return out


def processes_in_groups(pgids) -> list[int]:
    """The live processes whose process group is one of ``pgids`` (every party runs in its
    own group, so nothing of a run may be left in them; zombies have exited)."""
    pgids = set(pgids)
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if int(pgrp) in pgids and state != "Z":
            found.append(int(d))
    return found
