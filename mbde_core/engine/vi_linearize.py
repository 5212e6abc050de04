"""Structured linearisation of a variational step (paper 002 sec. 4.1; Johnson, Schultz &
Murphey 2014): the exact Jacobian of the implicit one-step map (z0, zd0) -> (z1, zd1).

The step (:mod:`mbde_core.engine.variational`) is defined implicitly by the reduced
discrete Euler-Lagrange residuals (q = q(z) the position problem's solution, R = dq/dz,
Mbar = R^T M R, F the force at the step's force point, Qe = M R0 a the extra force of an
acceleration offset a (g,))::

    Phi1(z0, zd0, z1)       = R0^T [M (q1 - q0) - c_h (F + Qe)] - h Mbar0 zd0 = 0
    Phi2(z0, z1, zd1)       = Mbar1 zd1 - R1^T [M (q1 - q0)/h + c_p (F + Qe)]  = 0

By the implicit-function theorem, with x = (z0, zd0, a) and y = (z1, zd1),
dy/dx = -(dPhi/dy)^-1 dPhi/dx, where dPhi/dy is block lower triangular::

    dPhi1/dz1 = R0^T [M - c_h dF/dq1] R1 = A      (the Newton matrix of the step)
    dPhi2/dzd1 = Mbar1

so dz1/dx = -A^-1 dPhi1/dx and dzd1/dx = -Mbar1^-1 (dPhi2/dx + dPhi2/dz1 dz1/dx): two
g x g solves. The derivatives of R along z are the second derivatives of the position
map, S[:, k, l] = d^2 q / dz_k dz_l, from the acceleration problem (S(u, u) = the
acceleration with qd = R u, zdd = 0; mixed terms by polarisation); dMbar/dz_l x =
S_l^T M R x + R^T M S_l x. Forces: F(t_f, q_a, v_a) with v_a = (q1 - q0)/h and
q_a = (q0 + q1)/2 (midpoint: dF/dq1 = K/2 + C/h, dF/dq0 = K/2 - C/h) or q_a = q1
(symplectic Euler: dF/dq1 = K + C/h, dF/dq0 = -C/h), K = dQ/dq, C = dQ/dqd.

Unlike the explicit-Euler linearisation I + h A(x) of the continuous dynamics (paper 003
eq. 13, the paper's baseline), this is the exact derivative of the discrete map that the
filter's prediction applies: the linearisation of a nearby mechanical system, symplectic
in (z, R^T M qd) (paper 002 sec. 4.1, "structured linearization").
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import fastpath, kinematics


def tangent_maps(mech, q):
    """(R (n, g), S (n, g, g)) at q (n,): on the generated scalar kernels when the mechanism
    has them (one trig/jac evaluation for R and every S(u, u)), else the generic code."""
    K = fastpath.kernels(mech)
    if K is not None:
        try:
            Sk = K.scalar
            x = np.asarray(q, dtype=float).tolist()
            tr = Sk.trig(x)
            J = Sk.jac(x, tr)
            R = np.array(Sk.rmatrix(J, tr), dtype=float).reshape(mech.n, mech.dof)
            g = mech.dof
            zero = [0.0] * g

            def curv(u):
                return np.array(Sk.acceleration(J, tr, x, (R @ u).tolist(), zero), dtype=float)

            S = np.empty((mech.n, g, g))
            E = np.eye(g)
            for k in range(g):
                S[:, k, k] = curv(E[k])
            for k in range(g):
                for l in range(k + 1, g):
                    S[:, k, l] = S[:, l, k] = 0.25 * (curv(E[k] + E[l]) - curv(E[k] - E[l]))
            return R, S
        except fastpath.SCALAR_ERRORS:
            pass
    R = kinematics.r_matrix(mech, q)
    return R, position_hessian(mech, q, R)


def position_hessian(mech, q, R) -> np.ndarray:
    """S (n, g, g): second derivatives d^2 q / dz_k dz_l of the position map at q (n,).

    S(u, u) is the acceleration of the motion with qd = R u and zdd = 0 (R' zd); the mixed
    terms come by polarisation, S(u, v) = (S(u + v, u + v) - S(u - v, u - v)) / 4.
    """
    g = R.shape[1]
    S = np.empty((q.shape[0], g, g))
    for k in range(g):
        S[:, k, k] = kinematics.rdot_zd(mech, q, R[:, k])
    for k in range(g):
        for l in range(k + 1, g):
            p = kinematics.rdot_zd(mech, q, R[:, k] + R[:, l])
            m = kinematics.rdot_zd(mech, q, R[:, k] - R[:, l])
            S[:, k, l] = S[:, l, k] = 0.25 * (p - m)
    return S


def step_jacobian(mech, t: float, h: float, midpoint: bool, q0, qd0, q1, qd1, a=None, force=None, E=None):
    """(Fx (2g, 2g), Fa (2g, g)): d(z1, zd1)/d(z0, zd0) and d(z1, zd1)/da of the variational
    step from (q0, qd0) to its result (q1, qd1) (single states (n,)), a: the acceleration
    offset of the step (g,) or None (zero), force: the step's generalized force fe (n,)
    (``extra_force`` of :func:`variational.run`) or None. With E (n, k), the columns of
    fe = E u: (Fx, Fa, Fu), Fu = d(z1, zd1)/du (2g, k): dPhi1/du = -c_h R0^T E,
    dPhi2/du = -c_p R1^T E (fe constant over the step: no z0-terms)."""
    M = np.asarray(mech.M, dtype=float)
    iz = mech.independent
    g = mech.dof
    a = np.zeros(g) if a is None else np.asarray(a, dtype=float).reshape(g)
    c_h = 0.5 * h * h if midpoint else 0.0
    c_p = 0.5 * h if midpoint else h
    (R0, S0), (R1, S1) = tangent_maps(mech, q0), tangent_maps(mech, q1)
    zd0, zd1 = qd0[iz], qd1[iz]
    va = (q1 - q0) / h
    if midpoint:
        tf, qa = t + 0.5 * h, 0.5 * (q0 + q1)
    else:
        tf, qa = t + h, q1
    F = mech.forces(tf, qa, va) + M @ R0 @ a
    if force is not None:
        F = F + np.asarray(force, dtype=float)
    if mech.loads:
        Kq, C = mech.force_jacobians(tf, qa, va)
    else:  # gravity only: constant
        Kq = C = np.zeros((mech.n, mech.n))
    dF1 = (0.5 * Kq if midpoint else Kq) + C / h  # dF/dq1
    dF0 = (0.5 * Kq if midpoint else 0.0 * Kq) - C / h  # dF/dq0
    MR0, MR1 = M @ R0, M @ R1
    Mbar0, Mbar1 = R0.T @ MR0, R1.T @ MR1
    a0 = M @ (q1 - q0) - c_h * F
    b1 = M @ (q1 - q0) / h + c_p * F
    A = R0.T @ (M - c_h * dF1) @ R1  # the Newton matrix
    # dPhi1 / d(z0, zd0, a)
    P1 = np.zeros((g, 2 * g + g))
    P2 = np.zeros((g, 2 * g + g))
    B0 = R0.T @ (-M - c_h * dF0) @ R0
    E0 = R1.T @ (M / h - c_p * dF0) @ R0  # dPhi2/dz0 without the S terms
    for l in range(g):
        Sl = S0[:, :, l]  # dR0/dz0_l (n, g)
        dMbar_zd = Sl.T @ MR0 @ zd0 + MR0.T @ Sl @ zd0
        P1[:, l] = Sl.T @ a0 + B0[:, l] - c_h * MR0.T @ (Sl @ a) - h * dMbar_zd
        P2[:, l] = E0[:, l] - c_p * MR1.T @ (Sl @ a)
    P1[:, g : 2 * g] = -h * Mbar0
    P1[:, 2 * g :] = -c_h * Mbar0
    P2[:, 2 * g :] = -c_p * MR1.T @ R0
    # dPhi2 / dz1
    D = -R1.T @ (M / h + c_p * dF1) @ R1
    for l in range(g):
        Sl = S1[:, :, l]
        D[:, l] += Sl.T @ MR1 @ zd1 + MR1.T @ Sl @ zd1 - Sl.T @ b1
    if E is not None:
        E = np.asarray(E, dtype=float)
        P1 = np.hstack([P1, -c_h * (R0.T @ E)])
        P2 = np.hstack([P2, -c_p * (R1.T @ E)])
    dz1 = -np.linalg.solve(A, P1)
    dzd1 = -np.linalg.solve(Mbar1, P2 + D @ dz1)
    J = np.vstack([dz1, dzd1])
    if E is not None:
        return J[:, : 2 * g], J[:, 2 * g : 3 * g], J[:, 3 * g :]
    return J[:, : 2 * g], J[:, 2 * g :]
