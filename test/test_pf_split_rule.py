"""The break-even rule of the PF's thread ranges (mbde_core.engine.thread_pools.parts): a pass
is split over the threads only when its work on one thread exceeds two hand-offs; a filter
step of 1e4 four-bar particles on two threads then hands only the propagation to the pool,
and its results equal one thread's bit for bit."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from conftest import REPO
from mbde_bench.common import TruthRecord
from mbde_core.engine import numba_cache, thread_pools
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults
from mbde_core.scenario import load_scenario


def test_parts_splits_only_above_the_break_even():
    assert thread_pools.parts(100000, 1, 1.0) == 1  # one thread
    assert thread_pools.parts(100, 2) == 1  # below min_rows
    assert thread_pools.parts(10000, 2) == 2  # no cost given: min_rows alone
    assert thread_pools.parts(10000, 2, 8.0) == 1  # 80 us of work < two hand-offs
    assert thread_pools.parts(100000, 2, 8.0) == 2  # 800 us
    assert thread_pools.parts(10000, 2, 70.0) == 2  # an RK4 step: 700 us
    assert thread_pools.parts(3, 8, 1e6, min_rows=1) == 3  # never more ranges than rows


def test_rows_below_the_break_even_runs_on_the_calling_thread():
    calls = []
    thread_pools.rows(lambda lo, hi: calls.append((lo, hi)), 10000, 2, ns_per_row=5.0)
    assert calls == [(0, 10000)]
    calls.clear()
    thread_pools.rows(lambda lo, hi: calls.append((lo, hi)), 10000, 2, ns_per_row=100.0)
    assert sorted(calls) == [(0, 5000), (5000, 10000)]


def _run(threads, N, steps, submits):
    sc = load_scenario(os.path.join(REPO, "config", "scenarios", "pf_sim.yaml"))
    truth = TruthRecord(sc, 0.005 * (steps + 2))
    meas = truth.measurements(sc.sensors, 0.005, seed=7)
    stamps = sorted({m.stamp for m in meas})
    assert len(stamps) > steps
    init = sc.estimator_initial_state()
    cfg = defaults("pf")
    cfg.update(init="gaussian", particles=N, threads=threads)
    cfg["uniform"]["particles"] = 0
    est = make_estimator("pf", sc.estimator_mechanism(), sc.estimator_sensors(), cfg, rng=np.random.default_rng(2))
    est.reset(stamps[0], InitialState(init.z, init.zd, np.full(1, 0.05), np.full(1, 0.5), init.q, init.branch))
    est.update([m for m in meas if m.stamp == stamps[0]])
    e = None
    for k, t in enumerate(stamps[1:steps + 1]):
        if k == 2:
            submits.clear()
        est.predict(0.005)
        est.update([m for m in meas if m.stamp == t])
        e = est.estimate()
    return est, e


@pytest.mark.skipif(numba_cache.numba() is None, reason="numba not importable")
def test_a_1e4_step_hands_only_the_propagation_to_the_pool(monkeypatch):
    """Four-bar, 1e4 particles, two threads: per step one hand-off (the RK4 step's second
    range); the update's and the estimate's kernels (< 300 us each on one thread) and the
    normals' prefetch stay on the calling thread; the results equal one thread's."""
    submits = []
    orig = ThreadPoolExecutor.submit

    def submit(self, fn, *a, **k):
        submits.append(self._thread_name_prefix)
        return orig(self, fn, *a, **k)

    monkeypatch.setattr(ThreadPoolExecutor, "submit", submit)
    steps = 8
    two, e2 = _run(2, 10000, steps, submits)
    assert two.propagator.threads == 2 and two.propagator.backend == "numba"
    per_step = len(submits) / (steps - 2)
    assert set(submits) <= {"mbde-rk4", "mbde-pfrows"} and 1.0 <= per_step < 1.5  # regularisation moves: rare
    one, e1 = _run(1, 10000, steps, [])
    for a, b in ((two.q, one.q), (two.qd, one.qd), (two.logw, one.logw), (e2.z, e1.z), (e2.zd, e1.zd)):
        assert np.array_equal(a, b)


def test_normals_ahead_copies_without_its_pending_draw():
    import copy
    import pickle

    from mbde_core.estimators.particle import normals

    rng, ahead = np.random.default_rng(1), normals.Ahead()
    ahead.prefetch(rng, normals.MIN_NORMALS)
    twin = copy.deepcopy(ahead)
    assert twin._fut is None and pickle.loads(pickle.dumps(ahead))._fut is None
    ref = np.random.default_rng(1).standard_normal((normals.MIN_NORMALS, 1))
    assert np.array_equal(ahead.take(rng, normals.MIN_NORMALS, 1), ref)  # drawn afresh after the copy waited
