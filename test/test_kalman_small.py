"""The Kalman helpers' float paths for small matrices (estimators.kalman) against LAPACK."""
import math

import numpy as np
import pytest

from mbde_core.estimators.kalman.algebra import cholesky, innovation_stats


@pytest.mark.parametrize("n", [2, 3, 4])
def test_innovation_stats_small_equals_lapack(n):
    rng = np.random.default_rng(n)
    for _ in range(50):
        A = rng.normal(size=(n, n))
        S = A @ A.T + 0.1 * np.eye(n)
        y = rng.normal(size=n)
        nis, e, logdet = innovation_stats(y, S)
        L = np.linalg.cholesky(S)
        e_ref = np.linalg.solve(L, y)
        np.testing.assert_allclose(e, e_ref, rtol=1e-12, atol=1e-12)
        assert math.isclose(nis, float(y @ np.linalg.solve(S, y)), rel_tol=1e-10)  # y^T S^-1 y
        assert math.isclose(logdet, np.linalg.slogdet(S)[1], rel_tol=1e-10, abs_tol=1e-12)
        np.testing.assert_allclose(cholesky(S), L, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("S", [np.diag([1.0, -1.0, 2.0]), np.array([[1.0, 2.0], [2.0, 1.0]]), np.full((3, 3), np.nan)])
def test_innovation_stats_small_not_positive_definite_is_nan(S):
    nis, e, logdet = innovation_stats(np.ones(S.shape[0]), S)
    assert math.isnan(nis) and math.isnan(logdet) and np.isnan(e).all()
    with pytest.raises(np.linalg.LinAlgError):
        cholesky(S)
