"""UKF: unscented Kalman filter in independent coordinates (paper 003 sec. 3.1.3, Wan & van der Merwe 2000).

State x = [z, zd], L = 2g. Sigma points chi_0 = x, chi_i = x +/- sqrt(L + lambda) S_i
(S = chol(P), i = 1..L), lambda = alpha^2 (L + kappa) - L, weights
W_0^m = lambda/(L+lambda), W_0^c = W_0^m + 1 - alpha^2 + beta, W_i = 1/(2(L+lambda)).
Each sigma point is a full multibody state (position problem, velocity problem), and all
2L+1 of them are propagated together with the forward-Euler transition of the other
observers (paper 003 eq. 12, ``transition: euler``), with its exact solution for an
acceleration held over the step (``constant_acceleration``), or, by default (``heun``),
with Heun's second stage at that prediction, whose 2L+1 points are assembled near the
mean and their dynamics evaluated as one more batch (:mod:`transition`). The update redraws sigma points from (x^-, P^-),
predicts every sensor for the whole batch (one vectorised sensor evaluation), and uses
circular means for angle channels.

Speed: chi_0 is the mean, whose full state (q, qd, accelerations, R) the filter keeps, so
only the 2L other points are assembled, each by a position problem started from the
mean's q + R (z_i - z) (one Newton iteration usually reaches the tolerance) followed by
one generated kernel call for the velocities and, in the prediction, the dynamics
(:meth:`ReducedModel.assemble_near`). The new mean is assembled from the second-order
predictor of the path from the previous mean. Cholesky factors of the small covariance
(L <= 4) and the sigma points built from them are computed on Python floats, and so are
the readings of gyroscopes and accelerometers at the few sigma points
(:mod:`ukf_readings`); a single innovation channel uses scalar algebra.

Inputs (option ``inputs``, :mod:`input_states`; ``auto`` by default: none without force
limits): x = [z, zd, u], L = 2g + k; each sigma point's accelerations gain B(z_i) u_i (B
from R at its configuration; qdd += R B u), u is carried unchanged through the
prediction and gains diag(psd) dt of plant noise. Input jumps (``input_jump_nis``,
:meth:`UKF._input_jump`) test the statistical linearisation of the readings, and an
update beyond an input's ``limit`` is projected back (:func:`input_states.project_inputs`).
On adekf_slider_crank (5 N m motor, slider accelerometer) the UKF with the input but
without jumps lost the crank where the motor leaves its limit at 18 ms (RMSE 1.3 rad);
with jumps and the bound: 0.0103 rad, mean NEES 2.1. The prediction's sigma points keep
the mean's acceleration in the unknown inputs' directions (``absorb_inputs``, on by
default, :meth:`UKF._absorbed`): an estimated input takes the state dependence of the force
it stands for (a speed controller's torque cancels the inertia's variation with the crank
angle), so the points' spread along z, zd does not pass through the model's df/dx there.
Through it, the UKF on adekf_slider_crank (1 kHz, 0.5 ms, 3 s, the trust bench's runs 0-2) sat
0.3 ms ahead of the truth (bias +0.015 rad, +0.4 rad/s) with errorEKF's covariance: NEES/dim
4.8-4.9, coverage 25 %; without: 0.70-0.72, 95 %, as errorEKF, DEKF, VI-EKF (the DEKF with
the full transition Jacobian 5.5: the same cause).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.errors import ConfigError
from mbde_core.estimators.base import UpdateResult
from mbde_core.engine import kinematics
from mbde_core.estimators.kalman.input_states import (InputStates, absorbing, jump_directions, jump_variance,
                                                     project_inputs, unabsorbed)
from mbde_core.engine.linalg import solve_one
from mbde_core.estimators.kalman.adaptive_noise import AdaptivePlantNoise
from mbde_core.estimators.kalman.algebra import cholesky_floats, cholesky, gate, reading_noise, update_result
from mbde_core.estimators.kalman.base import ReducedKalman
from mbde_core.estimators.kalman.transition import ExplicitTransition, heun_step, position_step
from mbde_core.estimators.kalman.ukf_readings import SigmaReadings
from mbde_core.sensors.base import wrap_angle
from mbde_core.estimators.options.common import KalmanOptions, input_field
from mbde_core.estimators.traits import KALMAN_TUNABLE, Traits


@dataclass(frozen=True)
class UKFOptions(KalmanOptions):
    """The UKF's options: the common ones, and the sigma points' spread."""

    alpha: float = 1.0               # sigma-point spread (> 0)
    beta: float = 2.0                # prior knowledge of the distribution (2: Gaussian)
    kappa: float = -1.0              # < 0: Julier's 3 - L
    transition: str = "heun"         # transition.py
    inputs: tuple | str = input_field()  # auto: the rule's (none without force limits)
    input_jump_nis: float = 16.0
    absorb_inputs: bool = True       # the unknown inputs take the known forces' state dependence (_absorbed)


class UKF(AdaptivePlantNoise, ExplicitTransition, InputStates, ReducedKalman):
    name = "ukf"
    traits = Traits(cost=1.5, color=(1.00, 0.50, 0.05, 1.0), slot=2, tunable=KALMAN_TUNABLE, input_states=True, known_inputs=True,
                    follower=True)
    Options = UKFOptions

    @classmethod
    def validate_config(cls, cfg, file, path):

        if not cfg["alpha"] > 0:
            raise ConfigError(file, f"{path}.alpha", f"the sigma-point spread must be > 0, got {cfg['alpha']}")
        if not cfg["beta"] >= 0:
            raise ConfigError(file, f"{path}.beta", f"must be >= 0, got {cfg['beta']}")
        super().validate_config(cfg, file, path)  # transition, inputs

    def __init__(self, mech, sensors, options, rng=None):
        super().__init__(mech, sensors, options, rng)
        self._init_inputs()
        L = 2 * self.g + self.k
        alpha, beta, kappa = options.alpha, options.beta, options.kappa
        if kappa < 0:
            kappa = 3.0 - L
        lam = alpha**2 * (L + kappa) - L
        self.gamma = np.sqrt(L + lam)
        self.Wm = np.full(2 * L + 1, 1.0 / (2 * (L + lam)))
        self.Wc = self.Wm.copy()
        self.Wm[0] = lam / (L + lam)
        self.Wc[0] = self.Wm[0] + 1 - alpha**2 + beta
        self.sigma_failures = 0
        self._angular = {}
        self._readings = SigmaReadings(mech, sensors)

    def _sigma_points(self, x, P):
        if P.shape[0] <= 4:  # on floats: the same products and sums as below
            S = cholesky_floats(P.tolist())
            if S is not None:
                gam, xl, n = float(self.gamma), x.tolist(), len(S)
                D = [[gam * S[k][j] for k in range(n)] for j in range(n)]  # rows = scaled columns of S
                return np.array([xl] + [[a + d for a, d in zip(xl, Dj)] for Dj in D]
                                + [[a - d for a, d in zip(xl, Dj)] for Dj in D])
        try:
            S = cholesky(P)
        except np.linalg.LinAlgError:
            w, V = np.linalg.eigh(0.5 * (P + P.T))
            S = V * np.sqrt(np.clip(w, 0.0, None))
        D = self.gamma * S.T  # rows = scaled columns of S
        return np.vstack([x, x + D, x - D])

    def reset(self, t, init) -> None:
        super().reset(t, init)
        self._reset_inputs()
        self._span = 0.0  # s since the last update (the input jumps' directions)

    def _assemble_batch(self, X, accelerations: bool, absorbed: bool = False):
        """(q, qd, zdd, qdd) of the sigma points X (row 0 = the mean); failures counted.
        absorbed: zdd + B u with the state dependence in the unknown inputs' directions
        dropped (:meth:`_absorbed`, the prediction's; qdd then without the inputs)."""
        if self.k:
            rs = []  # R of the rows where the kernels gave it (no second evaluation in with_inputs)
            q, qd, zdd, qdd, ok = self.model.assemble_near(self.t, X[:, : 2 * self.g], self._full(), accelerations,
                                                           center=0, r_out=rs)
            if accelerations:
                Rs = np.array(rs) if rs else None
                if absorbed:
                    zdd = self._absorbed(q, zdd, X[:, 2 * self.g:], Rs)
                else:
                    zdd, qdd = self.with_inputs(q, zdd, qdd, X[:, 2 * self.g:], Rs)
        else:
            q, qd, zdd, qdd, ok = self.model.assemble_near(self.t, X, self._full(), accelerations, center=0)
        if not ok.all():
            self.sigma_failures += int((~ok).sum())  # they took the mean's configuration
        return q, qd, zdd, qdd

    def _angular_mask(self, names):
        key = tuple(names)
        if key not in self._angular:
            self._angular[key] = np.concatenate([self.sensors[n].angular for n in names])
        return self._angular[key]

    def predict(self, dt: float) -> None:
        if self.k:
            return self._predict_inputs(dt)
        g = self.g
        x0 = self.x
        X = self._sigma_points(x0, self.P)
        zdd = self._assemble_batch(X, True)[2]
        Xp = np.hstack([position_step(self.options.transition, X[:, :g], X[:, g:], zdd, dt), X[:, g:] + dt * zdd])
        if self.options.transition == "heun":  # second stage at the predicted points
            zdd1 = self.model.assemble_near(self.t + dt, Xp, self._full(), True)[2]
            Xp = heun_step(X, zdd, zdd1, dt, g)
        self._predicted(x0, Xp, self.plant_noise(dt), dt)

    def _predict_inputs(self, dt: float) -> None:
        """:meth:`predict` of [z, zd, u]: the inputs' accelerations at every stage, u kept."""
        g, g2 = self.g, 2 * self.g
        x0 = self.x
        X = self._sigma_points(x0, self.P)
        zdd = self._assemble_batch(X, True, absorbed=True)[2]
        Xp = np.hstack([position_step(self.options.transition, X[:, :g], X[:, g:g2], zdd, dt), X[:, g:g2] + dt * zdd])
        if self.options.transition == "heun":
            rs = []
            q1, _, zdd1, _, _ = self.model.assemble_near(self.t + dt, Xp, self._full(), True, r_out=rs)
            zdd1 = self._absorbed(q1, zdd1, X[:, g2:], np.array(rs) if rs else None)
            Xp = heun_step(X[:, :g2], zdd, zdd1, dt, g)
        self._predicted(x0, np.hstack([Xp, X[:, g2:]]), self.augmented_noise(dt), dt)

    def _absorbed(self, q, zdd, U, Rs=None):
        """zdd + B u (N, g) of the sigma points (q (N, n), zdd (N, g) of the known forces, row
        0 the mean's; inputs U (N, k)) with the state dependence of their accelerations in
        the unknown inputs' directions dropped (:func:`input_states.unabsorbed`: an unknown
        input takes the force's dependence on the state): each point keeps the mean's
        acceleration, the inputs' own deviations through the mean's B, and what the inputs
        cannot produce (with g = k: the double integrator of F = [[I, dt I], [0, I]] plus
        B u). ``absorb_inputs`` off, or no unknown input on a coordinate without a measured
        torque (:func:`input_states.absorbing`): zdd + B(z_i) u_i. Rs (N, n, g): the sigma
        points' R where the position kernels gave it (else evaluated here)."""
        cols = absorbing(self) if self.options.absorb_inputs else []
        zdd = self.with_inputs(q, zdd, None, U, Rs)[0]
        if not cols:
            return zdd
        R = Rs[0] if Rs is not None else kinematics.r_matrix(self.mech, q[0])
        Mbar = R.T @ self.mech.M @ R
        B = self.input_gain(R)
        own = (U - U[0]) @ B.T  # the inputs' deviations, through the mean's B
        return zdd[0] + own + unabsorbed(zdd - zdd[0] - own, B[:, cols], Mbar)

    def _predicted(self, x0, Xp, Qd, dt: float) -> None:
        """Mean and covariance of the propagated sigma points Xp, plus the plant noise Qd."""
        g = self.g
        x = self.Wm @ Xp
        dX = Xp - x
        P = (dX.T * self.Wc) @ dX + Qd
        self.P = 0.5 * (P + P.T)
        guess = self.model.guess(self._full(), x[:g] - x0[:g], second_order=True)
        self.advance_clock(dt)
        self._span += dt
        self._assemble_into(x, guess)

    def update(self, measurements, gates=None):
        g = self.g
        names = [m.sensor for m in measurements]
        dims = [self.sensors[n].dim for n in names]
        o = np.concatenate([np.asarray(m.value, float) for m in measurements]) if len(measurements) > 1 \
            else np.asarray(measurements[0].value, float)
        X = self._sigma_points(self.x, self.P)
        q, qd, _, qdd = self._assemble_batch(X, self.sensors.uses_qdd(names))
        Y = self._readings(names, q, qd, qdd)  # (2L+1, d)
        ang = self._angular_mask(names)
        y_mean = self.Wm @ Y
        dY = Y - y_mean
        if ang.any():  # circular mean of angle channels
            y_mean[ang] = np.arctan2(self.Wm @ np.sin(Y[:, ang]), self.Wm @ np.cos(Y[:, ang]))
            dY = Y - y_mean
            dY[:, ang] = wrap_angle(dY[:, ang])
        dX = X - self.x
        R = reading_noise(self.measurement_covariance(names), measurements, dims)
        dYw = dY.T * self.Wc
        S = dYw @ dY + R
        Pxy = (dX.T * self.Wc) @ dY
        y = self.model.residual(names, o, y_mean)
        if self.k and self.options.input_jump_nis:
            S, Pxy = self._input_jump(y, S, Pxy)
        self._span = 0.0
        dist = []
        accepted, rejected, rows = gate(names, dims, y, S, gates, dist)
        if rows is not None:
            if rows.size == 0:
                return UpdateResult([], rejected, distances=dist)
            y, S, Pxy = y[rows], S[np.ix_(rows, rows)], Pxy[:, rows]
        if S.shape[0] == 1:
            s = S[0, 0]
            K = Pxy / s
            P = self.P - (s * K) @ K.T
        else:
            K = solve_one(S, Pxy.T).T  # numpy.linalg.solve's LAPACK routine without its checks
            P = self.P - K @ S @ K.T
        self.P = 0.5 * (P + P.T)
        dx = K @ y
        if self.k:  # the inputs within their limits (input_states.project_inputs)
            dx = project_inputs(dx, self.P, np.arange(2 * g, 2 * g + self.k), self.u, self._u_limit)
        self._assemble_into(self.x + dx, self.model.guess(self._full(), dx[:g]))
        res = update_result(accepted, rejected, y, S)
        res.distances = dist
        return self.learned(res, y, R, S)

    def _input_jump(self, y, S, Pxy):
        """(S, Pxy) after a jump of the unknown inputs the readings ask for
        (:func:`jump_variance`), P raised in place of the sigma points' spread (their
        readings are linear in it to first order): with the statistical linearisation
        H = Pxy^T P^-1 (Lefebvre et al. 2002), the jump's directions Gamma (a jump at the
        previous update moved z and zd since, :func:`jump_directions`), H_a = H Gamma and
        dV the added variances: P += Gamma dV Gamma^T, Pxy += Gamma dV H_a^T,
        S += H_a dV H_a^T. A gyroscope alone sees a jump only through Gamma's z, zd rows: on
        issue 42's speed-step slider-crank (PI controller at its 2 N m limit, torque from
        -2 to +2 N m in 20 ms) the UKF rejected the readings after such a swing, lost the
        crank and came back on its mirror (1.18 rad)."""
        g2, ku = 2 * self.g, self.k_unknown
        if not ku:
            return S, Pxy
        try:
            H = np.linalg.solve(self.P, Pxy).T
        except np.linalg.LinAlgError:
            return S, Pxy
        B = self.input_gain(self._full().R)[:, :ku] if self._span else np.zeros((self.g, ku))
        G = jump_directions(len(self.x), self.g, g2, B, self._span)
        Ha = H @ G
        idx = np.arange(g2, g2 + ku)
        Pa = self.P[idx, idx]
        V = jump_variance(Pa, y, S, Ha, self._u_sigma0[:ku] ** 2, self.options.input_jump_nis)
        if V is None:
            return S, Pxy
        dV = V - Pa
        self.P = self.P + (G * dV) @ G.T
        Pxy = Pxy + (G * dV) @ Ha.T
        self.input_jumps += 1
        return S + (Ha * dV) @ Ha.T, Pxy

    def estimate(self):
        return self.input_snapshot(super().estimate())

    def diagnostics(self) -> dict:
        out = {"assembly_failures": self.failures, "sigma_point_failures": self.sigma_failures}
        if self.k:
            out["input_jumps"] = self.input_jumps
        return {**out, **self.adaptive_diagnostics()}
