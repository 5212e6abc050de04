"""Second-order measurement terms of the EKFs (option ``measurement_order: 2``).

The EKF's update linearises h about the prediction: E[h(x)] ~ h(x^), Cov[h(x)] ~ H P H^T.
Where a reading depends on products of states, the terms it drops are not small. A
rocker gyroscope reads w = G(z) zd (G = d rocker / d crank): at a turning point of the
crank (zd ~ 0) next to the rocker's dead point (G ~ 0) both entries of H = [G' zd, G]
vanish, while the mixed second derivative G' does not -- the reading's spread is then
mostly the second-order part, and its mean is offset by G' P_z,zd. The Gaussian
second-order filter (Athans, Wishner & Bertolini 1968; Gelb 1974, sec. 6.1; Jazwinski
1970, sec. 9.3) keeps them: with the Hessians T_i = d^2 h_i / dx^2 at the prediction,

    h(x^) + 1/2 [tr(T_i P)]_i          (the predicted reading), and
    S = H P H^T + R + 1/2 [tr(T_i P T_l P)]_il   (its covariance).

The Hessians are forward differences of the Jacobian H (:meth:`ReducedModel.linearize`),
(H(x^ + eps e_k) - H(x^)) / eps, with H(x^) the update's own Jacobian (``H0``, else
evaluated here): 2g linearisations (with their position problems) per update, half those of
central differences; the truncation error O(eps |d^3 h|) (eps = 1e-5 relative) is far
below the terms' own approximation, and the terms changed by < 1e-4 relative against
central differences on the test cases (test/test_second_order.py). Where no
reading depends on accelerations, the 2g Jacobians are one batch per sensor
(:func:`jacobians_at`: H = [Hq R + Hqd d(R zd)/dz, Hqd R], the chain rule of
:mod:`~mbde_core.estimators.kalman.linearization`), the same values as 4g single
linearisations to rounding. The UKF's sigma points carry these terms by construction.
"""
from __future__ import annotations

import numpy as np

from mbde_core.estimators.kalman.reduced import FullState

EPS = 1e-5


def second_order_terms(model, names, t, x, q_guess, P, eps: float = EPS, H0=None):
    """(bias (d,), S_add (d, d)) of the readings ``names`` at x = [z, zd] (2g,) with the
    covariance P (2g, 2g) of x (module doc; H0: their Jacobian at x (d, 2g) if the caller
    has it, the base point of the forward differences), or None where a difference step's position
    problem fails or the terms are not finite (the caller then keeps the first order). S_add is symmetric PSD by construction (a sum
    of Gram matrices: tr(T_i P T_l P) = <L^T T_i L, L^T T_l L>_F, P = L L^T)."""
    g2 = x.shape[0]
    g = g2 // 2
    steps = [eps * max(1.0, abs(float(x[k]))) for k in range(g2)]
    batched = not model.sensors.uses_qdd(names)
    # readings of positions alone (encoders): H = [h_q R, 0] does not depend on zd, so the
    # zd columns of every T_i are exactly zero and their 2g linearisations are skipped
    kmax = g if batched and not any(model.sensors[n].uses_qd for n in names) else g2
    centre = None
    if batched:  # a step in zd leaves q (and R) as at x: qd = R (zd +- step e_k), no position problem
        centre, ok = model.solve_full(t, x[:g], x[g:], q_guess)
        if not ok or centre.R is None:
            return None
    states = []  # x + step e_k for k = 0 .. kmax-1 (then x itself if H0 is not given)
    for k in range(kmax + (H0 is None)):
        xx = x.astype(float).copy()
        if k < kmax:
            xx[k] += steps[k]
        if centre is not None and k >= g:
            st = FullState(centre.q, centre.R @ xx[g:], None, None, centre.R, None, centre.ctx)
        else:
            st, ok = model.solve_full(t, xx[:g], xx[g:], q_guess)
            if not ok:
                return None
        states.append(st)
    Hs = jacobians_at(model, names, states) if batched else None
    if Hs is None:
        Hs = np.array([model.linearize(names, t, st)[1] for st in states])
    Hc = Hs[kmax] if H0 is None else np.asarray(H0, dtype=float)[:, :g2]
    zero = np.zeros(Hs.shape[1:])
    T = np.stack([(Hs[k] - Hc) / steps[k] if k < kmax else zero
                  for k in range(g2)], axis=2)  # T[i, j, k] = d H_ij / d x_k
    T = 0.5 * (T + T.transpose(0, 2, 1))           # symmetric Hessians
    bias = 0.5 * np.einsum("ijk,jk->i", T, P)
    try:
        L = np.linalg.cholesky(0.5 * (P + P.T))
    except np.linalg.LinAlgError:
        w, V = np.linalg.eigh(0.5 * (P + P.T))
        L = V * np.sqrt(np.clip(w, 0.0, None))
    B = np.einsum("ji,njk,kl->nil", L, T, L).reshape(T.shape[0], -1)  # L^T T_i L, flattened
    S_add = 0.5 * (B @ B.T)
    if not (np.all(np.isfinite(bias)) and np.all(np.isfinite(S_add))):
        return None
    return bias, S_add


def jacobians_at(model, names, states):
    """H (N, d, 2g) of the named readings at N FullStates (each with its R), one batched
    Jacobian per sensor: dh/dz = Hq R + Hqd d(R zd)/dz, dh/dzd = Hqd R. None where a
    reading depends on accelerations (its dqdd/dx is the dynamics' central differences,
    :meth:`Linearization.linearize`) or a state has no R."""
    if model.sensors.uses_qdd(names) or any(st.R is None for st in states):
        return None
    Q = np.array([st.q for st in states])
    QD = np.array([st.qd for st in states])
    parts = [model.sensors[n].jacobians(Q, QD)[:2] for n in names]
    Hq = parts[0][0] if len(parts) == 1 else np.concatenate([p[0] for p in parts], axis=1)
    Hqd = parts[0][1] if len(parts) == 1 else np.concatenate([p[1] for p in parts], axis=1)
    R = np.array([st.R for st in states])
    if not any(model.sensors[n].uses_qd for n in names):  # h_qd = 0: d(R zd)/dz is not needed
        return np.concatenate([Hq @ R, Hqd @ R], axis=2)
    D = np.array([model.dqd_dz_at(st) for st in states])
    return np.concatenate([Hq @ R + Hqd @ D, Hqd @ R], axis=2)
