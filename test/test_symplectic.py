"""Paper 002 sec. 2-3 and 6: the stochastic harmonic oscillator (cloud area under RK1 and the
variational schemes) and the symplectic covariance propagation of Theorem 6.1 / Algorithm 6.1."""
import warnings

import numpy as np
import pytest
import scipy.linalg

from mbde_bench.symplectic import oscillator as osc
from mbde_bench.symplectic.riccati import (DiscreteKalman, EulerRiccatiKalman, LinearModel, SymplecticKalman,
                                          euler_riccati_step, exact_map, fractional_update, symplectic_defect,
                                          symplectic_euler_map, transition)

H_KF = 0.03125  # paper 002 examples 2.1 and 6.1
H_PF = 0.0625   # example 3.1 (Fig. 2)


def test_noise_free_clouds_keep_their_area_only_with_the_variational_schemes():
    rng = np.random.default_rng(0)
    x0 = osc.circle(200, 0.5)
    t, res = osc.clouds(("euler", "symplectic_euler", "midpoint"), x0, H_PF, 60.0, 0.0, 0.0, rng, every=960)
    a0 = res["midpoint"]["area"][0]
    for s in ("symplectic_euler", "midpoint"):
        assert res[s]["area"][-1] == pytest.approx(a0, rel=1e-10)
    # RK1: det(I + hA) = 1 + h^2 per step
    assert res["euler"]["area"][-1] == pytest.approx(a0 * (1 + H_PF**2) ** 960, rel=1e-8)
    assert res["euler"]["area"][-1] > 40 * a0


def test_noisy_clouds_follow_the_exact_covariance_with_the_variational_schemes():
    """Example 3.1 / Fig. 2: 1000 particles, sigma = gamma = 1, h = 0.0625, 60 s, same dW."""
    rng = np.random.default_rng(1)
    x0 = 0.1 * rng.standard_normal((1000, 2)) + [1.0, 0.0]
    t, res = osc.clouds(osc.SCHEMES, x0, H_PF, 60.0, 1.0, 1.0, rng, every=960)
    exact_eig = res["exact"]["eig"][-1]
    assert exact_eig == pytest.approx([60.0, 60.0], rel=0.15)  # C(t) ~ t I for sigma = gamma = 1
    for s in ("symplectic_euler", "midpoint"):
        assert res[s]["area"][-1] == pytest.approx(res["exact"]["area"][-1], rel=0.15)
        assert res[s]["energy"][-1] == pytest.approx(60.0, rel=0.15)  # E[H] = (sigma^2 + gamma^2) t / 2
    assert res["euler"]["area"][-1] > 5 * res["exact"]["area"][-1]
    assert res["euler"]["energy"][-1] > 5 * 60.0


def test_transition_matrices():
    h = 0.1
    Ak = transition(osc.A, h, "symplectic_euler")
    A11, A12, A21, A22 = osc.A[0, 0], osc.A[0, 1], osc.A[1, 0], osc.A[1, 1]
    i = 1.0 / (1 - h * A11)
    paper = np.array([[i, h * i * A12], [h * A21 * i, h * h * A21 * i * A12 + 1 + h * A22]])  # paper 002 sec. 4
    np.testing.assert_allclose(Ak, paper, atol=1e-15)
    for s in ("symplectic_euler", "midpoint"):
        assert np.linalg.det(transition(osc.A, h, s)) == pytest.approx(1.0, abs=1e-14)
    assert np.linalg.det(transition(osc.A, h, "euler")) == pytest.approx(1 + h * h)


def model(Rd):
    return LinearModel(osc.A, [[1.0, 0.0]], np.eye(2), np.eye(2), Rd * H_KF, H_KF)


