"""errorEKF: error-state (indirect) EKF over an independent multibody simulation (paper 003 sec. 3.3).

A multibody simulation runs with any engine integrator (``integrator`` option: euler,
rk4, trapezoidal, midpoint, symplectic_euler, ali3p). The Kalman filter estimates only
the error of the independent coordinates dx = [dz, dzd] (optionally extended, see
below), so its prediction is (eqs. 21-22)::

    dx_k^- = 0,      P_k^- = F P_{k-1}^+ F^T + Sigma^P,    F = [[I, dt I], [0, I]]

The update is a conventional EKF update on dx (innovation o - h(simulation state), the
chain-rule Jacobian of :mod:`reduced`). The estimated errors are fed back to the
simulation and the error state returns to zero: positions are corrected through the
velocity problem, dq = R dz, and velocities by the velocity problem, dqd = R dzd.
``correction: linear`` is exactly that (the paper's method: no iterative solve, the
corrected state leaves the constraint manifold by O(|dz|^2), which the simulation's next
position problem removes); ``correction: exact`` (default) then solves the position
problem at z + dz from q + R dz and the velocity problem at zd + dzd there, so every
published estimate satisfies the constraints to the engine's tolerance.

Variant with acceleration error and unknown inputs (``estimate_acceleration``,
``inputs``): the error state becomes [dz, dzd, da, du] with a persistent acceleration
offset a (g,) and input forces u (k generalized forces on the listed coordinates),
both random walks applied to the simulation as zdd += a + B u, B = dzdd/du =
(R^T M R)^{-1} R^T E. Then F gains the blocks dzd' = da + B du and dz' (via dt^2/2),
and accelerometers see them through dh/da = H_qdd R, dh/du = H_qdd R B. Estimated
inputs are reported in the snapshot (input_names, inputs, input_cov). The inputs may
jump (``input_jump_nis``, on by default: :func:`input_states.jump_variance`), the next
reading deciding jump or outlier (:mod:`jump_hypothesis`), and stay within their
``limit`` (:func:`input_states.project_inputs`).

Second order (``measurement_order: 2``, opt-in; DEKF and CEKF have it by default): with
the error state [dz, dzd] alone (no acceleration offset, no inputs) the predicted readings
and R gain the Gaussian second-order filter's terms at the simulation state
(:mod:`second_order`; the gyroscope at ``pf_sim``'s turning point: first order lost the
crank for q >= 16, second order keeps it at 25). The update then always takes the
generic path, not :mod:`errorekf_scalar`: measured with ``mbde bench transfer``, CPU per
run 1.3-5x (four-bar gyroscope 0.09 -> 0.44 s, 1 kHz pendulum encoder 1.6 -> 4.3 s), for
the same accuracy and NEES on every shipped scenario at the rule's plant noise -- so the
default stays the fast first order (its margin on ``pf_sim``: the rule's 8.2 against 16).

Speed: the simulation state carries its accelerations qdd (the forward dynamics, without
the estimated offset and inputs), so the integrator's next step and ``estimate`` do not
evaluate the dynamics again (except with ``ali3p``, whose acceleration is part of its own
scheme); the update evaluates R, the sensors and the chain rule at the simulation state
once (:meth:`ReducedModel.linearize`), and the correction solves the position problem
from q + R dz and evaluates the velocities and dynamics there in one kernel call. F and
Sigma^P are cached per dt when they do not depend on the state.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.engine import dynamics, fastpath, kinematics
from mbde_core.engine.integrators import INTEGRATOR_NAMES, MBState, get_integrator
from mbde_core.errors import ConfigError
from mbde_core.estimators.kalman import errorekf_numba
from mbde_core.estimators.kalman import errorekf_scalar
from mbde_core.estimators.kalman.input_states import (init_input_attributes, input_forces, input_jump, input_names,
                                                     for_both, jump_directions, known_input_state, project_inputs,
                                                     validate_inputs)
from mbde_core.estimators.base import CovarianceInflation, Estimator, InitialState, sensor_variances
from mbde_core.estimators.kalman.adaptive_noise import AdaptivePlantNoise
from mbde_core.estimators.kalman.jump_hypothesis import JumpHypothesis
from mbde_core.estimators.kalman.algebra import ekf_update, reading_noise
from mbde_core.estimators.kalman.second_order import second_order_terms
from mbde_core.estimators.kalman.reduced import FullState, ReducedModel
from mbde_core.types import MechanismSnapshot
from mbde_core.estimators.options.common import KalmanOptions, input_field
from mbde_core.estimators.traits import KALMAN_TUNABLE, Traits


@dataclass(frozen=True)
class ErrorEKFOptions(KalmanOptions):
    """The errorEKF's options: the common ones and these."""

    integrator: str = "rk4"              # paper 003: euler (config/estimators/paper003.yaml)
    correction: str = "exact"            # exact | linear (paper 003 sec. 3.3: dq = R dz, dqd = R dzd)
    estimate_acceleration: bool = False
    acceleration_bias_psd: float = 1.0   # [(unit/s^2)^2 / s] random walk of the acceleration offset
    inputs: tuple | str = input_field()  # auto: the rule's (none without force limits) | [{coordinate, psd, sigma0, ...}]
    input_jump_nis: float = 16.0         # NIS above which the inputs may jump by up to sigma0 (0 = off; input_states.py)
    measurement_order: int = 1           # 1: first order (paper 003; the scalar fast path) | 2: second order


