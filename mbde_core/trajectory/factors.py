"""The smoother's factors (paper 003 eq. 23) as whitened residual rows.

States x_i = [z_i, zd_i, zdd_i] (g each, b = 3g; with m input states u_i after them, b =
3g + m, :mod:`.inputs`) on the grid t_i = t0 + i dt. Each factor is a Gaussian N(r; 0, I)
of whitened residuals r (cost 1/2 |r|^2):

- ``prior`` phi_ini (step 0): r = S0 [z_0 - z0bar (angles wrapped), zd_0 - zd0bar],
  S0^T S0 = P0^-1, the initial guess's information (2g rows; 3g rows with zdd_0 for the
  marginalised past of a window, :mod:`.windowed`);
- ``eom`` phi_eom (every step; paper 000 eqs. 11-13, paper 003 eq. 3):
  r = (zdd_i - f(t_i, z_i, zd_i)) / sigma_a with sigma_a^2 = q_a / dt: the acceleration
  noise of density q_a [unit^2/s^3] (the filters' ``plant_noise.acceleration_psd``)
  averaged over one step, so that its effect on the velocity, dt^2 sigma_a^2 = q_a dt
  per step, equals the filters' (g rows); with input states u_i, f gains G u_i
  (:mod:`.inputs`: dr/du = -G / sigma_a);
- ``integrator`` phi_i (steps i, i+1; paper 000 eq. 14, paper 003 eq. 12), Newmark's
  family (beta, gamma):

      z_{i+1}  = z_i + dt zd_i + dt^2 ((1/2 - beta) zdd_i + beta zdd_{i+1})
      zd_{i+1} = zd_i + dt ((1 - gamma) zdd_i + gamma zdd_{i+1})

  ``linear_acceleration`` (beta 1/6, gamma 1/2, the default) is exact when the
  acceleration is linear between steps (z cubic); ``trapezoidal`` (1/4, 1/2);
  ``euler`` (1/2, 0) is paper 003 eq. 12. Paper 000 makes this factor a Dirac delta; here
  it is a Gaussian of standard deviations eps sigma_a (dt^2/2, dt) (an acceleration error
  eps sigma_a held over one step, eps = ``integrator_relaxation``, 1e-3): a hard
  constraint to every practical purpose that keeps the normal equations well conditioned.
  When sigma_a is estimated from the data (:mod:`.noise`) it can fall to the scheme's own
  error, which then sets these sigmas: s = hypot(eps sigma_a, d) with d the scheme's
  error as an acceleration held over the step (for ``linear_acceleration`` the velocity
  error dt^3 z^(4) / 12 = dt d and the position error dt^4 z^(4) / 24 = dt^2 / 2 d, d =
  dt^2 z^(4) / 12 ~ (second difference of the model's accelerations) / 12). Its rows are
  linear in the states, with constant Jacobians (2g rows);
- ``obs:<sensor>`` phi_o (paper 000 eq. 10): r = W (h(q_i, qd_i, qdd_i) - o) with the
  reading o fused at its grid step, angle channels wrapped, W^T W = Sigma_s^-1.
"""
from __future__ import annotations

import numpy as np

from mbde_core.sensors.base import wrap_angle
from mbde_core.trajectory.normal import RowBlock

SCHEMES = {"linear_acceleration": (1.0 / 6.0, 0.5), "trapezoidal": (0.25, 0.5), "euler": (0.5, 0.0)}


def prior_rows(X, g: int, mean: np.ndarray, sqrt_info: np.ndarray, angular: np.ndarray) -> RowBlock:
    """phi_ini at step 0 on the first m = len(mean) entries of x_0 ([z, zd] (m = 2g) or,
    for a window's marginalised past, [z, zd, zdd] (m = 3g)): sqrt_info (m, m) = S0."""
    m = len(mean)
    e = X[0, :m] - mean
    e[:g] = np.where(angular, wrap_angle(e[:g]), e[:g])
    Ji = np.zeros((1, m, X.shape[1]))
    Ji[0, :, :m] = sqrt_info
    return RowBlock("prior", np.array([0]), (sqrt_info @ e)[None], Ji, linear=True)


