"""Plain reference implementations of the engine's quantities, for testing the fast paths.

Written from the formulas in the module docstrings (constraints, inertia, kinematics,
ALI3-P), one constraint / state at a time, with no code shared with the engine's
evaluators: Phi row by row, Phi_q by complex-step differentiation of Phi (exact to
rounding), (Phi_q)' qd from the closed forms, the R matrix and the accelerations from
dense linear algebra (the Lagrange-multiplier system), and the textbook ALI3-P step
(the engine's implementation before the fast paths, evaluators taken from a Mechanism
without generated kernels).
"""
from __future__ import annotations

import copy

import numpy as np
import scipy.linalg

from mbde_core.engine import dynamics
from mbde_core.engine.integrators import MBState

# Mechanisms beyond the shipped ones: loads of every kind; rigid polygons, an oblique
# slider and a dependent angle; a triad (one 6x6 dependent block); no angle coordinate
# (z is a point coordinate); a redundant constraint (a dropped row).
LOADED = """
points:
  - {name: A, x: 0, y: 0, fixed: true}
  - {name: C, x: 0.1, y: 0.05}
  - {name: D, x: 0.35, y: 0.3}
  - {name: B, x: 0.4, y: 0, fixed: true}
planar_bodies:
  - {name: crank, points: [A, C], length: auto, mass: 1, I0: mass*length^2/3, cog: [length/2, 0.01]}
  - {name: coupler, points: [C, D], length: auto, mass: 2, I0: mass*length^2/3, cog: [length/2, 0]}
  - {name: rocker, points: [D, B], length: auto, mass: 1.5, I0: mass*length^2/3, cog: [length/2, 0]}
relative_coordinates: [{name: th, type: RelativeAngleAbsoluteDOF, points: [A, C]}]
loads:
  - {type: torque, body: coupler, value: "0.3 + 0.1*t"}
  - {type: joint_damping, body: coupler, body2: crank, c: 0.2}
  - {type: joint_damping, body: rocker, c: 0.1}
  - {type: point_damping, point: D, c: 0.7}
  - {type: force, point: D, value: [1, -2]}
  - {type: generalized_force, coordinate: th, value: 0.4}
  - {type: joint_friction, body: coupler, body2: crank, c: 0.05, velocity_scale: 0.5}
  - {type: joint_friction, body: rocker, c: 0.04}
  - {type: point_friction, point: D, c: 0.3, velocity_scale: 0.2}
"""

POLY_SLIDER = """
points:
  - {name: A, x: 0, y: 0, fixed: true}
  - {name: C, x: 0.3, y: 0.1}
  - {name: D, x: 1.0, y: 0.5}
  - {name: E, x: 0.7, y: 0.9}
  - {name: S, x: 1.6, y: 0.3}
  - {name: G, x: 0.2, y: 1.5, fixed: true}
planar_bodies:
  - {name: crank, points: [A, C], length: auto, mass: 1, I0: mass*length^2/3, cog: [length/2, 0]}
  - {name: tri, points: [C, D, E], length: auto, mass: 2, I0: mass*length^2/3, cog: [length/2, 0.1]}
  - {name: rod, points: [D, S], length: auto, mass: 0.5, I0: mass*length^2/3, cog: [length/2, 0]}
  - {name: link, points: [G, E], length: auto, mass: 0.7, I0: mass*length^2/3, cog: [length/2, 0]}
sliders:
  - {name: guide, point: S, origin: [1.0, -0.5], direction: [0.6, 0.8], mass: 0.3}
relative_coordinates:
  - {name: th, type: RelativeAngleAbsoluteDOF, points: [A, C]}
  - {name: psi, type: RelativeAngleAbsoluteDOF, points: [D, S]}
loads:
  - {type: torque, body: tri, value: "0.2*sin(t)"}
  - {type: point_damping, point: S, c: 0.4}
  - {type: joint_damping, body: rod, body2: tri, c: 0.05}
independent_coordinates: [th]
"""

TRIAD = """
points:
  - {name: A, x: 0, y: 0, fixed: true}
  - {name: P1, x: 0.5, y: 0.5}
  - {name: T1, x: 1.0, y: 1.0}
  - {name: T2, x: 2.0, y: 1.0}
  - {name: T3, x: 1.5, y: 1.8}
  - {name: G1, x: 2.5, y: 0, fixed: true}
  - {name: G2, x: 1.0, y: 2.8, fixed: true}
planar_bodies:
  - {name: crank, points: [A, P1], length: auto, mass: 1, I0: mass*length^2/3, cog: [length/2, 0]}
  - {name: link1, points: [P1, T1], length: auto, mass: 1, I0: mass*length^2/3, cog: [length/2, 0]}
  - {name: tri, points: [T1, T2, T3], length: auto, mass: 3, I0: mass*length^2/3, cog: [length/2, 0.2]}
  - {name: link2, points: [G1, T2], length: auto, mass: 1, I0: mass*length^2/3, cog: [length/2, 0]}
  - {name: link3, points: [G2, T3], length: auto, mass: 1, I0: mass*length^2/3, cog: [length/2, 0]}
relative_coordinates:
  - {name: th, type: RelativeAngleAbsoluteDOF, points: [A, P1]}
independent_coordinates: [th]
"""

