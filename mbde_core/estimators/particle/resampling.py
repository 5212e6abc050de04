"""Resampling of the particle filter: Algorithm 1 lines 12-14 of paper 000, KLD-sampling and
the regularisation of the copies.

**Schemes** (paper 000 sec. 5.1, line 13 of Algorithm 1). Each scheme draws n ancestor indices (default n = N) from normalised weights w (N,)
such that the offspring count c_i of particle i is unbiased, E[c_i] = n w_i (Douc & Cappe 2005,
paper 000 ref. [40]); they differ in the variance of c_i:

- ``multinomial``: N independent draws from the categorical distribution w
  (Var c_i = N w_i (1 - w_i), the largest);
- ``stratified``: one uniform draw in each stratum [k/n, (k+1)/n);
- ``systematic`` (default): the same single uniform offset u/n in every stratum
  ("low variance sampler"); c_i is floor(n w_i) or ceil(n w_i);
- ``residual``: floor(n w_i) deterministic copies, the remaining n - sum floor(n w_i)
  drawn multinomially from the residual weights n w_i - floor(n w_i).

All are O(N) or O(N log N) numpy (no Python loop over particles) and return indices
sorted in ascending order (copies of one particle are adjacent). Randomness comes only
from the given ``numpy.random.Generator``.

**Selective resampling** (:func:`resample_set`) with the scheme above; a set enlarged by a
uniform (re)initialisation or a lock injection shrinks towards ``particles`` by KLD-sampling
(Fox 2003: n = n_KLD(k) for the k occupied (z, zd, B) bins of the resampled set, bound
KLD_EPSILON on the Kullback-Leibler divergence with probability 1 - delta, z_{1-delta} =
KLD_QUANTILE); then the copies are moved by the regularisation kernel below.

**Regularisation** (Musso, Oudjane & Le Gland 2001, :func:`regularise`). Resampling leaves
copies of the heavier particles; the acceleration noise then spreads their velocities, but their positions z spread only as the integral of that noise, and
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

import math

import numpy as np

from mbde_core.engine import kinematics, numba_kernels, thread_pools
from mbde_core.estimators.particle import compiled as pf_compiled
from mbde_core.estimators.noise import kinematic_plant_noise

KLD_BIN_Z = 0.02        # [rad] for angles (x length scale for lengths)
KLD_BIN_ZD = 0.2        # [rad/s] (x length scale for lengths)
KLD_EPSILON = 0.05
KLD_QUANTILE = 2.326    # z_{1 - delta}, delta = 0.01
SCHEMES = ("systematic", "stratified", "residual", "multinomial")


def _cdf(w: np.ndarray) -> np.ndarray:
    c = np.cumsum(w)
    c /= c[-1]
    c[-1] = 1.0  # exactly: no index past the end from rounding
    return c


def _search(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    idx = np.searchsorted(cdf, u, side="right")
    return np.minimum(idx, cdf.size - 1)


def multinomial(w: np.ndarray, rng: np.random.Generator, n: int | None = None) -> np.ndarray:
    """(n,) ancestor indices, n independent categorical draws (default n = len(w))."""
    n = w.size if n is None else int(n)
    return _search(_cdf(w), np.sort(rng.random(n)))


def stratified(w: np.ndarray, rng: np.random.Generator, n: int | None = None) -> np.ndarray:
    """(n,) indices: one uniform point in each of the n strata of [0, 1)."""
    n = w.size if n is None else int(n)
    return _search(_cdf(w), (np.arange(n) + rng.random(n)) / n)


def systematic(w: np.ndarray, rng: np.random.Generator, n: int | None = None, threads: int | None = None) -> np.ndarray:
    """(n,) indices: the comb (k + u)/n, k = 0..n-1, with one uniform offset u; with
    ``threads``, a large set's comb is walked by the compiled kernel (the same indices,
    :func:`mbde_core.estimators.particle.compiled.systematic`)."""
    n = w.size if n is None else int(n)
    if threads is not None and pf_compiled.update_enabled(max(n, w.size)):
        return pf_compiled.systematic(_cdf(w), rng.random(), n, threads)
    return _search(_cdf(w), (np.arange(n) + rng.random()) / n)


def residual(w: np.ndarray, rng: np.random.Generator, n: int | None = None) -> np.ndarray:
    """(n,) indices: floor(n w_i) copies of each i plus a multinomial draw of the rest."""
    N = w.size
    n = N if n is None else int(n)
    Nw = n * (w / w.sum())
    base = np.floor(Nw).astype(np.int64)
    rest = n - int(base.sum())
    counts = base
    if rest > 0:
        r = Nw - base
        if r.sum() > 0:
            counts = counts + np.bincount(multinomial(r, rng, rest), minlength=N)
        else:  # pragma: no cover - only from rounding: give the rest to the largest weights
            counts = counts.copy()
            counts[np.argsort(-w)[:rest]] += 1
    return np.repeat(np.arange(N), counts)


def resample(scheme: str, w: np.ndarray, rng: np.random.Generator, n: int | None = None,
             threads: int | None = None) -> np.ndarray:
    """Ancestor indices (n,) (default n = len(w)) by the named scheme (see module docstring);
    ``threads``: the compiled comb of ``systematic`` may run (:func:`systematic`)."""
    w = np.asarray(w, dtype=float)
    if scheme == "systematic":
        return systematic(w, rng, n, threads)
    if scheme == "stratified":
        return stratified(w, rng, n)
    if scheme == "residual":
        return residual(w, rng, n)
    if scheme == "multinomial":
        return multinomial(w, rng, n)
    raise ValueError(f"unknown resampling scheme {scheme!r} (choose from {', '.join(SCHEMES)})")


def effective_sample_size(w: np.ndarray) -> float:
    """1 / sum(w^2) of normalised weights (Algorithm 1 line 11), at most N (equal weights
    after resampling would otherwise give N (1 + rounding))."""
    return float(min(1.0 / np.einsum("n,n->", w, w), w.size))  # no BLAS (see outputs.wsum)


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
    for b in _labels_present(labels, K):
        sel = labels == b
        wb = w[sel]
        tot = wb.sum()
        if not tot > 0:
            continue
        wb = wb / tot
        X = np.hstack([dev[sel], zd[sel]])
        X = X - np.einsum("n,nk->k", wb, X)
        C = np.einsum("n,ni,nj->ij", wb, X, X)  # no BLAS (see outputs.wsum)
        out[b] += 0.5 * (C + C.T)
    return out


def _labels_present(labels: np.ndarray, K: int) -> np.ndarray:
    """The branch labels (0 .. K-1) that occur, ascending: np.unique's answer by a count
    (O(N) instead of a sort; 1.3 -> 0.1 ms at 1e5 particles)."""
    return np.flatnonzero(np.bincount(labels, minlength=K))


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
    delta_all = h * np.einsum("nij,nj->ni", L[lab], pf.rng.standard_normal((idx.size, 2 * g)))
    q_all, qd_all = pf.q, pf.qd  # edited in place at the rows idx (the resampled copies)
    q_new, qd_new = q_all, qd_all
    fine_all = np.zeros(idx.size, dtype=bool)
    sensors = [pf.sensors[m.sensor] for m in readings]
    pos = [s for s in sensors if not getattr(s, "uses_qd", False) and not s.uses_qdd]
    vel = [s for s in sensors if getattr(s, "uses_qd", False) and not s.uses_qdd]
    for s in sensors:
        pf._noise(s.name)  # cached before the threads read it
    ctx = pf._aux  # the propagation's context at q (gathered with the particles), if known
    # the moves placed by a compiled kernel (numba_kernels.place), its module loaded here, before the threads
    compiled = pf_compiled.for_set(pf) and numba_kernels.load(mech) is not None

    def run(lo, hi):  # the moved particles lo .. hi - 1: each from its own draw and state alone
        sel = idx[lo:hi]
        P_ = P[lo:hi]
        delta = delta_all[lo:hi]
        q0, qd0 = q_all[sel], qd_all[sel]
        R0 = kinematics.r_matrix(mech, q0) if ctx is None or ctx.R is None else _r_rows(ctx, sel, mech.n, g)
        if pos:  # keep the position readings: delta | H delta = 0 (+ their noise), H = [dh/dq R, 0]
            Hs = [np.einsum("ij,njk->nik", pf._noise(s.name)[1], np.einsum("ndi,nig->ndg", s.jacobians(q0)[0], R0))
                  for s in pos]
            H = np.concatenate(Hs, axis=1)                                # (n, D, g), whitened
            PHt = P_[:, :, :g] @ np.swapaxes(H, 1, 2)                      # (n, 2g, D)
            S = H @ PHt[:, :g] + np.eye(H.shape[1])[None]
            corr = np.einsum("nkd,nd->nk", PHt, _solve(S, np.einsum("ndg,ng->nd", H, delta[:, :g])))
            good = np.isfinite(corr).all(axis=1)
            delta = np.where(good[:, None], delta - corr, 0.0)
        w_old = [s.h(q0, qd0) for s in vel]
        dz = delta[:, :g]
        zd1 = qd0[:, iz] + delta[:, g:]
        guess = q0 + np.einsum("nig,ng->ni", R0, dz)
        placed = numba_kernels.place(mech, q0[:, iz] + dz, zd1, guess) if compiled else None
        if placed is None:
            q1, ok = kinematics.solve_position(mech, q0[:, iz] + dz, guess, t=pf.t)
        else:  # compiled: q1, R and qd = R zd there in one pass per particle
            q1, qd1, Rc1, ok = placed
        ok &= np.isfinite(q1).all(axis=1)
        ok &= pf.atlas.codes_of(np.where(ok[:, None], q1, q0)) == pf._label_codes[lab[lo:hi]]
        q1 = np.where(ok[:, None], q1, q0)
        if placed is not None:  # a move not made: R and qd at q0
            Rc1 = np.where(ok[None, :, None], Rc1, np.moveaxis(R0, 2, 0))
            qd1 = np.where(ok[:, None], qd1, np.einsum("nig,ng->ni", R0, zd1))
        if vel and placed is None:
            Rc1 = np.moveaxis(kinematics.r_matrix(mech, q1), 2, 0)      # (g, n_move, n)
            # qd = R zd without drivers (kinematics.velocity, equal to rounding)
            qd1 = kinematics.velocity(mech, q1, zd1, t=pf.t) if getattr(mech, "drivers", None) else np.einsum("gni,ng->ni", Rc1, zd1)
        if vel:  # keep the velocity readings: a Kalman correction of zd at the moved q
            ys, Hs = [], []
            for s, wo in zip(vel, w_old):
                _, W = pf._noise(s.name)
                h1 = s.h(q1, qd1)
                ys.append(np.einsum("nd,kd->nk", s.residual(wo, h1), W))
                # dh/dzd e_k by exact differences (the readings are linear in qd)
                HR = np.stack([s.h(q1, qd1 + Rc1[k]) - h1 for k in range(g)], axis=2)
                Hs.append(np.einsum("ij,njk->nik", W, HR))
            y, H = np.concatenate(ys, axis=1), np.concatenate(Hs, axis=1)
            Pv = P_[:, g:, g:]
            PHt = Pv @ np.swapaxes(H, 1, 2)
            S = H @ PHt + np.eye(H.shape[1])[None]
            corr = np.einsum("ngd,nd->ng", PHt, _solve(S, y))
            good = np.isfinite(corr).all(axis=1)
            dzd = np.where(good[:, None], corr, qd0[:, iz] - zd1)
            zd1 = zd1 + dzd
            qd1 = qd1 + np.einsum("gni,ng->ni", Rc1, dzd)  # qd is affine in zd: + R dzd (one solve less)
        elif placed is None:
            qd1 = kinematics.velocity(mech, q1, zd1, t=pf.t)
        fine = np.isfinite(qd1).all(axis=1)
        q_new[sel] = np.where(fine[:, None], q1, q0)
        qd_new[sel] = np.where(fine[:, None], qd1, qd0)
        fine_all[lo:hi] = fine

    # the ranges on the propagation's threads: every moved particle from its own draw and
    # state alone (the Newton iterations of the position problem stop per particle), so the
    # result does not depend on the thread count
    thread_pools.rows(run, idx.size, pf.propagator.threads, ns_per_row=300.0)  # ~300 ns a moved four-bar particle
    return int(np.count_nonzero(fine_all))


def _r_rows(ctx, rows, n: int, g: int) -> np.ndarray:
    """R (len(rows), n, g) at the particles ``rows`` from a kernel context (its R entries:
    (N,) arrays or constants), as kinematics.r_matrix at their q (equal to rounding)."""
    out = np.empty((len(rows), n, g))
    for i, row in enumerate(ctx.R):
        for k, v in enumerate(row):
            out[:, i, k] = v[rows] if isinstance(v, np.ndarray) else v
    return out


def _solve(S, b):
    """x (N, D) of S x = b for S (N, D, D): a division when D = 1 (a gyroscope), else
    numpy's batched solve (LAPACK per matrix: ~30 ns a 1 x 1 system as a division, ~1 us
    through LAPACK)."""
    if S.shape[1] == 1:
        return b / S[:, :, 0]
    return np.linalg.solve(S, b[..., None])[..., 0]


def kernel_floor(g: int, dt: float, sigma_a: float, bin_z, bin_zd) -> np.ndarray:
    """(2g, 2g) floor of the kernel covariance: one step's acceleration noise (Van Loan
    with the density sigma_a^2 dt: sigma_a^2 dt [[dt^3/3, dt^2/2], [dt^2/2, dt]] per
    coordinate) plus the variance of a uniform spread over one KLD bin, bin^2 / 12 (the
    resolution the filter declares for its particle set: a particle stands for its bin)."""
    q = float(sigma_a) ** 2 * dt
    out = kinematic_plant_noise(g, dt, q if q > 0 else 1e-12)
    b = np.concatenate([np.broadcast_to(bin_z, (g,)), np.broadcast_to(bin_zd, (g,))])
    return out + np.diag(b**2 / 12.0)


def kernel_floor_of(pf) -> np.ndarray:
    """The regularisation kernel's floor (kernel_floor), cached per step."""
    key = (pf._last_dt, pf.sigma_a)
    if getattr(pf, "_floor", None) is None or pf._floor[0] != key:
        scale = np.where(pf.angular, 1.0, pf.mech.length_scale)
        pf._floor = (key, kernel_floor(pf.g, pf._last_dt, pf.sigma_a, KLD_BIN_Z * scale, KLD_BIN_ZD * scale))
    return pf._floor[1]


