"""The conformance properties fail on deliberately broken runs: a copy of the reference
protocol altered from the test side (its output off by one unit, an output leaked to the
server, the server's messages metered in another phase than the client's)."""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest

from secinfer.protocols import registry

from . import properties
from .harness import Case, run_case

CASE = Case("reference", "semi-honest", "digits-mlp")


def _altered(run_party):
    return dataclasses.replace(registry.get("reference"), run_party=run_party)


def test_honest_reference_passes():
    run = run_case(CASE)
    properties.finished(run)
    properties.output_within_budget(run)
    properties.only_input_role_learns_output(run)
    properties.phases_metered(run)


def test_output_off_by_one_unit_fails():
    real = registry.get("reference").run_party

    def run_party(role, ep, job):
        res = real(role, ep, job)
        if res.output_ring is not None:
            res.output_ring = res.output_ring.copy()
            res.output_ring.reshape(-1)[0] += np.uint64(1)
        return res

    run = run_case(CASE, spec=_altered(run_party))
    with pytest.raises(AssertionError, match="elements differ"):
        properties.output_within_budget(run)


def test_output_at_another_role_fails():
    real = registry.get("reference").run_party

    def run_party(role, ep, job):
        res = real(role, ep, job)
        if role == "server":
            res.output = np.zeros(1)
        return res

    run = run_case(CASE, spec=_altered(run_party))
    with pytest.raises(AssertionError, match="role server returned an output"):
        properties.only_input_role_learns_output(run)


class _SetupPhaseEndpoint:
    """The server meters its online messages as set-up ones (a phase left unmarked)."""

    def __init__(self, ep) -> None:
        self._ep = ep

    @contextlib.contextmanager
    def phase(self, name):
        with self._ep.phase("setup" if name == "online" else name):
            yield self

    def __getattr__(self, name):
        return getattr(self._ep, name)


def test_message_metered_in_different_phases_fails():
    real = registry.get("reference").run_party

    def run_party(role, ep, job):
        return real(role, _SetupPhaseEndpoint(ep) if role == "server" else ep, job)

    run = run_case(CASE, spec=_altered(run_party))
    with pytest.raises(AssertionError, match="metered differently at the two ends"):
        properties.phases_metered(run)
