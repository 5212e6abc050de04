"""numba backend of the batched RK4 step (mbde_core.engine.numba_kernels).

Compared with the numpy path (the engine's batched RK4 on the generated vector kernels)
on a four-bar, a five-bar (2 DOF), a slider-crank, a mechanism with time-dependent loads
and one with a dense (triad) block: chained steps with and without the model
acceleration and the extra acceleration, to rounding (1e-9 in the quantities' units;
with the default IEEE arithmetic the results are in fact bit-identical on x86-64);
the kernel context at the result; bit-identical results for any thread count and any
subset of particles; the numpy fallback for non-finite particles; the backend choice;
and a whole particle filter run on both backends. Skipped without numba. The first run
on a machine compiles each mechanism's module (~5-10 s each, then cached on disk).
"""
import os

import numpy as np
import pytest

import engine_reference as ref
from conftest import REPO, in_forked_child
from mbde_core.engine import fastpath, kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.model.loader import mechanism_spec_from_text
from mbde_core.model.mechanism import Mechanism

pytest.importorskip("numba")
from mbde_core.engine import numba_cache, numba_kernels as nk  # noqa: E402

pytestmark = pytest.mark.usefixtures("split_at_any_size")  # thread ranges split at any size (conftest)


NAMES = ["fourbar", "fivebar", "slider_crank", "loaded", "triad"]
TOL = 1e-9


@pytest.fixture(scope="module")
def mechs(mechanisms):
    out = dict(mechanisms)
    for name in ("loaded", "triad"):
        out[name] = Mechanism(mechanism_spec_from_text(ref.EXTRA[name], name))
    return out


def states(m, N, seed, spread=0.2):
    rng = np.random.default_rng(seed)
    z = m.q0[m.independent] + rng.uniform(-spread, spread, (N, m.dof))
    q, ok = kinematics.solve_position(m, z, np.broadcast_to(m.q0, (N, m.n)))
    assert ok.all()
    qd = kinematics.velocity(m, q, rng.uniform(-2, 2, (N, m.dof)))
    return np.ascontiguousarray(q), np.ascontiguousarray(qd)


def numpy_step(m, t, q, qd, qdd, h, extra=None):
    return get_integrator("rk4").step(m, t, MBState(q, qd, qdd), h, extra_zdd=extra)


@pytest.mark.parametrize("name", NAMES)
def test_steps_match_numpy_path(mechs, name):
    m = mechs[name]
    assert nk.load(m) is not None
    N, h = 300, 0.005
    q, qd = states(m, N, 1)
    rng = np.random.default_rng(2)
    a = (q, qd, None)
    b = (q, qd, None)
    both = np.ones(N, dtype=bool)
    for k in range(6):
        extra = rng.normal(0.0, 3.0, (N, m.dof)) if k % 2 else None
        t = 0.1 + k * h
        ra = numpy_step(m, t, *a, h, extra)
        q1, qd1, qdd1, ok, ctx = nk.rk4_step(m, t, *b, h, extra, threads=2)
        both &= ok & ra.ok  # a failed position problem (random states: rare) ends the comparison of that particle
        assert np.array_equal(ok, ra.ok) or not (ok ^ ra.ok)[both].any()
        assert both.mean() > 0.95
        scale = max(1.0, np.abs(ra.qdd[both]).max())
        assert np.abs(q1 - ra.q)[both].max() < TOL and np.abs(qd1 - ra.qd)[both].max() < TOL
        assert np.abs(qdd1 - ra.qdd)[both].max() < TOL * scale
        a = (ra.q, ra.qd, ra.qdd if k % 3 else None)
        b = (q1, qd1, qdd1 if k % 3 else None)
    # the context at the result: what the vector kernels compute there
    V = fastpath.kernels(m).vector
    qb = np.ascontiguousarray(q1.T)
    tr = V.trig(qb)
    J = V.jac(qb, tr)
    R = V.rmatrix(J, tr)
    kept_J = () if ctx.J is None else ctx.J  # the vectorised step leaves J to whoever needs it
    for x, y in zip(ctx.tr + kept_J, tr + J[:len(kept_J)]):
        assert np.allclose(x[both], np.broadcast_to(y, N)[both], rtol=1e-12, atol=1e-12)
    for row_x, row_y in zip(ctx.R, R):
        for x, y in zip(row_x, row_y):  # constant entries are floats
            assert np.allclose(np.broadcast_to(x, N)[both], np.broadcast_to(y, N)[both], rtol=1e-12, atol=1e-12)


