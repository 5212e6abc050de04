"""One-step integrators of the multibody equations, all with the same interface.

``integrator.step(mech, t, state, h, extra_zdd=None) -> MBState`` advances a single
state (arrays (n,)) or a batch (arrays (N, n)) from t to t + h. ``extra_zdd`` (g,) or
(N, g) is an acceleration added to the independent accelerations during the step (the
acceleration noise v of paper 000 eq. 11); the variational integrators apply it as the
generalized force M R v, which changes zdd by exactly v.

Independent-coordinate (R-matrix) integrators, state x = [z, zd], zdd = f(z, zd, t)
(paper 003 eqs. 3-4):

- ``euler``:  z1 = z0 + h zd0,  zd1 = zd0 + h f(x0)  (paper 003 eq. 12);
- ``rk4``:    classical 4th-order Runge-Kutta (paper 000 sec. 4.3);
- ``trapezoidal``: x1 = x0 + h/2 (F(x0) + F(x1)), implicit, Newton on zd1.

After the step q is recovered by the position problem started from q0 + h qd0, which
keeps every particle on its own assembly branch.

Variational integrators in natural coordinates with holonomic constraints (paper 002
sec. 2; constrained discrete Euler-Lagrange equations in position-momentum form, with
the RATTLE velocity projection):

- ``midpoint`` (2nd order), from L_d = h L((q0+q1)/2, (q1-q0)/h) and discrete forces
  f^- = f^+ = h/2 F(q_mid, v_mid)::

      M (q1 - q0) = h p0 + h^2/2 F(q_mid, v_mid) - Phi_q(q0)^T lambda',   Phi(q1) = 0
      p1 = M (q1 - q0)/h + h/2 F(q_mid, v_mid)

- ``symplectic_euler`` (1st order), from L_d = h [1/2 v^T M v - V(q1)] (paper 002 eq. 5)::

      M (q1 - q0) = h p0 - Phi_q(q0)^T lambda',   Phi(q1) = 0
      p1 = M (q1 - q0)/h + h F(q1, v)

  and for both, qd1 solves [[M, Phi_q^T], [Phi_q, 0]] [qd1; mu] = [p1; 0].

``ali3p`` (:mod:`mbde_core.engine.ali3p`) is the drift-free index-3 augmented
Lagrangian formulation with the trapezoidal rule, also exposed here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.engine import dynamics, kinematics
from mbde_core.engine.linalg import solve


@dataclass
class MBState:
    """Dynamic state: q, qd, qdd (n,) or (N, n); ok: bool or (N,) bool (assembly succeeded)."""

    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray | None = None
    ok: np.ndarray | bool = True

    def batch(self):
        """(q, qd, qdd, single) with arrays forced to (N, n)."""
        single = np.asarray(self.q).ndim == 1
        f = (lambda a: None if a is None else np.atleast_2d(np.asarray(a, dtype=float)))
        return f(self.q), f(self.qd), f(self.qdd), single

    @staticmethod
    def make(q, qd, qdd, ok, single) -> "MBState":
        if single:
            return MBState(q[0], qd[0], None if qdd is None else qdd[0], bool(np.all(ok)))
        return MBState(q, qd, qdd, ok)


def _extra(extra_zdd, N, g):
    return None if extra_zdd is None else np.asarray(extra_zdd, dtype=float).reshape(N, g)


class _IndependentIntegrator:
    """Shared helpers of the R-matrix (independent-coordinate) integrators."""

    implicit = False

    def _accel(self, mech, t, q, qd, v):
        return dynamics.evaluate(mech, t, q, qd, extra_zdd=v).zdd

    def _assemble(self, mech, t, q_guess, z, zd):
        q, ok = kinematics.solve_position(mech, z, q_guess)
        J = mech.phi_q(q)
        qd = kinematics.velocity(mech, q, zd, phi_q=J)
        return q, qd, ok

    def _finish(self, mech, t1, q0, qd0, h, z1, zd1, single, ok_prev=True):
        q1, qd1, ok = self._assemble(mech, t1, q0 + h * qd0, z1, zd1)
        qdd1 = dynamics.evaluate(mech, t1, q1, qd1).qdd
        return MBState.make(q1, qd1, qdd1, ok & ok_prev, single)


class ExplicitEuler(_IndependentIntegrator):
    name = "euler"
    order = 1

    def step(self, mech, t, state: MBState, h, extra_zdd=None) -> MBState:
        q, qd, qdd, single = state.batch()
        iz = mech.independent
        v = _extra(extra_zdd, q.shape[0], mech.dof)
        a = qdd[:, iz] if qdd is not None else self._accel(mech, t, q, qd, None)
        if v is not None:
            a = a + v
        z1 = q[:, iz] + h * qd[:, iz]
        zd1 = qd[:, iz] + h * a
        return self._finish(mech, t + h, q, qd, h, z1, zd1, single)


class RK4(_IndependentIntegrator):
    name = "rk4"
    order = 4

    def step(self, mech, t, state: MBState, h, extra_zdd=None) -> MBState:
        q, qd, qdd, single = state.batch()
        iz = mech.independent
        v = _extra(extra_zdd, q.shape[0], mech.dof)
        z0, zd0 = q[:, iz], qd[:, iz]
        a1 = qdd[:, iz] if qdd is not None else self._accel(mech, t, q, qd, None)
        if v is not None:
            a1 = a1 + v
        ok = np.ones(q.shape[0], dtype=bool)
        # stage 2
        zd2 = zd0 + 0.5 * h * a1
        q2, qd2, ok2 = self._assemble(mech, t + 0.5 * h, q + 0.5 * h * qd, z0 + 0.5 * h * zd0, zd2)
        a2 = self._accel(mech, t + 0.5 * h, q2, qd2, v)
        # stage 3
        zd3 = zd0 + 0.5 * h * a2
        q3, qd3, ok3 = self._assemble(mech, t + 0.5 * h, q2, z0 + 0.5 * h * zd2, zd3)
        a3 = self._accel(mech, t + 0.5 * h, q3, qd3, v)
        # stage 4
        zd4 = zd0 + h * a3
        q4, qd4, ok4 = self._assemble(mech, t + h, q + h * qd, z0 + h * zd3, zd4)
        a4 = self._accel(mech, t + h, q4, qd4, v)
        z1 = z0 + (h / 6.0) * (zd0 + 2.0 * zd2 + 2.0 * zd3 + zd4)
        zd1 = zd0 + (h / 6.0) * (a1 + 2.0 * a2 + 2.0 * a3 + a4)
        ok &= ok2 & ok3 & ok4
        return self._finish(mech, t + h, q, qd, h, z1, zd1, single, ok)


class Trapezoidal(_IndependentIntegrator):
    """Implicit trapezoidal rule on x = [z, zd]; Newton on zd1 with a finite-difference Jacobian."""

    name = "trapezoidal"
    order = 2
    implicit = True

    def __init__(self, tol: float = 1e-12, max_iter: int = 20):
        self.tol = tol
        self.max_iter = max_iter

    def step(self, mech, t, state: MBState, h, extra_zdd=None) -> MBState:
        q, qd, qdd, single = state.batch()
        iz = mech.independent
        g = mech.dof
        N = q.shape[0]
        v = _extra(extra_zdd, N, g)
        z0, zd0 = q[:, iz], qd[:, iz]
        a0 = qdd[:, iz] if qdd is not None else self._accel(mech, t, q, qd, None)
        if v is not None:
            a0 = a0 + v
        t1 = t + h
        guess = q + h * qd

        def residual(zd1, q_guess):
            z1 = z0 + 0.5 * h * (zd0 + zd1)
            q1, qd1, ok = self._assemble(mech, t1, q_guess, z1, zd1)
            a1 = self._accel(mech, t1, q1, qd1, v)
            return zd1 - zd0 - 0.5 * h * (a0 + a1), q1, ok

        zd1 = zd0 + h * a0
        G, q1, ok = residual(zd1, guess)
        scale = np.maximum(np.abs(zd0), 1.0)
        for _ in range(self.max_iter):
            if np.all(np.abs(G) <= self.tol * scale):
                break
            eps = 1e-7 * np.maximum(np.abs(zd1), 1.0)
            Jac = np.empty((N, g, g))
            for k in range(g):
                dz = zd1.copy()
                dz[:, k] += eps[:, k]
                Gk, _, _ = residual(dz, q1)
                Jac[:, :, k] = (Gk - G) / eps[:, k : k + 1]
            zd1 = zd1 - solve(Jac, G)
            G, q1, ok = residual(zd1, q1)
        z1 = z0 + 0.5 * h * (zd0 + zd1)
        return self._finish(mech, t1, q, qd, h, z1, zd1, single, ok)


class _Variational:
    """Constrained variational integrators in natural coordinates (see module docstring)."""

    implicit = True
    midpoint = True

    def __init__(self, tol: float = 1e-12, max_iter: int = 25):
        self.tol = tol
        self.max_iter = max_iter

    def step(self, mech, t, state: MBState, h, extra_zdd=None) -> MBState:
        q0, qd0, _, single = state.batch()
        N, n = q0.shape
        m = mech.m
        M = mech.M
        p0 = qd0 @ M.T
        J0 = mech.phi_q(q0)
        Qe = None
        if extra_zdd is not None:
            R0 = kinematics.r_matrix(mech, q0, phi_q=J0)
            v = np.asarray(extra_zdd, dtype=float).reshape(N, mech.dof)
            Qe = np.einsum("ij,njk,nk->ni", M, R0, v)
        tf = t + 0.5 * h if self.midpoint else t + h

        def force(q1):
            if self.midpoint:
                qa, va = 0.5 * (q0 + q1), (q1 - q0) / h
            else:
                qa, va = q1, (q1 - q0) / h
            F = mech.forces(tf, qa, va)
            return F if Qe is None else F + Qe

        q1 = q0 + h * qd0
        lam = np.zeros((N, m))
        tol = 1e-12 * max(1.0, mech.length_scale**2)
        ok = np.zeros(N, dtype=bool)
        for _ in range(self.max_iter):
            G1 = (q1 - q0) @ M.T - h * p0 + np.einsum("nji,nj->ni", J0, lam)
            if self.midpoint:
                G1 -= 0.5 * h * h * force(q1)
            G2 = mech.phi(q1)
            A = np.zeros((N, n + m, n + m))
            A[:, :n, :n] = M
            if self.midpoint and (mech.loads.position_dependent or mech.loads.velocity_dependent or Qe is not None):
                K, C = mech.force_jacobians(tf, 0.5 * (q0 + q1), (q1 - q0) / h)
                A[:, :n, :n] -= 0.5 * h * h * (0.5 * K + C / h)
            A[:, :n, n:] = np.transpose(J0, (0, 2, 1))
            A[:, n:, :n] = mech.phi_q(q1)
            rhs = -np.concatenate([G1, G2], axis=1)
            dy = solve(A, rhs)
            q1 = q1 + dy[:, :n]
            lam = lam + dy[:, n:]
            ok = (np.max(np.abs(dy[:, :n]), axis=1) <= 1e-13 * max(1.0, mech.length_scale)) & (
                np.max(np.abs(G2), axis=1) <= 1e3 * tol
            )
            if ok.all():
                break
        ok = np.all(np.abs(mech.phi(q1)) <= 1e3 * tol, axis=1)
        F1 = force(q1)
        p1 = (q1 - q0) @ M.T / h + (0.5 * h if self.midpoint else h) * F1
        qd1 = project_momentum(mech, q1, p1)
        qdd1 = dynamics.evaluate(mech, t + h, q1, qd1).qdd
        return MBState.make(q1, qd1, qdd1, ok, single)


class VariationalMidpoint(_Variational):
    name = "midpoint"
    order = 2
    midpoint = True


class SymplecticEuler(_Variational):
    name = "symplectic_euler"
    order = 1
    midpoint = False


def project_momentum(mech, q, p):
    """qd from a momentum p (N, n): [[M, Phi_q^T], [Phi_q, 0]] [qd; mu] = [p; 0]."""
    N, n = q.shape
    m = mech.m
    J = mech.phi_q(q)
    A = np.zeros((N, n + m, n + m))
    A[:, :n, :n] = mech.M
    A[:, :n, n:] = np.transpose(J, (0, 2, 1))
    A[:, n:, :n] = J
    rhs = np.concatenate([p, np.zeros((N, m))], axis=1)
    return solve(A, rhs)[:, :n]


def get_integrator(name: str, **kwargs):
    """Integrator by name: euler, rk4, trapezoidal, midpoint, symplectic_euler, ali3p."""
    from mbde_core.engine.ali3p import ALI3P

    table = {
        "euler": ExplicitEuler,
        "rk4": RK4,
        "trapezoidal": Trapezoidal,
        "midpoint": VariationalMidpoint,
        "symplectic_euler": SymplecticEuler,
        "ali3p": ALI3P,
    }
    if name not in table:
        raise KeyError(f"unknown integrator {name!r} (choose from {', '.join(table)})")
    return table[name](**kwargs)


INTEGRATOR_NAMES = ("euler", "rk4", "trapezoidal", "midpoint", "symplectic_euler", "ali3p")