@pytest.mark.parametrize("Rd", [1e-4, 1e-2, 1.0])
def test_symplectic_covariance_stays_spd_where_the_euler_riccati_diverges(Rd):
    m = model(Rd)
    Psi = symplectic_euler_map(m.S, H_KF)
    assert symplectic_defect(Psi) < 1e-13
    assert symplectic_defect(np.eye(4) + H_KF * m.S) == pytest.approx(
        np.max(np.abs(H_KF**2 * m.S.T @ np.block([[np.zeros((2, 2)), np.eye(2)], [-np.eye(2), np.zeros((2, 2))]]) @ m.S)))
    P = Pe = 0.1 * np.eye(2)
    euler_ok = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the Euler iteration overflows
        for _ in range(int(60.0 / H_KF)):
            P = fractional_update(Psi, P)
            assert np.max(np.abs(P - P.T)) <= 1e-12 * np.max(np.abs(P))
            assert np.linalg.eigvalsh(0.5 * (P + P.T)).min() > 0
            Pe = euler_riccati_step(m.A, m.C, m.GQG, m.Rinv, H_KF, Pe)
            euler_ok &= bool(np.all(np.isfinite(Pe)) and np.linalg.eigvalsh(0.5 * (Pe + Pe.T)).min() > 0)
    assert euler_ok == (Rd >= 0.1)  # the Euler step is unstable for accurate readings (h P C^T R^-1 C > 2)
    if Rd >= 0.1:  # both converge; the Euler fixed point is the exact algebraic Riccati solution
        Pinf = scipy.linalg.solve_continuous_are(m.A.T, m.C.T, m.GQG, m.R)
        np.testing.assert_allclose(Pe, Pinf, atol=1e-9)
        assert np.max(np.abs(P - Pinf)) < 0.03  # first order in h


def test_state_adjoint_relation_holds_to_round_off():
    """Theorem 6.1: (X, W) propagated by Psi from (I, P0) satisfy W_k = P_k X_k."""
    m = model(0.05)
    Psi = symplectic_euler_map(m.S, H_KF)
    P = np.array([[0.3, 0.05], [0.05, 0.2]])
    X, W = np.eye(2), P.copy()
    for _ in range(200):
        X, W = Psi[:2, :2] @ X + Psi[:2, 2:] @ W, Psi[2:, :2] @ X + Psi[2:, 2:] @ W
        P = fractional_update(Psi, P)
        assert np.max(np.abs(W - P @ X)) <= 1e-12 * np.max(np.abs(W))
    # the exact transition too (its covariance is the Kalman-Bucy one)
    assert symplectic_defect(exact_map(m.S, H_KF)) < 1e-12


def test_algorithm_6_1_filters_the_oscillator():
    """Example 6.1: one sample path, readings of q every h; Algorithm 6.1 against the discrete
    Kalman filters with Euler and midpoint transitions (state RMSE within 10 %)."""
    m = model(0.25)
    rng = np.random.default_rng(2)
    Th = scipy.linalg.expm(osc.A * H_KF)
    L = np.linalg.cholesky(osc.exact_noise_cov(H_KF, 1.0, 1.0))
    x, xs, zs = np.array([1.0, 0.0]), [], []
    for _ in range(int(20 / H_KF)):
        x = Th @ x + L @ rng.standard_normal(2)
        xs.append(x)
        zs.append(x[0] + 0.5 * rng.standard_normal())
    xs = np.array(xs)
    P0 = 0.1 * np.eye(2)
    rmse = {}
    for f in (SymplecticKalman(m, xs[0], P0), EulerRiccatiKalman(m, xs[0], P0), DiscreteKalman(m, xs[0], P0, "euler"),
              DiscreteKalman(m, xs[0], P0, "midpoint")):
        est = np.array([f.step(z)[0].copy() for z in zs])
        rmse[f.name] = np.sqrt(np.mean((est - xs) ** 2))
        assert np.linalg.eigvalsh(f.P).min() > 0
    assert rmse["symplectic"] < 1.1 * rmse["discrete_midpoint"]
    assert rmse["symplectic"] < 1.1 * rmse["discrete_euler"]
