"""Seconds <-> ROS time / nanoseconds: exact to the nanosecond, errors as DataError."""
import math
from types import SimpleNamespace

import pytest

from mbde_core.errors import DataError
from mbde_core.rosio.stamps import (ns_to_sec, sec_to_ns, sec_to_stamp, set_stamp,
                                    stamp_to_ns, stamp_to_sec)


@pytest.mark.parametrize("t, ns", [
    (0.0, 0),
    (1.000000001, 1_000_000_001),
    (1e9 + 0.5, 1_000_000_000_500_000_000),  # t * 1e9 in float64 would be off by up to 64 ns
    (0.1, 100_000_000),
    (1234.567891234, 1_234_567_891_234),
    (-0.5, -500_000_000),
    (-1.000000001, -1_000_000_001),
    (1.5e-9, 1),  # exact binary value is just below 1.5 ns
    (2.5e-9, 3),  # exact binary value is just above 2.5 ns
    (1_700_000_000.123456789, 1_700_000_000_123_456_717),  # float64 spacing there is 238 ns
])
def test_sec_to_ns_is_exact(t, ns):
    assert sec_to_ns(t) == ns


def test_exact_ties_round_half_to_even():
    # m / 2**10 s with m odd is exactly (m * 5**9 / 2) ns: a true tie
    assert sec_to_ns(1 / 1024) == 976_562  # 976562.5 -> even
    assert sec_to_ns(3 / 1024) == 2_929_688  # 2929687.5 -> even
    assert sec_to_ns(-1 / 1024) == -976_562


@pytest.mark.parametrize("t", [0.0, 1.000000001, 1e9 + 0.5, 0.1, 12.345, -0.5, -3.000000007,
                               1_700_000_000.123456789, 2**31 - 1.0])
def test_seconds_round_trip_through_stamp(t):
    sec, nanosec = sec_to_stamp(t)
    assert 0 <= nanosec < 1_000_000_000
    stamp = SimpleNamespace(sec=sec, nanosec=nanosec)
    assert stamp_to_sec(stamp) == t  # float64 equality
    assert stamp_to_ns(stamp) == sec_to_ns(t)


def test_negative_time_uses_positive_nanosec():
    assert sec_to_stamp(-0.5) == (-1, 500_000_000)
    assert sec_to_stamp(-2.0) == (-2, 0)


@pytest.mark.parametrize("ns", [0, 1, 999_999_999, 1_000_000_001, 4_000_000_000_000_001,
                                -1, -1_500_000_000])
def test_ns_round_trip_where_float_resolves_ns(ns):
    assert sec_to_ns(ns_to_sec(ns)) == ns


def test_set_stamp_fills_existing_message():
    stamp = SimpleNamespace(sec=7, nanosec=7)
    set_stamp(stamp, 1e9 + 0.5)
    assert (stamp.sec, stamp.nanosec) == (1_000_000_000, 500_000_000)


@pytest.mark.parametrize("t", [math.nan, math.inf, -math.inf, 2.0**31, -(2.0**31) - 1, 1e30])
def test_unrepresentable_times_raise_one_line(t):
    with pytest.raises(DataError) as info:
        sec_to_stamp(t)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("stamp", [
    SimpleNamespace(sec=1, nanosec=1_000_000_000),
    SimpleNamespace(sec=1, nanosec=-1),
    SimpleNamespace(sec=1.5, nanosec=0),
    SimpleNamespace(sec="1", nanosec=None),
    SimpleNamespace(sec=1),
    None,
])
def test_malformed_stamps_raise_data_error(stamp):
    with pytest.raises(DataError, match="time stamp"):
        stamp_to_sec(stamp)
