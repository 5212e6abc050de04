"""CEKF: continuous extended Kalman filter with trapezoidal integration (paper 003 sec. 3.1.1).

State x = [z, zd] with x' = f(x) (eq. 4). The continuous filter (Kalman-Bucy) is

    x^' = f(x^) + K (o - h(x^)),   K = P H^T Rc^-1,
    P'  = A P + P A^T + Qc - P H^T Rc^-1 H P,

with A the linearisation of eq. 5-6 (``transition_jacobian: simple`` uses
[[0, I], [0, 0]]; ``full`` the complete df/dx), Qc the acceleration-noise density and
Rc = R dt the measurement noise density of a reading held over one filter step dt. The
state equation is integrated with the implicit trapezoidal rule (eqs. 8-9),
x1 = x0 + dt/2 [F(x0) + F(x1)], F = f + K (o - h), solved by Newton-Raphson with the
approximate Jacobian of eq. 10, Jg = I - dt/2 (A - K H); the Riccati equation by exact
splitting (Van Loan for the linear part, the closed-form solution of P' = -P H^T Rc^-1 H P
for the measurement part). A reading acts only during the step at which it arrives: with sparse
readings the correction is applied over a small fraction of the time, which is why
paper 003 finds CEKF failing at low sensor rates (reproduced by ``mbde bench accuracy``).

Reading time (``correction_at``): the paper's trapezoid applies the correction K (o - h)
at both ends of the step [t_{k-1}, t_k], so the reading o of t_k is also compared with the
state of t_{k-1}, a lag of dt/2 that dominates on fast linkages (mean NEES 45 on the
five-bar, 4e6 on the paper-000 rig, 99 on a 1 kHz encoder: ``correction_at: both_ends``,
config/estimators/paper003.yaml). The default ``reading`` applies it at t_k only and
integrates the state equation by the same splitting as the Riccati equation (below): the
dynamics over the step by the trapezoidal rule (the prediction x^-, P^- = Phi P Phi^T + Qd),
then the correction x' = K (o - h(x)) over the step by implicit Euler with the gain of the
reading's time, K = P^- H^T Rc^-1 (H at x^-):

    x1 = x^- + dt K (o - h(x1)) = x^- + P^- H^T R^-1 (o - h(x1)),

solved by Newton-Raphson with Jg = I + P^- H^T R^-1 H (its first step from x^- is the
discrete Kalman update x^- + P^- H^T S^-1 (o - h(x^-)), exact for a linear h; the next ones
re-evaluate h at the iterate). The covariance is the Riccati equation's measurement part,
Joseph form with H at x^-. Why split (measured on paper 004's motor-driven slider-crank,
``mbde bench transfer``): with the correction inside the trapezoid, x1 = x0 + dt/2 [f(x0) +
f(x1)] + dt K (o - h(x1)), and K, H of t_{k-1} (the crank 0.06 rad before at 60 rad/s,
dt K H ~ 4000), the covariance contracted along the direction H had a step before while the
state moved along H of t_k, and the filter lost the crank (with input states; RMSE 1.5 rad);
with K, H of t_k but the correction inside the trapezoid (its dt/2 A (x1 - x^-) term moves zd
by dt/2 B du for an input correction du, which the covariance update does not know) it
tracked with a bias of +0.012 rad (mean NEES 22.5 with input jumps, 10.7 without);
split, 0.0086 rad and 3.16 (band [0.6, 6]; README, Defaults that transfer). The nine
other shipped scenarios: mean NEES within 17 %, RMSE within 11 % of the in-trapezoid form.

Second order (``measurement_order: 2``, the default; paper003.yaml: 1): the
reading and R are those of the Gaussian second-order filter at the prediction
(:mod:`second_order`): o - 1/2 tr(T_i P) and R + 1/2 tr(T_i P T_l P), so the gate, the
continuous gain K = P H^T (R dt)^-1 and the covariance update all see them. On ``pf_sim``
(the rocker gyroscope's reading G(z) zd at the crank's turning point next to the rocker's
dead point: H ~ 0, G' not) the first order lost the crank for q >= 8.2 (the rule's value;
mean NEES 2e5), the second order keeps it up to 25 (0.57-0.66).

Inputs (option ``inputs``, :mod:`input_states`; default ``auto``, the rule's, with
``input_jump_nis`` 16 as the UKF, errorEKF, VI-EKF and DIEKFpm): x = [z, zd, u] with
zd' = f + B(z) u, u' = w_u; A gains dzd'/du = B (at the step's start), Qc the inputs'
densities (Van Loan then gives P[zd, u] its exact dt^2/2 B psd term, which the DEKF's
first-order Q leaves out), the readings see qdd + R B u. On the motor-driven slider-crank
from the slider accelerometer alone: RMSE 0.0086 rad, mean NEES 3.16 (without input
jumps 0.021 rad and 5.07).

Newton-Raphson (the dynamics' step): from the linearly implicit Euler step x1 = x0 + dt
Jg^-1 F(x0) (the first Newton step from x0, which with ``both_ends`` also takes the stiff
correction term K H into account), at most ``newton_iterations`` steps; converged when
every |dx_i| <= tol_i = max(1e-12 max(1, |x1|), 1e-4 sigma_i) (sigma_i: the filter's sd of
x_i at the start: 1e-4 sigma moves no estimate or NEES measurably), the iterate then kept
without dx with the full state its dynamics were evaluated at (no further position
problem for the correction's result), or when the error estimated from the contraction
theta = r_k / r_{k-1} (r = max |dx_i| / tol_i), theta / (1 - theta) r_k, is < 1 (theta <
1/2). F uses the dynamics at the step's start time; each iterate's position problem
starts from the previous q + R dz. The correction (``reading``) stops by the same rules.
Position problems per step on fourbar_imu: 3.5 + 2.2 + 2 with 1e-12 alone, 2.0 + 1.2 + 1
(RMSE and mean NEES over 3 s the same to 3 digits on six scenarios).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.kalman.input_states import InputStates, jump_directions, jump_variance, project_inputs
from mbde_core.estimators.kalman.algebra import (STEP_HALVINGS, ekf_update, gate_rows, move_within_bound,
                                         reading_noise, update_result)
from mbde_core.estimators.kalman.base import ReducedKalman
from mbde_core.estimators.noise import van_loan
from mbde_core.errors import ConfigError
from mbde_core.estimators.options.common import KalmanOptions, input_field
from mbde_core.estimators.traits import KALMAN_TUNABLE, Traits

NEWTON_TOL = 1e-12
NEWTON_SIGMA = 1e-4  # of the state's standard deviation (module doc, Newton-Raphson)
CORRECTION_AT = ("reading", "both_ends")


def _measurement_part(P, H, R, gain=1.0):
    """P after the Riccati equation's measurement part over the step, in Joseph form with the
    (damped) discrete gain gain P H^T S^-1: symmetric PSD by construction, P - P H^T S^-1 H P
    for gain 1."""
    PHt = P @ H.T
    S = H @ PHt + R
    try:
        Kd = gain * np.linalg.solve(S, PHt.T).T
    except np.linalg.LinAlgError:
        Kd = gain * (PHt @ np.linalg.pinv(S))
    IKH = np.eye(P.shape[0]) - Kd @ H
    P = IKH @ P @ IKH.T + Kd @ R @ Kd.T
    return 0.5 * (P + P.T)


@dataclass(frozen=True)
class CEKFOptions(KalmanOptions):
    """The CEKF's options: the common ones and these."""

    newton_iterations: int = 5           # Newton iterations of the correction per update (>= 0)
    correction_at: str = "reading"       # reading | both_ends (paper 003 eqs. 8-9)
    measurement_order: int = 2
    inputs: tuple | str = input_field()  # auto: the rule's (none without force limits)
    input_jump_nis: float = 16.0


