"""The trust verdict's sensor-fault rules (estimators.stage.trust_faults) on synthetic
sequences: a step in a channel's innovations is LOST from its first readings and stays
LOST after the estimate absorbed it, until the channel steps back; consistent innovations
never trip it; a stuck channel (identical readings while the estimate predicts motion) is
DEGRADED with the channel named, an encoder at rest is not; a particle filter's published
follower is judged by its own monitor."""
from types import SimpleNamespace

import numpy as np

from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.stage.trust import DEGRADED, LOST, OK, TrustMonitor
from mbde_core.estimators.stage.trust_faults import STEP_DEGRADED, STEP_LOST, STUCK_HOLD, STUCK_N, StepDetector
from mbde_core.types import Measurement
from scalar_sensor import ScalarSensor

DT = 0.005  # s, a 200 Hz scalar sensor fused every step


def _res(e):
    return UpdateResult(["enc"], [], e * e, 1, normalized_innovation=np.array([e]))


def _feed(mon, es, t0=0.0):
    return [(t0 + k * DT, mon.step(t0 + k * DT, _res(float(e)))) for k, e in enumerate(es)]


def _absorbed(size, n=12):
    """The innovations of a step of ``size`` sigma that the estimate absorbs (30 % per reading)."""
    return size * 0.7 ** np.arange(n)


def test_consistent_innovations_never_step():
    """20 runs x 20 s of N(0, 1) innovations (80 000 readings): no alarm."""
    for seed in range(20):
        det = StepDetector()
        for k, e in enumerate(np.random.default_rng(seed).normal(size=4000)):
            det.observe(k * DT, ("enc",), [e], True)
        assert det.last is None


def test_a_step_in_the_innovations_is_lost_then_degraded():
    """2 s consistent (OK), a +10 sigma step absorbed within a few readings, then
    consistent innovations (the sliding window alone is OK again within 1.5 s): LOST
    within 2 readings of the step and for STEP_LOST s, naming the channel (the squared
    innovations' CUSUM alarms at the first one, 8.7 sigma),
    then DEGRADED for STEP_DEGRADED s, then OK."""
    rng = np.random.default_rng(3)
    mon = TrustMonitor()
    out = _feed(mon, rng.normal(size=400))
    assert out[-1][1].level == OK
    n = round((STEP_LOST + STEP_DEGRADED + 3.0) / DT)
    es = rng.normal(size=n)
    es[:12] += _absorbed(10.0)
    out = _feed(mon, es, t0=2.0)
    lost = [k for k, (t, v) in enumerate(out) if v.level == LOST]
    assert lost[0] <= 2
    assert "readings of enc[0] jumped: 1 innovation of " in out[lost[0]][1].reason  # the squares' CUSUM first
    t_step = out[lost[0]][0]
    assert all(v.level == LOST for t, v in out if t_step <= t < t_step + STEP_LOST - DT)
    assert all(v.level == DEGRADED and v.code == "step" for t, v in out
               if t_step + STEP_LOST + DT < t < t_step + STEP_LOST + STEP_DEGRADED - DT)
    assert out[-1][1].level == OK


def test_no_step_is_armed_while_the_estimate_is_not_trusted():
    """The same step during the first 0.5 s (acquiring, DEGRADED) is no alarm."""
    rng = np.random.default_rng(4)
    mon = TrustMonitor()
    es = rng.normal(size=600)
    es[20:32] += _absorbed(10.0)
    out = _feed(mon, es)
    assert mon.jumps.last is None
    assert out[-1][1].level == OK


def _snap(t, z, zd, sd=0.01):
    return SimpleNamespace(stamp=t, z=np.array([z]), zd=np.array([zd]), zdd=np.zeros(1), q=np.array([z]),
                           qd=np.zeros(1), qdd=np.zeros(1), cov=np.diag([sd * sd, sd * sd]), branch_probabilities=None)


def test_a_jump_after_rejections_from_trust_is_lost():
    """A trusted estimate moving at 1 rad/s (sigma 0.01 rad) whose readings are then
    rejected for 6 steps (a 10-sigma step) and which then jumps by 0.2 rad over 4 steps
    (20 sigma: it follows the shifted sensor) is LOST from the jump on, and still LOST
    after the window agrees again; the same motion without the jump ends OK."""
    for jump, expect in ((0.2, LOST), (0.0, OK)):
        mon, stage, rng = TrustMonitor(), _Stage(ScalarSensor()), np.random.default_rng(2)
        for k in range(700):
            t = k * DT
            z = t + (jump * min(max(k - 406, 0), 4) / 4)
            res = UpdateResult([], ["enc"]) if 400 <= k < 406 else _res(float(rng.normal()))
            v = mon.observe(stage, _snap(t, z, 1.0), res)
        assert v.level == expect, v.reason
        if expect == LOST:
            assert v.code == "step" and "jumped" in v.reason