class ErrorEKF(AdaptivePlantNoise, JumpHypothesis, CovarianceInflation, Estimator):
    name = "errorekf"
    Options = ErrorEKFOptions
    combines_readings = True  # a sensor faster than the step: one reading per slot (stage.multirate)
    traits = Traits(cost=2.5, color=(0.17, 0.63, 0.17, 1.0), slot=3, tunable=KALMAN_TUNABLE, input_states=True, known_inputs=True,
                    follower=True)
    ACCELERATION_SIGMA0 = 1.0  # [unit/s^2] initial standard deviation of the acceleration offset

    @classmethod
    def validate_config(cls, cfg, file, path):
        if cfg["integrator"] not in INTEGRATOR_NAMES:
            raise ConfigError(file, f"{path}.integrator", f"must be one of {', '.join(INTEGRATOR_NAMES)}")
        if cfg["correction"] not in ("exact", "linear"):
            raise ConfigError(file, f"{path}.correction", "must be one of exact, linear")
        if not cfg["acceleration_bias_psd"] >= 0:
            raise ConfigError(file, f"{path}.acceleration_bias_psd", f"must be >= 0, got {cfg['acceleration_bias_psd']}")
        validate_inputs(cfg, file, path)

    @classmethod
    def transition_orders(cls, cfg):
        """The simulation's integrator order in both z and zd."""
        p = int(getattr(get_integrator(cfg["integrator"]), "order", 2))
        return (p, p)

    def __init__(self, mech, sensors, options, rng=None):
        super().__init__(mech, sensors, options, rng)
        self.model = ReducedModel(mech, sensors)
        self.integrator = get_integrator(options.integrator)
        self.g = g = mech.dof
        self.acc = bool(options.estimate_acceleration)
        init_input_attributes(self)
        self.na = g if self.acc else 0
        self.dim = 2 * g + self.na + self.k
        self.a, self.u = np.zeros(g), np.zeros(self.k)
        self.state = MBState(mech.q0.copy(), mech.qd0.copy())
        self.P = np.eye(self.dim)
        self._sigma = sensor_variances(options)
        self.failures = 0
        # the integrators except ali3p take and return qdd = the forward dynamics (no extras)
        self._carry_qdd = options.integrator != "ali3p"
        self.linear = options.correction == "linear"
        self._FQ_cache = {}
        self._FQ_lists_cache = None
        # rk4 of one state straight on the scalar kernels (engine.rk4_single), if it applies
        K = fastpath.kernels(mech)
        self._kernels = K if (options.integrator == "rk4" and K is not None and not mech.drivers) else None
        # the same steps compiled with numba (errorekf_numba: when cached and the run is long
        # enough, or after a long run); in auto decided at expect_steps or the first step
        self._nb, self._nb_wait, self._nb_open = None, -1, self._kernels is not None
        if self._nb_open and errorekf_numba.requested() != "auto":
            self._decide_backend()
        self.full: FullState | None = None  # R and the kernel context at the simulation state

    def expect_steps(self, steps: int) -> None:
        """The caller will run about ``steps`` steps (a replay knows its bag's length): a short
        run stays on the Python path even if the compiled one is cached (errorekf_numba.select)."""
        if self._nb_open:
            self._decide_backend(steps)

    def _decide_backend(self, steps: int | None = None) -> None:
        """The compiled path or the Python one (errorekf_numba's rules), once."""
        self._nb_open = False
        self._nb = errorekf_numba.select(self.mech, steps=steps)
        self._nb_wait = errorekf_numba.AUTO_STEPS if (self._nb is None and errorekf_numba.requested() == "auto") else -1

    # -- helpers ------------------------------------------------------------------------------
    def _extra_zdd(self, q):
        return self.a + self._gain(q) @ self.u if self.k else self.a.copy()

    def _gain(self, q):  # the input gain at q, with the FullState's R when it is at q (no position-level R again)
        st = self.full
        return self.model.input_gain(q, self.input_cols, st.R if st is not None and st.q is q else None)

    def _extra_Q(self):
        return input_forces(self.mech.n, self.input_cols, self.u) if self.k else None

    def _accelerations(self):
        """(zdd, qdd) of the simulation state including the estimated offset and inputs."""
        q, qd = self.state.q, self.state.qd
        if not (self.acc or self.k) and self.state.qdd is not None:
            qdd = self.state.qdd.copy()
            return qdd[self.mech.independent], qdd
        zdd, qdd = dynamics.forward(self.mech, self.t, q, qd, extra_Q=self._extra_Q())
        if self.acc:
            zdd = zdd + self.a
            qdd = qdd + kinematics.r_matrix(self.mech, q) @ self.a
        return zdd, qdd

    # -- interface ----------------------------------------------------------------------------
    def reset(self, t: float, init: InitialState) -> None:
        self.t = float(t)
        self._alt = None
        g = self.g
        guess = self.mech.q0 if init.q_hint is None else init.q_hint
        q, ok = kinematics.solve_position(self.mech, init.z, guess)
        if not ok:
            raise ValueError("the initial state cannot be assembled")
        qd = kinematics.velocity(self.mech, q, init.zd)
        self.state = MBState(q, qd)
        self.a = np.zeros(g)
        self.u = self._u_initial.copy()
        diag = [np.broadcast_to(init.sigma_z, (g,)), np.broadcast_to(init.sigma_zd, (g,))]
        if self.acc:
            diag.append(np.full(g, float(self.ACCELERATION_SIGMA0)))
        if self.k:
            diag.append(self._u_sigma0)
        self.P = np.diag(np.concatenate(diag) ** 2)
        self.failures, self.full, self._span = 0, None, 0.0
        self._reset_adaptive()

    def rebase(self, t: float) -> None:
        super().rebase(t)
        self.state = MBState(self.state.q, self.state.qd)  # its qdd belongs to the old time
        self.full = None

    def _F_and_Q(self, dt, q):
        constant = not self.k and self.options.transition_jacobian != "full" and self.noise_scale == 1.0
        if constant and dt in self._FQ_cache:
            return self._FQ_cache[dt]
        out = self._build_F_and_Q(dt, q)
        if constant:
            self._FQ_cache[dt] = out
        return out

    def _build_F_and_Q(self, dt, q):
        g, na, k = self.g, self.na, self.k
        F = np.eye(self.dim)
        F[:g, g : 2 * g] = dt * np.eye(g)
        if self.options.transition_jacobian == "full":
            x = np.concatenate([q[self.model.iz], self.state.qd[self.model.iz]])
            A = self.model.transition_jacobian(self.t, x, q, "full", extra_Q=self._extra_Q())
            F[g : 2 * g, : 2 * g] += dt * A[g:, :]
        if na:
            F[:g, 2 * g : 2 * g + na] = 0.5 * dt * dt * np.eye(g)
            F[g : 2 * g, 2 * g : 2 * g + na] = dt * np.eye(g)
        if k:
            B = self._gain(q)
            F[:g, 2 * g + na :] = 0.5 * dt * dt * B
            F[g : 2 * g, 2 * g + na :] = dt * B
        Qd = np.zeros((self.dim, self.dim))
        Qd[: 2 * g, : 2 * g] = self.plant_noise(dt)
        if na:
            Qd[2 * g : 2 * g + na, 2 * g : 2 * g + na] = np.eye(g) * float(self.options.acceleration_bias_psd) * dt
        if k:
            Qd[2 * g + na :, 2 * g + na :] = np.diag(self._u_psd * dt)
        return F, Qd

    HYPOTHESIS = ("state", "full", "P", "a", "u")  # jump_hypothesis: the state of a hypothesis

    def predict(self, dt: float) -> None:
        self._span += dt  # s since the last update (the input jumps' directions)
        self._predict_both(self._predict_one, dt)

    def _predict_one(self, dt: float) -> None:
        if self._nb_open:
            self._decide_backend()
        q = self.state.q
        F, Qd = self._F_and_Q(dt, q)
        extra = self._extra_zdd(q) if (self.acc or self.k) else None
        if self._nb_wait >= 0:
            errorekf_numba.auto(self, dt)
        if self._kernels is not None and (
                (self._nb is not None and errorekf_numba.predict(self, self._nb, dt, extra))
                or errorekf_scalar.predict(self, dt, extra)):
            if self.dim == 2:  # F P F^T + Qd on floats (numpy's fixed costs dominate at 2 x 2)
                self.P = np.array(errorekf_scalar.propagate2(self.P.tolist(), *errorekf_scalar.fq_lists(self, F, Qd)))
            else:
                self.P = F @ self.P @ F.T + Qd
                self.P = 0.5 * (self.P + self.P.T)
            return
        qdd = self.state.qdd if self._carry_qdd else None
        new = self.integrator.step(self.mech, self.t, MBState(self.state.q, self.state.qd, qdd), dt, extra_zdd=extra)
        self.advance_clock(dt)
        self.full = None
        if (new.ok if isinstance(new.ok, bool) else new.ok.all()) and np.isfinite(new.q).all():
            self.state = MBState(new.q, new.qd, new.qdd if self._carry_qdd else None)
        else:
            self.failures += 1
            self.state = MBState(self.state.q, self.state.qd)  # its qdd belongs to the previous time
        self.P = F @ self.P @ F.T + Qd
        self.P = 0.5 * (self.P + self.P.T)

    def _full(self) -> FullState:
        """R and the kernel context at the simulation state (evaluated when first needed)."""
        if self.full is None:
            self.full = self.model.full_state_at(self.t, self.state.q, self.state.qd, with_dynamics=False)
        return self.full

    def update(self, measurements, gates=None):
        if self._nb_open:
            self._decide_backend()
        second = int(self.options.measurement_order) == 2 and self.dim == 2 * self.g
        if self._kernels is not None and not second and errorekf_scalar.applies(self, measurements):
            try:
                res = errorekf_scalar.update(self, measurements, gates)
            except fastpath.SCALAR_ERRORS:
                res = None  # nothing changed: the generic update decides
            if res is not None:
                return self.learned(res)
        g, na = self.g, self.na
        self._decide(measurements)
        names, dims, y, H, Rm = self._innovation(measurements)
        before = None
        if self.k_unknown:  # a jump since the last update moved z and zd (jump_directions)
            ku, first = self.k_unknown, 2 * g + na
            G = jump_directions(self.dim, g, first, self.model.input_gain(self.state.q, self.input_cols)[:, :ku], self._span)
            P = input_jump(self.P, y, H, Rm, slice(first, first + ku), self._u_sigma0[:ku] ** 2,
                           self.options.input_jump_nis, G)
            if P is not self.P:
                self.input_jumps += 1
                before = self._state_tuple()
            self.P = P
        P0, self._span = self.P, 0.0
        dx, self.P, res = ekf_update(np.zeros(self.dim), self.P, names, dims, y, H, Rm, gates)
        if res.accepted and self.k:  # the inputs within their limits (input_states.project_inputs)
            dx = project_inputs(dx, self.P, np.arange(2 * g + na, self.dim), self.u, self._u_limit)
        if res.accepted:
            self._correct(dx)
            if before is not None:
                self._keep_alternative(before)
        return self.learned(res, y, R=Rm, H=H, P=P0)

    def _innovation_cov(self, measurements):
        """(y, S) of the readings at the current state (jump_hypothesis)."""
        _, _, y, H, Rm = self._innovation(measurements)
        return y, H @ self.P @ H.T + Rm

    def _innovation(self, measurements):
        """(names, dims, y, H, R) of the readings at the current state."""
        g, na = self.g, self.na
        second = int(self.options.measurement_order) == 2 and self.dim == 2 * g
        names = [m.sensor for m in measurements]
        dims = [self.sensors[n].dim for n in names]
        o = np.concatenate([np.asarray(m.value, float) for m in measurements]) if len(measurements) > 1 \
            else np.asarray(measurements[0].value, float)
        q = self.state.q
        uses_qdd = self.sensors.uses_qdd(names)
        qdd = self._accelerations()[1] if uses_qdd else None
        st = self._full()
        pred, Hx, Hqdd = self.model.linearize(names, self.t, st, qdd=qdd, extra_Q=self._extra_Q())
        Rm = reading_noise(self.model.noise_covariance(names, self._sigma), measurements, dims)
        if second:  # the Gaussian second-order terms at the nominal state (second_order.py)
            iz = self.mech.independent
            x = np.concatenate([q[iz], self.state.qd[iz]])
            terms = second_order_terms(self.model, names, self.t, x, q, self.P)
            if terms is not None:
                pred, Rm = pred + terms[0], Rm + terms[1]
        y = self.model.residual(names, o, pred)
        if self.dim == 2 * g:
            H = Hx
        else:
            H = np.zeros((Hx.shape[0], self.dim))
            H[:, : 2 * g] = Hx
            if uses_qdd and (na or self.k):
                R = st.R
                if na:
                    H[:, 2 * g : 2 * g + na] = Hqdd @ R
                if self.k:
                    H[:, 2 * g + na :] = Hqdd @ R @ self.model.input_gain(q, self.input_cols, R)
        return names, dims, y, H, Rm

    def _correct(self, dx):
        """Feed the estimated errors back to the simulation (error state back to zero)."""
        g, na = self.g, self.na
        mech = self.mech
        q, qd = self.state.q, self.state.qd
        R = self._full().R
        if self.linear:  # paper 003 sec. 3.3: the velocity problem only
            q1, qd1 = q + R @ dx[:g], qd + R @ dx[g : 2 * g]
            if not (np.isfinite(q1).all() and np.isfinite(qd1).all()):
                self.failures += 1
                return
            st = self.model.full_state_at(self.t, q1, qd1, with_dynamics=self._carry_qdd)
        else:
            z = q[mech.independent] + dx[:g]
            zd = qd[mech.independent] + dx[g : 2 * g]
            st, ok = self.model.solve_full(self.t, z, zd, q + R @ dx[:g])
            if not ok:
                self.failures += 1
                return
        self.state = MBState(st.q, st.qd, st.qdd if self._carry_qdd else None)
        self.full = st
        if na:
            self.a = self.a + dx[2 * g : 2 * g + na]
        if self.k:
            self.u = self.u + dx[2 * g + na :]

    def estimate(self) -> MechanismSnapshot:
        g, na = self.g, self.na
        q, qd = self.state.q, self.state.qd
        zdd, qdd = self._accelerations()
        iz = self.mech.independent
        snap = MechanismSnapshot(
            stamp=self.t, q=q.copy(), qd=qd.copy(), qdd=qdd, z=q[iz].copy(), zd=qd[iz].copy(), zdd=zdd,
            cov=self.P[: 2 * g, : 2 * g].copy(),
        )
        if self.k:
            snap.input_names = input_names(self)
            snap.inputs = self.u.copy()
            snap.input_cov = self.P[2 * g + na :, 2 * g + na :].copy()
        return snap

    def set_known_inputs(self, values, variances) -> None:
        """The held known inputs and their variances for the next step
        (:func:`~mbde_core.estimators.kalman.input_states.known_input_state`)."""
        if self.k_known:
            first = 2 * self.g + self.na + self.k_unknown

            def held():
                self.u, self.P = known_input_state(self.u, self.P, first, values, variances)
            for_both(self, held)

    def diagnostics(self) -> dict:
        return {"assembly_failures": self.failures, **super().diagnostics()}  # + the jumps (jump_hypothesis)
