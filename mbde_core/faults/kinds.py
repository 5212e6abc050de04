"""Sensor faults injected into a stream of readings (``mbde bench faults``).

Each fault takes the clean readings of a run in arrival order (a list of
:class:`~mbde_core.types.Measurement`, as a bag yields them) and returns an
:class:`Injected`: the faulty readings in their (possibly disturbed) arrival order, the
true time at which the fault ends (``resume``: data resumes, the burst or the stuck
period is over; None for faults that last the whole run or never end) and the map from
the stamps the estimator sees back to the true time (``to_true``: clock faults shift or
stretch the stamps while the mechanism moves on). Value faults (outliers, bursts, stuck,
bias, NaN) hit one sensor, the *target* (the first of the scenario); clock and transport
faults (duplicates, jumps, gaps, future stamps, dropouts, drift) hit every sensor, as a
faulty clock or driver would. Every random choice comes from the seeded generator
passed in.

Magnitudes are in units of the target's noise standard deviation sigma (its noise model,
the value an estimator assumes by default). Times are fractions of the run so that every
scenario, whatever its length, sees the same fault pattern:

================  ==========================================================================
clean             the readings as recorded
nan_inf           10 NaN and 10 Inf values, evenly spread (the issue's first row)
late              every 10th reading arrives after the next one (arrival order only)
outliers          a 100-sigma outlier (random sign) every 50 readings of the target
bursts            3 bursts of 10 consecutive 100-sigma outliers (at 25, 50, 75 % of the run)
duplicate_stamps  20 random readings carry the stamp of the previous one of their sensor
backward_jump     the stamps of every reading jump back 2 s at 50 % of the run (the clock steps)
bag_loop          at 60 % of the run the recording starts again (stamps and motion)
gap               no reading for 2 s from 40 % of the run on (earlier if < 1 s would follow)
future_stamps     10 random readings stamped 5 s or 1000 s ahead (alternately)
stuck             the target repeats one value for 1 s from 40 % of the run on
bias_step         the target's readings are offset by 10 sigma from 40 % of the run on
dropout_10        10 % of the readings lost (independently)
dropout_50        50 % of the readings lost
clock_drift       the stamps run 1 % fast (stamp = t0 + 1.01 (t - t0))
================  ==========================================================================
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from mbde_core.types import Measurement

JUMP = 2.0          # s, backward stamp jump
GAP = 2.0           # s, gap length
AFTER_GAP = 1.0     # s, data the gap leaves after it (and before it) at least
FAULT_AT = 0.4      # fraction of the run where one-off faults start
PERIOD_SLACK = 0.05  # s, a run's last reading lies up to one sensor period before its end (gap_start)
OUTLIER = 100.0     # sigma
DRIFT = 0.01        # relative clock rate error


@dataclass
class Injected:
    """Faulty readings and how to score them (see the module docstring)."""

    measurements: list
    resume: float | None = None
    to_true: Callable[[np.ndarray], np.ndarray] | None = None
    notes: dict = field(default_factory=dict)
    after_jump: bool = False  # recovery counts only the estimates after the output's first jump back

    def true_times(self, stamps) -> np.ndarray:
        """True times (K,) of estimates emitted at ``stamps`` (K,), in emission order."""
        stamps = np.asarray(stamps, dtype=float)
        return stamps.copy() if self.to_true is None else self.to_true(stamps)


@dataclass
class Context:
    """What a fault needs to know: the target sensor, the noise sigma of every sensor
    ((d,) per name), the run's first and last stamps and a seeded generator."""

    target: str
    sigma: dict
    start: float
    end: float
    rng: np.random.Generator

    def at(self, fraction: float) -> float:
        return self.start + fraction * (self.end - self.start)


def _target_indices(ms, ctx) -> np.ndarray:
    return np.array([i for i, m in enumerate(ms) if m.sensor == ctx.target], dtype=int)


def _with_value(m: Measurement, value) -> Measurement:
    return Measurement(m.stamp, m.sensor, np.asarray(value, dtype=float))


def clean(ms, ctx) -> Injected:
    return Injected(list(ms))


