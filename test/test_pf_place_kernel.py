"""The compiled placement of moved particles (mbde_core.engine.numba_kernels.place: the
position problem at new z, R there and qd = R zd in one pass per particle) against the numpy
engine (kinematics.solve_position, r_matrix, velocity), and the PF's regularisation with it
against the regularisation on the numpy path (the same draws: equal to rounding)."""
from __future__ import annotations

import copy
import os

import numpy as np
import pytest

from conftest import REPO, random_states
from mbde_core.engine import kinematics, numba_cache, numba_kernels
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults
from mbde_core.estimators.particle import resampling
from mbde_core.scenario import load_scenario

pytestmark = pytest.mark.skipif(numba_cache.numba() is None, reason="numba not importable")


@pytest.mark.parametrize("name", ["fourbar", "fivebar", "slider_crank"])
def test_place_matches_the_numpy_engine(mechanisms, name):
    """Moves of 0.05 (rad or m) in z from guesses q + R dz: q within 1e-10 (rad, m) of
    the numpy Newton's, R and qd within 1e-9 (m/rad, m/s or rad/s), all converged."""
    m = mechanisms[name]
    q0, qd0 = random_states(m, 300, 4)
    rng = np.random.default_rng(1)
    dz = rng.uniform(-0.05, 0.05, (300, m.dof))
    zd = rng.uniform(-2, 2, (300, m.dof))
    R0 = kinematics.r_matrix(m, q0)
    guess = q0 + np.einsum("nig,ng->ni", R0, dz)
    z = q0[:, m.independent] + dz
    q1, qd1, Rc1, ok = numba_kernels.place(m, z, zd, guess)
    q_ref, ok_ref = kinematics.solve_position(m, z, guess)
    assert ok.all() and ok_ref.all()
    assert np.abs(q1 - q_ref).max() < 1e-10
    assert np.abs(Rc1 - np.moveaxis(kinematics.r_matrix(m, q_ref), 2, 0)).max() < 1e-9
    assert np.abs(qd1 - kinematics.velocity(m, q_ref, zd)).max() < 1e-9


def test_place_flags_a_non_finite_start(mechanisms):
    m = mechanisms["fourbar"]
    q0, _ = random_states(m, 4, 2)
    z = q0[:, m.independent].copy()
    z[1] = np.nan
    _, _, _, ok = numba_kernels.place(m, z, np.zeros((4, m.dof)), q0)
    assert ok.tolist() == [True, False, True, True]


def _filter(N):
    sc = load_scenario(os.path.join(REPO, "config", "scenarios", "pf_sim.yaml"))
    from mbde_bench.common import TruthRecord

    meas = TruthRecord(sc, 0.2).measurements(sc.sensors, 0.005, seed=2)
    init = sc.estimator_initial_state()
    cfg = defaults("pf")
    cfg.update(init="gaussian", particles=N, threads=1)
    cfg["uniform"]["particles"] = 0
    est = make_estimator("pf", sc.estimator_mechanism(), sc.estimator_sensors(), cfg, rng=np.random.default_rng(3))
    est.reset(meas[0].stamp, InitialState(init.z, init.zd, np.full(1, 0.05), np.full(1, 0.5), init.q, init.branch))
    return est, meas


def test_regularise_compiled_equals_the_numpy_path(monkeypatch):
    """pf_sim, 6000 particles: each regularisation of a short run done twice from the same
    state and draws, with the compiled placement (and R from the propagation's context) and
    on the numpy path; the moved q within 1e-10 rad, qd within 1e-8 rad/s."""
    est, meas = _filter(6000)
    orig = resampling.regularise
    seen = []

    def both(pf, move, C, h, readings):
        q, qd, state = pf.q.copy(), pf.qd.copy(), copy.deepcopy(pf.rng.bit_generator.state)
        n1 = orig(pf, move, C, h, readings)
        q1, qd1 = pf.q.copy(), pf.qd.copy()
        pf.q, pf.qd = q.copy(), qd.copy()
        pf.rng.bit_generator.state = state
        aux, pf.propagator.ctx = pf.propagator.ctx, None  # R from the engine
        monkeypatch.setenv("MBDE_PF_BACKEND", "numpy")  # the placement by kinematics.solve_position
        n0 = orig(pf, move, C, h, readings)
        monkeypatch.delenv("MBDE_PF_BACKEND")
        pf.propagator.ctx = aux
        assert n0 == n1 and n1 > 0.3 * move.sum()
        seen.append((np.abs(pf.q - q1).max(), np.abs(pf.qd - qd1).max()))
        return n0

    monkeypatch.setattr(resampling, "regularise", both)
    stamps = sorted({m.stamp for m in meas})
    for t in stamps[1:]:
        est.predict(0.005)
        est.update([m for m in meas if m.stamp == t])
    assert len(seen) >= 2
    assert max(a for a, _ in seen) < 1e-10 and max(b for _, b in seen) < 1e-8
