"""Fixtures of the CLI tests."""

import numpy as np
import pytest

from secinfer.ir import bundled


@pytest.fixture(scope="session")
def digits_input(tmp_path_factory):
    """Seven rows of digits-mlp's test set saved as .npy: (path, rows)."""
    X, _ = bundled.bundled_testset("digits-mlp")
    path = tmp_path_factory.mktemp("in") / "x.npy"
    np.save(path, X[:7])
    return path, X[:7]
