"""The trust verdict's rules added for absorbed steps and frozen readings
(estimators.stage.trust_faults) on synthetic sequences: a trusted estimate that the gate
rejects a reading of and that then moves many sigma of its covariance before the
rejection is LOST, a small move or the same move without a rejection is not; a channel
whose noise makes a run of identical readings improbable is stuck though the estimate
follows it, a coarse noiseless encoder repeating its count is not."""
from types import SimpleNamespace

import numpy as np

from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.stage.trust import DEGRADED, LOST, OK, TrustMonitor
from mbde_core.estimators.stage.trust_faults import JUMP_ANCHORED, P_REPEAT, STUCK_N, repeat_probability
from mbde_core.sensors.base import NoiseModel
from mbde_core.types import Measurement
from scalar_sensor import ScalarSensor

DT = 0.02  # s: a 50 Hz encoder, one reading per step
SD = 0.001  # rad: the estimate's sigma of z while trusted




def _stage(sensor=None):
    return SimpleNamespace(counters=SimpleNamespace(reacquisitions=0, multistarts=0, diverged=0),
                           est=SimpleNamespace(sensors={"enc": sensor or ScalarSensor(0.001)}))


def _snap(t, z, sd=SD, zd=1.0):
    return SimpleNamespace(stamp=t, z=np.array([z]), zd=np.array([zd]), zdd=np.zeros(1), q=np.array([z]),
                           qd=np.zeros(1), qdd=np.zeros(1), cov=np.diag([sd * sd, 0.01]), branch_probabilities=None)


def _ok(e):
    return UpdateResult(["enc"], [], e * e, 1, normalized_innovation=np.array([e]))


def _run(jump, reject=True, n=150):
    """A trusted estimate moving at 1 rad/s; at step 100 the gate rejects one reading (its
    covariance widened 2.4x, as the gate's re-acquisition does), at step 101 the estimate
    moves by ``jump`` [sigma of SD] beyond its extrapolation and stays there; the verdicts."""
    mon, stage, rng, out = TrustMonitor(), _stage(), np.random.default_rng(5), []
    for k in range(n):
        t = k * DT
        z = t + (jump * SD if k > 100 else 0.0)
        sd = 2.4 * SD if k == 100 else SD
        res = UpdateResult([], ["enc"]) if (reject and k == 100) else _ok(float(rng.normal(0.0, 0.5)))
        out.append(mon.observe(stage, _snap(t, z, sd), res))
    return out


def test_a_jump_after_a_rejection_of_a_trusted_estimate_is_lost():
    out = _run(JUMP_ANCHORED + 2.0)
    assert out[99].level == OK
    assert out[101].level == LOST and out[101].code == "step"
    assert "after the gate rejected a reading" in out[101].reason
    assert all(v.level == LOST for v in out[101:])


def test_a_small_move_after_a_rejection_stays_ok():
    out = _run(JUMP_ANCHORED - 3.0)
    assert all(v.level == OK for v in out[99:])


def test_the_same_move_without_a_rejection_is_no_alarm():
    """A trusted estimate corrected by 8 sigma without a rejection (the fast crank of
    pf_sim misses its own extrapolation by that much): no alarm from this rule."""
    out = _run(JUMP_ANCHORED + 2.0, reject=False)
    assert all(v.level == OK for v in out[99:])


def _frozen(sensor, follow=True):
    """2 s of readings of ``sensor`` (noise drawn from its model) frozen from 1 s on; the
    estimate follows the frozen value (it predicts no change) or keeps moving slowly."""
    stage, mon, out, rng = _stage(sensor), TrustMonitor(), [], np.random.default_rng(0)
    sig, q = float(sensor.noise.sigma[0]), float(sensor.noise.quantization[0])
    held = None
    for k in range(100):
        t = k * DT
        zd = 0.0 if follow else 1e-4
        z = 0.3 + zd * t
        v = 0.3 + sig * float(rng.normal())
        v = q * round(v / q) if q else v
        if t >= 1.0:
            held = v if held is None else held
            v = held
        est = _snap(t, z, zd=zd)
        out.append((t, mon.observe(stage, est, _ok(float(rng.normal())), [Measurement(t, "enc", np.array([v]))])))
    return out


def test_identical_readings_that_the_noise_makes_improbable_are_stuck():
    """A gyroscope-like channel (sigma 50 x its quantisation step): frozen from 1 s while
    the estimate follows it (its prediction does not move): DEGRADED 'stuck' from the
    STUCK_N-th identical reading on, the sensor named."""
    s = ScalarSensor(0.005, 1e-4)
    assert repeat_probability(s.noise) ** (STUCK_N - 1) < P_REPEAT
    out = _frozen(s)
    first = min(t for t, v in out if v.code == "stuck")
    assert abs(first - (1.0 + (STUCK_N - 1) * DT)) < 1e-9
    assert all(v.level == DEGRADED and "enc" in v.reason and "improbable" in v.reason for t, v in out if t >= first)


def test_a_noiseless_quantised_encoder_repeating_its_count_is_not_stuck():
    s = ScalarSensor(0.0, 0.0015)
    assert repeat_probability(s.noise) == 1.0
    out = _frozen(s, follow=True)
    assert not any(v.code == "stuck" for t, v in out)
    assert out[-1][1].level == OK


def test_repeat_probability():
    """q / (2 sigma sqrt(pi)) per channel for sigma >> q, 0 without quantisation, 1
    without noise, the product over channels; checked against a simulation."""
    assert repeat_probability(NoiseModel(np.array([0.1]), np.zeros(1), np.zeros(1), np.zeros(1))) == 0.0
    two = NoiseModel(np.array([0.01, 0.02]), np.zeros(2), np.zeros(2), np.array([1e-3, 1e-3]))
    assert np.isclose(repeat_probability(two), (1e-3 / (0.02 * np.sqrt(np.pi))) * (1e-3 / (0.04 * np.sqrt(np.pi))))
    rng = np.random.default_rng(1)
    sig, q = 0.01, 1e-3
    v = 0.3 + rng.uniform(-q, q, 200000)[:, None] + sig * rng.normal(size=(200000, 2))
    same = np.mean(np.round(v[:, 0] / q) == np.round(v[:, 1] / q))
    p = repeat_probability(NoiseModel(np.array([sig]), np.zeros(1), np.zeros(1), np.array([q])))
    assert abs(same - p) < 0.1 * p
