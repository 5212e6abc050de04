"""Proposals of the particle filter: where each particle goes, given the readings.

Paper 000's Algorithm 1 draws the acceleration noise v of every particle blindly (its
prior) and weights the result by the likelihood: with gyroscopes of 1 deg/s and
sigma_a dt ~ 0.04 rad/s of velocity spread per step, most particles miss the reading,
the weights degenerate at every step and (on 2-DOF linkages) the cloud collapses. The
proposals below use the readings (importance sampling with the locally optimal proposal,
Doucet, Godsill & Andrieu 2000, sec. II-D; Pitt & Shephard 1999 "full adaptation"):

**Adapted acceleration noise** (every update, ``proposal: adapted``). The noise v of the
last step (zdd = f + v, v ~ N(0, sigma_a^2 I), paper 000 eq. 13) is applied at the end
of the step as the velocity impulse it causes, zd <- zd + dt v (qd <- qd + R dt v; q is
not moved: the dt^2/2 v of position is left to the next steps). The readings are then
h(x) ~ h0 + G v with G = dh/dqd R dt + dh/dqdd R (exactly linear for gyroscopes, whose
h = Hqd(q) qd; accelerometers see the noise through qdd = R (f + v) + R'zd, linearised).
For each particle, with whitened y = W (o - h0), Gw = W G (W^T W = Sigma_s^-1):

    Lambda = I / sigma_a^2 + Gw^T Gw,      v ~ N(Lambda^-1 Gw^T y, Lambda^-1),
    log w += -1/2 (y^T y - y^T Gw Lambda^-1 Gw^T y) - 1/2 log det(sigma_a^2 Lambda)

(the weight is the evidence N(o; h0, G G^T sigma_a^2 + Sigma_s), matrix determinant
lemma). Readings that do not depend on v (encoders) contribute their likelihood. Steps
without readings draw v from its prior. The predictive moments for the NIS include the
noise term E[G G^T] sigma_a^2.

**Position proposal** (first update after a uniform (re)initialisation, readings of q
only: encoders, slider positions). The uniform draw u_i is read as a kernel mixture
sum_i N(u_i, Sigma0) with Sigma0 the variance of the uniform prior itself, range^2 / 12
(on the circle the mixture folds back to the uniform density exactly: a uniform density
on the circle convolved with any kernel stays uniform); each particle draws z from the
iterated-EKF posterior of its component (3 Gauss-Newton iterations with the position
problem) and is weighted by N(z; u_i, Sigma0) p(o | z) / q(z) -- importance sampling on
(component, z), exact whatever the linearisation. A precise encoder then places every
particle on the reading (or on one of its inverse images) instead of the few within a
sigma of it, with nearly equal weights.

**Velocity proposal** (the same first update, readings linear in qd: gyroscopes). zd is
redrawn from p(zd | z, B, o) with the uniform velocity prior moment-matched by N(m0, P0):
the Kalman formulas give N(m0 + K y, P0 - K H P0) and the marginal N(y; 0, S) is the
weight; velocities outside the uniform range get weight 0 (eq. 22).

Everything is vectorised over particles (closed forms when g = 1).
"""
from __future__ import annotations

import numpy as np
import scipy.linalg

from mbde_core.engine import dynamics, kinematics, thread_pools

IEKF_ITERATIONS = 3


def r_columns(mech, q, aux=None, threads: int = 1) -> np.ndarray:
    """The columns of R at q (N, n) as (g, N, n): R e_k for each independent coordinate k
    (from the integrator's kernel context when given, copied on ``threads`` ranges of
    particles, else the engine)."""
    N, n, g = q.shape[0], mech.n, mech.dof
    out = np.empty((g, N, n))
    if aux is not None and getattr(aux, "N", -1) == N:
        def run(lo, hi):
            for i, row in enumerate(aux.R):
                for k, v in enumerate(row):
                    out[k, lo:hi, i] = v[lo:hi] if isinstance(v, np.ndarray) else v

        thread_pools.rows(run, N, threads, ns_per_row=5.0 * g)  # a copy: ~5 ns a particle per column
        return out
    return np.ascontiguousarray(np.moveaxis(kinematics.r_matrix(mech, q), 2, 0))


