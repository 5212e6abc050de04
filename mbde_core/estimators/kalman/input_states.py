"""Unknown generalized-force inputs as random-walk states of the [z, zd] observers (UKF,
DEKF, CEKF; the errorEKF and VI-EKF use the same options and functions).

Option ``inputs`` (the same schema as the errorEKF's, :mod:`errorekf`): a list of
``{coordinate: name, psd: [(N m)^2/s or N^2/s], sigma0: [N m or N], initial: value,
limit: [N m or N]}``, one generalized force u_j on the named coordinate q_c(j) each, or
``auto``: the default-tuning rule adds one per force-limited independent coordinate
(:func:`~mbde_core.estimators.options.rule.auto_inputs`; none without force limits), with
``limit`` = sigma0 = the force limit. Two additions to paper 004's random walk:

- ``input_jump_nis`` (:func:`jump_variance`): a reading the random walk cannot explain
  but a jump of the inputs can raises their variances before the update;
- ``limit`` (:func:`project_inputs`): |u_j| <= limit_j (a motor's torque limit); an update
  that would take an input beyond it is projected back along P.

The state becomes x = [z, zd, u] (2g + k), with (paper 004 eqs. 30-33, the ADE-KF's
random-walk input model, here on the [z, zd] observers of paper 003 sec. 3.1)

    z' = zd,   zd' = f(z, zd) + B(z) u,   u' = w_u,   E[w_u w_u^T] = diag(psd) delta(t),

B(z) = dzdd/du = (R^T M R)^-1 R^T E (E (n, k): the unit columns of the input
coordinates; the R-matrix dynamics are linear in the applied forces, so the accelerations
with the inputs are those without plus B u, qdd gaining R B u). The discrete plant noise
is block diagonal, Sigma^P (2g, 2g) of the ``plant_noise`` option and diag(psd) dt for u
(the increment of a random walk over dt); every covariance is propagated as
F P F^T + Q (DEKF) or as the weighted outer products of sigma points plus Q (UKF), and
symmetrised, so it stays symmetric PSD by construction. The estimate's covariance (and
the NEES) is that of [z, zd] as without inputs; the inputs are reported in the snapshot
(input_names, inputs, input_cov). With ``inputs: []`` (k = 0) the filters run exactly
the code they ran before inputs existed.
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import kinematics
from mbde_core.estimators.options.inputs import INPUT_KEYS, validate_inputs  # noqa: F401 (the observers' import)



def input_forces(n: int, cols, u) -> np.ndarray:
    """The generalized forces (n,) of the inputs u (k,) acting on the coordinates ``cols``
    (summed where several act on one coordinate: a measured torque and an unknown one)."""
    Q = np.zeros(n)
    np.add.at(Q, cols, u)
    return Q


def init_input_attributes(est) -> None:
    """The inputs of ``est.options`` (resolved: a tuple of :class:`InputSpec`) on the
    estimator ``est`` (mech, options): input_specs, input_cols (their natural coordinates),
    k, _u_psd, _u_sigma0, _u_initial, _u_limit (k,), _E (n, k) (the unit columns:
    generalized forces E u) and the jump counter. The pipeline checked the coordinate
    names (:func:`~mbde_core.estimators.configure.check_names`).

    The known inputs of its sensors (``est.sensors.inputs``: measured torques,
    :mod:`mbde_core.sensors.effort`) follow the unknown ones as the last ``k_known`` of the
    k inputs (:func:`set_known_inputs`): psd 0, no limit, sigma0 the reading's force
    sigma gain sqrt(sigma^2 + step^2/12); ``k_unknown`` = k - k_known."""
    mech = est.mech
    specs = tuple(est.options.inputs)
    known = list(getattr(est.sensors, "inputs", ()))
    cols = [mech.coordinate_index(s.coordinate) for s in specs] + [int(s.coordinate) for s in known]
    est.input_specs, est.input_cols, est.k = specs, cols, len(cols)
    est.known_sensors, est.k_known, est.k_unknown = known, len(known), len(specs)
    known_sd = np.sqrt([s.force_variance() for s in known])
    est._u_psd = np.concatenate([[float(s.psd) for s in specs], np.zeros(len(known))])
    est._u_sigma0 = np.concatenate([[float(s.sigma0) for s in specs], known_sd])
    est._u_initial = np.concatenate([[float(s.initial) for s in specs], np.zeros(len(known))])
    est._u_limit = np.concatenate([input_limits(specs), np.full(len(known), np.inf)])
    est._E = np.zeros((mech.n, len(cols)))
    est._E[cols, np.arange(len(cols))] = 1.0
    est.input_jumps = 0  # updates at which the inputs jumped


class InputStates:
    """Mixin of a :class:`~mbde_core.estimators.kalman.base.ReducedKalman` observer:
    the k input states after [z, zd] (module doc). Call :meth:`_init_inputs` in
    ``__init__`` and :meth:`_reset_inputs` after the base class's ``reset``."""

    @classmethod
    def validate_config(cls, cfg: dict, file: str, path: str) -> None:
        """The ``inputs`` and ``input_jump_nis`` options (:func:`validate_inputs`)."""
        validate_inputs(cfg, file, path)
        super().validate_config(cfg, file, path)

    def _init_inputs(self) -> None:
        init_input_attributes(self)
        self._Qa_cache: dict = {}

    def _reset_inputs(self) -> None:
        """x = [z, zd, u0], P = diag(P_[z, zd], sigma0^2) (after the base reset)."""
        if not self.k:
            return
        g2 = 2 * self.g
        self.x = np.concatenate([self.x, self._u_initial])
        P = np.zeros((g2 + self.k, g2 + self.k))
        P[:g2, :g2] = self.P
        P[g2:, g2:] = np.diag(self._u_sigma0**2)
        self.P = P

    @property
    def u(self) -> np.ndarray:
        return self.x[2 * self.g:]

    def input_gain(self, R) -> np.ndarray:
        """B = dzdd/du = (R^T M R)^-1 R^T E: (g, k) for R (n, g), (N, g, k) for R (N, n, g)."""
        M = self.mech.M
        Rt = np.swapaxes(R, -1, -2)
        if R.shape[-1] == 1:  # one DOF: a division (np.linalg.solve's fixed cost is most of a sigma set's)
            return (Rt @ self._E) / (Rt @ M @ R)
        return np.linalg.solve(Rt @ M @ R, Rt @ self._E)

    def extra_forces(self):
        """The estimated generalized forces (n,) on the model (None without inputs)."""
        return input_forces(self.mech.n, self.input_cols, self.u) if self.k else None

    def with_inputs(self, q, zdd, qdd, U, R=None):
        """(zdd, qdd) of a batch of states (N rows: q (N, n), zdd (N, g), qdd (N, n) or
        None, inputs U (N, k)) with the inputs' accelerations B u added (qdd += R B u);
        R (N, n, g) at q if the caller has it, else evaluated."""
        if R is None:
            R = kinematics.r_matrix(self.mech, q)
        dz = np.einsum("igk,ik->ig", self.input_gain(R), U)
        zdd = zdd + dz
        if qdd is not None:
            qdd = qdd + np.einsum("ing,ig->in", R, dz)
        return zdd, qdd

    def augmented_noise(self, dt: float) -> np.ndarray:
        """Sigma^P of [z, zd, u] over dt: the plant noise and diag(psd) dt (cached per dt)."""
        Q = self._Qa_cache.get(dt)
        if Q is None:
            g2 = 2 * self.g
            Q = np.zeros((g2 + self.k, g2 + self.k))
            Q[:g2, :g2] = self.plant_noise(dt)
            Q[g2:, g2:] = np.diag(self._u_psd * dt)
            self._Qa_cache[dt] = Q
        return Q

    def _linearize_inputs(self, names, st):
        """(h, H (d, 2g + k)) of the readings ``names`` at the FullState st with the inputs
        applied (qdd + R B u, dh/d[z, zd] with the inputs' forces): dh/du = dh/dqdd R B."""
        g2 = 2 * self.g
        uses_qdd = self.sensors.uses_qdd(names)
        extra = self.extra_forces()
        qdd = None
        if uses_qdd:
            B = self.input_gain(st.R)
            qdd = st.qdd + st.R @ (B @ self.u)
        pred, Hx, Hqdd = self.model.linearize(names, self.t, st, qdd=qdd, extra_Q=extra if uses_qdd else None)
        H = np.zeros((Hx.shape[0], g2 + self.k))
        H[:, :g2] = Hx
        if uses_qdd:
            H[:, g2:] = Hqdd @ st.R @ B
        return pred, H

    def set_known_inputs(self, values, variances) -> None:
        """The held known inputs (k_known,) and their variances for the next step
        (:func:`known_input_state`; the stage calls it before every prediction)."""
        if self.k_known:
            g2 = 2 * self.g

            def held():
                u, self.P = known_input_state(self.x[g2:], self.P, g2 + self.k_unknown, values, variances)
                self.x = np.concatenate([self.x[:g2], u])
            for_both(self, held)

    def input_snapshot(self, snap):
        """The snapshot with the estimated inputs (names, values, covariance): the unknown
        inputs by coordinate name, the known ones by sensor name."""
        if self.k:
            g2 = 2 * self.g
            snap.input_names = input_names(self)
            snap.inputs = self.u.copy()
            snap.input_cov = self.P[g2:, g2:].copy()
        return snap


