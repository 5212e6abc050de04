"""Seconds (float) <-> ROS time (``sec``, ``nanosec``) and bag nanoseconds, exact to 1 ns.

Conversions use exact integer arithmetic (no ``t * 1e9`` rounding error):

- :func:`sec_to_ns` rounds the exact binary value of ``t`` to the nearest nanosecond
  (ties to even), so ``sec_to_ns(1e9 + 0.5) == 1_000_000_000_500_000_000`` and
  ``sec_to_ns(1.000000001) == 1_000_000_001``.
- :func:`ns_to_sec` returns the float nearest to ``ns * 1e-9`` (correctly rounded).

Hence ``ns_to_sec(sec_to_ns(t)) == t`` whenever ``t`` is the float nearest to a whole
number of nanoseconds (every stamp that came from a ROS message or bag), and for every
``|t| > 4.6e6 s`` (where float64 spacing exceeds 1 ns). The opposite direction,
``sec_to_ns(ns_to_sec(ns)) == ns``, holds while float64 resolves 1 ns (``|t| < ~4.5e6 s``,
i.e. simulation time); for epoch times (~1.7e9 s, float spacing 238 ns) keep the integer
stamp if nanoseconds matter.

ROS time (``builtin_interfaces/Time``): ``sec`` int32, ``nanosec`` uint32 in [0, 1e9);
negative times have ``sec < 0`` and a positive ``nanosec`` (-0.5 s -> (-1, 500000000)).
"""
from __future__ import annotations

from mbde_core.errors import DataError

NS_PER_S = 1_000_000_000
SEC_MIN, SEC_MAX = -(2**31), 2**31 - 1  # int32 range of builtin_interfaces/Time.sec


def sec_to_ns(t: float) -> int:
    """Seconds -> integer nanoseconds, rounded half-to-even on the exact value of t.

    Raises DataError for a non-finite t.
    """
    try:
        num, den = float(t).as_integer_ratio()  # den is a power of two: exact
    except (OverflowError, ValueError, TypeError):
        raise DataError(f"time {t!r} is not a finite number of seconds") from None
    q, r = divmod(num * NS_PER_S, den)
    if 2 * r > den or (2 * r == den and q % 2):
        q += 1
    return q


def ns_to_sec(ns: int) -> float:
    """Integer nanoseconds -> seconds, the float nearest to ns / 1e9."""
    return int(ns) / NS_PER_S  # int / int true division is correctly rounded


def sec_to_stamp(t: float) -> tuple[int, int]:
    """Seconds -> (sec, nanosec) of builtin_interfaces/Time, nanosec in [0, 1e9).

    Raises DataError if t is non-finite or sec leaves the int32 range.
    """
    sec, nanosec = divmod(sec_to_ns(t), NS_PER_S)
    if not SEC_MIN <= sec <= SEC_MAX:
        raise DataError(f"time {t!r} s is outside the ROS time range (int32 seconds)")
    return sec, nanosec


def stamp_to_ns(stamp) -> int:
    """builtin_interfaces/Time (anything with ``sec``, ``nanosec``) -> integer nanoseconds.

    Raises DataError if the fields are missing, not integers or nanosec is not in [0, 1e9).
    """
    try:
        sec, nanosec = stamp.sec, stamp.nanosec
        if isinstance(sec, float) or isinstance(nanosec, float):
            raise TypeError("sec/nanosec must be integers")
        sec, nanosec = int(sec), int(nanosec)
    except (AttributeError, TypeError, ValueError, OverflowError) as exc:
        raise DataError(f"malformed time stamp: {exc}") from None
    if not 0 <= nanosec < NS_PER_S:
        raise DataError(f"malformed time stamp: nanosec {nanosec} outside [0, 1e9)")
    return sec * NS_PER_S + nanosec


def stamp_to_sec(stamp) -> float:
    """builtin_interfaces/Time -> seconds (float nearest to sec + nanosec * 1e-9)."""
    return ns_to_sec(stamp_to_ns(stamp))


def set_stamp(stamp, t: float) -> None:
    """Write time t [s] into an existing builtin_interfaces/Time (``sec``, ``nanosec``)."""
    stamp.sec, stamp.nanosec = sec_to_stamp(t)