def velocity_impulse(Rc, dzd):
    """R dzd (N, n) for the columns Rc (g, N, n) of R and dzd (N, g)."""
    out = Rc[0] * dzd[:, :1]
    for k in range(1, Rc.shape[0]):
        out += Rc[k] * dzd[:, k:k + 1]
    return out


def impulse_velocities(qd, Rc, dzd, threads: int = 1):
    """qd + R dzd (N, n) (:func:`velocity_impulse`) on ``threads`` ranges of particles."""
    out = np.empty_like(qd)  # qd's layout (batch-last after a compiled step: the next one's input)

    def run(lo, hi):
        np.add(qd[lo:hi], velocity_impulse(Rc[:, lo:hi], dzd[lo:hi]), out=out[lo:hi])

    thread_pools.rows(run, qd.shape[0], threads, ns_per_row=10.0 * Rc.shape[0])
    return out


def _solve_spd(L, b):
    """x = (L L^T)^-1 b for lower-triangular L (N, g, g), b (N, g)."""
    u = np.linalg.solve(L, b[..., None])
    return np.linalg.solve(np.swapaxes(L, 1, 2), u)[..., 0]


def adapted_noise(sigma_a: float, yw: np.ndarray, Gw: np.ndarray, rng):
    """(v (N, g), log evidence (N,)) of the adapted proposal (module docstring).

    yw: (N, D) whitened innovations at v = 0; Gw: (N, D, g) whitened dh/dv."""
    N, D, g = Gw.shape
    s2 = float(sigma_a) ** 2
    yy = np.einsum("nd,nd->n", yw, yw)
    if g == 1:
        G = Gw[:, :, 0]
        lam = 1.0 / s2 + np.einsum("nd,nd->n", G, G)
        b = np.einsum("nd,nd->n", G, yw)
        v = (b / lam + rng.standard_normal(N) / np.sqrt(lam))[:, None]
        ll = -0.5 * (yy - b * b / lam) - 0.5 * np.log(s2 * lam)
        return v, ll
    Lam = np.eye(g)[None] / s2 + np.einsum("ndg,ndk->ngk", Gw, Gw)
    b = np.einsum("ndg,nd->ng", Gw, yw)
    L = np.linalg.cholesky(Lam)
    u = np.linalg.solve(L, b[..., None])[..., 0]
    eps = rng.standard_normal((N, g))
    v = np.linalg.solve(np.swapaxes(L, 1, 2), (u + eps)[..., None])[..., 0]
    logdet = 2.0 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum(axis=1) + g * np.log(s2)
    ll = -0.5 * (yy - np.einsum("ng,ng->n", u, u)) - 0.5 * logdet
    return v, ll


def noise_jacobian(sensor, q, qd, qdd, Rc, dt, h0=None, memo=None):
    """G = dh/dv (N, d, g) of one sensor at the deterministic prediction (module docstring).

    Column k is the exact directional difference h(q, qd + dt R e_k, qdd + R e_k) - h(q, qd,
    qdd): every reading of mbde is linear in qd and in qdd at a fixed q (gyroscopes read
    angular rates, accelerometers point accelerations), so the difference is dh/dv e_k to
    rounding -- g cheap evaluations of h instead of the (N, d, n) Jacobians, in one
    ``sensor.h_many`` (an accelerometer's axes computed once). h0: h(q, qd, qdd) if the
    caller has it (the readings' own prediction at the state), else computed; memo: the
    caller's ``h_many`` memo at q."""
    uses_qd, uses_qdd = bool(getattr(sensor, "uses_qd", False)), bool(sensor.uses_qdd)
    N, d, g = q.shape[0], sensor.dim, Rc.shape[0]
    G = np.empty((N, d, g))
    if not (uses_qd or uses_qdd):
        G.fill(0.0)
        return G
    pairs = [(qd + dt * Rc[k] if uses_qd else qd, qdd + Rc[k] if uses_qdd else qdd) for k in range(g)]
    hs = sensor.h_many(q, pairs if h0 is not None else [(qd, qdd)] + pairs, memo)
    if h0 is None:
        h0, hs = hs[0], hs[1:]
    for k in range(g):
        np.subtract(hs[k], h0, out=G[:, :, k])
    return G


