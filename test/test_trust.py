"""The trust verdict from the readings alone (estimators.stage.trust), checked on cases it
did not produce: chi-square innovations of a consistent estimator, a loss and a recovery,
and a real run started far from the truth."""
import dataclasses
import os

import numpy as np
import pytest

from conftest import REPO, run_mbde
from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.stage.trust import ACQUIRE, DEGRADED, LOST, OK, RECOVER, WINDOW, TrustMonitor
from mbde_core.estimators.stage.trust_truth import TrustSummary

DT = 0.005  # s, a 200 Hz scalar sensor fused every step


def _consistent(rng):
    return UpdateResult(["enc"], [], float(rng.chisquare(1)), 1)


def test_consistent_innovations_are_ok():
    """20 s of chi2(1) NIS (a consistent estimator): DEGRADED (acquiring) for the first
    ACQUIRE s, then OK at >= 99 % of the steps, never LOST."""
    rng = np.random.default_rng(1)
    mon = TrustMonitor()
    verdicts = [mon.step(k * DT, _consistent(rng)) for k in range(4000)]
    first = round(ACQUIRE / DT)
    assert all(v.level == DEGRADED and v.code == "acquiring" for v in verdicts[:first])
    levels = [v.level for v in verdicts]
    assert np.mean(np.array(levels[first:]) == OK) >= 0.99
    assert LOST not in levels


def test_a_loss_is_lost_at_once_and_a_recovery_ok_a_window_later():
    """Readings rejected by the gate from 5 s to 6 s (the estimate far off): LOST at the
    fifth in a row; consistent again from 6 s: still LOST while the rejections are in the
    window, DEGRADED (recovering) for RECOVER s after the last LOST, then OK."""
    rng = np.random.default_rng(2)
    mon = TrustMonitor()
    out = []
    for k in range(3000):
        t = k * DT
        u = UpdateResult([], ["enc"]) if 5.0 <= t < 6.0 else _consistent(rng)
        out.append((t, mon.step(t, u)))
    lost = [t for t, v in out if v.level == LOST]
    assert lost[0] == pytest.approx(5.0 + 4 * DT, abs=1e-9)  # s: the fifth rejected reading
    assert "rejected by the gate" in [v for t, v in out if t == lost[0]][0].reason
    end = max(t for t, v in out if v.level == LOST)
    assert all(v.code == "still_lost" for t, v in out if 6.0 <= t <= end) and 6.0 + WINDOW <= end < 6.0 + 1.5 * WINDOW
    assert all(v.level == DEGRADED and v.code == "recovering" for t, v in out if end < t < end + RECOVER - DT)
    assert not any(v.code == "rejected" for t, v in out if t > 6.0 + WINDOW)
    assert np.mean([v.level == OK for t, v in out if t > end + RECOVER]) >= 0.9


def test_large_accepted_innovations_are_lost_moderate_ones_degraded():
    """Without a gate: NIS 50 x its dof is LOST within 1 s; NIS 2 x its dof is DEGRADED
    (innovations 1.4 x larger than the estimator says), never LOST."""
    for scale, want in ((50.0, LOST), (2.0, DEGRADED)):
        rng = np.random.default_rng(3)
        mon = TrustMonitor()
        levels = [mon.step(k * DT, _consistent(rng)).level for k in range(400)]  # 2 s consistent
        t_bad = 400 * DT
        first = None
        for k in range(400, 800):
            v = mon.step(k * DT, UpdateResult(["enc"], [], scale * float(rng.chisquare(1)), 1))
            levels.append(v.level)
            if v.level == want and first is None:
                first = k * DT
        assert first is not None and first - t_bad <= 1.0, scale  # s
        assert max(levels) == want


def test_an_uncertain_branch_and_silence_are_degraded():
    rng = np.random.default_rng(4)
    mon = TrustMonitor()
    v = mon.step(0.0, _consistent(rng), np.array([0.55, 0.45]))
    assert v.level == DEGRADED and "branch" in v.reason
    for k in range(1, 400):
        v = mon.step(k * DT, None)
    assert v.level == DEGRADED and "no reading fused" in v.reason


