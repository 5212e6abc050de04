"""argparse types of the numeric command-line arguments: each refuses (usage error, exit
2, one line) a value that is not a number, not finite or out of range, before anything
runs. ``mbde_core.cli.main`` also refuses NaN and infinity in any float argument."""
from __future__ import annotations

import argparse
import math

SEED_MAX = 2**63 - 1  # numpy SeedSequence takes any non-negative integer; ROS int64 parameters this many


def seed_type(text: str) -> int:
    """A random seed: an integer in [0, 2^63 - 1]."""
    try:
        value = int(text, 10)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be in [0, 2^63 - 1], got {value}")
    return value


def int_range(lo: int | None = None, hi: int | None = None):
    """An integer in [lo, hi] (either bound may be None)."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be in [{_b(lo, '-inf')}, {_b(hi, 'inf')}], got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def float_range(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False):
    """A finite float in the interval lo..hi (open or closed at each end; None: unbounded)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        bad = not math.isfinite(value)
        if lo is not None:
            bad |= value <= lo if lo_open else value < lo
        if hi is not None:
            bad |= value >= hi if hi_open else value > hi
        if bad:
            left = "(" if lo_open or lo is None else "["
            right = ")" if hi_open or hi is None else "]"
            raise argparse.ArgumentTypeError(f"must be a finite number in {left}{_b(lo, '-inf')}, "
                                             f"{_b(hi, 'inf')}{right}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


def _b(v, default: str) -> str:
    return default if v is None else f"{v:g}"


positive = float_range(0.0, lo_open=True)
nonnegative = float_range(0.0)
positive_int = int_range(1)
nonnegative_int = int_range(0)
