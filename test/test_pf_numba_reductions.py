"""The numba moments of the particle filter's estimate (mbde_core.estimators.particle.compiled)
against the numpy path: same values to rounding, deterministic for any thread count."""
import numpy as np
import pytest

from mbde_core.estimators.particle import compiled as pf_numba


pytestmark = [pytest.mark.skipif(pf_numba.kernels() is None, reason="numba is not importable"),
              pytest.mark.usefixtures("split_at_any_size")]  # ranges split at any size (conftest)


def _cloud(N, g, angular, seed=0):
    rng = np.random.default_rng(seed)
    n = g + 2
    iz = np.arange(g) * 2 % n if g > 1 else np.array([1])
    q = np.asfortranarray(rng.standard_normal((N, n)))
    q[:, iz[angular]] = 3.0 + 0.5 * rng.standard_normal((N, int(angular.sum())))  # straddles +-pi
    qd, qdd = np.asfortranarray(rng.standard_normal((N, n))), np.asfortranarray(rng.standard_normal((N, n)))
    v = rng.standard_normal((N, g))
    w = rng.random(N) ** 4
    w /= w.sum()
    return w, q, qd, qdd, v, iz


def _numpy_moments(w, q, qd, qdd, v, iz, angular):
    z, zd, zdd = q[:, iz], qd[:, iz], qdd[:, iz] + v
    zm = np.einsum("n,nk->k", w, z)
    zm[angular] = np.arctan2(np.einsum("n,nk->k", w, np.sin(z))[angular], np.einsum("n,nk->k", w, np.cos(z))[angular])
    d = z - zm
    d[:, angular] = (d[:, angular] + np.pi) % (2 * np.pi) - np.pi
    X = np.hstack([d, zd - np.einsum("n,nk->k", w, zd)])
    return (zm, np.einsum("n,nk->k", w, zd), np.einsum("n,nk->k", w, zdd)), np.einsum("n,ni,nj->ij", w, X, X)


@pytest.mark.parametrize("g,angular", [(1, [True]), (2, [True, False]), (3, [False, True, True]), (1, [False])])
def test_moments_match_numpy(g, angular):
    angular = np.array(angular)
    w, q, qd, qdd, v, iz = _cloud(20000, g, angular)
    z = q[:, iz]
    (zm, zdm, zddm), P = pf_numba.moments(w, q, qd, qdd, v, np.sin(z), np.cos(z), iz, angular, threads=2)
    (zm0, zdm0, zddm0), P0 = _numpy_moments(w, q, qd, qdd, v, iz, angular)
    # units: rad (or m), rad/s, rad/s^2, their squares; the sums of 2e4 terms agree to rounding
    np.testing.assert_allclose(zm, zm0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(zdm, zdm0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(zddm, zddm0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(P, P0, rtol=1e-10, atol=1e-13)
    assert np.array_equal(P, P.T)


def test_moments_thread_count_does_not_change_bits():
    angular = np.array([True, False])
    w, q, qd, qdd, v, iz = _cloud(30001, 2, angular, seed=3)
    z = q[:, iz]
    a = pf_numba.moments(w, q, qd, qdd, v, np.sin(z), np.cos(z), iz, angular, threads=1)
    b = pf_numba.moments(w, q, qd, qdd, v, np.sin(z), np.cos(z), iz, angular, threads=2)
    for x, y in zip(a[0], b[0]):
        assert np.array_equal(x, y)
    assert np.array_equal(a[1], b[1])


def test_filter_estimate_numba_vs_numpy(monkeypatch):
    """The four-bar filter's estimate with the numba moments equals the numpy path's to rounding."""
    from mbde_core.config.paths import config_path
    from mbde_core.estimators import make_estimator
    from mbde_core.scenario import load_scenario

    sc = load_scenario(config_path("scenarios", "pf_sim.yaml"))
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    from mbde_core.estimators.base import InitialState
    from mbde_core.estimators.configure import defaults

    cfg = defaults("pf")
    cfg.update(init="gaussian", particles=6000)
    cfg["uniform"]["particles"] = 0
    init = sc.estimator_initial_state()
    est = make_estimator("pf", mech, sensors, cfg, rng=np.random.default_rng(1))
    est.reset(0.0, InitialState(init.z, init.zd, np.full(1, 0.05), np.full(1, 0.5), init.q, init.branch))
    est.predict(0.005)
    monkeypatch.setenv("MBDE_PF_BACKEND", "numpy")
    ref = est.estimate()
    monkeypatch.setenv("MBDE_PF_BACKEND", "numba")  # auto: numba from MOMENTS_MIN particles only
    got = est.estimate()
    np.testing.assert_allclose(got.z, ref.z, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.zd, ref.zd, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.zdd, ref.zdd, rtol=0, atol=1e-10)
    np.testing.assert_allclose(got.cov, ref.cov, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(got.q, ref.q, rtol=0, atol=1e-10)