def test_summary_checks_the_verdict_against_truth():
    class V:
        def __init__(self, level):
            self.level, self.reason = level, "r"

        def as_dict(self):
            return {"level": ["OK", "DEGRADED", "LOST"][self.level], "reason": self.reason}

    t = np.arange(0, 4, DT)
    lv = np.where((t >= 1.0) & (t < 2.5), LOST, OK)
    off = (t >= 0.9) & (t < 2.5)  # off by > 10 sigma from 0.9 s, LOST from 1.0 s
    s = TrustSummary()
    s.add(t, [V(x) for x in lv], within3=~off, off10=off)
    r = s.result()
    assert r["fraction"]["LOST"] == pytest.approx(1.5 / 4, abs=0.01)
    assert r["first_lost_after"] == pytest.approx(1.0, abs=1e-9)
    assert r["vs_truth"]["ok_steps_within_3_sigma"] == pytest.approx(1 - 0.1 / 2.5, abs=0.01)
    assert r["vs_truth"]["off_10_sigma_steps_lost"] == 1.0
    assert r["vs_truth"]["lost_delay_max"] == pytest.approx(0.1, abs=1e-9)
    assert r["worst"]["level"] == "LOST" and r["worst"]["duration"] == pytest.approx(1.5, abs=1e-9)


@pytest.fixture(scope="module")
def offset_bag(tmp_path_factory):
    out = tmp_path_factory.mktemp("trust") / "bag"
    proc = run_mbde("simulate", os.path.join(REPO, "config", "scenarios", "fourbar_encoder.yaml"), "--out", out,
                    "--set", "duration=3", "--set", "model_errors.initial_position.theta=1.0")
    assert proc.returncode == 0, proc.stderr
    return out


def test_a_filter_started_far_off_is_lost_then_ok(offset_bag):
    """The UKF started 1 rad (20 of its sigmas) from the truth with an encoder: LOST within
    1 s, OK again at the end, and while OK the error is within 3 sigma at >= 95 % of the steps;
    from the right start it is never LOST."""
    from mbde_core.estimators.configure import defaults
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.runner import evaluate, run_estimator

    inputs = load_inputs(str(offset_bag))
    run = run_estimator(inputs, "ukf", defaults("ukf"), seed=0)
    trust = evaluate(inputs, run)["trust"]
    assert trust["first_lost_after"] is not None and trust["first_lost_after"] <= 1.0  # s
    assert trust["final"]["level"] == "OK"
    assert trust["vs_truth"]["ok_steps_within_3_sigma"] >= 0.95
    right = dataclasses.replace(inputs, initial_z=np.array(inputs.truth.z[0], float),
                                initial_q=np.array(inputs.truth.q[0], float))  # same geometry: gravity error only
    run = run_estimator(right, "ukf", defaults("ukf"), seed=0)
    trust = evaluate(right, run)["trust"]
    assert trust["first_lost_after"] is None and trust["fraction"]["OK"] >= 0.9 * (1 - ACQUIRE / 3.0)  # 3 s run


def test_a_restart_of_the_track_is_degraded_for_a_window():
    rng = np.random.default_rng(5)
    mon = TrustMonitor()
    levels = []
    for k in range(800):
        t = k * DT
        v = mon.step(t, _consistent(rng), None, 0 if t < 1.0 else 1)  # one re-acquisition at 1 s
        levels.append((t, v))
    assert all(v.level == DEGRADED and "restarted" in v.reason for t, v in levels if 1.0 <= t < 1.0 + WINDOW - DT)
    assert np.mean([v.level == OK for t, v in levels if t >= 1.0 + WINDOW]) >= 0.95


def test_biased_innovations_are_degraded_then_lost():
    """Innovations of the right size but one sign (an estimate on a wrong state that keeps
    correcting the same way, NIS near 1.3): a bias of 0.5 sigma is DEGRADED and LOST within
    1 s; white innovations around the same NIS are not biased."""
    rng = np.random.default_rng(6)
    mon = TrustMonitor()
    first = {}
    for k in range(400):
        t = k * DT
        x = 0.5 + rng.standard_normal()
        v = mon.step(t, UpdateResult(["gyro"], [], x * x, 1, np.array([x]), np.array([x])))
        first.setdefault(v.level, t)
    assert first[DEGRADED] < first[LOST] <= 1.0  # s
    assert "biased" in v.reason and "gyro" in v.reason
    mon = TrustMonitor()
    levels = []
    for k in range(4000):
        x = 1.15 * rng.standard_normal()
        levels.append(mon.step(k * DT, UpdateResult(["gyro"], [], x * x, 1, np.array([x]), np.array([x]))))
    assert not any(v.code == "bias" for v in levels)
