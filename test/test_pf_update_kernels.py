"""The compiled update and resampling kernels of the particle filter
(:mod:`mbde_core.estimators.particle.compiled`) against their numpy counterparts on random
particle sets: the adapted proposal (the same draws; v and the log-evidence to rounding),
systematic resampling (the same indices) and the batch-last gather (the same values), for
one and two threads."""
import numpy as np
import pytest

from mbde_core.engine import numba_kernels
from mbde_core.estimators.particle import compiled, proposal, resampling


pytestmark = [pytest.mark.skipif(numba_kernels.numba() is None, reason="numba not importable"),
              pytest.mark.usefixtures("split_at_any_size")]  # ranges split at any size (conftest)


@pytest.mark.parametrize("g", [1, 2, 3])
@pytest.mark.parametrize("threads", [1, 2])
def test_adapted_noise_matches_numpy(g, threads):
    rng = np.random.default_rng(10 + g)
    N, D = 5000, 3
    yw = rng.standard_normal((N, D)) * 3.0
    Gw = rng.standard_normal((N, D, g)) * 0.02
    v0, ll0 = proposal.adapted_noise(0.7, yw, Gw, np.random.default_rng(5))
    v1, ll1 = compiled.adapted_noise(0.7, yw, Gw, np.random.default_rng(5), threads)
    np.testing.assert_allclose(v1, v0, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ll1, ll0, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("n", [1, 7, 4096, 30000])
@pytest.mark.parametrize("threads", [1, 2])
def test_systematic_matches_numpy(n, threads):
    rng = np.random.default_rng(3)
    w = rng.exponential(size=20000) ** 4  # uneven weights: long runs of copies and gaps
    w[::97] = 0.0
    w /= w.sum()
    ref = resampling.systematic(w, np.random.default_rng(8), n)
    got = compiled.systematic(resampling._cdf(w), np.random.default_rng(8).random(), n, threads)
    np.testing.assert_array_equal(got, ref)
    assert resampling.systematic(w, np.random.default_rng(8), n, threads=threads).tolist() == ref.tolist()


@pytest.mark.parametrize("threads", [1, 2])
def test_gather_matches_fancy_indexing(threads):
    rng = np.random.default_rng(4)
    a = np.ascontiguousarray(rng.standard_normal((5, 9000))).T  # batch-last, as the propagation leaves it
    idx = np.sort(rng.integers(0, 9000, 9000))
    out = compiled.gather(a, idx, threads)
    np.testing.assert_array_equal(out, a[idx])
    assert out.T.flags.c_contiguous
    c = np.ascontiguousarray(a)  # row-major: numpy's own gather
    np.testing.assert_array_equal(compiled.gather(c, idx, threads), c[idx])


def test_update_kernels_follow_the_backend_switch(monkeypatch):
    monkeypatch.setenv("MBDE_PF_BACKEND", "numpy")
    assert not compiled.update_enabled(10**6)
    monkeypatch.setenv("MBDE_PF_BACKEND", "auto")
    assert compiled.update_enabled(compiled.UPDATE_MIN) and not compiled.update_enabled(compiled.UPDATE_MIN - 1)
    monkeypatch.setenv("MBDE_PF_BACKEND", "numba")
    assert compiled.update_enabled(10)


@pytest.mark.parametrize("g", [1, 2])
def test_moments_blocks_do_not_depend_on_threads(g):
    rng = np.random.default_rng(6)
    N, n = 9000, 5
    q, qd, qdd = (np.asfortranarray(rng.standard_normal((N, n))) for _ in range(3))
    v = rng.standard_normal((N, g))
    w = rng.random(N)
    w /= w.sum()
    iz = np.arange(g)
    angular = np.array([True, False][:g])
    s, c = np.sin(q[:, iz]), np.cos(q[:, iz])
    (m1, p1) = compiled.moments(w, q, qd, qdd, v, s, c, iz, angular, 1)
    (m2, p2) = compiled.moments(w, q, qd, qdd, v, s, c, iz, angular, 2)
    for a, b in zip(m1, m2):
        assert a.tolist() == b.tolist()
    assert p1.tolist() == p2.tolist()
    zm = np.arctan2(w @ s[:, 0], w @ c[:, 0])
    assert abs(m1[0][0] - zm) < 1e-12
    np.testing.assert_allclose(m1[1], w @ qd[:, iz], rtol=1e-12, atol=1e-14)


def _numpy_branch_covariances(w, q, qd, iz, label, K, angular, floor):
    """resample_set's numpy computation of the regularisation kernel's covariances."""
    z, zd = q[:, iz], qd[:, iz]
    dev = np.empty_like(z)
    for b in np.unique(label):
        sel = label == b
        wb = w[sel] / max(w[sel].sum(), 1e-300)
        zb = z[sel]
        m = np.einsum("n,nk->k", wb, zb)
        m[angular] = np.arctan2(wb @ np.sin(zb[:, angular]), wb @ np.cos(zb[:, angular]))
        d = zb - m
        d[:, angular] = (d[:, angular] + np.pi) % (2 * np.pi) - np.pi
        dev[sel] = d
    return resampling.branch_covariances(dev, zd, w, label, K, floor)


@pytest.mark.parametrize("g", [1, 2])
@pytest.mark.parametrize("threads", [1, 2])
def test_branch_covariances_match_numpy(g, threads):
    rng = np.random.default_rng(20 + g)
    N, n, K = 8000, 5, 3
    q = np.asfortranarray(rng.standard_normal((N, n)) * 2.0)  # angles across +-pi: the wrap matters
    q[:, 0] += np.pi - 0.1
    qd = np.asfortranarray(rng.standard_normal((N, n)))
    w = rng.random(N) ** 3
    w /= w.sum()
    label = rng.integers(0, 2, N)  # branch 2 empty: the floor alone
    iz = np.arange(g)
    angular = np.array([True, False][:g])
    floor = np.eye(2 * g) * 1e-6
    ref = _numpy_branch_covariances(w, q, qd, iz, label, K, angular, floor)
    got = compiled.branch_covariances(w, q, qd, iz, label, K, angular, floor, threads)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-13)
    assert got[2].tolist() == floor.tolist()


