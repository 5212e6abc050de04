"""The DIEKFpm's perfect measurements: the constraints as readings (paper 003 sec. 3.2.1).

The dependent state X = [q, qd] (2n) of the DIEKFpm (:mod:`.diekfpm`) satisfies the position
and velocity constraints Phi(q) = 0, Phi_q qd = 0 only after its sensor update is projected
back onto them: they are readings without noise, h_c(X) = [Phi(q); Phi_q qd] = 0, with the
Jacobian [[Phi_q, 0], [d(Phi_q qd)/dq, Phi_q]] (:func:`constraints`), fused by the iterated
update with the filter's isotropic normal covariance W (:func:`project`).
"""
from __future__ import annotations

import numpy as np

CHORD_RATE = 1e-3  # a chord pass must shrink max |h_c| by this factor, else H is re-linearised (project)


def constraints(model, X, jacobian: bool):
    """h_c(X) = [Phi(q); Phi_q qd] and (if ``jacobian``, else None) its Jacobian
    [[Phi_q, 0], [d(Phi_q qd)/dq, Phi_q]]."""
    n = model.mech.n
    q, qd = X[:n], X[n:]
    phi, J, ctx = model.constraint_values(q)
    h = np.concatenate([phi, J @ qd])
    if not jacobian:
        return h, None
    return h, _jacobian(model, q, qd, J, ctx)


def _jacobian(model, q, qd, J, ctx):
    """[[Phi_q, 0], [d(Phi_q qd)/dq, Phi_q]] from Phi_q = J and its kernel context at q."""
    n = model.mech.n
    m = J.shape[0]
    H = np.zeros((2 * m, 2 * n))
    H[:m, :n] = J
    H[m:, :n] = model.constraint_hessian_qd(q, qd, ctx)
    H[m:, n:] = J
    return H


def project(model, iso, X):
    """Perfect measurements Phi = 0, Phi_q qd = 0 as an iterated (Gauss-Newton) update
    with the isotropic normal covariance W (diagonal ``iso``, (2n, 2n)): X <- X - W H^T
    (H W H^T)^-1 h_c(X) (the inputs of [X, u], if any, are kept).

    A chord iteration: H (and H W H^T) of the first pass are kept while each pass shrinks
    max |h_c| by at least ``CHORD_RATE`` (the error of a frozen Jacobian is O(|dX|) of the
    step, and a projection after one filter step starts within ~1e-6 of the manifold);
    a slower pass re-linearises at the iterate (Gauss-Newton). The fixed point is the same
    manifold to ``tol``; the point on it differs from Gauss-Newton's by O(|dX|^2)."""
    n = model.mech.n
    if len(X) > 2 * n:
        return np.concatenate([project(model, iso, X[: 2 * n]), X[2 * n:]])
    W = np.diag(iso)
    W = np.where(W > 0, W, 1.0)
    tol = 1e-14 * max(1.0, model.mech.length_scale**2)
    HW = A = None
    last = np.inf
    for _ in range(20):
        q, qd = X[:n], X[n:]
        phi, J, ctx = model.constraint_values(q)  # once per iteration: h, and H from the same J
        h = np.concatenate([phi, J @ qd])
        size = float(np.max(np.abs(h)))
        if size <= tol:
            break
        if HW is None or size > CHORD_RATE * last:
            H = _jacobian(model, q, qd, J, ctx)
            HW = H * W
            A = HW @ H.T
        last = size
        X = X - HW.T @ np.linalg.solve(A, h)
    return X


def normal_noise(ratio: float, Qq):
    """W: isotropic q-space noise with ``ratio`` (``normal_noise_ratio``) times the
    per-coordinate average of the tangent noise Qq (2n, 2n) (the DIEKFpm's normal freedom)."""
    n = Qq.shape[0] // 2
    r = float(ratio)
    pos = r * np.trace(Qq[:n, :n]) / n
    vel = r * np.trace(Qq[n:, n:]) / n
    return np.diag(np.concatenate([np.full(n, pos), np.full(n, vel)]))