def kld_size(pf, idx) -> int:
    """Particles needed for the resampled set idx (KLD-sampling bound on its occupied bins)."""
    scale = np.where(pf.angular, 1.0, pf.mech.length_scale)
    zb = np.floor(pf.z[idx] / (KLD_BIN_Z * scale)).astype(np.int64)
    zdb = np.floor(pf.zd[idx] / (KLD_BIN_ZD * scale)).astype(np.int64)
    keys = np.hstack([zb, zdb, pf.label[idx, None]])
    # one int64 per row (a hash of the bin; collisions only merge bins: k is a lower bound)
    h = np.zeros(keys.shape[0], dtype=np.uint64)
    for col in keys.T:
        h = h * np.uint64(1000003) + col.astype(np.uint64)
    k = len(np.unique(h))
    if k <= 1:
        return 1
    a = 2.0 / (9.0 * (k - 1))
    return int(math.ceil((k - 1) / (2.0 * KLD_EPSILON) * (1.0 - a + math.sqrt(a) * KLD_QUANTILE) ** 3))


def resample_set(pf, w, ess):
    """Lines 12-14, then the regularisation of the copies (:func:`regularise`). A set
    enlarged by a uniform (re)initialisation shrinks towards ``particles`` by
    KLD-sampling: n = clip(n_KLD(occupied bins), particles, N)."""
    C = None
    nt = pf.propagator.threads
    if pf.reg_factor > 0 and pf_compiled.for_set(pf):  # the same in three compiled block passes
        C = pf_compiled.branch_covariances(w, pf.q, pf.qd, pf.iz, pf.label, pf.K, pf.angular, kernel_floor_of(pf), nt)
    elif pf.reg_factor > 0:
        dev = np.empty((pf.N, pf.g))
        for b in _labels_present(pf.label, pf.K):
            sel = pf.label == b
            wb = w[sel] / max(w[sel].sum(), 1e-300)
            zb = pf.z[sel]
            m = np.einsum("n,nk->k", wb, zb)
            if pf.angular.any():
                a = pf.angular
                m[a] = np.arctan2(np.einsum("n,nk->k", wb, np.sin(zb[:, a])), np.einsum("n,nk->k", wb, np.cos(zb[:, a])))
            d = zb - m
            d[:, pf.angular] = (d[:, pf.angular] + np.pi) % (2 * np.pi) - np.pi
            dev[sel] = d
        C = branch_covariances(dev, pf.zd, w, pf.label, pf.K, kernel_floor_of(pf))
    idx = resample(pf.scheme, w, pf.rng, threads=nt)
    n = pf.N
    if n > pf.N_track:
        n = int(min(n, max(pf.N_track, kld_size(pf, idx))))
        if n < pf.N:
            idx = resample(pf.scheme, w, pf.rng, n, threads=nt)
    if pf_compiled.for_set(pf):  # batch-last copies: the next propagation's input as is
        pf.q, pf.qd, pf.qdd, pf.v = (pf_compiled.gather(a, idx, nt) for a in (pf.q, pf.qd, pf.qdd, pf.v))
    else:
        pf.q, pf.qd, pf.qdd, pf.v = pf.q[idx], pf.qd[idx], pf.qdd[idx], pf.v[idx]
    pf.propagator.take(idx)
    if getattr(pf, "inputs", None):  # each particle's torques (:mod:`.inputs`)
        pf.inputs.take(idx)
    pf.label = pf.label[idx]
    pf._unique = pf._unique_resampled = int(np.count_nonzero(np.bincount(idx, minlength=pf.N)))
    pf.N = n
    pf.logw = np.full(n, -math.log(n))
    pf.counts["resamples"] += 1
    if C is not None:
        move = duplicates(idx)
        h = bandwidth(n, pf.g, pf.reg_factor)
        moved = regularise(pf, move, C, h, pf._vel_readings)
        if moved:
            pf.counts["regularised"] += moved
            pf._aux = None
            pf._fresh = False
