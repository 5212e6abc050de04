"""DIEKFpm: iterated EKF in dependent coordinates with perfect measurements (paper 003 sec. 3.2.1).

The estimate is the full dependent state X = [q, qd] (2n).

Prediction: forward Euler on the dependent coordinates, q^- = q + dt qd,
qd^- = qd + dt qdd (qdd from the R-matrix dynamics at q, qd; ``transition: euler``, paper
003 eq. 12), ``constant_acceleration`` q^- = q + dt qd + dt^2/2 qdd, or (the default,
``heun``, :mod:`transition`) a second stage at that prediction, qdd* = qdd(q*, qd*):
qd^- = qd + dt/2 (qdd + qdd*), q^- = q + dt qd + dt^2/6 (2 qdd + qdd*) (both O(dt^3) per
step, so the rule adds no q_disc: :mod:`~mbde_core.estimators.options.rule`);
``constant_acceleration``'s first-order velocity update the rule covers with q_disc
(pf_sim: q 15.6 instead of 8.2).

Update: the readings are fused by an iterated EKF in q-space (at most ``iterations``
passes, X_{i+1} = X^- + K_i (o - h(X_i) - H_i (X^- - X_i)); a pass that moved the iterate
by less than 1e-3 of the prior's standard deviation in every coordinate ends them: the
next would move it by less again, the iteration contracting), then the constraints are imposed as
perfect measurements (eqs. 16-17: h'(X) = [Phi(q); Phi_q qd] = 0 with zero noise),
iterated to convergence -- a Gauss-Newton projection X <- X - W H^T (H W H^T)^-1 h'(X).
The constraint-only projection is also applied after every prediction, keeping the
estimate on the position and velocity constraint manifolds.

Normal freedom W (``normal_noise_ratio`` r, default 1e-6 of the plant noise; 1e-4 in
paper003.yaml): the q-space prior lets the sensor update move off the
constraint manifolds by W, which the projection then maps back onto them. At a turning
point where the readings hardly depend on the state (``pf_sim``: the crank at rest next to
the rocker's dead point, the rocker gyroscope reading G(z) zd with G and zd ~ 0) such
normal moves, projected, pushed the crank onto the mirrored motion: with Heun and the
rule's q = 8.2, r = 1e-4 lost the track (mean NEES 2e5, RMSE 0.57 rad), r <= 1e-5 kept it
(0.83-0.86, 2.1 mrad), r = 1e-6 up to q = 16 (errorEKF: 12; DEKF, second order: 50).

Covariance (a documented departure from a literal implementation): the uncertainty is
carried in tangent coordinates, Pz (2g, 2g), and mapped to q-space as
P = T Pz T^T + W, T = d[q, qd]/d[z, zd] = [[R, 0], [d(R zd)/dz, R]], W a small isotropic
"normal" covariance (``normal_noise_ratio`` times the per-coordinate average of the
plant noise) that gives the perfect measurements room to act. Pz is propagated with
F = [[I, dt I], [0, I]] (``transition_jacobian: simple``, paper 003 eq. 13) or
F = I + dt A, A = d[zd, zdd]/d[z, zd] at the estimate (``full``, the option of the other
observers, which this filter ignored before; the default here), and the Van Loan plant
noise. Why ``full`` by default: with a gyroscope on a rocker at rest near its dead point
(pf_rig_branch0 after a 2 s gap, the rig oscillating with small amplitude around -1.83 rad), the
readings depend on the crank angle z only through the dynamics, the gravity stiffness
d zdd / dz (the rocker rate R_r(z) zd has d/dz = R_r'(z) zd ~ 0 at rest); the simple F
leaves it out, so the velocity innovations hardly correct z and the covariance does not
know it: the filter settled 0.11-0.17 rad off with sd 0.01-0.02 (its gap bank's scores,
sums of NIS + log det S, then differ only by log det S: NIS < 1 for every member, and
the member nearest the dead point, where the gyro is least sensitive to the crank rate,
has the smallest S and won). The UKF (sigma points through the dynamics) and the VI-EKF
(exact step Jacobian) have the stiffness and re-converged in 0.05 s; with ``full`` this
filter re-converges in 0.85 s, the errorEKF, DEKF and CEKF in 0.05 s (their default stays
paper 003's simple F: ``full`` costs them 2-4x, the CEKF 16x, its A and Van Loan terms
every step; DIEKFpm 1.6x over the faults bench). The sensors' information
P - K S K^T is mapped back with Pz = T^+ (P - K S K^T) T^+T, and the perfect
measurements add none. Two literal alternatives were tried and fail on the four-bar:
propagating P in q-space lets the O(dt) leak of the Euler step's tangent covariance
into the normal directions be read by the (nearly) perfect measurements as
information, collapsing the tangent variance within a few hundred steps; and a large
isotropic W lets the sensor update explain innovations by unconstrained motions whose
information is then projected away.

Step control (not in the paper): the update's move of [z, zd] must respect the
linear-Gaussian bound dx^T Pz^-1 dx <= NIS (within ``kalman.STEP_BOUND`` (NIS + dof)); an
update that leaves it (a wide covariance near a singular configuration, where the
q-space step leaves the manifold by radians and the projection lands far away) is
damped by step halving, and the information of the damped gain taken in Joseph form, so
Pz stays symmetric PSD by construction (see :meth:`DIEKFpm._checked_step`).

Inputs (``inputs``, ``input_jump_nis``; :mod:`diekfpm_inputs`): unknown generalized forces
as random-walk states beside X, the estimate [X, u] and Pz that of [z, zd, u] (the rule's
``inputs: auto`` on force-limited mechanisms; on paper 004's motor-driven slider-crank
from its accelerometer: lost without them, 0.010 rad and mean NEES 1.6 with them).

Speed: the constraints, their Jacobian and d(Phi_q qd)/dq come from the mechanism's
generated kernels (the n columns D(e_j, qd) of the last one from 2n evaluations of
(Phi_q)' qd), the projection's convergence test evaluates only h'(X) (the Jacobian only
when another step follows), T at the projected mean is reused as the next update's prior
T, T^+ = (T^T T)^-1 T^T (T has full column rank), the eigenvalue clipping of Pz runs only
when Pz is not positive definite, and the plant noise is cached per dt.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.engine import dynamics, kinematics
from mbde_core.estimators.base import Estimator, InitialState, UpdateResult, sensor_variances
from mbde_core.estimators.kalman.diekfpm_inputs import DependentInputs
from mbde_core.estimators.kalman.algebra import STEP_HALVINGS, cholesky, gate_rows, move_within_bound, reading_noise, update_result
from mbde_core.estimators.kalman.perfect_measurements import normal_noise, project
from mbde_core.estimators.kalman.reduced import ReducedModel
from mbde_core.estimators.kalman.transition import ExplicitTransition, euler_covariance, heun_step, position_step
from mbde_core.types import MechanismSnapshot
from mbde_core.errors import ConfigError
from mbde_core.estimators.options.common import KalmanOptions, input_field
from mbde_core.estimators.traits import KALMAN_TUNABLE, Traits

NORMAL_NOISE_RATIO = 1e-6  # W relative to the plant noise (module doc, "Normal freedom")
ITERATION_TOL = 1e-3  # of the prior sigma: the iterated update has converged (module doc, "Update")


@dataclass(frozen=True)
class DIEKFpmOptions(KalmanOptions):
    """The DIEKFpm's options: the common ones (transition_jacobian full by default: the
    common default is paper 003's simple F; module doc, "Covariance": at rest at the
    rocker's dead point the full A is what ties the crank angle to the readings) and these."""

    transition_jacobian: str = "full"
    iterations: int = 3                  # iterated-EKF iterations per update (>= 1)
    normal_noise_ratio: float = NORMAL_NOISE_RATIO
    transition: str = "heun"
    inputs: tuple | str = input_field()  # auto: the rule's (none without force limits; diekfpm_inputs.py)
    input_jump_nis: float = 16.0
    absorb_inputs: bool = False          # the unknown inputs take f's state dependence (diekfpm_inputs)


