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
config/estimators/paper003.yaml). The default ``reading`` applies it at t_k only,
x1 = x0 + dt/2 [f(x0) + f(x1)] + dt K (o - h(x1)) (implicit Euler for the correction,
trapezoidal for the dynamics), Newton matrix Jg = I - dt/2 A + dt K H.

Second order (``measurement_order: 2``, the default since stop 30; paper003.yaml: 1): the
reading and R are those of the Gaussian second-order filter at the prediction
(:mod:`second_order`): o - 1/2 tr(T_i P) and R + 1/2 tr(T_i P T_l P), so the gate, the
continuous gain K = P H^T (R dt)^-1 and the covariance update all see them. On ``pf_sim``
(the rocker gyroscope's reading G(z) zd at the crank's turning point next to the rocker's
dead point: H ~ 0, G' not) the first order lost the crank for q >= 8.2 (the rule's value;
mean NEES 2e5), the second order keeps it up to 25 (0.57-0.66).

Inputs (option ``inputs``, opt-in, :mod:`input_states`): x = [z, zd, u] with
zd' = f + B(z) u, u' = w_u; A gains dzd'/du = B (at the step's start), Qc the inputs'
densities (Van Loan then gives P[zd, u] its exact dt^2/2 B psd term, which the DEKF's
first-order Q leaves out), the readings see qdd + R B u. Measured on the motor-driven
slider-crank (test/test_kalman_inputs.py): with the motor encoder in the NEES band as the
DEKF; from the slider accelerometer alone lost when the motor leaves its torque limit
(~18 ms: the torque drops faster than the random walk follows, as for the DEKF, which
recovers), so the rule's ``inputs: auto`` is not its default.