def input_names(est) -> list:
    """The names of the k inputs of ``est``: the unknown ones' coordinates, then the known
    ones' sensors (a measured torque is not an estimate of the coordinate's whole force)."""
    names = [est.mech.coordinate_names[c] for c in est.input_cols[: est.k_unknown]]
    return names + [s.name for s in est.known_sensors]


def for_both(est, fn) -> None:
    """fn() on the estimator's state and on its held jump alternative, if any
    (:mod:`~mbde_core.estimators.kalman.jump_hypothesis`: both take the same steps)."""
    fn()
    if getattr(est, "_alt", None) is not None:
        est._swap()
        fn()
        est._swap()


def known_input_state(u, P, first: int, values, variances):
    """(u, P) with the known inputs set to the held readings (:func:`set_known_inputs`):
    u[-m:] = values, and the rows and columns of P of the m known inputs (from index
    ``first``) cleared to diag(variances). The known inputs are states only within a step:
    the transition carries their uncertainty into [z, zd] through dzdd/du = Mbar^-1 R^T E
    (F's columns dt^2/2 B, dt B: the process noise G var G^T of a force held over the step),
    and an update may correct them with the state; the next step starts from the next
    reading again (a zero-order hold whose error is independent from step to step)."""
    m = len(values)
    u = np.array(u, dtype=float)
    u[len(u) - m:] = values
    idx = np.arange(first, first + m)
    P = np.array(P, dtype=float)
    P[idx, :] = 0.0
    P[:, idx] = 0.0
    P[idx, idx] = variances
    return u, P