NOANGLE = """
parameters: {a: 2.0, b: a*3}
points:
  - {x: 0, y: 0, fixed: true}
  - {x: a, y: 0}
  - {x: x1, y: b/3}
  - {x: 4, y: 0.5}
  - {x: 5, y: 0, fixed: true}
planar_bodies:
  - {points: [0, 1], length: auto, mass: index, I0: (1/3)*mass*length^2, cog: [0.5*length, 0]}
  - {points: [1, 2, 3], length: auto, mass: 1+index, I0: mass*length13^2, cog: [0.5*length12, 0.1]}
  - {points: [3, 4], length: auto, mass: 1, I0: (1/3)*mass*length^2, cog: [0.5*length, 0]}
"""

REDUNDANT = """
points:
  - {name: A, x: 0, y: 0, fixed: true}
  - {name: P1, x: 0, y: 1}
  - {name: P2, x: 1, y: 1}
  - {name: B, x: 1, y: 0, fixed: true}
  - {name: C, x: 0.5, y: 0, fixed: true}
  - {name: D, x: 0.5, y: 1}
planar_bodies:
  - {name: crank, points: [A, P1], length: auto, mass: 1, I0: mass*length^2/3, cog: [length/2, 0]}
  - {name: coupler, points: [P1, P2, D], length: auto, mass: 2, I0: mass*length^2/3, cog: [length/2, 0]}
  - {name: rocker, points: [B, P2], length: auto, mass: 1, I0: mass*length^2/3, cog: [length/2, 0]}
  - {name: link, points: [C, D], length: auto, mass: 1, I0: mass*length^2/3, cog: [length/2, 0]}
relative_coordinates:
  - {name: th, type: RelativeAngleAbsoluteDOF, points: [A, P1]}
independent_coordinates: [th]
"""

EXTRA = {"loaded": LOADED, "poly_slider": POLY_SLIDER, "triad": TRIAD, "noangle": NOANGLE, "redundant": REDUNDANT}


def generic(mech):
    """A shallow copy of ``mech`` without generated kernels: the engine's generic code."""
    g = copy.copy(mech)
    object.__setattr__(g, "_kernels", None)
    return g


# ----------------------------------------------------------------------------------------
# constraints, one row at a time (complex-capable for complex-step differentiation)


def points(mech, q):
    """(n_points, 2) positions: the YAML coordinates of fixed points, q for moving ones."""
    P = np.array(mech.fixed_xy, dtype=complex if np.iscomplexobj(q) else float)
    for k, i in enumerate(mech.moving_points):
        P[i] = q[2 * k], q[2 * k + 1]
    return P


def _all_rows(mech, q):
    spec = mech.spec
    P = points(mech, q)
    fixed = [p.fixed for p in spec.points]
    xy = np.asarray(mech.fixed_xy, dtype=float)
    dist, rigid = [], []
    for b in spec.bodies:
        i, j = b.points[0], b.points[1]
        d = P[j] - P[i]
        if not (fixed[i] and fixed[j]):
            dist.append(d[0] * d[0] + d[1] * d[1] - b.length**2)
        d0 = xy[j] - xy[i]
        L2 = d0 @ d0
        for k in b.points[2:]:
            if fixed[k] and fixed[i] and fixed[j]:
                continue
            e0 = xy[k] - xy[i]
            a = (e0 @ d0) / L2
            bb = (d0[0] * e0[1] - d0[1] * e0[0]) / L2
            r = P[k] - P[i] - a * d - bb * np.array([-d[1], d[0]])
            rigid += [r[0], r[1]]
    sliders = [s.direction[0] * (P[s.point][1] - s.origin[1]) - s.direction[1] * (P[s.point][0] - s.origin[0])
               for s in spec.sliders]
    angles = []
    for k, r in enumerate(spec.relative_coordinates):
        th = q[mech.rel_columns[k]]
        v = P[r.points[1]] - P[r.points[0]]
        angles.append(np.sin(th) * v[0] - np.cos(th) * v[1])
    return dist + rigid + sliders + angles


def phi(mech, q):
    rows = _all_rows(mech, q)
    return np.array([rows[r] for r in mech.keep_rows])


def phi_q(mech, q, h=1e-30):
    """Complex-step derivative of :func:`phi`: exact to rounding."""
    q = np.asarray(q, dtype=float)
    cols = []
    for k in range(q.size):
        x = q.astype(complex)
        x[k] += 1j * h
        cols.append(phi(mech, x).imag / h)
    return np.stack(cols, axis=1)