Newton-Raphson: the iteration starts from the linearly implicit Euler step
x1 = x0 + dt Jg^-1 F(x0) (the first Newton step from x0 itself, which also takes the stiff
correction term K H into account) and stops after ``newton_iterations`` steps or when
converged: the step dx satisfies |dx| < 1e-12 max(1, |x1|), or the remaining error
estimated from the observed contraction theta = |dx_k| / |dx_{k-1}| of the (linearly
convergent) iteration, theta / (1 - theta) |dx_k|, does (theta < 1/2). All F evaluations
of a step use the dynamics at the step's start time. Each iterate's full state comes
from a position problem started from the previous iterate's q + R dz.
"""
from __future__ import annotations

import numpy as np

from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.input_states import InputStates, jump_variance, project_inputs, validate_inputs
from mbde_core.estimators.kalman import STEP_HALVINGS, ekf_update, gate_rows, move_within_bound, update_result
from mbde_core.estimators.kalman_base import ReducedKalman
from mbde_core.estimators.noise import van_loan

NEWTON_TOL = 1e-12
CORRECTION_AT = ("reading", "both_ends")


class CEKF(InputStates, ReducedKalman):
    name = "cekf"
    DEFAULTS = {"newton_iterations": 5, "correction_at": "reading", "measurement_order": 2, "inputs": [],
                "input_jump_nis": 0.0}

    @staticmethod
    def validate_config(cfg, file, path):
        from mbde_core.errors import ConfigError

        if cfg["correction_at"] not in CORRECTION_AT:
            raise ConfigError(file, f"{path}.correction_at", f"must be one of {', '.join(CORRECTION_AT)}")
        validate_inputs(cfg, file, path)

    def __init__(self, mech, sensors, config, rng=None):
        super().__init__(mech, sensors, config, rng)
        self._saved = None
        self._x_pred = None
        self._const = {}  # dt -> (A, Qc, Phi, Qd, Jg^-1 without correction) for the simple A
        self._init_inputs()

    def _linear_part(self, x0, q0, dt, st0=None):
        """(A, Qc, Phi, Qd, Jg^-1 of the uncorrected step); constant for the simple A
        without inputs."""
        if self.k:
            return self._linear_part_inputs(x0, q0, dt, st0)
        simple = self.config["transition_jacobian"] == "simple"
        if simple and dt in self._const:
            return self._const[dt]
        g = self.g
        A = self.model.transition_jacobian(self.t, x0, q0, self.config["transition_jacobian"])
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
        pn = self.config["plant_noise"]
        Qc[:g, :g] = np.eye(g) * pn.get("velocity_psd", 0.0)
        Qc[g:g2, g:g2] = np.eye(g) * pn["acceleration_psd"]
        if self.k:
            Qc[g2:, g2:] = np.diag(self._u_psd)
        return Qc

    def _linear_part_inputs(self, x0, q0, dt, st0):
        """The same for x = [z, zd, u] (module doc): A gains dzd'/du = B(z) (B at st0's R),
        Qc the inputs' random-walk densities."""
        g, g2, n = self.g, 2 * self.g, 2 * self.g + self.k
        A = np.zeros((n, n))
        A[:g2, :g2] = self.model.transition_jacobian(self.t, x0[:g2], q0, self.config["transition_jacobian"],
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
        adds gain K (o - h(x)) to the dynamics (gain < 1: a damped correction, see
        :meth:`update`). Returns (x1, P1, position guess for x1)."""
        g = self.g
        nx = x0.shape[0]
        model = self.model
        A, _, Phi, Qd, Jinv = self._linear_part(x0, st0.q, dt, st0)
        K = H = None
        names = uses_qdd = None
        at_end = self.config.get("correction_at", "reading") == "reading"
        if corr is not None:
            names, o, R = corr
            uses_qdd = self.sensors.uses_qdd(names)
            h0, H = self._linearize(names, st0)
            Rc_inv = np.linalg.inv(R * dt)
            K = gain * (P0 @ H.T @ Rc_inv)
            # the correction at both ends of the trapezoid (paper), or only at x1, the time
            # of the reading (the reading is compared with the state of its own time)
            Jinv = np.linalg.inv(np.eye(nx) - 0.5 * dt * A + dt * K @ H if at_end
                                 else np.eye(nx) - 0.5 * dt * (A - K @ H))

        def F(x, st, h=None):
            fx, hx = self._f_and_h(x, st, names if (corr is not None and h is None) else None, uses_qdd)
            if corr is not None:
                fx = fx + (2.0 if at_end else 1.0) * K @ model.residual(names, o, hx if h is None else h)
            return fx

        F0 = F(x0, st0, h0 if corr is not None else None)
        x1 = x0 + Jinv @ (dt * F0)
        if corr is not None and at_end:
            F0 = self._f_and_h(x0, st0, None, None)[0]  # no correction at t_{k-1}
        st, guess = st0, model.guess(st0, x1[:g] - x0[:g], second_order=True)
        last = None
        for _ in range(int(self.config.get("newton_iterations", 5))):
            st, _ok = model.solve_full(self.t, x1[:g], x1[g : 2 * g], guess)
            if st.zdd is None or not np.all(np.isfinite(st.zdd)):  # no dynamics at this iterate
                break
            G = x1 - x0 - 0.5 * dt * (F0 + F(x1, st))
            dx = -(Jinv @ G)
            if not np.all(np.isfinite(dx)):  # a diverged iterate: stop at the last finite one
                break
            x1 = x1 + dx
            guess = model.guess(st, dx[:g])
            size = float(np.max(np.abs(dx)))
            tol = NEWTON_TOL * max(1.0, float(np.max(np.abs(x1))))
            if size < tol:
                break
            if last is not None and last > 0.0:
                theta = size / last
                if theta < 0.5 and theta / (1.0 - theta) * size < tol:
                    break
            last = size
        # Riccati equation by exact splitting over the step: the linear part
        # P' = A P + P A^T + Qc (Van Loan), then the measurement part P' = -P H^T Rc^-1 H P,
        # whose exact solution over dt is (P^-1 + dt H^T Rc^-1 H)^-1 (Woodbury form below,
        # with Rc / dt = R).
        P = Phi @ P0 @ Phi.T + Qd
        if K is not None:
            # in Joseph form with the (damped) discrete gain gain P H^T S^-1: symmetric PSD
            # by construction, P - P H^T S^-1 H P for gain 1
            PHt = P @ H.T
            S = H @ PHt + corr[2]
            try:
                Kd = gain * np.linalg.solve(S, PHt.T).T
            except np.linalg.LinAlgError:
                Kd = gain * (PHt @ np.linalg.pinv(S))
            IKH = np.eye(nx) - Kd @ H
            P = IKH @ P @ IKH.T + Kd @ corr[2] @ Kd.T
        P = 0.5 * (P + P.T)
        return x1, P, guess

    def reset(self, t, init) -> None:
        super().reset(t, init)
        self._reset_inputs()
        self._saved = None  # the step an update would redo belongs to the previous track

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
        self.t += dt
        self.P = P1
        self._assemble_into(x1, guess)

    def _discrete_update(self, names, dims, y, H, R, gates):
        """Readings at the time the filter was (re)started, with no step before them to redo
        with the continuous correction: the discrete EKF update at that time (paper 003 eqs.
        15a-e, :func:`~mbde_core.estimators.kalman.ekf_update`), the limit of the correction
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
        """Fuse the readings of the current time t_k: redo the last step [t_{k-1}, t_k] with
        their continuous correction (module doc). Right after :meth:`reset` or
        :meth:`rebase` there is no such step: :meth:`_discrete_update`."""
        names = [m.sensor for m in measurements]
        dims = [self.sensors[n].dim for n in names]
        o = np.concatenate([np.asarray(m.value, float) for m in measurements])
        R = self.measurement_covariance(names)
        pred, H = self._linearize(names, self._full())
        pred2, R = self.second_order(names, pred, R)
        o = o - (pred2 - pred)  # the second-order mean offset, carried by the reading into the redone step
        y = self.model.residual(names, o, pred)
        if self.k and self.config.get("input_jump_nis"):
            self._input_jump(y, H, R)
        S = H @ self.P @ H.T + R
        dist = []
        accepted, rejected, rows = gate_rows(names, dims, y, S, gates, dist)
        if rows.size == 0:
            return UpdateResult([], rejected, distances=dist)
        if self._saved is None:  # no step to redo (just reset or rebased): the discrete update
            return self._discrete_update(names, dims, y, H, R, gates)
        result = update_result(accepted, rejected, y[rows], S[np.ix_(rows, rows)])
        result.distances = dist
        o_k = o[rows] if rejected else o  # rows, not names: a sensor may have several readings in a slot
        R_k = R[np.ix_(rows, rows)] if rejected else R
        # redo the last step with the continuous correction of these readings; a correction
        # that moves the state beyond what a Kalman update can (kalman.move_within_bound,
        # against the prediction) is damped, halving its gain
        predicted = (self.x.copy(), self.P, self.q, self.qd, self.full, self.t)
        x0, P0, q0, qd0, st0, t0, dt = self._saved
        self._saved = None
        angular = np.concatenate([np.isin(self.mech.independent, self.mech.rel_columns), np.zeros(self.g + self.k, bool)])
        for k in range(STEP_HALVINGS + 1):
            self.x, self.P, self.q, self.qd, self.full, self.t = x0, P0, q0, qd0, st0, t0
            x1, P1, guess = self._step(x0, P0, dt, st0, corr=(accepted, o_k, R_k), gain=0.5**k)
            if self.k:  # the inputs within their limits (input_states.project_inputs)
                x1 = project_inputs(x1, P1, np.arange(2 * self.g, 2 * self.g + self.k), 0.0, self._u_limit)
            d = x1 - self._x_pred
            d = np.where(angular, (d + np.pi) % (2.0 * np.pi) - np.pi, d)
            if move_within_bound(d, predicted[1], result.nis, result.dof) and np.all(np.isfinite(P1)):
                self.t = t0 + dt
                self.P = P1
                self._assemble_into(x1, guess)
                return result
        self.x, self.P, self.q, self.qd, self.full, self.t = predicted  # no consistent correction: not fused
        return UpdateResult([], accepted + rejected, distances=dist)

    def _input_jump(self, y, H, R) -> None:
        """Raise the inputs' variances when the readings ask for a jump
        (:func:`~mbde_core.estimators.input_states.jump_variance`): at the current time and,
        by the same amount, at the start of the step the update redoes (the inputs jumped
        within it)."""
        g2 = 2 * self.g
        idx = np.arange(g2, g2 + self.k)
        Pa = self.P[idx, idx]
        V = jump_variance(Pa, y, H @ self.P @ H.T + R, H[:, g2:], self._u_sigma0**2, self.config["input_jump_nis"])
        if V is None:
            return
        self.P = self.P.copy()
        self.P[idx, idx] = V
        if self._saved is not None:
            P0 = self._saved[1].copy()
            P0[idx, idx] += V - Pa
            self._saved = (self._saved[0], P0) + self._saved[2:]
        self.input_jumps += 1

    def estimate(self):
        return self.input_snapshot(super().estimate())