def test_threads_and_subsets_give_bit_identical_results(mechs):
    m = mechs["fivebar"]
    N = nk.SERIAL_MAX + 53  # threads=2: two ranges on two threads; threads=1 and the subset: one range
    q, qd = states(m, N, 3)
    extra = np.random.default_rng(4).normal(0.0, 1.0, (N, m.dof))
    outs = [nk.rk4_step(m, 0.0, q, qd, None, 0.005, extra, threads=t) for t in (1, 2)]
    for x, y in zip(outs[0][:4], outs[1][:4]):
        assert np.array_equal(x, y)
    idx = np.arange(7, 1500, 13)
    sub = nk.rk4_step(m, 0.0, q[idx], qd[idx], None, 0.005, extra[idx], threads=2)
    for x, y in zip(outs[0][:4], sub[:4]):
        assert np.array_equal(x[idx], y)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_steps_on_its_own_threads(mechs):
    """The parent's thread pool does not exist in a forked child (the benches and replay
    fork workers after a parent's run): the child must make its own, not hang."""
    m = mechs["fourbar"]
    q, qd = states(m, nk.SERIAL_MAX + 11, 6)
    ref_out = nk.rk4_step(m, 0.0, q, qd, None, 0.005, None, threads=2)  # the parent's pool exists now
    got = in_forked_child(lambda: [np.asarray(x) for x in nk.rk4_step(m, 0.0, q, qd, None, 0.005, None, threads=2)[:4]],
                          timeout=120)
    for x, y in zip(ref_out[:4], got):
        assert np.array_equal(x, y)  # the same code on the same inputs in the same machine


def test_non_finite_particles_are_decided_by_the_numpy_path(mechs):
    m = mechs["fourbar"]
    q, qd = states(m, 50, 5)
    q[3, 0] = np.inf
    qd[7, :] = np.nan
    q1, qd1, qdd1, ok, ctx = nk.rk4_step(m, 0.0, q, qd, None, 0.005, threads=2)
    ra = numpy_step(m, 0.0, q, qd, None, 0.005)
    assert ctx is None and not ok[3] and not ok[7] and ok.sum() == 48
    assert np.array_equal(ok, ra.ok)
    good = ok
    assert np.abs(q1[good] - ra.q[good]).max() < TOL
    for i in (3, 7):
        assert np.array_equal(np.isfinite(q1[i]), np.isfinite(ra.q[i]))


def test_backend_choice(mechs, monkeypatch):
    m = mechs["fourbar"]
    monkeypatch.setenv("MBDE_PF_BACKEND", "auto")
    monkeypatch.delenv("MBDE_PF_NUMBA_MIN", raising=False)
    monkeypatch.setattr(nk, "cached", lambda mech: False)  # not compiled yet (small sets: next test)
    assert nk.backend(m, nk.AUTO_MIN) == "numba" and nk.backend(m, nk.AUTO_MIN - 1) == "numpy"
    assert nk.backend(m, 10**6, "euler") == "numpy"
    monkeypatch.setenv("MBDE_PF_BACKEND", "numba")
    assert nk.backend(m, 10) == "numba"
    monkeypatch.setenv("MBDE_PF_BACKEND", "numpy")
    assert nk.backend(m, 10**6) == "numpy"


def test_backend_choice_for_small_sets(mechs, monkeypatch):
    """Below AUTO_MIN particles: numba when its module is cached or the expected work pays a compile."""
    m = mechs["fourbar"]
    monkeypatch.setenv("MBDE_PF_BACKEND", "auto")
    monkeypatch.delenv("MBDE_PF_NUMBA_MIN", raising=False)
    monkeypatch.setattr(nk, "cached", lambda mech: False)
    assert nk.backend(m, 300) == "numpy" and nk.backend(m, 300, work=nk.WORK_MIN - 1) == "numpy"
    assert nk.backend(m, 300, work=nk.WORK_MIN) == "numba"
    monkeypatch.setattr(nk, "cached", lambda mech: True)
    assert nk.backend(m, 300) == "numba" and nk.backend(m, 300, "euler") == "numpy"


def test_small_sets_keep_the_per_particle_module_until_the_vector_one_is_compiled(mechs, monkeypatch):
    """The vectorised loop runs when its module is compiled, when nothing is compiled yet,
    or for a large set; a small set with only the per-particle module on disk keeps that
    one (no compile for a short run)."""
    from mbde_core.engine import simd_kernels

    m = mechs["fourbar"]
    loads = []
    monkeypatch.delenv("MBDE_PF_SIMD", raising=False)
    monkeypatch.setattr(simd_kernels, "load", lambda mech, cols=(): loads.append(1) or object())
    monkeypatch.setattr(simd_kernels, "cached", lambda mech, cols=(): False)
    monkeypatch.setattr(nk, "_scalar_cached", lambda mech, funcs: True)
    assert not nk._simd(m, 300) and not loads
    assert nk._simd(m, nk.AUTO_MIN) and loads
    monkeypatch.setattr(simd_kernels, "cached", lambda mech, cols=(): True)
    assert nk._simd(m, 300)
    monkeypatch.setattr(simd_kernels, "cached", lambda mech, cols=(): False)
    monkeypatch.setattr(nk, "_scalar_cached", lambda mech, funcs: False)
    assert nk._simd(m, 300)
    monkeypatch.setenv("MBDE_PF_SIMD", "0")
    assert not nk._simd(m, nk.AUTO_MIN)


