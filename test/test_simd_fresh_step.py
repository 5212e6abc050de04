"""The vectorised RK4 step without a known start acceleration (rk4_block_fresh: qdd computed
block by block in the same pass) gives exactly what the step given qdd_block's qdd gives,
also for particles the vector loop hands to the scalar code (REDO)."""
import numpy as np
import pytest

from conftest import random_states
from mbde_core.engine import fastpath, numba_cache, simd_kernels


pytestmark = [pytest.mark.skipif(numba_cache.numba() is None, reason="numba not importable"),
              pytest.mark.usefixtures("split_at_any_size")]  # ranges split at any size (conftest)


@pytest.mark.parametrize("threads", [1, 2])
def test_fresh_step_equals_the_step_given_its_qdd(mechanisms, threads):
    m = mechanisms["fourbar_pf"]
    mod = simd_kernels.load(m)
    assert mod is not None
    K = fastpath.kernels(m)
    N = 5000
    q, qd = random_states(m, N, 3)
    extra = np.random.default_rng(2).normal(0.0, 40.0, (N, 1))
    extra[[7, 4000]] = [[4e4], [-6e4]]  # two REDO particles (test_simd_kernels)
    Q, QD = fastpath.soa(q, K.n), fastpath.soa(qd, K.n)
    QDD = np.empty((K.n, N))
    mod.qdd_block(Q, QD, tuple(float(x) for x in K.time_values(0.0)), QDD, 0, N)
    a = simd_kernels.rk4_step(m, 0.0, q, qd, None, 0.005, extra, threads)
    b = simd_kernels.rk4_step(m, 0.0, q, qd, QDD.T, 0.005, extra, threads)
    for x, y in zip(a[:4], b[:4]):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(a[4].tr, b[4].tr):
        np.testing.assert_array_equal(x, y)
