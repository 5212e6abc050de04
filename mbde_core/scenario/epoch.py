"""When simulated time starts: the epoch of the stamps of ``mbde simulate`` and the
``simulator`` node.

Stamps are ``start_time + k step`` (integer nanoseconds). A scenario may fix
``start_time`` [s since 1970-01-01 UTC]; otherwise simulated data start *now*, rounded
down to the whole second, so that bags and live runs carry plausible dates in Foxglove,
RViz and ``ros2 bag info`` (not 1970-01-01) while every stamp stays ns-exact. The
scenario's own time (loads, controller targets) always starts at 0.
"""
from __future__ import annotations

import time

NOW = "now"


def now_epoch() -> int:
    """The current time [s], rounded down to the whole second."""
    return int(time.time())


def resolve_start_time(value, scenario) -> float | None:
    """The start time to impose on ``scenario``: ``value`` is None (the scenario's
    start_time if it sets one, else now), 'now', or seconds (a number or its text).
    Returns None when the scenario's own start_time stays."""
    if value is None:
        return None if "start_time" in scenario.raw else float(now_epoch())
    if str(value).strip().lower() == NOW:
        return float(now_epoch())
    return float(value)


def with_start_time(scenario, value=None):
    """``scenario`` starting at :func:`resolve_start_time` (the same object if unchanged)."""
    start = resolve_start_time(value, scenario)
    if start is None or start == scenario.start_time:
        return scenario
    return scenario.with_overrides(settings=[f"start_time={start!r}"])
