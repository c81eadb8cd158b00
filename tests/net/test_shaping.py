"""Network profiles: parsing, combination and the token bucket's arithmetic (no clocks)."""

import pytest

from secinfer.errors import ConfigError
from secinfer.net.shaping import LAN, MB, NONE, WAN, LinkProfile, TokenBucket, combine, link_profile, parse_profile

pytestmark = pytest.mark.timeout(30)


def test_named_profiles():
    assert parse_profile("none") is NONE and NONE.is_null
    assert parse_profile("LAN") is LAN
    assert LAN.bandwidth == pytest.approx(125e6) and LAN.latency == pytest.approx(0.25e-3)
    assert WAN.bandwidth == pytest.approx(40e6) and WAN.latency == pytest.approx(35e-3)
    assert parse_profile(None) is NONE


def test_custom_profiles():
    p = parse_profile("bw=100,lat=5")
    assert p.bandwidth == pytest.approx(100 * MB) and p.latency == pytest.approx(5e-3)
    assert parse_profile("lat=20").bandwidth is None
    assert parse_profile("bw=2.5").latency == 0.0
    assert p.transfer_time(10 * MB) == pytest.approx(0.105)


@pytest.mark.parametrize("bad", ["fast", "bw=0", "bw=-1", "lat=-3", "bw=x", "bw=1,bw=2", "speed=3", "", "bw=inf"])
def test_bad_profiles(bad):
    with pytest.raises(ConfigError):
        parse_profile(bad)


def test_combine_takes_the_worse_of_each():
    a = parse_profile("bw=10,lat=1")
    b = parse_profile("bw=50,lat=30")
    c = combine(a, b)
    assert c.bandwidth == pytest.approx(10 * MB) and c.latency == pytest.approx(30e-3)
    assert combine(NONE, a) is a and combine(a, NONE) is a and combine(WAN, WAN) is WAN
    assert link_profile(NONE, None, None) is NONE
    assert link_profile(WAN, None, None) is WAN
    assert link_profile(NONE, a, None) is a
    assert link_profile(WAN, a, b, explicit=LAN) is LAN


def test_token_bucket_paces_at_the_rate():
    tb = TokenBucket(100.0, burst=50)
    assert tb.reserve(50, 0.0) == 0.0          # the burst goes at once
    assert tb.reserve(100, 0.0) == pytest.approx(1.0)   # then 100 bytes at 100 B/s
    assert tb.reserve(100, 0.5) == pytest.approx(2.0)   # queued behind the previous frame
    assert tb.reserve(10, 10.0) == 10.0        # refilled after a pause (capped at the burst)
    assert tb.reserve(100, 10.0) == pytest.approx(10.6)


def test_token_bucket_total_time_for_a_large_transfer():
    tb = TokenBucket(100 * MB)
    t = 0.0
    for _ in range(10):
        t = tb.reserve(MB, 0.0)
    assert t == pytest.approx((10 * MB - tb.burst) / (100 * MB))
    assert TokenBucket(None).reserve(10**9, 3.0) == 3.0
    with pytest.raises(ConfigError):
        TokenBucket(0)


def test_describe():
    assert "40 MB/s" in WAN.describe() and "35 ms" in WAN.describe()
    assert LinkProfile("x", None, 0.0).is_null