class DIEKFpm(ExplicitTransition, DependentInputs, Estimator):
    name = "diekfpm"
    Options = DIEKFpmOptions
    combines_readings = True  # a sensor faster than the step: one reading per slot (stage.multirate)
    traits = Traits(cost=3.0, color=(0.89, 0.47, 0.76, 1.0), slot=7, tunable=KALMAN_TUNABLE, input_states=True, known_inputs=True,
                    follower=True)

    @classmethod
    def validate_config(cls, cfg, file, path):
        n = cfg["iterations"]
        if not (n >= 1 and float(n).is_integer()):
            raise ConfigError(file, f"{path}.iterations", f"a whole number >= 1, got {n}")
        if not cfg["normal_noise_ratio"] >= 0:
            raise ConfigError(file, f"{path}.normal_noise_ratio", f"must be >= 0, got {cfg['normal_noise_ratio']}")
        super().validate_config(cfg, file, path)  # transition, inputs

    def __init__(self, mech, sensors, options, rng=None):
        super().__init__(mech, sensors, options, rng)
        self.model = ReducedModel(mech, sensors)
        self.n = mech.n
        self.X = np.concatenate([mech.q0, mech.qd0])
        self.P = np.eye(2 * self.n)
        self._iso = np.zeros((2 * self.n, 2 * self.n))
        self._sigma = sensor_variances(options)
        self._T_at = None  # (X, T) of the last projected mean
        self._init_inputs()

    def reset(self, t: float, init: InitialState) -> None:
        self.t = float(t)
        guess = self.mech.q0 if init.q_hint is None else init.q_hint
        q, ok = kinematics.solve_position(self.mech, init.z, guess)
        if not ok:
            raise ValueError("the initial state cannot be assembled")
        qd = kinematics.velocity(self.mech, q, init.zd)
        self.X = np.concatenate([q, qd])
        g = self.mech.dof
        Pz = np.diag(np.concatenate([np.broadcast_to(init.sigma_z, (g,)), np.broadcast_to(init.sigma_zd, (g,))]) ** 2)
        self.Pz = Pz = self._reset_inputs(Pz)
        T = self._T(q, qd)
        Ta = self._Ta(T)
        self.P = Ta @ Pz @ Ta.T
        Qz = self.plant_noise(float(self.options.step))
        self._iso = normal_noise(self.options.normal_noise_ratio, T @ Qz @ T.T)
        self._T_at = None

    def _T(self, q, qd):
        """d[q, qd]/d[z, zd] on the manifold: [[R, 0], [d(R zd)/dz, R]]."""
        n, g = self.n, self.mech.dof
        st = self.model.full_state_at(self.t, q, qd, with_dynamics=False)
        T = np.zeros((2 * n, 2 * g))
        T[:n, :g] = st.R
        T[n:, :g] = self.model.dqd_dz_at(st)
        T[n:, g:] = st.R
        return T

    def _Ta(self, T):
        """blockdiag(T, I_k): [X, u] over [z, zd, u] (T itself without inputs)."""
        return self._augment(T, np.eye(self.k))

    def _qdd(self, q, qd, u=None):
        return dynamics.forward(self.mech, self.t, q, qd, extra_Q=self._forces(u))[1]

    HYPOTHESIS = ("X", "u", "Pz", "P", "_iso", "_T_at")  # jump_hypothesis: the state of a hypothesis

    def predict(self, dt: float) -> None:
        self._span += dt  # since the last update (diekfpm_inputs' jump directions)
        self._predict_both(self._predict_one, dt)

    def _predict_one(self, dt: float) -> None:
        n = self.n
        q, qd = self.X[:n], self.X[n:]
        qdd = self._qdd(q, qd)
        g = self.mech.dof
        Qz = self.plant_noise(dt)
        full = self.options.transition_jacobian == "full"
        if self.k:
            Fz = np.eye(2 * g)
            Fz += dt * self._absorbed_jacobian(self._transition_jacobian(), q) if full else np.eye(2 * g, k=g) * dt
            Fz = self._input_transition(Fz, q, dt)
            self.Pz = Fz @ self.Pz @ Fz.T + self._input_noise(Qz, dt)
            self.Pz = 0.5 * (self.Pz + self.Pz.T)
        elif full:
            Fz = np.eye(2 * g) + dt * self._transition_jacobian()
            self.Pz = Fz @ self.Pz @ Fz.T + Qz
        else:
            self.Pz = euler_covariance(self.Pz, dt, g) + Qz
        T = self._prior_T(self.X)
        self._iso = normal_noise(self.options.normal_noise_ratio, T @ Qz @ T.T)
        if self.options.transition == "heun":  # second stage at the constant-acceleration prediction
            qdd1 = self._qdd(q + dt * qd + (0.5 * dt * dt) * qdd, qd + dt * qdd)
            self.X = heun_step(self.X[None], qdd[None], qdd1[None], dt, n)[0]
        else:
            self.X = np.concatenate([position_step(self.options.transition, q, qd, qdd, dt), qd + dt * qdd])
        self.advance_clock(dt)
        self._iterated_update([], np.zeros(0), None, None)

    def _transition_jacobian(self):
        """A = d[zd, zdd]/d[z, zd] at the estimate (``transition_jacobian: full``; the
        reduced model's central differences, as DEKF, CEKF and the errorEKF take it)."""
        n, iz = self.n, self.mech.independent
        x = np.concatenate([self.X[:n][iz], self.X[n:][iz]])
        return self.model.transition_jacobian(self.t, x, self.X[:n], "full", extra_Q=self._forces())

    def _prior_P(self):
        """The q-space prior covariance of [X, u] without the O(dt) tangent->normal leak of the
        Euler step: the tangent part T_a Pz T_a^T (orthogonal projection at the prior) plus
        the isotropic normal freedom W (none on the inputs)."""
        T0 = self._Ta(self._prior_T(self.X))
        return T0 @ self.Pz @ T0.T + self._augment(self._iso, np.zeros((self.k, self.k)))

    def _prior_T(self, X):
        """T at X (reused when X is the last projected mean)."""
        if self._T_at is not None and self._T_at[0] is X:
            return self._T_at[1]
        return self._T(X[: self.n], X[self.n :])

    def _augmented(self, names, X):
        """h'(X) (d,) and H'(X) (d, 2n + k) of the named sensors at [X, u] (the inputs
        enter through qdd; the constraints are projected separately, :meth:`_iterated_update`)."""
        n = self.n
        q, qd, u = X[:n], X[n:2 * n], (X[2 * n:] if self.k else None)
        uses_qdd = self.sensors.uses_qdd(names)
        qdd = dqdd = None
        if uses_qdd:
            qdd, dqdd = self._qdd_dX(X)
        hs, Hq, Hqd, Hqdd = self.model.sensor_terms(names, q, qd, qdd)
        H = np.concatenate([Hq, Hqd, np.zeros((Hq.shape[0], self.k))], axis=1)
        if uses_qdd:
            H = H + Hqdd @ dqdd
        return hs, H

    def _qdd_dX(self, X):
        """(qdd (n,) at [X, u], dqdd/d[X, u] (n, 2n + k) by central differences of the
        dynamics): X and the 2(2n + k) difference states as one batch (:func:`dynamics.forward`)."""
        n, L = self.n, len(X)
        e = 1e-6 * np.maximum(1.0, np.abs(X))
        Xs = np.concatenate([X + np.diag(e), X - np.diag(e), X[None]])  # rows X +- e_k, then X
        forces = None
        if self.k:
            forces = np.zeros((2 * L + 1, n))
            np.add.at(forces.T, self.input_cols, Xs[:, 2 * n:].T)  # input_forces of each row
        qdd = dynamics.forward(self.mech, self.t, Xs[:, :n], Xs[:, n:2 * n], extra_Q=forces)[1]
        return qdd[2 * L].copy(), (qdd[:L] - qdd[L : 2 * L]).T / (2 * e)

    def _iterated_update(self, names, o, Rs, gates):
        """Iterated sensor update + perfect-measurement constraint projection (docstring)."""
        n = self.n
        X_prior = np.concatenate([self.X, self.u]) if self.k else self.X.copy()  # [X, u]
        P = self._prior_P()
        result = UpdateResult()
        jumped = None  # the state before an input jump (jump_hypothesis)
        X = X_prior.copy()
        first = None  # (K, H, R) of the first (EKF) pass over the accepted readings
        ds = len(o)
        if ds:
            dims = [self.sensors[nm].dim for nm in names]
            srows = None
            for it in range(int(self.options.iterations)):
                h, H = self._augmented(names, X)
                y = self.model.residual(names, o, h)
                S = H @ P @ H.T + Rs
                before = self._state_tuple() if it == 0 and self.k else None
                if before is not None and self._input_jump(y, S, H):  # Pz's input variances raised
                    P = self._prior_P()
                    S = H @ P @ H.T + Rs
                    jumped = before
                if it == 0:
                    dist = []
                    accepted, rejected, srows = gate_rows(names, dims, y, S, gates, dist)
                    if not srows.size:
                        result = UpdateResult([], rejected, distances=dist)
                        break
                    result = update_result(accepted, rejected, y[srows], S[np.ix_(srows, srows)])
                    result.distances = dist
                Hr, yr, Sr = H[srows], y[srows], S[np.ix_(srows, srows)]
                K = np.linalg.solve(Sr, Hr @ P).T
                if it == 0:
                    first = (K, Hr, Rs[np.ix_(srows, srows)])
                    tol = ITERATION_TOL * np.sqrt(np.clip(np.diag(P), 0.0, None))
                X, moved = X_prior + K @ (yr - Hr @ (X_prior - X)), X
                if it and np.all(np.abs(X - moved) <= tol):
                    break
        self._span = 0.0 if ds else self._span  # the perfect measurements' own projections do not count
        if first is not None and self.k:  # the inputs within their limits
            X = self._bound_inputs(X, P)
        if first is None:
            X, P_info = project(self.model, self._iso, X), P
        else:
            X, P_info = self._checked_step(X_prior, X, P, first, result)
            if X is None:  # no step along the update is consistent: the readings are not fused
                result = UpdateResult([], result.accepted + result.rejected, distances=result.distances)
                X, P_info = project(self.model, self._iso, X_prior), P
        if self.k:
            X, self.u = X[:2 * n], X[2 * n:].copy()
        self.X = X
        # Covariance: the sensors' information, then the orthogonal projection onto the
        # tangent space of both constraint manifolds at the new mean (the perfect
        # measurements carry no information, they only remove the normal components).
        T = self._T(X[:n], X[n:])
        self._T_at = (X, T)
        TtT = T.T @ T
        try:
            Tp = np.linalg.solve(TtT, T.T)  # pinv(T): full column rank
        except np.linalg.LinAlgError:
            Tp = np.linalg.pinv(T)
        Tp, T = self._Ta(Tp), self._Ta(T)
        Pz = Tp @ P_info @ Tp.T
        Pz = 0.5 * (Pz + Pz.T)
        if not np.all(np.isfinite(Pz)):  # T overflowed (a singular configuration): keep the prior's
            Pz = self.Pz
        try:  # positive definite: the clipping below would leave it unchanged
            cholesky(Pz)
            self.Pz = Pz
        except np.linalg.LinAlgError:
            w, V = np.linalg.eigh(Pz)
            self.Pz = (V * np.clip(w, 0.0, None)) @ V.T
        self.P = T @ self.Pz @ T.T
        if jumped is not None and result.accepted:
            self._keep_alternative(jumped)
        return result

    def _checked_step(self, X_prior, X, P, first, result):
        """(projected mean, information P_info) of an update, or (None, None).

        Linear-Gaussian bound: an update x+ = x- + K y moves the state by dx with
        dx^T P^-1 dx = y^T S^-1 H P H^T S^-1 y <= y^T S^-1 y (the NIS). The iterated
        update plus the projection onto the constraints is nonlinear: with a wide
        covariance (a re-acquisition) near a singular configuration, q-space steps of
        radians leave the manifold and the Gauss-Newton projection lands on a far
        solution (velocities of 1e3 rad/s, then diverging predictions whose covariances
        overflow: ``mbde bench faults``, stuck gyro on fivebar_gyro). So the move of the
        independent coordinates, measured with the prior Pz, must stay within
        ``kalman.STEP_BOUND`` (NIS + dof) (clean runs: <= 0.87 NIS); otherwise the step
        x- + a (x_iter - x-) is halved (at most ``kalman.STEP_HALVINGS`` times), with the
        information of the damped gain a K in Joseph form (PSD by construction):
        (I - a K H) P (I - a K H)^T + a^2 K R K^T.
        """
        K, H, R = first
        n, iz, k = self.n, self.mech.independent, self.k
        idx = np.concatenate([iz, n + iz, 2 * n + np.arange(k)])
        angular = self.model.angular_x(k)
        step = X - X_prior
        for k in range(STEP_HALVINGS + 1):
            a = 0.5**k
            Xa = X_prior + a * step
            if not np.all(np.isfinite(Xa)):
                continue
            Xa = project(self.model, self._iso, Xa)
            d = Xa[idx] - X_prior[idx]
            d = np.where(angular, (d + np.pi) % (2.0 * np.pi) - np.pi, d)
            if move_within_bound(d, self.Pz, result.nis, result.dof):
                IKH = np.eye(len(X_prior)) - a * (K @ H)
                return Xa, IKH @ P @ IKH.T + (a * a) * (K @ R @ K.T)
        return None, None

    def reacquire(self, inflation: float) -> None:
        """Re-acquisition (:meth:`Estimator.reacquire`): Pz and P = T Pz T^T scaled."""
        self._alt = None  # jump_hypothesis: the held alternative dropped
        self.Pz = self.Pz * float(inflation)
        self.P = self.P * float(inflation)

    def _readings(self, measurements):
        """(names, o, R) of the readings."""
        names = [mm.sensor for mm in measurements]
        o = np.concatenate([np.asarray(mm.value, float) for mm in measurements])
        R = self.model.noise_covariance(names, self._sigma)  # cached per names, read-only
        return names, o, reading_noise(R, measurements, [self.sensors[n].dim for n in names])

    def update(self, measurements, gates=None):
        self._decide(measurements)
        return self._iterated_update(*self._readings(measurements), gates)

    def estimate(self) -> MechanismSnapshot:
        n = self.n
        q, qd = self.X[:n].copy(), self.X[n:].copy()
        zdd, qdd = dynamics.forward(self.mech, self.t, q, qd, extra_Q=self._forces())
        iz = self.mech.independent
        idx = np.concatenate([iz, n + iz])
        return self.input_snapshot(MechanismSnapshot(stamp=self.t, q=q, qd=qd, qdd=qdd, z=q[iz].copy(),
                                                     zd=qd[iz].copy(), zdd=zdd, cov=self.P[np.ix_(idx, idx)].copy()))

