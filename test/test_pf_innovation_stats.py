"""The PF update's NIS, whitened innovations and log det S computed block by block
(likelihood.innovation_stats) equal the full block-diagonal Cholesky's (to rounding)."""
import numpy as np
import pytest
import scipy.linalg

from mbde_core.estimators.particle.likelihood import innovation_stats


def _full(ys, blocks):
    S = scipy.linalg.block_diag(*blocks)
    L = np.linalg.cholesky(S)
    e = np.linalg.solve(L, np.concatenate(ys))
    return float(e @ e), e, float(2.0 * np.log(np.diagonal(L)).sum())


@pytest.mark.parametrize("dims", [(1,), (3,), (1, 1), (1, 3, 2), (6, 1)])
def test_blocks_equal_the_full_factor(dims):
    rng = np.random.default_rng(4)
    ys, blocks = [], []
    for d in dims:
        A = rng.standard_normal((d, d)) * 0.3
        blocks.append(A @ A.T + np.diag(rng.uniform(0.01, 2.0, d)))  # units^2 of the reading
        ys.append(rng.standard_normal(d))
    nis, e, logdet = innovation_stats(ys, blocks)
    nis0, e0, logdet0 = _full(ys, blocks)
    assert nis == pytest.approx(nis0, rel=1e-10, abs=1e-12)
    assert logdet == pytest.approx(logdet0, rel=1e-10, abs=1e-10)
    np.testing.assert_allclose(e, e0, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bad", [np.array([[0.0]]), np.array([[-1.0]]), np.array([[1.0, 2.0], [2.0, 1.0]])])
def test_a_block_not_positive_definite_gives_none(bad):
    ys = [np.ones(1), np.ones(bad.shape[0])]
    assert innovation_stats(ys, [np.eye(1), bad]) == (None, None, None)
