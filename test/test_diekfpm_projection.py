"""DIEKFpm's constraint projection (perfect_measurements.project, a chord iteration)
against plain Gauss-Newton (H re-linearised at every pass) on the five-bar and the
four-bar: both end on the constraint manifold, at points that differ by O(|dX|^2) (within
size^2 in rad and rad/s for violations of size 1e-6 (one prediction) to 3e-2; measured
4e-9 at 1e-3), far below any filter's sigma."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults
from mbde_core.estimators.kalman.perfect_measurements import _jacobian, constraints, project
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors


def _gauss_newton(model, iso, X):
    n = model.mech.n
    W = np.where(np.diag(iso) > 0, np.diag(iso), 1.0)
    for _ in range(50):
        q, qd = X[:n], X[n:]
        phi, J, ctx = model.constraint_values(q)
        h = np.concatenate([phi, J @ qd])
        if np.max(np.abs(h)) <= 1e-14:
            break
        H = _jacobian(model, q, qd, J, ctx)
        X = X - (H * W).T @ np.linalg.solve((H * W) @ H.T, h)
    return X


@pytest.mark.parametrize("name, body", [("fivebar", "coupler1"), ("fourbar", "coupler")])
@pytest.mark.parametrize("size", [1e-6, 1e-3, 3e-2])
def test_chord_projection_matches_gauss_newton(name, body, size):
    m = load_mechanism(mech_path(name))
    ss = load_sensors(parse_yaml(f"- {{name: gyro, type: gyroscope, body: {body}, rate: 200, noise: {{sigma: 0.01}}}}"), m)
    est = make_estimator("diekfpm", m, ss, dict(defaults("diekfpm"), step=0.005))
    g = len(m.independent)
    est.reset(0.0, InitialState(m.q0[m.independent], np.full(g, 2.0), np.full(g, 0.01), np.full(g, 0.1), m.q0, None))
    rng = np.random.default_rng(3)
    iso = np.diag(np.concatenate([np.full(m.n, 1e-6), np.full(m.n, 1e-2)]))
    for _ in range(5):
        X = est.X + size * rng.standard_normal(est.X.shape)
        a, b = project(est.model, iso, X), _gauss_newton(est.model, iso, X)
        assert np.max(np.abs(constraints(est.model, a, False)[0])) <= 1e-12
        np.testing.assert_allclose(a, b, rtol=0, atol=max(size * size, 1e-12))
