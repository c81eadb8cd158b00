"""Whole-command wall time of ``secinfer run`` (process start included) and where it goes.

``command_wall`` runs the real command (``secinfer run ... --json``) as a child process and
times it from the outside; the command's own JSON carries its start-up report
(``RunResult.startup``: how the parties were started and the consecutive steps from the
command's process start to the merged result, ``secinfer.runtime.launcher.startup_report``).
``summarize`` gives the median and spread (min, max) of the walls and the median of each
step. Used by ``secinfer bench runtime`` (the W1 command row) and ``secinfer bench peers``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMAND_TARGET_S = 0.5     # issue #23 item 2: `secinfer run` on W1 under 0.5 s (the peer: 0.12 s)


def command_wall(protocol: str, model_path: str, x_path: str, security: str = "semi-honest",
                 timeout: float = 900) -> tuple[float, dict]:
    """(wall seconds of the whole command, its start-up report)."""
    exe = Path(sys.executable).with_name("secinfer")
    cmd = [str(exe), "run", "-p", protocol, "-s", security, "-m", model_path, "-i", x_path, "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()[-400:]}")
    try:
        startup = json.loads(proc.stdout).get("startup") or {}
    except json.JSONDecodeError:
        startup = {}
    return wall, startup


def summarize(walls: list[float], startups: list[dict]) -> dict:
    """Median and spread of the walls; median of each start-up step; how parties started."""
    steps: dict[str, list[float]] = {}
    for st in startups:
        for k, v in (st.get("steps") or {}).items():
            steps.setdefault(k, []).append(v)
    imports = [st["fork_server_import_s"] for st in startups if st.get("fork_server_import_s") is not None]
    cpu = [st.get("cpu_s") or {} for st in startups]

    def med(vals):
        vals = [v for v in vals if v is not None]
        return round(statistics.median(vals), 4) if vals else None
    return {"command_s": statistics.median(walls) if walls else None,
            "command_s_min": min(walls) if walls else None, "command_s_max": max(walls) if walls else None,
            "command_s_all": [round(w, 4) for w in walls],
            "startup_steps_median_s": {k: round(statistics.median(v), 4) for k, v in steps.items()},
            "fork_server_import_s_median": round(statistics.median(imports), 4) if imports else None,
            # CPU seconds (median): on a loaded machine a better guide to the idle wall time
            "cpu_s_median": {"launcher_until_parties_started": med([c.get("launcher_until_parties_started")
                                                                   for c in cpu]),
                             "launcher": med([c.get("launcher") for c in cpu]),
                             "fork_server_imports": med([c.get("fork_server_imports") for c in cpu]),
                             "parties_sum": med([sum(v for v in (c.get("parties") or {}).values() if v)
                                                 if c.get("parties") else None for c in cpu])},
            "party_start": sorted({st.get("start") for st in startups if st.get("start")}),
            "fallbacks": sorted({st["fallback"] for st in startups if st.get("fallback")})}
