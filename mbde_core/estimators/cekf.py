"""CEKF: continuous extended Kalman filter with trapezoidal integration (paper 003 sec. 3.1.1).

State x = [z, zd] with x' = f(x) (eq. 4). The continuous filter (Kalman-Bucy) is

    x^' = f(x^) + K (o - h(x^)),   K = P H^T Rc^-1,
    P'  = A P + P A^T + Qc - P H^T Rc^-1 H P,

with A the linearisation of eq. 5-6 (``transition_jacobian: simple`` uses
[[0, I], [0, 0]]; ``full`` the complete df/dx), Qc the acceleration-noise density and
Rc = R dt the measurement noise density of a reading held over one filter step dt. The
state equation is integrated with the implicit trapezoidal rule (eqs. 8-9),
x1 = x0 + dt/2 [F(x0) + F(x1)], F = f + K (o - h), solved by Newton-Raphson with the
approximate Jacobian of eq. 10, I - dt/2 (A - K H); the Riccati equation by exact
splitting (Van Loan for the linear part, the closed-form solution of P' = -P H^T Rc^-1 H P
for the measurement part). A reading acts only during the step at which it arrives: with sparse
readings the correction is applied over a small fraction of the time, which is why
paper 003 finds CEKF failing at low sensor rates (reproduced by ``mbde bench accuracy``).
"""
from __future__ import annotations

import numpy as np

from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.kalman import gate_rows, innovation_stats
from mbde_core.estimators.kalman_base import ReducedKalman
from mbde_core.estimators.noise import van_loan


class CEKF(ReducedKalman):
    name = "cekf"
    DEFAULTS = {"newton_iterations": 5}

    def __init__(self, mech, sensors, config, rng=None):
        super().__init__(mech, sensors, config, rng)
        self._saved = None

    def _f(self, x, q_guess):
        q, qd, ok = self.model.assemble(x, q_guess)
        zdd = self.model.accelerations(self.t, q, qd)[0]
        return np.concatenate([x[self.g :], zdd]), q, qd, ok

    def _step(self, x0, P0, dt, corr=None):
        """One trapezoidal step; corr = (names, o, R) adds K (o - h(x)) to the dynamics."""
        g = self.g
        A = self.model.transition_jacobian(self.t, x0, self.q, self.config["transition_jacobian"])
        Qc = np.zeros((2 * g, 2 * g))
        pn = self.config["plant_noise"]
        Qc[:g, :g] = np.eye(g) * pn.get("velocity_psd", 0.0)
        Qc[g:, g:] = np.eye(g) * pn["acceleration_psd"]
        K = H = Rc_inv = None
        q_guess = self.q

        def F(x, q_hint):
            fx, q, qd, ok = self._f(x, q_hint)
            if corr is not None:
                names, o, _ = corr
                qdd = self.model.accelerations(self.t, q, qd)[1] if self.sensors.uses_qdd(names) else None
                y = self.model.residual(names, o, self.model.predict_measurements(names, q, qd, qdd))
                fx = fx + K @ y
            return fx, q, qd, ok

        if corr is not None:
            names, o, R = corr
            qdd = self.model.accelerations(self.t, self.q, self.qd)[1] if self.sensors.uses_qdd(names) else None
            H = self.model.measurement_jacobian(names, self.t, self.q, self.qd, qdd)
            Rc_inv = np.linalg.inv(R * dt)
            K = P0 @ H.T @ Rc_inv
        F0, _, _, _ = F(x0, q_guess)
        x1 = x0 + dt * F0
        Jg = np.eye(2 * g) - 0.5 * dt * (A - (K @ H if K is not None else 0.0))
        q1 = q_guess
        for _ in range(int(self.config.get("newton_iterations", 5))):
            F1, q1, _, ok = F(x1, q1)
            G = x1 - x0 - 0.5 * dt * (F0 + F1)
            dx = np.linalg.solve(Jg, -G)
            x1 = x1 + dx
            if np.max(np.abs(dx)) < 1e-12 * max(1.0, np.max(np.abs(x1))):
                break
        # Riccati equation by exact splitting over the step: the linear part
        # P' = A P + P A^T + Qc (Van Loan), then the measurement part P' = -P H^T Rc^-1 H P,
        # whose exact solution over dt is (P^-1 + dt H^T Rc^-1 H)^-1 (Woodbury form below).
        Phi, Qd = van_loan(A, Qc, dt)
        P = Phi @ P0 @ Phi.T + Qd
        if K is not None:
            Rd = np.linalg.inv(dt * Rc_inv)  # = Rc / dt
            S = H @ P @ H.T + Rd
            P = P - P @ H.T @ np.linalg.solve(S, H @ P)
        P = 0.5 * (P + P.T)
        return x1, P

    def predict(self, dt: float) -> None:
        self._saved = (self.x.copy(), self.P.copy(), self.q.copy(), self.qd.copy(), self.t, dt)
        x1, P1 = self._step(self.x, self.P, dt)
        self.t += dt
        self.P = P1
        self._assemble_into(x1)

    def update(self, measurements, gates=None):
        names = [m.sensor for m in measurements]
        dims = [self.sensors[n].dim for n in names]
        o = np.concatenate([np.asarray(m.value, float) for m in measurements])
        R = self.measurement_covariance(names)
        qdd = self.model.accelerations(self.t, self.q, self.qd)[1] if self.sensors.uses_qdd(names) else None
        y = self.model.residual(names, o, self.model.predict_measurements(names, self.q, self.qd, qdd))
        H = self.model.measurement_jacobian(names, self.t, self.q, self.qd, qdd)
        S = H @ self.P @ H.T + R
        accepted, rejected, rows = gate_rows(names, dims, y, S, gates)
        if rows.size == 0 or self._saved is None:
            return UpdateResult([], rejected if rows.size == 0 else [])
        nis, e = innovation_stats(y[rows], S[np.ix_(rows, rows)])
        keep = [m for m in measurements if m.sensor in accepted]
        o_k = np.concatenate([np.asarray(m.value, float) for m in keep])
        R_k = self.measurement_covariance(accepted)
        # redo the last step with the continuous correction of these readings
        x0, P0, q0, qd0, t0, dt = self._saved
        self.x, self.P, self.q, self.qd, self.t = x0, P0, q0, qd0, t0
        x1, P1 = self._step(x0, P0, dt, corr=(accepted, o_k, R_k))
        self.t = t0 + dt
        self.P = P1
        self._assemble_into(x1)
        self._saved = None
        return UpdateResult(accepted, rejected, nis, int(rows.size), y[rows], e)