def nan_inf(ms, ctx) -> Injected:
    out = list(ms)
    idx = _target_indices(ms, ctx)
    pick = idx[np.linspace(0, len(idx) - 1, 22).astype(int)[1:-1]]
    for k, i in enumerate(pick):
        bad = np.nan if k % 2 == 0 else (np.inf if k % 4 == 1 else -np.inf)
        out[i] = _with_value(out[i], np.full(np.shape(out[i].value), bad))
    return Injected(out, notes={"bad_values": len(pick)})


def late(ms, ctx) -> Injected:
    out = list(ms)
    moved = 0
    for i in range(9, len(out) - 1, 10):
        out[i], out[i + 1] = out[i + 1], out[i]
        moved += 1
    return Injected(out, notes={"late": moved})


def outliers(ms, ctx) -> Injected:
    out = list(ms)
    idx = _target_indices(ms, ctx)[49::50]
    sig = ctx.sigma[ctx.target]
    for i in idx:
        sign = np.where(ctx.rng.random(sig.shape) < 0.5, -1.0, 1.0)
        out[i] = _with_value(out[i], out[i].value + OUTLIER * sig * sign)
    return Injected(out, notes={"outliers": len(idx)})


def bursts(ms, ctx) -> Injected:
    out = list(ms)
    idx = _target_indices(ms, ctx)
    sig = ctx.sigma[ctx.target]
    hit = 0
    last_end = None
    for frac in (0.25, 0.5, 0.75):
        k0 = int(np.searchsorted([ms[i].stamp for i in idx], ctx.at(frac)))
        sign = np.where(ctx.rng.random(sig.shape) < 0.5, -1.0, 1.0)
        for i in idx[k0 : k0 + 10]:
            out[i] = _with_value(out[i], out[i].value + OUTLIER * sig * sign)
            hit += 1
            last_end = ms[i].stamp
    return Injected(out, resume=last_end, notes={"outliers": hit})


def duplicate_stamps(ms, ctx) -> Injected:
    out = list(ms)
    last = {}
    prev_of = {}
    for i, m in enumerate(ms):
        prev_of[i] = last.get(m.sensor)
        last[m.sensor] = i
    cand = [i for i in range(len(ms)) if prev_of[i] is not None]
    pick = np.sort(ctx.rng.choice(cand, size=min(20, len(cand)), replace=False))
    for i in pick:
        out[i] = Measurement(ms[prev_of[i]].stamp, ms[i].sensor, ms[i].value)
    return Injected(out, notes={"duplicates": len(pick)})


def backward_jump(ms, ctx) -> Injected:
    t_jump = ctx.at(0.5)
    out = [m if m.stamp < t_jump else Measurement(m.stamp - JUMP, m.sensor, m.value) for m in ms]

    def to_true(stamps):
        """Estimates after the first backward step of the output are JUMP behind."""
        s = np.asarray(stamps, dtype=float)
        back = np.flatnonzero(np.diff(s) < -0.5 * JUMP)
        t = s.copy()
        if back.size:
            t[back[0] + 1 :] += JUMP
        return t

    first = next((m.stamp for m in ms if m.stamp >= t_jump), None)
    return Injected(out, resume=first, to_true=to_true, notes={"jump": JUMP})


def bag_loop(ms, ctx) -> Injected:
    """The recording plays again from its start at 60 % of the run (``ros2 bag play --loop``):
    stamps and motion restart together."""
    again = [m for m in ms if m.stamp < ctx.at(0.4)]
    return Injected(list(ms[: int(0.6 * len(ms))]) + again, resume=ctx.start, after_jump=True,
                    notes={"loop_at": 0.6})


def gap(ms, ctx) -> Injected:
    a = gap_start(ctx)
    out = [m for m in ms if not a <= m.stamp < a + GAP]
    first = next((m.stamp for m in ms if m.stamp >= a + GAP), None)
    return Injected(out, resume=first, notes={"gap": GAP})