@pytest.mark.parametrize("g,D", [(1, 1), (2, 3), (3, 2)])
@pytest.mark.parametrize("threads", [1, 2])
def test_adapted_reading_matches_the_numpy_update(g, D, threads):
    """weights.adapted's numpy steps for one reading: whitening, bad particles, the proposal,
    the wild test and the noise term."""
    rng = np.random.default_rng(30 + g)
    N = 6000
    r = rng.standard_normal((N, D)) * 2.0
    W = np.linalg.cholesky(np.eye(D) + 0.1 * np.ones((D, D)))
    G = rng.standard_normal((N, D, g)) * 0.01
    G[5, 0, 0] = np.nan  # a bad particle
    r[9, -1] = np.inf    # another
    r[11] *= 1e6         # a wild one
    w = rng.random(N)
    w /= w.sum()
    s2, lim = 0.7**2, 10.0 * 0.7
    yw, Gw = np.einsum("nd,kd->nk", r, W), np.einsum("ij,njg->nig", W, G)
    extra = s2 * np.einsum("n,ndg,nkg->dk", w, G, G)
    bad = ~(np.isfinite(yw).all(axis=1) & np.isfinite(Gw).all(axis=(1, 2)))
    yw[bad], Gw[bad] = 0.0, 0.0
    v0, ll0 = proposal.adapted_noise(0.7, yw, Gw, np.random.default_rng(5))
    ll0[bad] = -np.inf
    wild0 = bad | ~(np.abs(v0).max(axis=1) <= lim)
    v1, ll1, bad1, wild1, e1 = compiled.adapted_reading(0.7, r, W, G, w, np.random.default_rng(5), lim, threads)
    assert bad1.tolist() == bad.tolist() and bad[[5, 9]].all()
    assert wild1.tolist() == wild0.tolist() and wild0[11]
    ok = ~bad
    np.testing.assert_allclose(v1[ok], v0[ok], rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(ll1[ok], ll0[ok], rtol=1e-11, atol=1e-9)
    assert np.isneginf(ll1[bad]).all()
    assert np.isnan(e1).all() == np.isnan(extra).all()  # the NaN particle spoils the noise term as in numpy
    G[5, 0, 0] = 0.0
    extra = s2 * np.einsum("n,ndg,nkg->dk", w, G, G)
    e2 = compiled.adapted_reading(0.7, r, W, G, w, np.random.default_rng(5), lim, threads)[4]
    np.testing.assert_allclose(e2, extra, rtol=1e-12, atol=1e-18)


@pytest.mark.parametrize("g", [1, 2, 3])
@pytest.mark.parametrize("threads", [1, 2])
def test_impulse_matches_numpy(g, threads):
    rng = np.random.default_rng(40 + g)
    N, n = 7000, 6
    qd = np.asfortranarray(rng.standard_normal((N, n)))  # batch-last, as the propagation leaves it
    Rc = rng.standard_normal((g, N, n))
    dzd = 0.005 * rng.standard_normal((N, g))
    ref = qd + proposal.velocity_impulse(Rc, dzd)
    got = compiled.impulse(qd, Rc, dzd, threads)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-15)  # rad/s (m/s): the same sums
    assert got.flags.f_contiguous
    c = np.ascontiguousarray(qd)
    np.testing.assert_allclose(compiled.impulse(c, Rc, dzd, threads), ref, rtol=0, atol=1e-15)


@pytest.mark.parametrize("threads", [1, 2])
def test_gyroscope_matches_numpy(threads):
    """compiled.gyroscope against Gyroscope.h and proposal.noise_jacobian on every body of the
    four-bar (bodies with a fixed and with two moving basis points), g = 1 and 3 columns."""
    import os

    from conftest import REPO
    from mbde_core.scenario import load_scenario
    from mbde_core.sensors.gyroscope import Gyroscope

    mech = load_scenario(os.path.join(REPO, "config", "scenarios", "pf_sim.yaml")).estimator_mechanism()
    rng = np.random.default_rng(50)
    N = 6000
    q = np.asfortranarray(rng.standard_normal((N, mech.n)))
    qd = np.asfortranarray(rng.standard_normal((N, mech.n)))
    for g in (1, 3):
        Rc = rng.standard_normal((g, N, mech.n))
        for body in range(len(mech.body_basis)):
            s = Gyroscope(mech, f"g{body}", body=body, rate=200.0, noise=None, frame_id="f", topic="t")
            h0 = s.h(q, qd)
            G0 = proposal.noise_jacobian(s, q, qd, None, Rc, 0.005, h0)
            h1, G1 = compiled.gyroscope(s, q, qd, Rc, 0.005, threads)
            np.testing.assert_allclose(h1, h0, rtol=1e-12, atol=1e-12)  # rad/s
            np.testing.assert_allclose(G1, G0, rtol=1e-9, atol=1e-12)  # rad/s per rad/s^2
            assert compiled.gyroscope(s, q, qd, None, 0.005, threads)[1] is None
