"""Index-3 augmented Lagrangian formulation with projections (ALI3-P), trapezoidal rule.

Drift-free simulation of the constrained equations M qdd + Phi_q^T lambda = Q,
Phi(q) = 0 (Bayo & Ledesma 1996; Cuadrado, Cardenal & Bayo 1997; the ground-truth
formulation of the mbde-matlab and libmbse toolkits):

- trapezoidal rule: qd1 = (2/h) q1 + qdh, qdh = -((2/h) q0 + qd0);
  qdd1 = (4/h^2) q1 + qddh, qddh = -((4/h^2) q0 + (4/h) qd0 + qdd0);
- augmented Lagrangian equations, with penalty alpha and multipliers lambda*:
  f(q1) = h^2/4 (M qdd1 + Phi_q^T (alpha Phi + lambda*) - Q) = 0, solved by Newton with
  the tangent f_q = M + h/2 C + h^2/4 (Phi_q^T alpha Phi_q + K), C = -dQ/dqd,
  K = -dQ/dq, and lambda* <- lambda* + alpha Phi after every iteration;
- mass-orthogonal projections of the velocities and accelerations onto the constraint
  manifold: f_q qd = W qd*, f_q qdd = W qdd* - h^2/4 Phi_q^T alpha (Phi_q)' qd,
  W = M + h/2 C + h^2/4 K (repeated ``projections`` times with the same factorisation,
  so the velocity and acceleration constraints hold to rounding).

Constraints hold to the Newton tolerance at every step, so long simulations do not
drift. Single states only (the simulator integrates one ground truth).

Speed (a step from a state without multipliers is the textbook form above operation for
operation, bit for bit): the multipliers lambda* start from the previous step's converged values
(``MBState.aux``; Bayo & Ledesma 1996) instead of zero: at 1 ms the Newton iteration
then converges in 2 iterations instead of 5. Phi and Phi_q come together from the
mechanism's generated kernels (one evaluation per iterate, reused for lambda*, the next
iteration and the projections); Q and the force Jacobians are evaluated once per step
unless a load depends on q or qd (gravity, constant and time-dependent forces: K = C =
0, and M - 0 = M exactly); the projection matrix is
factorised once with LAPACK getrf and the 2 x ``projections`` solves reuse it through
getrs, called directly (no argument-checking wrappers).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.linalg
from scipy.linalg import lapack

from mbde_core.engine import dynamics, fastpath, kinematics
from mbde_core.engine.linalg import solve_one
from mbde_core.engine.state import MBState


class ALI3P:
    name = "ali3p"
    order = 2
    implicit = True

    def __init__(self, penalty: float = 1e9, tol: float = 1e-12, max_iter: int = 30, projections: int = 3):
        self.penalty = penalty
        self.projections = projections
        self.tol = tol
        self.max_iter = max_iter
        self._setups: dict = {}  # (id(mech), h) -> (mech, constants of the scalar step)

    def step_lists(self, mech, t, x0, v0, acc0, aux, h):
        """:meth:`step` of one state given as lists q, qd, qdd (and its ``aux``), without
        extra accelerations, on the scalar kernels: (q1, qd1, qdd1 lists, ok, aux1), the
        values :meth:`step` returns as arrays; None when the scalar kernels do not apply
        (then call :meth:`step`). For loops of many steps (the simulator's ground truth):
        the step's constants are kept per (mechanism, h)."""
        if getattr(mech, "drivers", None):
            return None
        key = (id(mech), h)
        entry = self._setups.get(key)
        if entry is None or entry[0] is not mech:
            entry = self._setups[key] = (mech, _scalar_setup(self, mech, h))
        return None if entry[1] is None else _scalar_lists(entry[1], t, x0, v0, acc0, aux, h)

    def step(self, mech, t, state: MBState, h, extra_zdd=None) -> MBState:
        if getattr(mech, "drivers", None):
            raise ValueError(f"ali3p does not support the time-dependent driving constraints of {mech.name!r} "
                             "(use rk4, euler, midpoint or symplectic_euler)")
        if isinstance(state.q, np.ndarray) and state.q.ndim == 1 and state.qdd is not None:  # one state
            q0, qd0, qdd0, single = state.q[None], state.qd[None], state.qdd[None], True
        else:
            q0, qd0, qdd0, single = state.batch()
        if not single and q0.shape[0] != 1:
            out = [self.step(mech, t, MBState(q0[k], qd0[k], None if qdd0 is None else qdd0[k]), h,
                             None if extra_zdd is None else np.asarray(extra_zdd)[k]) for k in range(q0.shape[0])]
            return MBState(np.stack([o.q for o in out]), np.stack([o.qd for o in out]),
                           np.stack([o.qdd for o in out]), np.array([o.ok for o in out]))
        q0, qd0 = q0[0], qd0[0]
        qdd0 = dynamics.forward(mech, t, q0, qd0)[1] if qdd0 is None else qdd0[0]
        if extra_zdd is None:
            fast = _scalar_step(self, mech, t, q0, qd0, qdd0, state.aux, h)
            if fast is not None:
                q1, qd1, qdd1, ok, aux = fast
                if single:
                    return MBState(np.array(q1), np.array(qd1), np.array(qdd1), ok, aux)
                return MBState(np.array([q1]), np.array([qd1]), np.array([qdd1]), np.array([ok]))
        M = mech.M
        t1 = t + h
        Qe = None
        if extra_zdd is not None:
            R0 = kinematics.r_matrix(mech, q0)
            Qe = M @ R0 @ np.asarray(extra_zdd, dtype=float).reshape(mech.dof)
        ev = _Evaluator(mech, t1, Qe)
        alpha = ev.alpha(self.penalty)
        qdh = -((2.0 / h) * q0 + qd0)
        qddh = -((4.0 / h**2) * q0 + (4.0 / h) * qd0 + qdd0)
        q1 = q0 + h * qd0 + 0.5 * h * h * qdd0
        warm = isinstance(state.aux, _Multipliers) and len(state.aux.lam) == mech.m and state.aux.h == h
        lam = np.array(state.aux.lam, dtype=float) if warm else np.zeros(mech.m)
        scale = max(1.0, mech.length_scale)
        ok = False
        Q = Kf = Cf = None
        Phi, J = ev.phi_and_jacobian(q1)
        for _ in range(self.max_iter):
            qd1 = (2.0 / h) * q1 + qdh if ev.state_dependent or Q is None else None
            qdd1 = (4.0 / h**2) * q1 + qddh
            if qd1 is not None:  # forces depend on the state (or the first iteration)
                Q = ev.forces(q1, qd1)
                Kf, Cf = ev.force_jacobians(q1, qd1)
            if Kf is None:  # = the line below with K = C = 0
                fq = M + 0.25 * h * h * (alpha * J.T @ J)
            else:
                fq = M - 0.5 * h * Cf + 0.25 * h * h * (alpha * J.T @ J - Kf)
            f = 0.25 * h * h * (M @ qdd1 + J.T @ (alpha * Phi + lam) - Q)
            dq = -solve_one(fq, f)  # = numpy.linalg.solve
            q1 = q1 + dq
            Phi, J = ev.phi_and_jacobian(q1)  # for lambda*, the next iteration, the projections
            lam = lam + alpha * Phi
            if fastpath.maxabs(dq.tolist()) <= self.tol * scale:  # = np.max(np.abs(dq)), NaN included
                ok = True
                break
        qd_star = (2.0 / h) * q1 + qdh
        qdd_star = (4.0 / h**2) * q1 + qddh
        Kf, Cf = ev.force_jacobians(q1, qd_star)
        W = M if Kf is None else M - 0.5 * h * Cf - 0.25 * h * h * Kf
        fq = W + 0.25 * h * h * alpha * J.T @ J
        lu = _LU(fq)
        # Each projection divides the constraint violation by ~ h^2 alpha ||Phi_q||^2 / ||W||;
        # repeating it (same factorisation) drives it to rounding level.
        qd1 = qd_star
        for _ in range(self.projections):
            qd1 = lu.solve(W @ qd1)
        rhs_a = 0.25 * h * h * alpha * J.T @ ev.phi_q_dot_qd(q1, qd1)
        qdd1 = qdd_star
        for _ in range(self.projections):
            qdd1 = lu.solve(W @ qdd1 - rhs_a)
        ok = ok and bool(fastpath.maxabs(Phi.tolist()) <= 1e-9 * max(1.0, mech.length_scale**2))
        ok = ok and math.isfinite(sum(qd1.tolist()) + sum(qdd1.tolist()))
        return MBState(q1 if single else q1[None], qd1 if single else qd1[None],
                       qdd1 if single else qdd1[None], ok if single else np.array([ok]),
                       _Multipliers(lam.tolist(), h) if single else None)


def _scalar_step(self, mech, t, q0, qd0, qdd0, aux, h):
    """The step above on Python floats through the generated ALI3-P kernels
    (:mod:`mbde_core.model.codegen_ali3p`): (q1, qd1, qdd1 lists, ok, _Multipliers), or
    None when they do not apply (no kernels, forces depending on q or qd) or meet an
    arithmetic exception (the numpy code then runs). Same operations, in the same
    order, as the numpy path with K = C = 0; the solves with M + c Phi_q^T Phi_q use its
    L D L^T factors instead of LU (equal to rounding)."""
    setup = _scalar_setup(self, mech, h)
    if setup is None:
        return None
    return _scalar_lists(setup, t, q0.tolist(), qd0.tolist(), qdd0.tolist(), aux, h)


def _scalar_setup(self, mech, h):
    """The constants of :func:`_scalar_lists` for one mechanism and step, or None."""
    K = fastpath.kernels(mech)
    if K is None or K.scalar.pen_newton is None or mech.loads.position_dependent or mech.loads.velocity_dependent:
        return None
    ev = _Evaluator(mech, 0.0, None)  # the penalty does not depend on the time
    a = float(ev.alpha(self.penalty))  # a Python float: numpy scalars would slow every operation 5x
    hh = 0.25 * h * h
    return (K, mech.n, mech.m, a, hh, hh * a, 2.0 / h, 4.0 / h**2, 4.0 / h, 0.5 * h * h,
            self.tol * max(1.0, mech.length_scale), self.max_iter, self.projections,
            1e-9 * max(1.0, mech.length_scale**2))


def _scalar_lists(setup, t, x0, v0, acc0, aux, h):
    """One step of :func:`_scalar_step` from lists x0, v0, acc0 (q, qd, qdd)."""
    K, n, m, a, hh, c, k1, k2, k4, h2, tol, max_iter, projections, phi_tol = setup
    S = K.scalar
    try:
        qdh = [-(k1 * x + v) for x, v in zip(x0, v0)]
        qddh = [-(k2 * x + k4 * v + w) for x, v, w in zip(x0, v0, acc0)]
        q1 = [x + h * v + h2 * w for x, v, w in zip(x0, v0, acc0)]
        warm = isinstance(aux, _Multipliers) and len(aux.lam) == m and aux.h == h
        lam = aux.lam if warm else [0.0] * m
        zero = (0.0,) * n
        Q = S.forces(q1, zero, K.time_values(t + h))  # depends on t only here
        ok = False
        ph, J, tr = S.pen_state(q1)
        for _ in range(max_iter):
            dx = S.pen_newton(J, ph, lam, q1, qddh, Q, a, c, hh, k2)
            q1 = [x - d for x, d in zip(q1, dx)]
            ph, J, tr = S.pen_state(q1)
            lam = [v + a * p for v, p in zip(lam, ph)]
            if fastpath.maxabs(dx) <= tol:
                ok = True
                break
        F = S.pen_factor(J, c)
        qd1 = [k1 * x + y for x, y in zip(q1, qdh)]
        for _ in range(projections):
            qd1 = S.pen_msolve(F, qd1, zero)
        rhs = S.pen_jt(J, S.jdot(q1, qd1, tr), c)
        qdd1 = [k2 * x + y for x, y in zip(q1, qddh)]
        for _ in range(projections):
            qdd1 = S.pen_msolve(F, qdd1, rhs)
    except fastpath.SCALAR_ERRORS:
        return None
    ok = ok and fastpath.maxabs(ph) <= phi_tol
    ok = ok and math.isfinite(sum(qd1) + sum(qdd1))
    return q1, qd1, qdd1, ok, _Multipliers(lam, h)


class _Multipliers:
    """The converged augmented-Lagrangian multipliers lambda* (list of m floats) of a step
    (MBState.aux): the next step of the same size starts its iteration from them instead
    of zero (Bayo & Ledesma 1996), which saves ~3 of 5 Newton iterations at 1 ms."""

    def __init__(self, lam, h):
        self.lam, self.h = lam, h


class _Evaluator:
    """Phi, Phi_q, (Phi_q)' qd, Q and the force Jacobians of one state at time t1.

    With generated kernels: Phi, Phi_q and (Phi_q)' qd straight from them, Q = Q_gravity
    without loads (the value Mechanism.forces returns), and force Jacobians None when no
    load depends on q or qd (they are zero). Otherwise the Mechanism's methods.
    """

    def __init__(self, mech, t1, Qe):
        self.mech, self.t1, self.Qe = mech, t1, Qe
        self.K = fastpath.kernels(mech)
        loads = mech.loads
        self.constant_jacobians = not (loads.position_dependent or loads.velocity_dependent)
        self.state_dependent = not self.constant_jacobians  # Q(t1, q, qd) varies within a step

    def alpha(self, penalty: float) -> float:
        """Penalty scaled to the mass matrix and the geometry (cached per mechanism)."""
        mech = self.mech
        key = ("ali3p_alpha", penalty)
        cache = mech.__dict__.setdefault("_ali3p_cache", {})
        if key not in cache:
            cache[key] = penalty * max(np.max(np.abs(np.diag(mech.M))), 1e-12) / max(mech.length_scale, 1e-12) ** 2
        return cache[key]

    def phi(self, q):
        K = self.K
        if K is None:
            return self.mech.phi(q)
        x = q.tolist()
        return np.array(K.scalar.phi(x, K.scalar.trig(x)))

    def phi_and_jacobian(self, q):
        """(Phi (m,), Phi_q (m, n)) at q, sharing the sines and cosines (kernels)."""
        K = self.K
        if K is None:
            return self.mech.phi(q), self.mech.phi_q(q)
        S = K.scalar
        x = q.tolist()
        tr = S.trig(x)
        J = np.zeros(K.m * K.n)
        J[K.jac_flat] = S.jac_values(x, tr)
        return np.array(S.phi(x, tr)), J.reshape(K.m, K.n)

    def phi_q(self, q):
        return self.mech.phi_q(q)

    def phi_q_dot_qd(self, q, qd):
        return self.mech.phi_q_dot_qd(q, qd)

    def forces(self, q, qd):
        mech = self.mech
        Q = mech.Q_gravity if (self.K is not None and not mech.loads) else mech.forces(self.t1, q, qd)
        return Q if self.Qe is None else Q + self.Qe

    def force_jacobians(self, q, qd):
        """(dQ/dq, dQ/dqd), or (None, None) when both are zero."""
        if self.constant_jacobians:
            return None, None
        return self.mech.force_jacobians(self.t1, q, qd)


class _LU:
    """LU factors of a square matrix: scipy.linalg.lu_factor/lu_solve without the wrappers.

    Same LAPACK routines (getrf/getrs), so the same numbers; a non-finite matrix raises the
    same ValueError as the wrapper's check (right-hand sides are not checked: a non-finite
    one gives a non-finite solution, which the step reports as not ok).
    """

    def __init__(self, A):
        if not np.all(np.isfinite(A)):
            scipy.linalg.lu_factor(A)  # raises ValueError
        self.lu, self.piv, info = lapack.dgetrf(A)
        if info != 0:  # singular (warns) or bad argument (raises): the wrapper decides
            self.lu, self.piv = scipy.linalg.lu_factor(A)

    def solve(self, b):
        """x with A x = b (non-finite b gives non-finite x: the step then reports not ok)."""
        x, info = lapack.dgetrs(self.lu, self.piv, b)
        return x
