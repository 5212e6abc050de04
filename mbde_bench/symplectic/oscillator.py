"""The stochastic harmonic oscillator of paper 002 (examples 2.1, 3.1, 6.1; Milstein et al. 2002).

    dq = p dt + sigma dW1,   dp = -q dt + gamma dW2,    H = (q^2 + p^2) / 2     (eq. 7)

One step of length h for clouds x = (q, p) of N particles (arrays (N, 2)), all driven by
the same Wiener increments dW = (dW1, dW2) ~ N(0, h I) per particle:

- ``euler`` (Euler-Maruyama, "RK1"): x1 = (I + h A) x0 + G dW; det(I + h A) = 1 + h^2:
  every step inflates the phase-space area;
- ``symplectic_euler`` (eq. 5): q1 = q0 + h p0 + sigma dW1, p1 = p0 - h q1 + gamma dW2;
- ``midpoint`` (eq. 6): x1 = x0 + h A (x0 + x1)/2 + G dW (the Cayley transform of h A:
  an exact rotation by a slightly modified angle, area preserving);
- ``exact``: x1 = e^{A h} x0 + eta, eta ~ N(0, int_0^h e^{A s} G G^T e^{A^T s} ds) (a
  Gaussian with the exact covariance, not driven by the same dW).

A = [[0, 1], [-1, 0]], G = diag(sigma, gamma). The exact covariance of the cloud at time t
from a deterministic initial set with covariance C0 is e^{At} C0 e^{A^T t} + (sigma^2 +
gamma^2)/2 t I + (sigma^2 - gamma^2)/4 [[sin 2t, ...]] (for sigma = gamma: C0 rotated + t
sigma^2 I), its mean energy E[H] grows as (sigma^2 + gamma^2) t / 2.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg

A = np.array([[0.0, 1.0], [-1.0, 0.0]])
SCHEMES = ("euler", "symplectic_euler", "midpoint", "exact")


def step_matrix(scheme: str, h: float) -> tuple[np.ndarray, np.ndarray]:
    """(T, N) with x1 = T x0 + N (G dW): the linear scheme's state and noise matrices."""
    I = np.eye(2)
    if scheme == "euler":
        return I + h * A, I
    if scheme == "symplectic_euler":
        # q1 = q0 + h p0 + n1 ; p1 = p0 - h q1 + n2
        T = np.array([[1.0, h], [-h, 1.0 - h * h]])
        Nm = np.array([[1.0, 0.0], [-h, 1.0]])
        return T, Nm
    if scheme == "midpoint":
        L = np.linalg.inv(I - 0.5 * h * A)
        return L @ (I + 0.5 * h * A), L
    raise ValueError(scheme)


def exact_noise_cov(h: float, sigma: float, gamma: float) -> np.ndarray:
    """int_0^h e^{A s} G G^T e^{A^T s} ds (Van Loan)."""
    GG = np.diag([sigma**2, gamma**2])
    M = np.block([[-A, GG], [np.zeros((2, 2)), A.T]]) * h
    E = scipy.linalg.expm(M)
    Phi = E[2:, 2:].T
    return Phi @ E[:2, 2:]


class Cloud:
    """A particle cloud (N, 2) of the oscillator advanced by one scheme."""

    def __init__(self, x0: np.ndarray, scheme: str, h: float, sigma: float, gamma: float):
        self.x = np.array(x0, dtype=float)
        self.scheme, self.h = scheme, float(h)
        self.G = np.array([sigma, gamma])
        if scheme == "exact":
            self.T = scipy.linalg.expm(A * h)
            self.L = np.linalg.cholesky(exact_noise_cov(h, sigma, gamma) + 1e-300 * np.eye(2))
        else:
            self.T, self.Nm = step_matrix(scheme, h)

    def step(self, dW: np.ndarray) -> None:
        """dW (N, 2) ~ N(0, h I) (the exact scheme uses dW / sqrt(h) as its standard normals)."""
        if self.scheme == "exact":
            self.x = self.x @ self.T.T + (dW / np.sqrt(self.h)) @ self.L.T
        else:
            self.x = self.x @ self.T.T + (dW * self.G) @ self.Nm.T

    def statistics(self):
        """(area of the 1-sigma covariance ellipse, covariance eigenvalues, mean energy)."""
        C = np.cov(self.x.T)
        return float(np.pi * np.sqrt(max(np.linalg.det(C), 0.0))), np.linalg.eigvalsh(C), float(np.mean(0.5 * np.sum(self.x**2, axis=1)))


def circle(N: int, radius: float = 1.0, centre=(1.0, 0.0)) -> np.ndarray:
    """N initial conditions on a circle (paper 002 Fig. 1) (N, 2)."""
    a = np.linspace(0.0, 2.0 * np.pi, N, endpoint=False)
    return np.stack([centre[0] + radius * np.cos(a), centre[1] + radius * np.sin(a)], axis=1)


def clouds(schemes, x0, h: float, T: float, sigma: float, gamma: float, rng, every: int = 1):
    """Propagate the same initial set with every scheme and the same dW; returns
    (t (K,), {scheme: dict(area (K,), eig (K, 2), energy (K,))})."""
    cs = {s: Cloud(x0, s, h, sigma, gamma) for s in schemes}
    steps = int(round(T / h))
    out = {s: {"area": [], "eig": [], "energy": []} for s in schemes}
    ts = []
    for k in range(steps + 1):
        if k % every == 0:
            ts.append(k * h)
            for s, c in cs.items():
                a, e, E = c.statistics()
                out[s]["area"].append(a)
                out[s]["eig"].append(e)
                out[s]["energy"].append(E)
        if k < steps:
            dW = np.sqrt(h) * rng.standard_normal(x0.shape)
            for c in cs.values():
                c.step(dW)
    return np.array(ts), {s: {k: np.array(v) for k, v in d.items()} for s, d in out.items()}