def test_cached_sees_the_compiled_module_on_disk(mechs, monkeypatch, tmp_path):
    m = mechs["fourbar"]
    assert nk.load(m) is not None  # compiled into (or loaded from) the cache folder
    K = fastpath.kernels(m)
    assert nk.cached(m)
    monkeypatch.setattr(K, "_numba", None)  # as a fresh process: only the disk tells
    monkeypatch.setattr(K, "_simd", None, raising=False)
    monkeypatch.setattr(K, "_numba_on_disk", None, raising=False)
    monkeypatch.setattr(K, "_simd_on_disk", None, raising=False)
    monkeypatch.setattr(numba_cache, "MODULES", {})  # the vectorised module's lookup
    monkeypatch.setattr(nk, "_MODULES", {})  # the per-particle module's
    assert nk.cached(m)
    monkeypatch.setattr(K, "_numba_on_disk", None)
    monkeypatch.setattr(K, "_simd_on_disk", None)
    monkeypatch.setattr(numba_cache, "folders", lambda: [str(tmp_path)])  # an empty cache
    monkeypatch.setattr(nk, "_folders", lambda: [str(tmp_path)])
    assert not nk.cached(m)
    monkeypatch.setattr(numba_cache, "folders", lambda: 1 / 0)  # remembered: the disk is not looked at again
    monkeypatch.setattr(nk, "_folders", lambda: 1 / 0)
    assert not nk.cached(m)


def test_expected_steps_reach_the_backend_choice(mechanisms, monkeypatch):
    from mbde_core.estimators import make_estimator
    from mbde_core.estimators.configure import defaults
    from mbde_core.sensors.sensor_set import SensorSet

    seen = []
    monkeypatch.setattr(nk, "backend", lambda mech, N, name="rk4", work=0.0: seen.append(work) or "numpy")
    m = mechanisms["fourbar"]
    est = make_estimator("pf", m, SensorSet([]), dict(defaults("pf"), particles=10), rng=np.random.default_rng(0))
    est.reset(0.0, None)
    est.expect_steps(3)
    for _ in range(4):
        est.predict(0.005)
    assert seen == [est.N * 3, est.N * 2, est.N * 1, 0]


@pytest.mark.parametrize("name", ["fourbar", "fivebar"])
def test_particle_filter_on_both_backends(mechs, monkeypatch, name):
    """The same filter run (same seed) on numpy and on numba: the same estimates to rounding."""
    from mbde_core.estimators import make_estimator
    from mbde_core.estimators.base import InitialState
    from mbde_core.estimators.configure import defaults
    from mbde_core.scenario import load_scenario
    from mbde_bench.common import TruthRecord

    scen = {"fourbar": "pf_sim.yaml", "fivebar": "fivebar_gyro.yaml"}[name]
    path = os.path.join(REPO, "config", "scenarios", scen)
    if not os.path.exists(path):
        pytest.skip(f"no scenario {scen}")
    sc = load_scenario(path)
    truth = TruthRecord(sc, 0.06)
    meas = truth.measurements(sc.sensors, 0.005, seed=2)
    init = sc.estimator_initial_state()
    g = len(init.z)
    res = {}
    for be in ("numpy", "numba"):
        monkeypatch.setenv("MBDE_PF_BACKEND", be)
        cfg = defaults("pf")
        cfg.update(init="gaussian", particles=500)
        cfg["uniform"]["particles"] = 0
        est = make_estimator("pf", sc.estimator_mechanism(), sc.estimator_sensors(), cfg, rng=np.random.default_rng(7))
        est.reset(meas[0].stamp, InitialState(init.z, init.zd, np.full(g, 0.05), np.full(g, 0.5), init.q, init.branch))
        est.update([meas[0]])
        for m in meas[1:10]:
            est.predict(0.005)
            est.update([m])
            assert est.propagator.backend == be
        res[be] = (est.q.copy(), est.qd.copy(), est.estimate().z)
    for a, b in zip(res["numpy"], res["numba"]):
        assert np.abs(a - b).max() < 1e-8