def absorbing(est) -> list:
    """The indices of the unknown inputs of ``est`` that take the force's state dependence
    (:func:`unabsorbed`): those on a coordinate without a measured torque. A measured
    torque leaves its coordinate a residual input (:func:`~mbde_core.estimators.options.
    rule.residual_inputs`) and the force is known: on paper 004's slider-crank with the
    torque read, the UKF absorbing there gave 2.03e-3 rad, NEES/dim 0.057 (1.72e-3, 0.047
    without; 3 seeds x 3 s)."""
    known = set(est.input_cols[est.k_unknown:])
    return [j for j in range(est.k_unknown) if est.input_cols[j] not in known]


def unabsorbed(dA, B, Mbar) -> np.ndarray:
    """dA (..., g): deviations of the known forces' accelerations (between sigma points and
    their mean, or the rows df/dx of a transition Jacobian, transposed) without the part
    the unknown inputs can produce, (I - B (B^T Mbar B)^-1 B^T Mbar) dA (B (g, k) = dzdd/du,
    Mbar = R^T M R: the projection onto span(B) in the kinetic-energy metric).

    An unknown input is estimated from the readings to whatever the force on its
    coordinate is, so its estimate takes the force's dependence on the state too: a speed
    controller's holding torque cancels the inertia's variation with the crank angle
    (f + B u_hold ~ 0 at constant speed), which a random walk of u held over the step does
    not know. A covariance carried through the model's df/dx in the inputs' directions
    then claims a tie between z, zd and the readings that the motor removes. Measured on
    paper 004's slider-crank (1 kHz accelerometer, torque unknown, 3 s, the trust bench's run 0): DEKF
    with the full transition Jacobian NEES/dim 5.5, with F = [[I, dt I], [0, I]] 0.70; the
    UKF (whose sigma points follow the full dynamics) 4.8; the DIEKFpm (full A) 3.3. With
    one input per coordinate (g = k) nothing is left: the transition of [z, zd] is the
    double integrator plus B u."""
    MB = Mbar @ B
    C = np.linalg.solve(B.T @ MB, MB.T)  # (k, g)
    return dA - (dA @ C.T) @ B.T


def input_limits(specs) -> np.ndarray:
    """(k,) the inputs' bounds |u_j| <= limit_j (inf where a spec has none)."""
    return np.array([float(s.limit) for s in specs])


