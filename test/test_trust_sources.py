"""The trust verdict's particle-filter and smoother sources (estimators.stage.trust): a
PF's effective sample size and the source of a restart (its lock detector, a collapse) in
the reason, and the batch smoother's goodness of fit as the verdict of its steps."""
from __future__ import annotations

import types

import numpy as np

from conftest import run_mbde
from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.stage.trust import ACQUIRE, DEGRADED, ESS_DEGRADED, LOST, OK, WINDOW, TrustMonitor, fit_verdict

DT = 0.005


class _PF:
    """The attributes of a particle filter the monitor reads."""

    def __init__(self, n=1000):
        self.N, self.ess_before = n, float(n)
        self.recovery_reasons = {"likelihood": 0, "ess": 0, "lock": 0}


def _stage(est):
    return types.SimpleNamespace(est=est, counters=types.SimpleNamespace(reacquisitions=0, multistarts=0, diverged=0))


def _estimate(t):
    return types.SimpleNamespace(stamp=t, branch_probabilities=None)


def test_degenerate_weights_are_degraded_and_a_lock_names_itself():
    rng = np.random.default_rng(4)
    pf = _PF()
    stage, mon, out = _stage(pf), TrustMonitor(), []
    for k in range(1200):
        t = k * DT
        pf.ess_before = pf.N * (0.02 if 2.0 <= t < 3.0 else rng.uniform(0.3, 0.9))
        if k == 800:  # the lock detector fires at 4 s
            pf.recovery_reasons["lock"] += 1
        out.append((t, mon.observe(stage, _estimate(t), UpdateResult(["gyro"], [], float(rng.chisquare(1)), 1))))
    ok = [v for t, v in out if ACQUIRE <= t < 2.0 or 3.0 + WINDOW <= t < 4.0 or t >= 4.0 + WINDOW]
    assert np.mean([v.level == OK for v in ok]) >= 0.97
    degenerate = [v for t, v in out if 2.0 + 0.6 * WINDOW <= t < 3.0]
    assert all(v.level == DEGRADED and v.code == "ess" for v in degenerate)
    assert "effective sample size 0.02" in degenerate[-1].reason and f"below {ESS_DEGRADED:g}" in degenerate[-1].reason
    locked = [v for t, v in out if 4.0 <= t < 4.0 + WINDOW - DT]
    assert all(v.level == DEGRADED and "lock detector fired" in v.reason for v in locked)


def test_smoother_fit_verdict():
    assert fit_verdict({"status": "converged", "warnings": [], "fit": {"normalised_cost": 1.02}}).level == OK
    poor = fit_verdict({"status": "poor fit", "warnings": ["normalised cost 7.1 outside [0.5, 2]: ..."]})
    assert poor.level == DEGRADED and poor.reason.startswith("poor fit: normalised cost 7.1")
    assert fit_verdict({"status": "not converged", "warnings": []}).level == LOST


def test_mbde_smooth_steps_carry_the_fit_verdict(tmp_path):
    import json

    assert run_mbde("simulate", "config/scenarios/fourbar_encoder.yaml", "--out", tmp_path / "bag",
                    "--set", "duration=1").returncode == 0
    proc = run_mbde("smooth", tmp_path / "bag", "--out", tmp_path / "s", "--no-plots")
    assert proc.returncode == 0, proc.stderr
    m = json.loads((tmp_path / "s" / "metrics.json").read_text())
    trust = next(iter(m["estimators"].values()))["metrics"]["trust"]
    assert trust["fraction"]["OK"] == 1.0 and trust["final"]["reason"].startswith("the smoother's solution fits")