def phi_q_dot_qd(mech, q, qd):
    """(Phi_q)' qd from the closed forms: 2 |v_j - v_i|^2 (distances), 0 (linear rows),
    thd^2 (-s dx + c dy) + 2 thd (c dvx + s dvy) (angles)."""
    spec = mech.spec
    V = np.zeros((len(spec.points), 2))
    for k, i in enumerate(mech.moving_points):
        V[i] = qd[2 * k], qd[2 * k + 1]
    P = points(mech, q)
    fixed = [p.fixed for p in spec.points]
    dist, lin = [], []
    for b in spec.bodies:
        i, j = b.points[0], b.points[1]
        if not (fixed[i] and fixed[j]):
            w = V[j] - V[i]
            dist.append(2.0 * (w @ w))
        lin += [0.0, 0.0] * sum(1 for k in b.points[2:] if not (fixed[k] and fixed[i] and fixed[j]))
    lin += [0.0] * len(spec.sliders)
    angles = []
    for k, r in enumerate(spec.relative_coordinates):
        th, thd = q[mech.rel_columns[k]], qd[mech.rel_columns[k]]
        s, c = np.sin(th), np.cos(th)
        v = P[r.points[1]] - P[r.points[0]]
        w = V[r.points[1]] - V[r.points[0]]
        angles.append(thd**2 * (-s * v[0] + c * v[1]) + 2.0 * thd * (c * w[0] + s * w[1]))
    rows = dist + lin + angles
    return np.array([rows[r] for r in mech.keep_rows])


# ----------------------------------------------------------------------------------------
# kinematics and dynamics by dense linear algebra


def r_matrix(mech, q):
    J = phi_q(mech, q)
    R = np.zeros((mech.n, mech.dof))
    R[mech.independent, np.arange(mech.dof)] = 1.0
    R[mech.dependent] = -np.linalg.solve(J[:, mech.dependent], J[:, mech.independent])
    return R


def accelerations(mech, q, qd, Q):
    """qdd from the Lagrange-multiplier system [[M, J^T], [J, 0]] [qdd; lam] = [Q; -J'qd]."""
    J = phi_q(mech, q)
    m, n = J.shape
    A = np.block([[mech.M, J.T], [J, np.zeros((m, m))]])
    return np.linalg.solve(A, np.concatenate([Q, -phi_q_dot_qd(mech, q, qd)]))[:n]


# ----------------------------------------------------------------------------------------
# ALI3-P as it was written before the fast paths (textbook form, generic evaluators)


def ali3p_step(mech, t, state, h, penalty=1e9, tol=1e-12, max_iter=30, projections=3):
    """One ALI3-P step of a single state; ``mech`` should be :func:`generic`."""
    q0, qd0, qdd0 = (np.asarray(a, dtype=float) for a in (state.q, state.qd, state.qdd))
    M = mech.M
    t1 = t + h
    alpha = penalty * max(np.max(np.abs(np.diag(M))), 1e-12) / max(mech.length_scale, 1e-12) ** 2
    qdh = -((2.0 / h) * q0 + qd0)
    qddh = -((4.0 / h**2) * q0 + (4.0 / h) * qd0 + qdd0)
    q1 = q0 + h * qd0 + 0.5 * h * h * qdd0
    lam = np.zeros(mech.m)
    scale = max(1.0, mech.length_scale)
    ok = False
    for _ in range(max_iter):
        qd1 = (2.0 / h) * q1 + qdh
        qdd1 = (4.0 / h**2) * q1 + qddh
        Phi = mech.phi(q1)
        J = mech.phi_q(q1)
        Q = mech.forces(t1, q1, qd1)
        Kf, Cf = mech.force_jacobians(t1, q1, qd1)
        fq = M - 0.5 * h * Cf + 0.25 * h * h * (alpha * J.T @ J - Kf)
        f = 0.25 * h * h * (M @ qdd1 + J.T @ (alpha * Phi + lam) - Q)
        dq = -np.linalg.solve(fq, f)
        q1 = q1 + dq
        lam = lam + alpha * mech.phi(q1)
        if np.max(np.abs(dq)) <= tol * scale:
            ok = True
            break
    qd_star = (2.0 / h) * q1 + qdh
    qdd_star = (4.0 / h**2) * q1 + qddh
    J = mech.phi_q(q1)
    Kf, Cf = mech.force_jacobians(t1, q1, qd_star)
    W = M - 0.5 * h * Cf - 0.25 * h * h * Kf
    fq = W + 0.25 * h * h * alpha * J.T @ J
    lu = scipy.linalg.lu_factor(fq)
    qd1 = qd_star
    for _ in range(projections):
        qd1 = scipy.linalg.lu_solve(lu, W @ qd1)
    rhs_a = 0.25 * h * h * alpha * J.T @ mech.phi_q_dot_qd(q1, qd1)
    qdd1 = qdd_star
    for _ in range(projections):
        qdd1 = scipy.linalg.lu_solve(lu, W @ qdd1 - rhs_a)
    ok = ok and bool(np.max(np.abs(mech.phi(q1))) <= 1e-9 * max(1.0, mech.length_scale**2))
    return MBState(q1, qd1, qdd1, ok)


def initial_accelerations(mech, t, q, qd):
    return dynamics.forward_lagrange(mech, t, q, qd)[0]
