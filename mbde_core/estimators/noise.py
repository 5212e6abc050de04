"""Discretisation of continuous-time plant noise (Van Loan 1978), as in mbde-matlab.

For x' = A x + w with white noise of spectral density Qc (E[w(t) w(s)^T] = Qc delta(t-s)),
the discrete process noise over a step dt is Qd = int_0^dt e^{A s} Qc e^{A^T s} ds.
Van Loan: with C = expm([[-A, Qc], [0, A^T]] dt) = [[., C12], [0, C22]],
Phi = C22^T and Qd = Phi C12.

For the independent-coordinate state x = [z, zd] with white acceleration noise of density
q_a per coordinate (A = [[0, I], [0, 0]]) this gives the familiar
Qd = q_a [[dt^3/3, dt^2/2], [dt^2/2, dt]].
"""
from __future__ import annotations

import numpy as np
import scipy.linalg


def van_loan(A: np.ndarray, Qc: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """(Phi, Qd): state transition e^{A dt} and discrete process-noise covariance."""
    n = A.shape[0]
    M = np.zeros((2 * n, 2 * n))
    M[:n, :n] = -A
    M[:n, n:] = Qc
    M[n:, n:] = A.T
    C = scipy.linalg.expm(M * dt)
    Phi = C[n:, n:].T
    Qd = Phi @ C[:n, n:]
    return Phi, 0.5 * (Qd + Qd.T)


def kinematic_plant_noise(g: int, dt: float, acc_psd, vel_psd=0.0) -> np.ndarray:
    """Qd (2g, 2g) for x = [z, zd], x' = [zd, zdd] + w.

    acc_psd: spectral density of the white noise on zdd (unmodelled forces, model errors)
    [(unit/s^2)^2 s = unit^2/s^3]; vel_psd: density of white noise on z' [unit^2/s].
    Scalars or (g,) arrays.
    """
    A = np.zeros((2 * g, 2 * g))
    A[:g, g:] = np.eye(g)
    Qc = np.zeros((2 * g, 2 * g))
    Qc[:g, :g] = np.diag(np.broadcast_to(np.asarray(vel_psd, dtype=float), (g,)))
    Qc[g:, g:] = np.diag(np.broadcast_to(np.asarray(acc_psd, dtype=float), (g,)))
    _, Qd = van_loan(A, Qc, dt)
    return Qd
