"""The particle filter's per-particle numpy passes on the propagation's threads
(:func:`mbde_core.engine.thread_pools.rows`): the readings' predictions and noise Jacobians
(:func:`likelihood.predict_at_state`), the columns of R and the velocity impulse
(:mod:`.proposal`), the branch check and the regularisation's moves (:mod:`.resampling`).
Each is checked against the one-range numpy code it splits, and whole filter runs against
one thread on linkages with 1, 2 and 3 DOF (gyroscopes; an IMU, whose accelerometers
read qdd): bit-identical particles, weights and estimates."""
import os

import numpy as np
import pytest

from conftest import REPO
from mbde_bench.common import TruthRecord
from mbde_core.engine import thread_pools
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults
from mbde_core.estimators.particle import likelihood, normals, proposal
from mbde_core.scenario import load_scenario

pytestmark = pytest.mark.usefixtures("split_at_any_size")  # thread ranges split at any size (conftest)


CASES = [  # (scenario, DOF)
    (os.path.join(REPO, "config", "scenarios", "pf_sim.yaml"), 1),
    (os.path.join(REPO, "config", "bench", "pf_acquisition", "double_pendulum_imu.yaml"), 2),
    (os.path.join(REPO, "config", "bench", "pf_multidof", "sixbar_loop3_gyro.yaml"), 3),
]


def test_rows_covers_the_set_once_and_raises_a_ranges_error():
    seen = np.zeros(10000, dtype=int)

    def mark(lo, hi):
        seen[lo:hi] += 1

    thread_pools.rows(mark, 10000, 2)
    assert (seen == 1).all()
    calls = []
    thread_pools.rows(lambda lo, hi: calls.append((lo, hi)), 100, 2)  # below ROWS_MIN: one range
    assert calls == [(0, 100)]

    def fail(lo, hi):
        if lo > 0:
            raise ValueError("second range")

    with pytest.raises(ValueError, match="second range"):
        thread_pools.rows(fail, 10000, 2)


def _filter(path, threads, N, steps, seed=3):
    sc = load_scenario(path)
    truth = TruthRecord(sc, 0.01 * (steps + 2))
    meas = truth.measurements(sc.sensors, 0.005, seed=2)
    stamps = sorted({m.stamp for m in meas})
    init = sc.estimator_initial_state()
    g = len(np.atleast_1d(init.z))
    cfg = defaults("pf")
    cfg.update(init="gaussian", particles=N, threads=threads)
    cfg["uniform"]["particles"] = 0
    est = make_estimator("pf", sc.estimator_mechanism(), sc.estimator_sensors(), cfg, rng=np.random.default_rng(seed))
    est.reset(stamps[0], InitialState(init.z, init.zd, np.full(g, 0.05), np.full(g, 0.5), init.q, init.branch))
    est.update([m for m in meas if m.stamp == stamps[0]])
    return est, meas, stamps


@pytest.mark.parametrize("path,g", CASES)
def test_threaded_passes_equal_the_one_range_numpy_code(path, g):
    """After a few steps (the readings' noise pending): predictions and noise Jacobians of
    every sensor, R's columns and the impulse, split over two threads, against one range."""
    est, meas, stamps = _filter(path, 2, 9000, 3)
    for t in stamps[1:4]:
        est.predict(0.005)
        est.update([m for m in meas if m.stamp == t])
    est.predict(0.005)
    assert est.g == g and est._pending and est.propagator.threads == 2
    rc2 = proposal.r_columns(est.mech, est.q, est._aux, threads=2)
    rc1 = proposal.r_columns(est.mech, est.q, est._aux, threads=1)
    assert est._aux is not None and np.array_equal(rc1, rc2)
    np.testing.assert_allclose(rc1, proposal.r_columns(est.mech, est.q), rtol=1e-9, atol=1e-9)  # the engine's R
    for s in est.sensors:
        qdd = likelihood.accelerations(est) if s.uses_qdd else est.qdd
        pred, G = likelihood.predict_at_state(est, s, qdd, True)
        ref = s.h_many(est.q, [(est.qd, qdd)], {})[0]
        np.testing.assert_allclose(pred, ref, rtol=1e-12, atol=1e-12)  # rad/s, m/s^2 to rounding
        Gref = proposal.noise_jacobian(s, est.q, est.qd, qdd, rc1, est._pending, ref, {})
        assert G.shape == (est.N, s.dim, g)
        np.testing.assert_allclose(G, Gref, rtol=1e-10, atol=1e-12)
    v = np.random.default_rng(1).standard_normal((est.N, g))
    got = proposal.impulse_velocities(est.qd, rc1, 0.005 * v, 2)
    np.testing.assert_allclose(got, est.qd + proposal.velocity_impulse(rc1, 0.005 * v), rtol=0, atol=1e-15)
    assert got.flags.f_contiguous == est.qd.flags.f_contiguous  # the layout the next step takes as is


@pytest.mark.parametrize("path,g", CASES)
def test_one_and_two_threads_give_bit_identical_runs(path, g):
    """Whole filter steps (propagation, update, resampling with regularisation, estimate)."""
    out = []
    for threads in (1, 2):
        est, meas, stamps = _filter(path, threads, 8000, 12)
        for t in stamps[1:12]:
            est.predict(0.005)
            est.update([m for m in meas if m.stamp == t])
        e = est.estimate()
        assert est.counts["resamples"] >= 1 and est.counts["regularised"] > 0
        out.append((est.q.copy(), est.qd.copy(), est.logw.copy(), e.z, e.zd))
    for a, b in zip(*out):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("g", [1, 2, 3])
def test_prefetched_normals_are_the_streams_own(g):
    """normals.Ahead prefetch / take: the numbers and the generator's state afterwards equal
    a plain draw's, taken right away, after a second prefetch, or after another draw from
    the generator in between (then drawn afresh); a draw below MIN_NORMALS is not prefetched."""
    N = normals.MIN_NORMALS
    ref = np.random.default_rng(9)
    a = ref.standard_normal(N)[:, None] if g == 1 else ref.standard_normal((N, g))
    b = ref.random(7)
    c = ref.standard_normal((N, g))
    d = ref.standard_normal((100, g))
    rng, ahead = np.random.default_rng(9), normals.Ahead()
    ahead.prefetch(rng, N * g)
    ahead.prefetch(rng, N * g)  # again before a take: the same numbers
    assert ahead._fut is not None
    assert np.array_equal(ahead.take(rng, N, g), a)
    ahead.prefetch(rng, N * g)
    assert np.array_equal(rng.random(7), b)  # a draw in between: the prefetch is not used
    assert np.array_equal(ahead.take(rng, N, g), c)
    ahead.prefetch(rng, 100 * g)
    assert ahead._fut is None  # below the break-even: drawn when taken
    assert np.array_equal(normals.take(ahead, rng, 100, g), d)
    assert rng.bit_generator.state == ref.bit_generator.state
