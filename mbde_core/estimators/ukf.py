"""UKF: unscented Kalman filter in independent coordinates (paper 003 sec. 3.1.3, Wan & van der Merwe 2000).

State x = [z, zd], L = 2g. Sigma points chi_0 = x, chi_i = x +/- sqrt(L + lambda) S_i
(S = chol(P), i = 1..L), lambda = alpha^2 (L + kappa) - L, weights
W_0^m = lambda/(L+lambda), W_0^c = W_0^m + 1 - alpha^2 + beta, W_i = 1/(2(L+lambda)).
Each sigma point is a full multibody state (position problem, velocity problem), and all
2L+1 of them are propagated as ONE numpy batch with the forward-Euler transition of the
other observers (paper 003 eq. 12). The update redraws sigma points from (x^-, P^-),
predicts every sensor for the whole batch, and uses circular means for angle channels.
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import dynamics
from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.kalman import gate_rows, innovation_stats
from mbde_core.estimators.kalman_base import ReducedKalman
from mbde_core.sensors.base import wrap_angle


class UKF(ReducedKalman):
    name = "ukf"
    DEFAULTS = {"alpha": 1.0, "beta": 2.0, "kappa": -1.0}  # kappa < 0: Julier's 3 - L

    def __init__(self, mech, sensors, config, rng=None):
        super().__init__(mech, sensors, config, rng)
        L = 2 * self.g
        alpha, beta = config.get("alpha", 1.0), config.get("beta", 2.0)
        kappa = config.get("kappa", -1.0)
        if kappa is None or kappa < 0:
            kappa = 3.0 - L
        lam = alpha**2 * (L + kappa) - L
        self.gamma = np.sqrt(L + lam)
        self.Wm = np.full(2 * L + 1, 1.0 / (2 * (L + lam)))
        self.Wc = self.Wm.copy()
        self.Wm[0] = lam / (L + lam)
        self.Wc[0] = self.Wm[0] + 1 - alpha**2 + beta
        self.sigma_failures = 0

    def _sigma_points(self, x, P):
        try:
            S = np.linalg.cholesky(P)
        except np.linalg.LinAlgError:
            w, V = np.linalg.eigh(0.5 * (P + P.T))
            S = V * np.sqrt(np.clip(w, 0.0, None))
        D = self.gamma * S.T  # rows = scaled columns of S
        return np.vstack([x, x + D, x - D])

    def _assemble_batch(self, X):
        N = X.shape[0]
        q, qd, ok = self.model.assemble(X, np.broadcast_to(self.q, (N, self.mech.n)))
        if not ok.all():
            self.sigma_failures += int((~ok).sum())
            q[~ok], qd[~ok] = self.q, self.qd  # fall back to the mean's configuration
        return q, qd

    def predict(self, dt: float) -> None:
        g = self.g
        X = self._sigma_points(self.x, self.P)
        q, qd = self._assemble_batch(X)
        zdd = dynamics.evaluate(self.mech, self.t, q, qd).zdd
        Xp = np.hstack([X[:, :g] + dt * X[:, g:], X[:, g:] + dt * zdd])
        x = self.Wm @ Xp
        dX = Xp - x
        self.P = (dX.T * self.Wc) @ dX + self.plant_noise(dt)
        self.P = 0.5 * (self.P + self.P.T)
        self.t += dt
        self._assemble_into(x)

    def update(self, measurements, gates=None):
        names = [m.sensor for m in measurements]
        dims = [self.sensors[n].dim for n in names]
        o = np.concatenate([np.asarray(m.value, float) for m in measurements])
        X = self._sigma_points(self.x, self.P)
        q, qd = self._assemble_batch(X)
        qdd = dynamics.evaluate(self.mech, self.t, q, qd).qdd if self.sensors.uses_qdd(names) else None
        Y = np.concatenate([self.sensors[n].h(q, qd, qdd) for n in names], axis=1)  # (2L+1, d)
        ang = np.concatenate([self.sensors[n].angular for n in names])
        y_mean = self.Wm @ Y
        if ang.any():  # circular mean of angle channels
            y_mean[ang] = np.arctan2(self.Wm @ np.sin(Y[:, ang]), self.Wm @ np.cos(Y[:, ang]))
        dY = Y - y_mean
        dY[:, ang] = wrap_angle(dY[:, ang])
        dX = X - self.x
        R = self.measurement_covariance(names)
        S = (dY.T * self.Wc) @ dY + R
        Pxy = (dX.T * self.Wc) @ dY
        y = self.model.residual(names, o, y_mean)
        accepted, rejected, rows = gate_rows(names, dims, y, S, gates)
        if rows.size == 0:
            return UpdateResult([], rejected)
        y, S, Pxy = y[rows], S[np.ix_(rows, rows)], Pxy[:, rows]
        K = np.linalg.solve(S, Pxy.T).T
        self.P = self.P - K @ S @ K.T
        self.P = 0.5 * (self.P + self.P.T)
        self._assemble_into(self.x + K @ y)
        nis, e = innovation_stats(y, S)
        return UpdateResult(accepted, rejected, nis, int(rows.size), y, e)

    def diagnostics(self) -> dict:
        return {"assembly_failures": self.failures, "sigma_point_failures": self.sigma_failures}
