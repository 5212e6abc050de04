"""The PF step's serial bookkeeping: the propagator's ``ok`` excludes non-finite particles
on every backend (the filter no longer scans the arrays), and the recovery windows'
running counts and sums decide as the plain sums over the window do."""
import copy
import pickle

import numpy as np
import pytest

from conftest import random_states
from mbde_core.engine.integrators import RK4
from mbde_core.estimators.particle.propagate import Propagator
from mbde_core.estimators.particle.recovery import LockDetector, LostDetector


def _broken(m, N=32):
    """N assembled states, particle 3 with a NaN velocity, particle 7 pushed by an infinite
    acceleration, particle 11 with an infinite position."""
    q, qd = random_states(m, N, 5)
    qd[3, 0] = np.nan
    q[11, 0] = np.inf
    extra = np.zeros((N, m.dof))
    extra[7] = np.inf
    return q, qd, extra


@pytest.mark.parametrize("backend,simd", [("numpy", "1"), ("numba", "1"), ("numba", "0")])
def test_non_finite_particles_are_not_ok_on_every_backend(mechanisms, monkeypatch, backend, simd):
    if backend == "numba":
        pytest.importorskip("numba")
    monkeypatch.setenv("MBDE_PF_BACKEND", backend)
    monkeypatch.setenv("MBDE_PF_SIMD", simd)
    m = mechanisms["fourbar_pf"]
    q, qd, extra = _broken(m)
    p = Propagator(RK4(), m, threads=1)
    st = p.step(0.0, q, qd, None, 0.005, extra)
    assert p.backend == backend and st is p.last
    finite = np.isfinite(st.q).all(1) & np.isfinite(st.qd).all(1) & np.isfinite(st.qdd).all(1)
    ok = np.asarray(st.ok, dtype=bool)
    assert not ok[[3, 7, 11]].any()
    assert not (ok & ~finite).any()  # ok implies finite
    assert ok.sum() >= q.shape[0] - 3  # the others step normally


def _lost_reference(events, T, since):
    """More than half of the flags of the last T s (the plain count)."""
    t = events[-1][0]
    win = [f for a, f in events if a >= t - T - 1e-12]
    return t - since >= T - 1e-12 and 2 * sum(win) > len(win)


def test_lost_detector_counts_as_the_plain_sum_across_a_saved_and_restored_window():
    rng = np.random.default_rng(3)
    det, events, since = LostDetector(0.5), [], 0.0
    for k in range(1, 1500):
        t = 0.005 * k
        flag = bool(rng.random() < (0.8 if 400 < k < 600 else 0.2))
        events.append((t, flag))
        assert det(t, flag) == _lost_reference(events, 0.5, since)
        if k == 700:  # an injection: the items saved, the detector restarted, the items restored
            saved = (list(det.hist), det.since)
            det.restart(t)
            det.hist.extend(saved[0])
            det.since = saved[1]
        if k == 900:
            det = copy.deepcopy(det)
        if k == 1000:
            det = pickle.loads(pickle.dumps(det))
        if k == 1200:
            det.restart(t)
            events, since = [], t


def _lock_reference(events, det):
    """The lock test with the plain mean and median over the windows."""
    t = events[-1][0]
    slow = [min(r, det.CAP) for a, r in events if a >= t - det.slow.T - 1e-12]
    fast = [r for a, r in events if a >= t - det.fast.T - 1e-12]
    age = t - det.since
    if age >= det.slow.T - 1e-12 and float(np.mean(slow)) > det.limit:
        return True
    return age >= det.fast.T - 1e-12 and float(np.median(fast)) > det.FAST_FACTOR * det.limit


def test_lock_detector_decides_as_the_plain_mean_and_median():
    rng = np.random.default_rng(4)
    det, events = LockDetector(3.0, 0.5), []
    for k in range(1, 4000):  # > RESUM removals: the running total is summed afresh
        t = 0.005 * k
        r = rng.chisquare(2) / 2 * (4.0 if 1000 < k < 1400 else 1.0) * (40.0 if 2000 < k < 2030 else 1.0)
        if k == 2500:
            r = np.inf
        if k == 3000:
            r = np.nan
        events.append((t, r))
        got = det(t, 2 * r, 2)
        assert got == _lock_reference(events, det), k
        slow = [min(v, det.CAP) for a, v in events if a >= t - det.slow.T - 1e-12]
        if np.isfinite(slow).all():
            assert det.last == pytest.approx(np.mean(slow), rel=1e-12)
        if k == 3500:
            det = copy.deepcopy(det)


def _snap_equal(a, b):
    for f in ("q", "qd", "qdd", "z", "zd", "zdd", "cov", "branch_probabilities"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert a.stamp == b.stamp and a.branch == b.branch


def test_cloud_estimate_is_computed_once_per_state_and_callers_get_their_own_copy():
    import copy as _copy
    import os

    from conftest import REPO
    from mbde_core.estimators import make_estimator
    from mbde_core.estimators.base import InitialState
    from mbde_core.estimators.configure import defaults
    from mbde_core.estimators.particle import outputs
    from mbde_core.scenario import load_scenario
    from mbde_core.simulator import run as simulate_run
    from mbde_core.types import Measurement

    sc = load_scenario(os.path.join(REPO, "config", "scenarios", "pf_sim.yaml")).with_overrides(duration=0.2)
    ts, vs = simulate_run(sc).measurements["gyro_rocker"]
    meas = [Measurement(float(t), "gyro_rocker", v) for t, v in zip(ts, vs)]
    cfg = _copy.deepcopy(defaults("pf"))
    cfg["init"], cfg["particles"] = "gaussian", 200
    est = make_estimator("pf", sc.estimator_mechanism(), sc.estimator_sensors(), cfg, rng=np.random.default_rng(0))
    init = sc.estimator_initial_state()
    est.reset(meas[0].stamp, InitialState(init.z, init.zd, np.full(1, 0.05), np.full(1, 0.5), init.q, init.branch))
    est.update([meas[0]])
    calls = [0]
    inner = outputs._estimate

    def counted(pf):
        calls[0] += 1
        return inner(pf)

    outputs._estimate = counted
    try:
        for k in range(1, 12):
            est.predict(0.005)
            est.update([meas[k]])
            a = est.cloud_estimate()
            a.z[:] = 99.0  # a caller editing its copy
            b = est.cloud_estimate()
            assert calls[0] == k  # once per state
            _snap_equal(b, inner(est))  # what a fresh computation gives
            est.logw = est.logw.copy()  # a new weight array: computed again
            est.cloud_estimate()
            assert calls[0] == k + 1
            calls[0] -= 1
    finally:
        outputs._estimate = inner


def test_estimate_cache_holds_no_particle_array_and_copies_start_empty():
    import copy as _copy
    import gc
    import pickle as _pickle
    import weakref

    from mbde_core.estimators.particle import outputs
    arr = np.zeros(3)
    c = outputs._Cache((0.0,), (arr,), "snap")
    assert c.hit((0.0,), (arr,)) and not c.hit((0.0,), (np.zeros(3),)) and not c.hit((1.0,), (arr,))
    ref = weakref.ref(arr)
    del arr
    gc.collect()
    assert ref() is None  # the cache did not keep it alive
    for copied in (_copy.deepcopy(c), _pickle.loads(_pickle.dumps(c))):
        assert copied.snap is None
