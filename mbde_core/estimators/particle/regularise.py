"""Regularisation of the particle filter after resampling (Musso, Oudjane & Le Gland 2001).

Resampling leaves copies of the heavier particles; the acceleration noise then spreads
their velocities, but their positions z spread only as the integral of that noise, and
where the gyroscopes pin zd given z (readings linear in qd: w = H(z) zd) the cloud
collapses in z to a small fraction of its true uncertainty -- on the five-bar with two
gyroscopes to ~1e-4 rad while the error drifts to 0.5 rad. The post-regularised particle
filter of Musso et al. replaces each copy by a draw from a kernel around it,

    x <- x + h_opt b L eps,  eps ~ N(0, I_2g),  L L^T = C,
    h_opt = (4 / (N (d + 2)))^(1 / (d + 4)),  d = 2g,

with C the weighted covariance of [z, zd] before resampling (one per assembly branch, so
that the branches' modes are not smeared into each other; angle deviations wrapped about
the circular mean) plus the covariance of one step's acceleration noise (Van Loan; the
cloud's kernel, a floor when the weights collapse) and ``regularisation.bandwidth`` b
(default 0.5: h_opt is optimal for a Gaussian, smaller suits multimodal clouds).

Two departures, both for constrained multibody states:

- the kernel move must keep each particle assembled on its branch: z moves by the
  position problem (Newton from q + R dz), a move that fails or changes the branch
  signature is not made;
- the kernel is conditioned on the readings of the last update, so that the moved
  particle predicts them as well as before the move (within their noise): the jitter is
  confined to the directions the readings do not see. Position readings (encoders)
  condition the draw itself (Kalman conditional of the kernel given H dx = 0, H =
  [dh/dq R, 0]): without it a kernel wider than a precise encoder's sigma (4e-4 rad on
  pendulum_release) would throw every copy off the reading. Velocity readings
  (gyroscopes, w = H(z) zd) correct zd after the z move by a Kalman step at the moved
  configuration: a z move with the old zd would contradict the gyroscopes and be undone
  by the next weights; with it the cloud explores the one-dimensional family of (z, zd)
  the readings allow, which the dynamics then discriminate.

Only the second and later copies of an ancestor move (the first stays where the weights
put it), which halves the cost and keeps the best particle of each ancestor intact.
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import kinematics
from mbde_core.estimators.noise import kinematic_plant_noise


def bandwidth(N: int, g: int, factor: float) -> float:
    """h_opt b of the Gaussian kernel for N particles in d = 2g dimensions."""
    d = 2 * g
    return float(factor) * (4.0 / (max(N, 1) * (d + 2))) ** (1.0 / (d + 4))


def branch_covariances(dev: np.ndarray, zd: np.ndarray, w: np.ndarray, labels: np.ndarray, K: int,
                       floor: np.ndarray) -> np.ndarray:
    """(K, 2g, 2g) weighted covariance of [z, zd] per branch label plus ``floor``.

    dev: (N, g) z deviations from the circular mean of each particle's branch (wrapped);
    a branch without weight gets the floor."""
    g = zd.shape[1]
    out = np.broadcast_to(floor, (K, 2 * g, 2 * g)).copy()
    for b in np.unique(labels):
        sel = labels == b
        wb = w[sel]
        tot = wb.sum()
        if not tot > 0:
            continue
        wb = wb / tot
        X = np.hstack([dev[sel], zd[sel]])
        X = X - np.einsum("n,nk->k", wb, X)
        C = np.einsum("n,ni,nj->ij", wb, X, X)  # no BLAS (see pf_outputs.wsum)
        out[b] += 0.5 * (C + C.T)
    return out


def duplicates(idx: np.ndarray) -> np.ndarray:
    """(N,) bool: every entry of sorted ancestor indices idx but the first of its run."""
    out = np.zeros(idx.size, dtype=bool)
    out[1:] = idx[1:] == idx[:-1]
    return out


def regularise(pf, move: np.ndarray, C: np.ndarray, h: float, readings) -> int:
    """Move the particles ``move`` (bool (N,)) by the kernel h^2 C[label] (see the module
    docstring), conditioned on ``readings`` (the position-only and velocity-linear
    Measurements of the last update). pf: the ParticleFilter (its q, qd, label, mech,
    atlas, rng, t, _noise). Returns the number of particles moved."""
    idx = np.nonzero(move)[0]
    if idx.size == 0 or not h > 0:
        return 0
    mech, g = pf.mech, pf.g
    iz = mech.independent
    lab = pf.label[idx]
    P = (h * h) * C[lab]                                           # (n, 2g, 2g)
    L = np.linalg.cholesky(C + 1e-300 * np.eye(2 * g))            # (K, 2g, 2g)
    delta = h * np.einsum("nij,nj->ni", L[lab], pf.rng.standard_normal((idx.size, 2 * g)))
    q0, qd0 = pf.q[idx], pf.qd[idx]
    R0 = kinematics.r_matrix(mech, q0)
    sensors = [pf.sensors[m.sensor] for m in readings]
    pos = [s for s in sensors if not getattr(s, "uses_qd", False) and not s.uses_qdd]
    vel = [s for s in sensors if getattr(s, "uses_qd", False) and not s.uses_qdd]
    if pos:  # keep the position readings: delta | H delta = 0 (+ their noise), H = [dh/dq R, 0]
        Hs = [np.einsum("ij,njk->nik", pf._noise(s.name)[1], np.einsum("ndi,nig->ndg", s.jacobians(q0)[0], R0))
              for s in pos]
        H = np.concatenate(Hs, axis=1)                                # (n, D, g), whitened
        PHt = P[:, :, :g] @ np.swapaxes(H, 1, 2)                      # (n, 2g, D)
        S = H @ PHt[:, :g] + np.eye(H.shape[1])[None]
        corr = np.einsum("nkd,nd->nk", PHt, np.linalg.solve(S, np.einsum("ndg,ng->nd", H, delta[:, :g])[..., None])[..., 0])
        good = np.isfinite(corr).all(axis=1)
        delta = np.where(good[:, None], delta - corr, 0.0)
    w_old = [s.h(q0, qd0) for s in vel]
    dz = delta[:, :g]
    q1, ok = kinematics.solve_position(mech, q0[:, iz] + dz, q0 + np.einsum("nig,ng->ni", R0, dz), t=pf.t)
    ok &= np.isfinite(q1).all(axis=1)
    ok &= pf.atlas.codes_of(np.where(ok[:, None], q1, q0)) == pf._label_codes[lab]
    q1 = np.where(ok[:, None], q1, q0)
    zd1 = qd0[:, iz] + delta[:, g:]
    if vel:  # keep the velocity readings: a Kalman correction of zd at the moved q
        Rc1 = np.moveaxis(kinematics.r_matrix(mech, q1), 2, 0)      # (g, n_move, n)
        qd1 = kinematics.velocity(mech, q1, zd1, t=pf.t)
        ys, Hs = [], []
        for s, wo in zip(vel, w_old):
            _, W = pf._noise(s.name)
            h1 = s.h(q1, qd1)
            ys.append(np.einsum("nd,kd->nk", s.residual(wo, h1), W))
            # dh/dzd e_k by exact differences (the readings are linear in qd)
            HR = np.stack([s.h(q1, qd1 + Rc1[k]) - h1 for k in range(g)], axis=2)
            Hs.append(np.einsum("ij,njk->nik", W, HR))
        y, H = np.concatenate(ys, axis=1), np.concatenate(Hs, axis=1)
        Pv = P[:, g:, g:]
        PHt = Pv @ np.swapaxes(H, 1, 2)
        S = H @ PHt + np.eye(H.shape[1])[None]
        corr = np.einsum("ngd,nd->ng", PHt, np.linalg.solve(S, y[..., None])[..., 0])
        good = np.isfinite(corr).all(axis=1)
        zd1 = np.where(good[:, None], zd1 + corr, qd0[:, iz])
    qd1 = kinematics.velocity(mech, q1, zd1, t=pf.t)
    fine = np.isfinite(qd1).all(axis=1)
    pf.q[idx] = np.where(fine[:, None], q1, q0)
    pf.qd[idx] = np.where(fine[:, None], qd1, qd0)
    return int(np.count_nonzero(fine))


def kernel_floor(g: int, dt: float, sigma_a: float, bin_z, bin_zd) -> np.ndarray:
    """(2g, 2g) floor of the kernel covariance: one step's acceleration noise (Van Loan
    with the density sigma_a^2 dt: sigma_a^2 dt [[dt^3/3, dt^2/2], [dt^2/2, dt]] per
    coordinate) plus the variance of a uniform spread over one KLD bin, bin^2 / 12 (the
    resolution the filter declares for its particle set: a particle stands for its bin)."""
    q = float(sigma_a) ** 2 * dt
    out = kinematic_plant_noise(g, dt, q if q > 0 else 1e-12)
    b = np.concatenate([np.broadcast_to(bin_z, (g,)), np.broadcast_to(bin_zd, (g,))])
    return out + np.diag(b**2 / 12.0)