def project_inputs(x, P, idx, u, limit):
    """x moved so that the inputs u + x[idx] stay within +-limit (the force limits: a motor
    cannot exceed its torque limit): the excess e (k,) is removed along P's columns, the
    estimate projection of a Kalman filter with an active inequality constraint (Simon &
    Chia 2002, eq. 9 with W = P^-1): x <- x - P[:, idx] P[idx, idx]^-1 e, which sets the
    inputs on the bound and moves the states correlated with them accordingly (a torque
    cannot be over its limit, so neither is the speed change it would have caused). P is
    kept (the bound is one-sided: the inputs may still move back inside). x unchanged if
    inside."""
    v = u + x[idx]
    e = v - np.clip(v, -limit, limit)
    if not e.any() or not np.isfinite(e).all():
        return x
    try:
        return x - P[:, idx] @ np.linalg.solve(P[np.ix_(idx, idx)], e)
    except np.linalg.LinAlgError:
        x = x.copy()
        x[idx] -= e
        return x


def jump_variance(P_a, y, S0, Ha, jump_var, jump_nis: float):
    """The inputs' variances V (k,) after a jump a reading asks for (the ADE-KF's test,
    :meth:`~mbde_core.estimators.kalman.adekf_jumps.InputJumps._input_jump`), or None.

    z and zd cannot jump within a step, the inputs can (a saturating speed controller at a
    change of its target: the random walk, tuned for their smooth part, lags the step and
    the gate rejects the readings that show it). With the innovation y, its covariance S0
    and H_a the inputs' columns of the measurement Jacobian (or of the statistical
    linearisation Pxy^T P^-1 of a UKF), the least-squares jump is
    d = (H_a^T S0^-1 H_a)^-1 H_a^T S0^-1 y, its variance V = min(d^2, jump_var)
    (jump_var = sigma0^2: the rule's force limit F^2), and S1 = S0 + H_a V H_a^T: if
    y^T S0^-1 y > jump_nis and y^T S1^-1 y + ln det S1 < y^T S0^-1 y + ln det S0 (a
    generalised likelihood ratio), the inputs' variances P_a (k,) are raised to at least V
    before the update (and its gate). jump_nis 0: never."""
    if not jump_nis:
        return None
    try:
        Si_y = np.linalg.solve(S0, y)
        d0 = float(y @ Si_y)
        if not d0 > jump_nis:
            return None
        Si_Ha = np.linalg.solve(S0, Ha)
        d = np.linalg.lstsq(Ha.T @ Si_Ha, Ha.T @ Si_y, rcond=None)[0]
        V = np.minimum(d * d, jump_var)
        S1 = S0 + (Ha * V) @ Ha.T
        d1 = float(y @ np.linalg.solve(S1, y))
        l0, l1 = np.linalg.slogdet(S0)[1], np.linalg.slogdet(S1)[1]
    except np.linalg.LinAlgError:
        return None
    if not d1 + l1 < d0 + l0:
        return None
    return np.maximum(P_a, V)


def jump_directions(L: int, g: int, first: int, B, span: float) -> np.ndarray:
    """Gamma (L, k): how a jump du of k inputs (state indices first..first+k) at the start
    of the last ``span`` seconds moved the state [z, zd, ..., u] by now: dz = span^2/2 B du,
    dzd = span B du (B (g, k) = dzdd/du), du itself. A reading that sees only z and zd
    (a gyroscope, an encoder) shows an input jump only through these: at its own time its
    Jacobian has no input columns, and the jump test (:func:`jump_variance`) needs
    H_a = H Gamma."""
    k = B.shape[1]
    G = np.zeros((L, k))
    G[:g] = (0.5 * span * span) * B
    G[g:2 * g] = span * B
    G[first + np.arange(k), np.arange(k)] = 1.0
    return G


def input_jump(P, y, H, R, cols: slice, jump_var, jump_nis: float, G=None):
    """P with the inputs' variances raised when a reading says they jumped
    (:func:`jump_variance`, S0 = H P H^T + R), or P itself. G: the jump's directions
    (:func:`jump_directions`, columns of the inputs ``cols``): then H_a = H G and
    P += G dV G^T (a jump since the last update moved z and zd too)."""
    if not jump_nis:
        return P
    idx = np.arange(P.shape[0])[cols]
    Pa = P[idx, idx]
    V = jump_variance(Pa, y, H @ P @ H.T + R, H[:, cols] if G is None else H @ G, jump_var, jump_nis)
    if V is None:
        return P
    if G is not None:
        return P + (G * (V - Pa)) @ G.T
    P = P.copy()
    P[idx, idx] = V
    return P