def velocity_proposal(mech, sensors, noise, q, zd_lo, zd_hi, t, rng, measurements, prior=None):
    """(zd (N, g), log p(o | z, B) (N,)) for readings linear in qd (module docstring).

    noise(name) -> (Sigma_s, W). Draws outside [zd_lo, zd_hi] or with a non-finite
    reading model get log-weight -inf and a prior velocity (harmless until resampled).
    prior: (mean (N, g), variance (g,)) of a Gaussian prior of zd per particle instead of
    the moments of the uniform [zd_lo, zd_hi] (a lock's copies of the cloud, :mod:`.recovery`)."""
    N, g = q.shape[0], mech.dof
    if prior is None:
        m0 = 0.5 * (zd_lo + zd_hi)
        var = np.maximum((zd_hi - zd_lo) ** 2 / 12.0, 1e-300)
    else:
        m0, var = np.asarray(prior[0], dtype=float), np.maximum(np.asarray(prior[1], dtype=float), 1e-300)
    R = kinematics.r_matrix(mech, q)  # (N, n, g)
    qd0 = kinematics.velocity(mech, q, np.broadcast_to(m0, (N, g)), t=t)
    ys, Hs, Ss = [], [], []
    for m in measurements:
        s = sensors[m.sensor]
        h0 = s.h(q, qd0)
        Hqd = s.jacobians(q, qd0)[1]  # (N, d, n)
        ys.append(s.residual(np.asarray(m.value, float)[None, :], h0))
        Hs.append(np.einsum("ndi,nik->ndk", Hqd, R))
        Ss.append(noise(m.sensor)[0])
    y = np.concatenate(ys, axis=1)            # (N, D)
    H = np.concatenate(Hs, axis=1)            # (N, D, g)
    bad = ~(np.isfinite(y).all(axis=1) & np.isfinite(H).all(axis=(1, 2)))
    if bad.any():  # a non-finite reading model: no information, weight 0 below
        y[bad], H[bad] = 0.0, 0.0
    Sig = scipy.linalg.block_diag(*Ss)        # (D, D)
    PHt = var[None, :, None] * np.swapaxes(H, 1, 2)  # (N, g, D)
    S = H @ PHt + Sig                         # (N, D, D)
    L = np.linalg.cholesky(S)
    Kt = np.linalg.solve(S, np.swapaxes(PHt, 1, 2))  # (N, D, g) = K^T
    K = np.swapaxes(Kt, 1, 2)
    mean = m0 + np.einsum("ngd,nd->ng", K, y)
    cov = np.diag(var)[None] - K @ np.swapaxes(PHt, 1, 2)
    cov = 0.5 * (cov + np.swapaxes(cov, 1, 2)) + 1e-18 * np.eye(g)
    Lc = np.linalg.cholesky(cov)
    zd = mean + np.einsum("ngk,nk->ng", Lc, rng.standard_normal((N, g)))
    e = np.linalg.solve(L, y[..., None])[..., 0]
    # log N(y; 0, S) relative to the readings' own noise (the constant of every other weight)
    ll = -0.5 * np.einsum("nd,nd->n", e, e) - np.log(np.abs(np.diagonal(L, axis1=1, axis2=2))).sum(axis=1) \
        + 0.5 * np.linalg.slogdet(Sig)[1]
    inside = np.all((zd >= zd_lo - 1e-12) & (zd <= zd_hi + 1e-12), axis=1) & np.isfinite(ll) & ~bad
    ll = np.where(inside, ll, -np.inf)
    prior = zd_lo + (zd_hi - zd_lo) * rng.random((N, g))
    return np.where(inside[:, None], zd, prior), ll


