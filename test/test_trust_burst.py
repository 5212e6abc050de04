"""The trust verdict's burst test (estimators.stage.trust_faults, the CUSUM of the squared
normalised innovations): innovations of a few sigma of alternating sign after a bias step
(a filter with a gain near one following the step and overshooting: pendulum_release's
1 kHz encoder read 3.5, 4.2, -4.6 sigma, then white ones) make a trusted estimate LOST,
naming the channel; the signed CUSUM alone sums to 2.7 there. Consistent innovations never
trip it (test_trust_faults.test_consistent_innovations_never_step runs both tests)."""
import numpy as np

import mbde_core.estimators.stage.trust_faults as tf
from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.stage.trust import LOST, OK, TrustMonitor
from mbde_core.estimators.stage.trust_faults import BURST_ALARM, BURST_DRIFT, StepDetector

DT = 0.005


def _feed(mon, es, t0=0.0):
    out = []
    for k, e in enumerate(es):
        res = UpdateResult(["enc"], [], float(e) ** 2, 1, normalized_innovation=np.array([float(e)]))
        out.append((t0 + k * DT, mon.step(t0 + k * DT, res)))
    return out


def test_an_overshooting_burst_is_lost():
    rng = np.random.default_rng(5)
    mon = TrustMonitor()
    out = _feed(mon, rng.normal(scale=0.5, size=400))
    assert out[-1][1].level == OK
    es = rng.normal(scale=0.5, size=400)
    es[:3] = [3.5, 4.2, -4.6]
    out = _feed(mon, es, t0=2.0)
    lost = [k for k, (t, v) in enumerate(out) if v.level == LOST]
    assert lost and lost[0] == 2
    assert "readings of enc[0] jumped: 3 innovations of 4.13 sigma (rms) at 2.010 s" in out[2][1].reason
    assert all(v.level == LOST for t, v in out[2:])


def test_the_signed_cusum_alone_misses_that_burst():
    """The pendulum's innovations with the burst test switched off (its drift above any
    square): no alarm, so the burst test is what catches it."""
    det = StepDetector()
    old = tf.BURST_DRIFT
    tf.BURST_DRIFT = 1e9
    try:
        for k, e in enumerate([0.3, -0.5, 3.5, 4.2, -4.6, -2.6, -1.9, 0.7]):
            det.observe(k * DT, ("enc",), [e], True)
    finally:
        tf.BURST_DRIFT = old
    assert det.last is None
    assert 3.5 ** 2 + 4.2 ** 2 + 4.6 ** 2 - 3 * BURST_DRIFT > BURST_ALARM