def gap_start(ctx) -> float:
    """When the gap begins: at ``FAULT_AT`` of the run, moved earlier where that would leave
    less than ``AFTER_GAP`` of data after it (the target is re-convergence within 1 s after
    the data resumes, which a shorter remainder cannot show: the 4 s rig scenarios had
    0.4 s), but not into the first ``AFTER_GAP`` (a particle filter's acquisition from the
    uniform prior). Runs too short for both keep ``FAULT_AT``. From 5 s on (the bench's
    default length) this is ``FAULT_AT`` of the run.

    A recording of length L has its last reading one sensor period before L (the 4 s rig
    bags: at 3.996 s, gyroscope every 6 ms), so the lengths are compared within
    ``PERIOD_SLACK``: without it those bags counted as too short and kept the gap at
    1.6-3.6 s (0.4 s after it); now 0.996-2.996 s."""
    a, late = ctx.at(FAULT_AT), ctx.end - GAP - AFTER_GAP
    if late < ctx.start + AFTER_GAP - PERIOD_SLACK:
        return a
    return min(max(a, ctx.start + AFTER_GAP), late)


def future_stamps(ms, ctx) -> Injected:
    out = list(ms)
    pick = np.sort(ctx.rng.choice(np.arange(1, len(ms) - 1), size=min(10, max(len(ms) - 2, 0)), replace=False))
    for k, i in enumerate(pick):
        ahead = 5.0 if k % 2 == 0 else 1000.0
        out[i] = Measurement(ms[i].stamp + ahead, ms[i].sensor, ms[i].value)
    return Injected(out, notes={"future": len(pick)})


def stuck(ms, ctx) -> Injected:
    a = ctx.at(FAULT_AT)
    out = list(ms)
    held = None
    end = None
    for i in _target_indices(ms, ctx):
        if a <= ms[i].stamp < a + 1.0:
            if held is None:
                held = ms[i].value
            out[i] = _with_value(ms[i], held)
            end = ms[i].stamp
    return Injected(out, resume=end, notes={"stuck_s": 1.0})


def bias_step(ms, ctx) -> Injected:
    a = ctx.at(FAULT_AT)
    sig = ctx.sigma[ctx.target]
    out = [_with_value(m, m.value + 10.0 * sig) if (m.sensor == ctx.target and m.stamp >= a) else m for m in ms]
    return Injected(out, notes={"bias_sigma": 10.0})


def _dropout(fraction):
    def fault(ms, ctx) -> Injected:
        keep = ctx.rng.random(len(ms)) >= fraction
        return Injected([m for m, k in zip(ms, keep) if k], notes={"dropped": int((~keep).sum())})

    fault.__name__ = f"dropout_{int(round(100 * fraction))}"
    return fault


def clock_drift(ms, ctx) -> Injected:
    t0 = ctx.start
    out = [Measurement(t0 + (1.0 + DRIFT) * (m.stamp - t0), m.sensor, m.value) for m in ms]

    def to_true(stamps):
        return t0 + (np.asarray(stamps, dtype=float) - t0) / (1.0 + DRIFT)

    return Injected(out, to_true=to_true, notes={"drift": DRIFT})


FAULTS = {f.__name__: f for f in (clean, nan_inf, late, outliers, bursts, duplicate_stamps, backward_jump, bag_loop, gap,
                                  future_stamps, stuck, bias_step, _dropout(0.1), _dropout(0.5), clock_drift)}
FAULT_NAMES = tuple(FAULTS)


def inject(name: str, ms, target: str, sigma: dict, seed: int = 0) -> Injected:
    """Apply fault ``name`` to the readings ``ms`` (arrival order) with ``target`` the
    sensor hit by value faults; sigma: sensor name -> (d,) noise standard deviation."""
    if name not in FAULTS:
        raise KeyError(f"unknown fault {name!r} (choose from {', '.join(FAULT_NAMES)})")
    stamps = [m.stamp for m in ms]
    ctx = Context(target, {k: np.asarray(v, float) for k, v in sigma.items()}, min(stamps), max(stamps),
                  np.random.default_rng(seed))
    return FAULTS[name](list(ms), ctx)
