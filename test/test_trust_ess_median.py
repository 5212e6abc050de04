"""The trust verdict's effective-sample-size statistic (estimators.stage.trust): the window's
median is read only when at least half the window is below ESS_DEGRADED, and the verdict is
the one the median over the whole window gives at every step (ESS hovering at the bound, odd
and even window lengths, a 1 kHz filter's long window)."""
from __future__ import annotations

import types

import numpy as np
import pytest

from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.stage.trust import ESS_DEGRADED, MIN_READINGS, WINDOW, TrustMonitor


def _stage(est):
    return types.SimpleNamespace(est=est, counters=types.SimpleNamespace(reacquisitions=0, multistarts=0, diverged=0))


@pytest.mark.parametrize("dt,seed", [(0.005, 1), (0.001, 2), (0.003, 3)])
def test_ess_verdict_is_the_window_median(dt, seed):
    rng = np.random.default_rng(seed)
    pf = types.SimpleNamespace(N=1000, ess_before=1000.0, recovery_reasons={})
    stage, mon, seen, checked = _stage(pf), TrustMonitor(), [], 0
    for k in range(int(4.0 / dt)):
        t = k * dt
        # around the bound: long runs below and above it, and stretches mixing both
        centre = ESS_DEGRADED * (1.0 + 0.6 * np.sin(2 * np.pi * t / 1.3))
        pf.ess_before = pf.N * max(centre * rng.uniform(0.7, 1.3), 0.0)
        seen.append((t, pf.ess_before / pf.N))
        v = mon.observe(stage, types.SimpleNamespace(stamp=t, branch_probabilities=None), UpdateResult(["gyro"], [], 1.0, 1))
        window = [f for s, f in seen if s > t - WINDOW]
        if len(window) < MIN_READINGS:
            continue
        med = float(np.median(window))
        assert (v.code == "ess") == (med < ESS_DEGRADED), (t, med, v.code)
        if v.code == "ess":
            assert v.ratio == med
        checked += 1
    assert checked > 0.9 * int(4.0 / dt)