def eom_rows(X, g: int, f: np.ndarray, F: np.ndarray, sigma_a: np.ndarray, G: np.ndarray | None = None) -> RowBlock:
    """phi_eom at every step: f (N, g) and F = df/d[z, zd] (N, g, 2g) from the model (with
    the inputs' G u if any); G (N, g, m): dzdd/du of the input states X[:, 3g:]."""
    N, b = X.shape
    w = 1.0 / np.asarray(sigma_a, dtype=float).reshape(g)
    r = (X[:, 2 * g:3 * g] - f) * w
    Ji = np.empty((N, g, b))
    Ji[:, :, :2 * g] = -F * w[None, :, None]
    Ji[:, :, 2 * g:3 * g] = np.diag(w)
    if b > 3 * g:
        Ji[:, :, 3 * g:] = -G * w[None, :, None]
    return RowBlock("eom", np.arange(N), r, Ji)


class Integrator:
    """phi_i between consecutive steps (Newmark scheme, see the module docstring)."""

    def __init__(self, g: int, dt: float, scheme: str, sigma_a: np.ndarray, relaxation: float, b: int | None = None,
                 discretization=None):
        beta, gamma = SCHEMES[scheme]
        b = 3 * g if b is None else int(b)  # state size (input states after zdd: zero columns)
        sa = relaxation * np.asarray(sigma_a, dtype=float).reshape(g)
        sz = szd = sa
        if discretization is not None:  # the scheme's own error as accelerations over the step (z rows, zd rows)
            d = np.broadcast_to(np.asarray(discretization, dtype=float), (2, g))
            sz, szd = np.hypot(sa, d[0]), np.hypot(sa, d[1])
        self.g = g
        wz = 1.0 / (sz * dt * dt / 2.0)
        wzd = 1.0 / (szd * dt)
        I = np.eye(g)
        Z = np.zeros((g, g))
        # residual = A x_i + B x_{i+1}, rows [z; zd]
        A = np.block([[-I, -dt * I, -dt * dt * (0.5 - beta) * I], [Z, -I, -dt * (1.0 - gamma) * I]])
        B = np.block([[I, Z, -dt * dt * beta * I], [Z, I, -dt * gamma * I]])
        W = np.diag(np.concatenate([wz, wzd]))
        pad = np.zeros((2 * g, b - 3 * g))
        self.A, self.B = np.hstack([W @ A, pad]), np.hstack([W @ B, pad])

    def rows(self, X) -> RowBlock:
        N = X.shape[0]
        if N < 2:
            g, b = self.g, self.A.shape[1]
            return RowBlock("integrator", np.zeros(0, dtype=np.intp), np.zeros((0, 2 * g)), np.zeros((0, 2 * g, b)),
                            np.zeros((0, 2 * g, b)))
        r = X[:-1] @ self.A.T + X[1:] @ self.B.T
        K = N - 1
        return RowBlock("integrator", np.arange(K), r, np.broadcast_to(self.A, (K,) + self.A.shape),
                        np.broadcast_to(self.B, (K,) + self.B.shape), linear=True)


def observation_rows(model, ev, sensor_rows, b: int | None = None, scale=None) -> RowBlock:
    """phi_o of one sensor's readings (:class:`mbde_core.trajectory.readings.SensorRows`);
    b: the state size (input states after zdd: zero columns); scale (d,): its channels'
    sigmas multiplied by these (an estimated noise level) or None."""
    idx = sensor_rows.idx
    h, H = model.observe(sensor_rows.name, ev, idx)
    e = model.innovation(sensor_rows.name, sensor_rows.values, h)
    W = sensor_rows.whiten if scale is None else np.diag(1.0 / np.asarray(scale, dtype=float)) @ sensor_rows.whiten
    J = np.einsum("ij,kjl->kil", W, H)
    if b is not None and b > J.shape[2]:
        J = np.concatenate([J, np.zeros(J.shape[:2] + (b - J.shape[2],))], axis=2)
    return RowBlock("obs:" + sensor_rows.name, idx, e @ W.T, J)
