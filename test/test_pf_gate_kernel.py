"""The compiled gate d^2 of a scalar reading (compiled.gate_d2) equals the numpy code of
likelihood.predictive_d2 (d^2 is dimensionless: compared to 1e-9 absolute)."""
import numpy as np
import pytest

from mbde_core.estimators.particle import compiled, likelihood
from mbde_core.sensors.base import wrap_angle

pytest.importorskip("numba")


def _residual(angular):
    return (lambda a, b: wrap_angle(np.asarray(a) - np.asarray(b))) if angular else (lambda a, b: np.asarray(a) - np.asarray(b))


@pytest.mark.parametrize("N", [5, 17, 300, 5000])
@pytest.mark.parametrize("angular", [False, True])
@pytest.mark.parametrize("equal_weights", [False, True])
def test_gate_d2_matches_numpy(N, angular, equal_weights):
    rng = np.random.default_rng(N + 3 * angular)
    p = rng.normal(3.0 if angular else 0.2, 0.5, N)  # predictions [rad]: some wrap across pi
    logw = np.full(N, -np.log(N)) if equal_weights else rng.normal(0, 2, N)
    logw = logw - np.log(np.exp(logw - logw.max()).sum()) - logw.max()
    w = np.exp(logw)
    W = np.array([[1.0 / 0.05]])
    r = _residual(angular)(np.array([3.1]), p[:, None]) * W[0, 0]
    ll = -0.5 * r[:, 0] ** 2
    ref = likelihood.predictive_d2(ll, logw, p[:, None], _residual(angular), W, w=w)
    got = compiled.gate_d2(ll, logw, w, p, W[0, 0], angular, likelihood.candidates(logw))
    assert got == pytest.approx(ref, rel=1e-9, abs=1e-9)
