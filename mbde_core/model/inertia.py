"""Constant mass matrix and gravity forces of planar bodies in natural coordinates.

A body with basis points i, j (its first two points), length L, mass m, inertia I0 about
point i and centre of gravity (xi_g, eta_g) in the body frame moves its material points as

    r(xi, eta) = r_i + (xi/L) d + (eta/L) J d,  d = r_j - r_i,  J = [[0, -1], [1, 0]]

so the kinetic energy T = 1/2 qd_b^T M_b qd_b with qd_b = [r_i', r_j'] and
(García de Jalón & Bayo 1994, sec. 3.2)::

    M_b = [[ alpha I2,        beta I2 + gamma J ],
           [ beta I2 - gamma J,  delta I2       ]]
    alpha = m - 2 m xi_g / L + I0 / L^2,  beta = m xi_g / L - I0 / L^2,
    gamma = m eta_g / L,                   delta = I0 / L^2.

Gravity g gives the constant generalized force
Q_b = m [ (1 - xi_g/L) g + (eta_g/L) J g ;  (xi_g/L) g - (eta_g/L) J g ].
"""
from __future__ import annotations

import numpy as np

J2 = np.array([[0.0, -1.0], [1.0, 0.0]])


def body_mass_matrix(L: float, m: float, I0: float, cog) -> np.ndarray:
    """4x4 mass matrix of a body in its basis coordinates [x_i, y_i, x_j, y_j]."""
    xi, eta = cog
    alpha = m - 2.0 * m * xi / L + I0 / L**2
    beta = m * xi / L - I0 / L**2
    gamma = m * eta / L
    delta = I0 / L**2
    Mij = beta * np.eye(2) + gamma * J2
    return np.block([[alpha * np.eye(2), Mij], [Mij.T, delta * np.eye(2)]])


def body_gravity_force(L: float, m: float, cog, g) -> np.ndarray:
    """Generalized gravity force (4,) on [x_i, y_i, x_j, y_j]."""
    xi, eta = cog
    g = np.asarray(g, dtype=float)
    Jg = J2 @ g
    return m * np.concatenate([(1 - xi / L) * g + (eta / L) * Jg, (xi / L) * g - (eta / L) * Jg])


def body_point_coefficients(L: float, local) -> np.ndarray:
    """(2, 4) matrix C with r(local) = C [r_i; r_j] for a body-frame point ``local``."""
    xi, eta = local
    return np.hstack([(1 - xi / L) * np.eye(2) - (eta / L) * J2, (xi / L) * np.eye(2) + (eta / L) * J2])


def assemble_inertia(spec, n: int, px, py) -> tuple[np.ndarray, np.ndarray]:
    """The mechanism's mass matrix M (n, n) and gravity force Q_gravity (n,).

    Sums every body's M_b and Q_b (above) and every slider's point mass over the
    coordinate columns px, py of the points (index n = a fixed point, dropped).
    """
    M = np.zeros((n + 1, n + 1))
    Qg = np.zeros(n + 1)
    g = np.array(spec.gravity, dtype=float)
    for b in spec.bodies:
        i, j = b.points[0], b.points[1]
        cols = [px[i], py[i], px[j], py[j]]
        M[np.ix_(cols, cols)] += body_mass_matrix(b.length, b.mass, b.I0, b.cog)
        Qg[cols] += body_gravity_force(b.length, b.mass, b.cog, g)
    for s in spec.sliders:
        M[px[s.point], px[s.point]] += s.mass
        M[py[s.point], py[s.point]] += s.mass
        Qg[[px[s.point], py[s.point]]] += s.mass * g
    return M[:n, :n].copy(), Qg[:n].copy()
