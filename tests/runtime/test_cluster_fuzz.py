"""Issue #22 item 5: a cluster file, whatever it holds, is loaded or refused with a
``ConfigError`` naming the cause (property-based; ``SECINFER_FUZZ_EXAMPLES=N`` for a
longer bounded run)."""

import os
import tomllib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secinfer.errors import ConfigError
from secinfer.runtime.cluster import load_cluster, parse_cluster, write_loopback_cluster

# SECINFER_FUZZ_EXAMPLES=N runs a longer bounded fuzz campaign (default: 300 per property)
FAST = settings(max_examples=int(os.environ.get("SECINFER_FUZZ_EXAMPLES", "300")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=12),
                    st.just("tcp"), st.just("lan"), st.just("a"), st.just(0.5), st.just(20001))
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=3)
                      | st.dictionaries(st.text(max_size=8), kids, max_size=3), max_leaves=8)
KEYS = ["session", "network", "connect_timeout", "heartbeat_interval", "peer_timeout", "max_frame", "transport",
        "party", "link", "id", "role", "host", "port", "public_key", "public_key_file", "bind", "between",
        "profile"]


def _valid(tmp_path):
    path = write_loopback_cluster(tmp_path / "c", ("a", "b"))
    with open(path, "rb") as f:
        return path, tomllib.load(f)


def _mutate(data, draw):
    """Replace, delete or add one field somewhere in the (nested) cluster dict."""
    d = data
    for _ in range(draw(st.integers(0, 2))):
        kids = [v for v in (d.values() if isinstance(d, dict) else d) if isinstance(v, (dict, list)) and v]
        if not kids:
            break
        d = draw(st.sampled_from(kids))
    if isinstance(d, dict):
        key = draw(st.sampled_from(sorted(d) + KEYS))
        if draw(st.booleans()) and key in d:
            del d[key]
        else:
            d[key] = draw(values)
    elif isinstance(d, list) and d:
        d[draw(st.integers(0, len(d) - 1))] = draw(values)


@FAST
@given(st.data())
def test_mutated_cluster_dicts_give_config_error_only(tmp_path_factory, data):
    path, good = _valid(tmp_path_factory.mktemp("c"))
    for _ in range(data.draw(st.integers(1, 3))):
        _mutate(good, data.draw)
    try:
        parse_cluster(good, "fuzz", path.parent)
    except ConfigError:
        pass


@FAST
@given(st.dictionaries(st.sampled_from(KEYS), values, max_size=6))
def test_arbitrary_cluster_dicts_give_config_error_only(data):
    try:
        parse_cluster(data, "fuzz")
    except ConfigError:
        pass


@FAST
@given(st.binary(max_size=400))
def test_arbitrary_cluster_file_bytes_give_config_error_only(tmp_path_factory, raw):
    p = tmp_path_factory.mktemp("f") / "cluster.toml"
    p.write_bytes(raw)
    try:
        load_cluster(p)
    except ConfigError:
        pass


def test_unreadable_public_key_files_give_config_error(tmp_path):
    """Found by the fuzz campaign: a public_key_file that is a folder, holds a NUL byte or
    is too long escaped as IsADirectoryError / ValueError / OSError."""
    import pytest

    for bad in ["", ".", "\x00", "a" * 300]:
        d = {"session": "s", "party": [
            {"id": "a", "role": "a", "host": "h", "port": 1, "public_key_file": bad},
            {"id": "b", "role": "b", "host": "h", "port": 2, "public_key_file": "b.key"}]}
        with pytest.raises(ConfigError, match="public_key_file"):
            parse_cluster(d, "fuzz", tmp_path)