class _Stage:
    def __init__(self, sensor):
        self.counters = SimpleNamespace(reacquisitions=0, multistarts=0, diverged=0)
        self.est = SimpleNamespace(sensors={"enc": sensor})


def _stuck_run(sensor, speed, value=lambda t: 0.3):
    """2 s of a sensor reading ``value`` (stuck from 1 s on: the reading of 1 s repeated)
    while the estimate's coordinate moves at ``speed``; the verdicts."""
    stage, mon, out = _Stage(sensor), TrustMonitor(), []
    rng = np.random.default_rng(0)
    for k in range(400):
        t = k * DT
        q = np.array([0.3 + speed * t])
        v = value(min(t, 1.0)) if t >= 1.0 else value(t) + float(rng.normal(0.0, 1e-3))
        est = SimpleNamespace(stamp=t, q=q, qd=np.zeros(1), qdd=np.zeros(1), branch_probabilities=None, z=q,
                              zd=np.array([speed]), zdd=np.zeros(1), cov=np.diag([1e-4, 1e-4]))
        out.append((t, mon.observe(stage, est, _res(float(rng.normal())), [Measurement(t, "enc", np.array([v]))])))
    return out


def test_a_stuck_channel_is_degraded_and_named():
    """Readings frozen from 1 s while the estimate predicts 0.5 rad/s of motion (0.0025 rad
    per reading, 0.25 sigma): DEGRADED 'stuck' once the prediction moved 3 sigma (13
    readings), naming the sensor, until the end."""
    out = _stuck_run(ScalarSensor(0.01), 0.5, value=lambda t: 0.3 + 0.5 * t)
    first = min(t for t, v in out if v.code == "stuck")
    assert 1.0 + (STUCK_N - 1) * DT - 1e-9 <= first < 1.0 + 20 * DT
    assert all(v.level == DEGRADED and v.code == "stuck" and "enc" in v.reason for t, v in out if t > first)


def test_an_encoder_at_rest_repeating_its_count_is_not_stuck():
    """A quantised encoder (step 0.0015 rad) at rest: identical counts, no predicted change: OK."""
    out = _stuck_run(ScalarSensor(0.0, 0.0015), 0.0)
    assert not any(v.code == "stuck" for t, v in out)
    assert out[-1][1].level == OK


def test_a_stuck_channel_is_held_after_it_moves_again():
    from mbde_core.estimators.stage.trust_faults import StuckReadings
    st, s = StuckReadings(), ScalarSensor(0.01)
    for k in range(20):
        est = SimpleNamespace(q=np.array([0.01 * k]), qd=np.zeros(1), qdd=np.zeros(1))
        st.observe(k * DT, [Measurement(k * DT, "enc", np.array([0.5]))], {"enc": s}, est)
    assert st.verdict(20 * DT) is not None
    assert st.verdict(19 * DT + STUCK_HOLD - DT) is not None
    assert st.verdict(19 * DT + STUCK_HOLD + DT) is None


def test_a_published_follower_is_judged_by_its_own_monitor():
    """A particle filter whose follower publishes and whose follower's monitor said
    DEGRADED: the stage's verdict is DEGRADED with the follower named, though the cloud's
    innovations are consistent; while the cloud publishes, DEGRADED; without a follower
    the cloud's verdict stands."""
    fmon = TrustMonitor()
    fmon.step(0.0, _res(0.1))  # acquiring: DEGRADED
    follower = SimpleNamespace(monitor=fmon, following=True, est=SimpleNamespace(name="ukf"))
    stage = _Stage(ScalarSensor())
    stage.est.follower = follower
    mon, rng = TrustMonitor(), np.random.default_rng(1)
    for k in range(300):
        est = SimpleNamespace(stamp=k * DT, q=np.zeros(1), qd=np.zeros(1), qdd=np.zeros(1), branch_probabilities=None)
        v = mon.observe(stage, est, _res(float(rng.normal())))
    assert v.level == DEGRADED and v.code == "follower" and "ukf" in v.reason and "acquiring" in v.reason
    follower.following = False  # the cloud publishes: DEGRADED (acquiring or dropped)
    snap = SimpleNamespace(stamp=300 * DT, q=np.zeros(1), qd=np.zeros(1), qdd=np.zeros(1), branch_probabilities=None)
    v = mon.observe(stage, snap, _res(0.2))
    assert v.level == DEGRADED and "particle cloud publishes" in v.reason
    del stage.est.follower  # no follower configured: the cloud's verdict stands
    snap.stamp = 301 * DT
    assert mon.observe(stage, snap, _res(0.2)).level == OK
