"""The conformance suite's cases and its in-process runner.

Cases are ``secinfer demo``'s plan (``secinfer.cli.demo._plan``: every registered protocol,
baselines included, x every security level it offers x every bundled model its
``check_model`` accepts and whose sums of products fit its ring), with ``demo_rows``
capped at ``expectations.ROWS`` held-out rows. Each case runs every role in this process
(LocalHub threads, deterministic test PRGs), so a run takes well under a second for most
protocols; tests/conformance/test_abort_processes.py runs real OS processes.
"""

from __future__ import annotations

import contextlib
import functools
import io
from dataclasses import dataclass

import numpy as np

from secinfer.arith.fixed import get_config
from secinfer.crypto.prg import PRG
from secinfer.net.channel import run_local
from secinfer.protocols.base import PartyJob

from .expectations import EXPECT, ROWS


@dataclass(frozen=True)
class Case:
    protocol: str
    security: str
    model: str

    @property
    def id(self) -> str:
        return f"{self.protocol}-{self.security}-{self.model}"


@functools.lru_cache(maxsize=1)
def plan() -> tuple[tuple[Case, ...], str]:
    """(the demo's cases, its notes on stderr: unavailable protocols, skipped models)."""
    from secinfer.cli.demo import _plan
    from secinfer.protocols import registry

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        jobs, failures = _plan(registry.names(), baselines=True, explicit=False, all_securities=True)
    notes = err.getvalue()
    if failures:
        notes = f"{failures} protocol(s) unavailable:\n{notes}"
    return tuple(Case(spec.name, sec, m) for spec, m, sec in jobs), (notes if failures else "")


def cases() -> list[Case]:
    return list(plan()[0])


@functools.lru_cache(maxsize=None)
def model_data(model: str):
    from secinfer.ir import bundled
    from secinfer.ir.onnx_import import load_model

    graph = load_model(str(bundled.bundled_path(model)))
    X, _ = bundled.bundled_testset(model)
    return graph, X


@dataclass
class Run:
    case: Case
    spec: object
    cfg: object
    graph: object
    x: np.ndarray
    results: dict   # role -> PartyResult or exception
    meters: dict    # role -> Meter (roles that finished)


def fixed_config(spec):
    return get_config(EXPECT[spec.name]["fixed"] or spec.default_fixed)


def run_case(case: Case, seed: int = 1, spec=None) -> Run:
    """Every role of ``case.protocol`` (or of ``spec``, a test's altered copy of it)
    in-process on ``ROWS`` held-out rows."""
    from secinfer.cli.demo import demo_rows
    from secinfer.protocols import registry

    spec = spec or registry.get(case.protocol)
    graph, X = model_data(case.model)
    X = X[:demo_rows(spec, len(X), ROWS)]
    cfg = fixed_config(spec)
    meters = {}

    def party(k: int, role: str):
        def body(ep):
            job = PartyJob(role=role, security=case.security, fixed=cfg, prg=PRG.for_tests(100 * seed + k, role),
                           model=graph if role == spec.model_role else None,
                           input=X if role == spec.input_role else None)
            res = spec.run_party(role, ep, job)
            meters[role] = ep.meter
            return res
        return body

    results = run_local({r: party(k, r) for k, r in enumerate(spec.roles)}, timeout=300, recv_timeout=60)
    return Run(case, spec, cfg, graph, X, results, meters)