def position_proposal(mech, sensors, noise, atlas, q, labels, sigma0, t, rng, measurements):
    """(q (N, n), log weight (N,)) for readings of q only (module docstring).

    q: (N, n) the uniform draw on its branches; sigma0: (g,) kernel standard deviations.
    A particle whose position problem fails or leaves its branch keeps its q with
    log-weight -inf."""
    N, g = q.shape[0], mech.dof
    iz = mech.independent
    u = q[:, iz].copy()
    P0 = sigma0**2
    codes = atlas.label_codes()[labels]
    Sig = scipy.linalg.block_diag(*[noise(m.sensor)[0] for m in measurements])
    Wn = np.linalg.inv(np.linalg.cholesky(Sig))

    def readings(qq):
        ys, Hs = [], []
        R = kinematics.r_matrix(mech, qq)
        for m in measurements:
            s = sensors[m.sensor]
            ys.append(s.residual(np.asarray(m.value, float)[None, :], s.h(qq)))
            Hs.append(np.einsum("ndi,nig->ndg", s.jacobians(qq)[0], R))
        return np.concatenate(ys, axis=1), np.concatenate(Hs, axis=1)

    def solve(z, guess):
        qq, ok = kinematics.solve_position(mech, z, guess, t=t)
        ok &= np.isfinite(qq).all(axis=1) & (atlas.codes_of(np.where(np.isfinite(qq), qq, 0.0)) == codes)
        return np.where(ok[:, None], qq, guess), ok

    m, qm, ok = u.copy(), q.copy(), np.ones(N, dtype=bool)
    for _ in range(IEKF_ITERATIONS):
        y, H = readings(qm)                                   # y = o - h(m)
        y = np.where(np.isfinite(y), y, 0.0)
        H = np.where(np.isfinite(H), H, 0.0)
        r = y + np.einsum("ndg,ng->nd", H, m - u)             # o - h(m) - H (u - m)
        PHt = P0[None, :, None] * np.swapaxes(H, 1, 2)
        S = H @ PHt + Sig
        K = np.swapaxes(np.linalg.solve(S, np.swapaxes(PHt, 1, 2)), 1, 2)  # (N, g, D)
        m_new = u + np.einsum("ngd,nd->ng", K, r)
        qn, okn = solve(m_new, qm)
        ok &= okn
        m, qm = np.where(okn[:, None], m_new, m), qn
    cov = np.diag(P0)[None] - K @ np.swapaxes(PHt, 1, 2)
    cov = 0.5 * (cov + np.swapaxes(cov, 1, 2)) + 1e-18 * np.diag(P0)[None]
    Lc = np.linalg.cholesky(cov)
    eps = rng.standard_normal((N, g))
    z = m + np.einsum("ngk,nk->ng", Lc, eps)
    qz, okz = solve(z, qm)
    ok &= okz
    y, _ = readings(qz)
    e = y @ Wn.T
    log_lik = -0.5 * np.einsum("nd,nd->n", e, e)
    log_prior = -0.5 * np.sum((z - u) ** 2 / P0, axis=1)
    log_q = -0.5 * np.einsum("nk,nk->n", eps, eps) - np.log(np.diagonal(Lc, axis1=1, axis2=2)).sum(axis=1) \
        + 0.5 * np.log(P0).sum()
    ll = np.where(ok & np.isfinite(log_lik), log_lik + log_prior - log_q, -np.inf)
    return np.where(ok[:, None], qz, q), ll


def model_accelerations(mech, t, q, qd):
    """qdd (N, n) of the model at (q, qd) (no noise)."""
    return np.ascontiguousarray(dynamics.evaluate(mech, t, q, qd).qdd)
