"""The trust verdict's jump test measured in the spread of z over its span (a velocity
uncertain between readings moves the position: no false LOST), and a particle filter's
follower dropped by a sensor-fault test holding the stage's verdict LOST
(estimators.stage.trust_faults, trust_sources)."""
from types import SimpleNamespace

import numpy as np

from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.stage.trust import DEGRADED, LOST, OK, TrustMonitor, Verdict
from mbde_core.estimators.stage.trust_faults import STEP_LOST, StepDetector, spread
from mbde_core.estimators.stage.trust_sources import follower_fault

DT = 0.005


def test_spread_is_the_covariance_of_z_at_constant_velocity():
    """spread(P, g, T) against the sample covariance of z + T zd drawn from N(0, P)."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 4))
    cov = a @ a.T + 0.1 * np.eye(4)
    x = rng.multivariate_normal(np.zeros(4), cov, size=200_000)
    sample = np.cov((x[:, :2] + 0.3 * x[:, 2:]).T)
    assert np.allclose(spread(cov, 2, 0.3), sample, rtol=0.03, atol=0.03 * np.abs(sample).max())
    assert np.array_equal(spread(cov, 2, 0.0), cov[:2, :2])
    assert np.array_equal(spread(np.eye(3), 3, 0.1), np.eye(3))  # no velocity block: z's own


def _moves(sd_zd: float, step: float = 0.003) -> StepDetector:
    """An armed detector fed 12 steps (5 ms) of an estimate at 1 rad/s whose position is
    corrected by ``step`` rad per step beyond its extrapolation (sd of z 0.001 rad, of zd ``sd_zd``)."""
    det = StepDetector()
    z = 0.0
    for k in range(12):
        z += DT + (step if k >= 2 else 0.0)
        est = SimpleNamespace(z=np.array([z]), zd=np.array([1.0]), zdd=np.zeros(1),
                              cov=np.diag([1e-6, sd_zd * sd_zd]))
        det.moved(k * DT, est, np.array([True]), armed=True)
    return det


def test_a_correction_the_velocity_uncertainty_explains_is_no_jump():
    """Corrections summing to 0.03 rad in 50 ms: 30 sigma of z alone (0.001 rad) but within
    the spread of an estimate whose velocity is uncertain by 0.3 rad/s (0.015 rad over the
    span, as the slider-crank with its torque unknown between gyroscope readings); with a
    velocity known to 0.01 rad/s the same corrections are a jump."""
    assert _moves(0.3).last is None
    det = _moves(0.01)
    assert det.last is not None and "jumped" in det.last[1]


def _follower(level: int, code: str, following: bool):
    fmon = TrustMonitor()
    detail = "readings of encoder[0] jumped: 3 innovations of 4.15 sigma (rms) at 1.210 s"
    fmon.last = Verdict(level, code, detail=detail)
    return SimpleNamespace(monitor=fmon, following=following, est=SimpleNamespace(name="ukf"), counts={"seeds": 1})


def test_follower_fault_names_the_sensor_fault_that_dropped_it():
    est = SimpleNamespace(follower=_follower(LOST, "step", False))
    assert "encoder[0] jumped" in follower_fault(est) and "ukf" in follower_fault(est)
    for level, code, following in ((LOST, "step", True), (LOST, "nis", False), (DEGRADED, "step", False)):
        assert follower_fault(SimpleNamespace(follower=_follower(level, code, following))) is None
    assert follower_fault(SimpleNamespace()) is None


def test_a_follower_dropped_by_a_sensor_fault_makes_the_stage_lost():
    """A particle filter whose trusted follower publishes; its monitor's burst test then says
    LOST and the follower is dropped: the cloud publishes with consistent innovations, and the
    stage's verdict is LOST for STEP_LOST s (the cloud follows the shifted sensor), then
    DEGRADED; a follower dropped for another reason leaves the cloud DEGRADED."""
    for code, expect in (("step", LOST), ("nis", DEGRADED)):
        follower = _follower(OK, "consistent", True)
        stage = SimpleNamespace(counters=SimpleNamespace(reacquisitions=0, multistarts=0, diverged=0),
                                est=SimpleNamespace(sensors={}, follower=follower))
        mon, rng = TrustMonitor(), np.random.default_rng(1)
        res = lambda: UpdateResult(["enc"], [], 1.0, 1, normalized_innovation=np.array([rng.normal()]))  # noqa: E731
        snap = lambda k: SimpleNamespace(stamp=k * DT, q=np.zeros(1), qd=np.zeros(1), qdd=np.zeros(1),  # noqa: E731
                                         branch_probabilities=None)
        for k in range(300):
            v = mon.observe(stage, snap(k), res())
        assert v.level == OK, v.reason
        follower.monitor.last = Verdict(LOST, code, 12.0, 2.0, detail="readings of enc[0] jumped")
        follower.following = False
        v = mon.observe(stage, snap(300), res())
        assert v.level == expect, v.reason
        if expect == LOST:
            assert "dropped" in v.reason and "enc[0] jumped" in v.reason
            k_end = 300 + int(STEP_LOST / DT) + 2
            for k in range(301, k_end):
                v = mon.observe(stage, snap(k), res())
            assert v.level == DEGRADED


def _window_run(nis_sd: float, n: int = 300):
    """Verdicts of n steps of one channel whose normalised innovations are N(0, nis_sd^2)."""
    mon, rng = TrustMonitor(), np.random.default_rng(3)
    out = []
    for k in range(n):
        e = float(rng.normal(0.0, nis_sd))
        out.append(mon.step(k * DT, UpdateResult(["enc"], [], e * e, 1, normalized_innovation=np.array([e]))))
    return out


def test_an_estimate_never_consistent_for_a_second_is_lost_not_acquired():
    """Innovations 1.6x too wide from the start (mean NIS ~2.6 x dof: DEGRADED, below the
    LOST ratio): LOST "not acquired" once 1 s of readings never gave an OK verdict; the
    same innovations after an OK start stay DEGRADED; consistent ones are OK."""
    from mbde_core.estimators.stage.trust import UNACQUIRED

    out = _window_run(1.6)
    first = next(k for k, v in enumerate(out) if v.level == LOST)
    assert out[first].code == "unacquired" and "not acquired" in out[first].reason
    assert abs(first * DT - UNACQUIRED) < 2 * DT
    assert all(v.level < LOST for v in out[:first])
    assert _window_run(1.0)[-1].level == OK
    mon, rng = TrustMonitor(), np.random.default_rng(3)
    for k in range(400):
        e = float(rng.normal(0.0, 1.0 if k < 200 else 1.6))
        v = mon.step(k * DT, UpdateResult(["enc"], [], e * e, 1, normalized_innovation=np.array([e])))
    assert v.level == DEGRADED and v.code == "nis", v.reason


def test_an_acceleration_that_jumps_between_steps_is_no_jump():
    """A position integrated exactly from an acceleration switching between +-3000 rad/s^2
    every 4 steps of 2.5 ms (a held torque reading stepping at the motor's limit), its
    velocity known to 0.01 rad/s and its position to 0.001 rad: no jump; the same with a
    0.012 rad shift of z over 3 steps is one (a constant-acceleration extrapolation from
    the last step missed by 19 sigma at each switch)."""
    for shift, jumped in ((0.0, False), (0.004, True)):
        det, dt = StepDetector(), 0.0025
        z, zd = 0.0, 20.0
        for k in range(40):
            a = 3000.0 if (k // 4) % 2 else -3000.0
            z += zd * dt + 0.5 * a * dt * dt + (shift if 20 <= k < 23 else 0.0)
            zd += a * dt
            est = SimpleNamespace(z=np.array([z]), zd=np.array([zd]), zdd=np.array([a]),
                                  cov=np.diag([1e-6, 1e-4]))
            det.moved(k * dt, est, np.array([True]), armed=True)
        assert (det.last is not None) == jumped, det.last