class CEKF(InputStates, ReducedKalman):
    name = "cekf"
    Options = CEKFOptions
    traits = Traits(cost=2.5, color=(0.55, 0.34, 0.29, 1.0), slot=6, tunable=KALMAN_TUNABLE, input_states=True, known_inputs=True,
                    follower=True)

    @classmethod
    def validate_config(cls, cfg, file, path):
        if cfg["correction_at"] not in CORRECTION_AT:
            raise ConfigError(file, f"{path}.correction_at", f"must be one of {', '.join(CORRECTION_AT)}")
        n = cfg["newton_iterations"]
        if not (n >= 0 and float(n).is_integer()):
            raise ConfigError(file, f"{path}.newton_iterations", f"a whole number >= 0, got {n}")
        super().validate_config(cfg, file, path)  # inputs

    def __init__(self, mech, sensors, options, rng=None):
        super().__init__(mech, sensors, options, rng)
        self._saved = None
        self._x_pred = None
        self._const = {}  # dt -> (A, Qc, Phi, Qd, Jg^-1 without correction) for the simple A
        self._init_inputs()

    def _linear_part(self, x0, q0, dt, st0=None):
        """(A, Qc, Phi, Qd, Jg^-1 of the uncorrected step); constant for the simple A
        without inputs."""
        if self.k:
            return self._linear_part_inputs(x0, q0, dt, st0)
        simple = self.options.transition_jacobian == "simple"
        if simple and dt in self._const:
            return self._const[dt]
        g = self.g
        A = self.model.transition_jacobian(self.t, x0, q0, self.options.transition_jacobian)
        Qc = self._plant_density()
        Phi, Qd = van_loan(A, Qc, dt)
        out = (A, Qc, Phi, Qd, np.linalg.inv(np.eye(2 * g) - 0.5 * dt * A))
        if simple:
            self._const[dt] = out
        return out

    def _plant_density(self) -> np.ndarray:
        """Qc of x: the velocity and acceleration noise densities on [z, zd] and, with
        inputs, their random walks' densities."""
        g, g2 = self.g, 2 * self.g
        Qc = np.zeros((g2 + self.k, g2 + self.k))
        pn = self.options.plant_noise
        Qc[:g, :g] = np.eye(g) * pn.velocity_psd
        Qc[g:g2, g:g2] = np.eye(g) * pn.acceleration_psd
        if self.k:
            Qc[g2:, g2:] = np.diag(self._u_psd)
        return Qc

    def _linear_part_inputs(self, x0, q0, dt, st0):
        """The same for x = [z, zd, u] (module doc): A gains dzd'/du = B(z) (B at st0's R),
        Qc the inputs' random-walk densities."""
        g, g2, n = self.g, 2 * self.g, 2 * self.g + self.k
        A = np.zeros((n, n))
        A[:g2, :g2] = self.model.transition_jacobian(self.t, x0[:g2], q0, self.options.transition_jacobian,
                                                     extra_Q=self.extra_forces())
        A[g:g2, g2:] = self.input_gain(st0.R)
        Qc = self._plant_density()
        Phi, Qd = van_loan(A, Qc, dt)
        return A, Qc, Phi, Qd, np.linalg.inv(np.eye(n) - 0.5 * dt * A)

    def _f_and_h(self, x, st, names, uses_qdd):
        """(x' without correction, predicted readings or None) at the iterate x (assembled as
        st): with inputs zdd + B(z) u and u' = 0, the readings with qdd + R B u."""
        g, g2 = self.g, 2 * self.g
        if not self.k:
            h = None if names is None else self.model.predict_measurements(names, st.q, st.qd, st.qdd if uses_qdd else None)
            return np.concatenate([x[g:], st.zdd]), h
        dz = self.input_gain(st.R) @ x[g2:]
        h = None
        if names is not None:
            h = self.model.predict_measurements(names, st.q, st.qd, st.qdd + st.R @ dz if uses_qdd else None)
        return np.concatenate([x[g:g2], st.zdd + dz, np.zeros(self.k)]), h

    def _step(self, x0, P0, dt, st0, corr=None, gain=1.0):
        """One trapezoidal step from x0 (assembled as the FullState st0); corr = (names, o, R)
        adds the paper's correction K (o - h(x)) at both ends (``both_ends``; gain < 1: a
        damped correction, see :meth:`update`). Returns (x1, P1, position guess for x1)."""
        g = self.g
        nx = x0.shape[0]
        model = self.model
        A, _, Phi, Qd, Jinv = self._linear_part(x0, st0.q, dt, st0)
        K = H = names = uses_qdd = None
        if corr is not None:
            names, o, R = corr
            uses_qdd = self.sensors.uses_qdd(names)
            h0, H = self._linearize(names, st0)
            K = gain * (P0 @ H.T @ np.linalg.inv(R * dt))
            Jinv = np.linalg.inv(np.eye(nx) - 0.5 * dt * (A - K @ H))

        def F(x, st, h=None):
            fx, hx = self._f_and_h(x, st, names if (corr is not None and h is None) else None, uses_qdd)
            if corr is not None:
                fx = fx + K @ model.residual(names, o, hx if h is None else h)
            return fx

        F0 = F(x0, st0, h0 if corr is not None else None)
        x1 = x0 + Jinv @ (dt * F0)
        guess = model.guess(st0, x1[:g] - x0[:g], second_order=True)
        x1, guess, _ = self._newton(x1, guess, Jinv, lambda x, st: x - x0 - 0.5 * dt * (F0 + F(x, st)), P0)
        # Riccati equation by exact splitting over the step: the linear part
        # P' = A P + P A^T + Qc (Van Loan), then the measurement part P' = -P H^T Rc^-1 H P,
        # whose exact solution over dt is (P^-1 + dt H^T Rc^-1 H)^-1 (Woodbury form, with
        # Rc / dt = R): :func:`_measurement_part`.
        P = Phi @ P0 @ Phi.T + Qd
        if K is not None:
            P = _measurement_part(P, H, corr[2], gain)
        return x1, 0.5 * (P + P.T), guess

    def _newton(self, x1, guess, Jinv, G, P):
        """Newton-Raphson on G(x, FullState) = 0 from x1, fixed matrix Jinv, tolerance from P's
        sigmas (module doc). Returns (x1, its position guess, its FullState or None)."""
        g = self.g
        model = self.model
        last = None
        sig = NEWTON_SIGMA * np.sqrt(np.clip(np.diag(P), 0.0, None))
        for _ in range(int(self.options.newton_iterations)):
            st, ok = model.solve_full(self.t, x1[:g], x1[g : 2 * g], guess)
            if st.zdd is None or not np.all(np.isfinite(st.zdd)):  # no dynamics at this iterate
                break
            dx = -(Jinv @ G(x1, st))
            if not np.all(np.isfinite(dx)):  # a diverged iterate: stop at the last finite one
                break
            tol = np.maximum(NEWTON_TOL * max(1.0, float(np.max(np.abs(x1)))), sig)
            r = float(np.max(np.abs(dx) / tol))
            if r < 1.0:  # x1 is within the tolerance: kept with its evaluated full state
                return x1, guess, (st if ok else None)
            x1 = x1 + dx
            guess = model.guess(st, dx[:g])
            if last is not None and last > 0.0:
                theta = r / last
                if theta < 0.5 and theta / (1.0 - theta) * r < 1.0:
                    break
            last = r
        return x1, guess, None

    def _correct(self, names, o, R, H, y, gain=1.0):
        """The correction of the readings o of the current time (``reading``, module doc): x1
        = x^- + gain P H^T R^-1 (o - h(x1)) by Newton from the Kalman update, the covariance
        by the measurement part with the same gain. Returns (x1, P1, (position guess, x1's
        FullState or None))."""
        g = self.g
        nx = self.x.shape[0]
        x_pred, P = self.x, self.P
        uses_qdd = self.sensors.uses_qdd(names)
        M = gain * (P @ H.T) @ np.linalg.inv(R)  # dt K
        Jinv = np.linalg.inv(np.eye(nx) + M @ H)
        x1 = x_pred + Jinv @ (M @ y)
        guess = self.model.guess(self._full(), x1[:g] - x_pred[:g])

        def G(x, st):
            return x - x_pred - M @ self.model.residual(names, o, self._f_and_h(x, st, names, uses_qdd)[1])

        x1, guess, st = self._newton(x1, guess, Jinv, G, P)
        return x1, _measurement_part(P, H, R, gain), (guess, st)

    def reset(self, t, init) -> None:
        super().reset(t, init)
        self._reset_inputs()
        self._saved = None  # the step an update would redo belongs to the previous track
        self._span = 0.0

    def _linearize(self, names, st):
        """(h, H) of the readings at st (with the inputs applied, :mod:`input_states`)."""
        if self.k:
            return self._linearize_inputs(names, st)
        h, H, _ = self.model.linearize(names, self.t, st)
        return h, H

    def rebase(self, t) -> None:
        super().rebase(t)
        self._saved = None

    def predict(self, dt: float) -> None:
        st0 = self._full()
        self._saved = (self.x.copy(), self.P.copy(), self.q, self.qd, st0, self.t, dt)
        x1, P1, guess = self._step(self.x, self.P, dt, st0)
        self._x_pred = x1  # the uncorrected step (self.x keeps the last state if its assembly fails)
        self.advance_clock(dt)
        self._span += dt  # s since the last update (the input jumps' directions)
        self.P = P1
        self._assemble_into(x1, guess)

    def _discrete_update(self, names, dims, y, H, R, gates):
        """Readings at the time the filter was (re)started, with no step before them to redo
        with the continuous correction: the discrete EKF update at that time (paper 003 eqs.
        15a-e, :func:`~mbde_core.estimators.kalman.algebra.ekf_update`), the limit of the correction
        acting over a step of length zero. (Before: such readings were neither fused nor
        rejected. A multi-start bank's candidates, reset when the readings resume after a
        gap, thus skipped their first reading -- no correction of their guessed velocities
        (sd >= the mechanism's speed) and no score -- and the candidate at the truth lagged
        with NIS up to 27 for 0.2 s while the kept open-loop member, which was scored,
        settled on a mirror state; see :meth:`update`.)"""
        g = self.g
        dx, P, res = ekf_update(self.x, self.P, names, dims, y, H, R, gates)
        if res.accepted:
            if not (np.all(np.isfinite(dx)) and np.all(np.isfinite(P))):
                return UpdateResult([], res.accepted + res.rejected, distances=res.distances)
            self.P = P
            self._assemble_into(self.x + dx, self.q + self._full().R @ dx[:g])
        return res

    def update(self, measurements, gates=None):
        """Fuse the readings of the current time t_k (module doc): ``reading``, correct the
        prediction (:meth:`_correct`); ``both_ends``, redo the last step [t_{k-1}, t_k] with
        their continuous correction (right after :meth:`reset` or :meth:`rebase` there is no
        such step: :meth:`_discrete_update`)."""
        names = [m.sensor for m in measurements]
        dims = [self.sensors[n].dim for n in names]
        o = np.concatenate([np.asarray(m.value, float) for m in measurements])
        R = reading_noise(self.measurement_covariance(names), measurements, dims)
        pred, H = self._linearize(names, self._full())
        pred2, R = self.second_order(names, pred, R, H)
        o = o - (pred2 - pred)  # the second-order mean offset, carried by the reading into the correction
        y = self.model.residual(names, o, pred)
        if self.k and self.options.input_jump_nis:
            self._input_jump(y, H, R)
        self._span = 0.0
        S = H @ self.P @ H.T + R
        dist = []
        accepted, rejected, rows = gate_rows(names, dims, y, S, gates, dist)
        if rows.size == 0:
            return UpdateResult([], rejected, distances=dist)
        both_ends = self.options.correction_at == "both_ends"
        if both_ends and self._saved is None:  # no step to redo (just reset or rebased): the discrete update
            return self._discrete_update(names, dims, y, H, R, gates)
        result = update_result(accepted, rejected, y[rows], S[np.ix_(rows, rows)])
        result.distances = dist
        o_k = o[rows] if rejected else o  # rows, not names: a sensor may have several readings in a slot
        R_k = R[np.ix_(rows, rows)] if rejected else R
        # a correction that moves the state beyond what a Kalman update can
        # (kalman.move_within_bound, against the prediction) is damped, halving its gain
        predicted = (self.x.copy(), self.P, self.q, self.qd, self.full, self.t)
        saved, self._saved = self._saved, None
        x_pred = self._x_pred if both_ends else predicted[0]
        angular = self.model.angular_x(self.k)
        for k in range(STEP_HALVINGS + 1):
            if both_ends:
                x0, P0, q0, qd0, st0, t0, dt = saved
                self.x, self.P, self.q, self.qd, self.full, self.t = x0, P0, q0, qd0, st0, t0
                x1, P1, guess = self._step(x0, P0, dt, st0, corr=(accepted, o_k, R_k), gain=0.5**k)
                self.t, st1 = t0 + dt, None
            else:
                x1, P1, (guess, st1) = self._correct(accepted, o_k, R_k, H[rows], y[rows], gain=0.5**k)
            if self.k:  # the inputs within their limits (input_states.project_inputs)
                x1 = project_inputs(x1, P1, np.arange(2 * self.g, 2 * self.g + self.k), 0.0, self._u_limit)
            d = x1 - x_pred
            d = np.where(angular, (d + np.pi) % (2.0 * np.pi) - np.pi, d)
            if move_within_bound(d, predicted[1], result.nis, result.dof) and np.all(np.isfinite(P1)):
                self.P = P1
                self._assemble_into(x1, guess, st1)  # st1: x1's full state from the correction's Newton
                return result
        self.x, self.P, self.q, self.qd, self.full, self.t = predicted  # no consistent correction: not fused
        return UpdateResult([], accepted + rejected, distances=dist)

    def _input_jump(self, y, H, R) -> None:
        """Raise the inputs' variances when the readings ask for a jump
        (:func:`~mbde_core.estimators.kalman.input_states.jump_variance`): at the current time and,
        by the same amount, at the start of the step the update redoes (the inputs jumped
        within it)."""
        g2, ku = 2 * self.g, self.k_unknown
        if not ku:
            return
        idx = np.arange(g2, g2 + ku)
        Pa = self.P[idx, idx]
        G = jump_directions(len(self.x), self.g, g2, self.input_gain(self._full().R)[:, :ku], self._span)
        V = jump_variance(Pa, y, H @ self.P @ H.T + R, H @ G, self._u_sigma0[:ku] ** 2, self.options.input_jump_nis)
        if V is None:
            return
        self.P = self.P + (G * (V - Pa)) @ G.T  # a jump since the last update moved z and zd (jump_directions)
        if self._saved is not None:
            P0 = self._saved[1].copy()
            P0[idx, idx] += V - Pa
            self._saved = (self._saved[0], P0) + self._saved[2:]
        self.input_jumps += 1

    def estimate(self):
        return self.input_snapshot(super().estimate())
