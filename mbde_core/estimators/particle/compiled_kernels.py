"""The compiled kernels of :mod:`mbde_core.estimators.particle.compiled` (imported only when numba is
importable; see there for what they compute and their determinism)."""
import math

import numpy as np
from numba import njit

BLOCKS = 64  # fixed reduction blocks: the results do not depend on the thread count



@njit(cache=True, nogil=True, fastmath=False)
def moment_sums(w, q, qd, qdd, v, sin_z, cos_z, iz, angular, acc, b0, b1):
    """Blocks b0 .. b1 - 1 (of len(acc) fixed blocks of the N particles) of the weighted sums
    w z, w sin z, w cos z, w zd, w zdd (zdd = qdd[:, iz] + v; sin_z, cos_z (N, g): their
    values at the angle columns, any at the others) into acc (B, 5, g), each block summed
    in particle order."""
    N, g, B = q.shape[0], iz.shape[0], acc.shape[0]
    for b in range(b0, b1):
        lo, hi = b * N // B, (b + 1) * N // B
        for k in range(g):
            c = iz[k]
            s0 = 0.0
            s1 = 0.0
            s2 = 0.0
            s3 = 0.0
            s4 = 0.0
            if angular[k]:
                for i in range(lo, hi):
                    wi = w[i]
                    s1 += wi * sin_z[i, k]
                    s2 += wi * cos_z[i, k]
                    s3 += wi * qd[i, c]
                    s4 += wi * (qdd[i, c] + v[i, k])
            else:
                for i in range(lo, hi):
                    wi = w[i]
                    s0 += wi * q[i, c]
                    s3 += wi * qd[i, c]
                    s4 += wi * (qdd[i, c] + v[i, k])
            acc[b, 0, k] = s0
            acc[b, 1, k] = s1
            acc[b, 2, k] = s2
            acc[b, 3, k] = s3
            acc[b, 4, k] = s4


@njit(cache=True, nogil=True, fastmath=False)
def moment_means(acc, angular, mean_out):
    """The block sums of :func:`moment_sums` added in block order: mean_out (3, g) = the
    means of z (circular: atan2 of the sine and cosine sums at angle columns), zd, zdd."""
    B, g = acc.shape[0], acc.shape[2]
    tot = np.zeros((5, g))
    for b in range(B):
        for r in range(5):
            for k in range(g):
                tot[r, k] += acc[b, r, k]
    for k in range(g):
        mean_out[0, k] = math.atan2(tot[1, k], tot[2, k]) if angular[k] else tot[0, k]
        mean_out[1, k] = tot[3, k]
        mean_out[2, k] = tot[4, k]


@njit(cache=True, nogil=True, fastmath=False)
def cov_sums(w, q, qd, iz, angular, mean_in, cacc, b0, b1):
    """Blocks b0 .. b1 - 1 of the weighted outer products of [z - zm (wrapped to [-pi, pi)
    at angle columns), zd - zdm] (upper triangles) into cacc (B, 2g, 2g)."""
    N, g, B = q.shape[0], iz.shape[0], cacc.shape[0]
    d = 2 * g
    two_pi = 2.0 * math.pi
    x = np.empty(d)
    for b in range(b0, b1):
        lo, hi = b * N // B, (b + 1) * N // B
        loc = np.zeros((d, d))
        for i in range(lo, hi):
            for k in range(g):
                dz = q[i, iz[k]] - mean_in[0, k]
                if angular[k]:
                    u = dz + math.pi
                    if not (u >= 0.0 and u < two_pi):
                        u = u - two_pi * math.floor(u / two_pi)
                    dz = u - math.pi
                x[k] = dz
                x[g + k] = qd[i, iz[k]] - mean_in[1, k]
            wi = w[i]
            for r in range(d):
                wr = wi * x[r]
                for c in range(r, d):
                    loc[r, c] += wr * x[c]
        for r in range(d):
            for c in range(r, d):
                cacc[b, r, c] = loc[r, c]


@njit(cache=True, nogil=True, fastmath=False)
def cov_total(cacc, cov_out):
    """The block sums of :func:`cov_sums` added in block order into cov_out (symmetric)."""
    B, d = cacc.shape[0], cacc.shape[1]
    for r in range(d):
        for c in range(r, d):
            s = 0.0
            for b in range(B):
                s += cacc[b, r, c]
            cov_out[r, c] = s
            cov_out[c, r] = s


# -- the update and the resampling on ranges of particles (nogil: the caller's thread pool) --

@njit(cache=True, nogil=True, fastmath=False)
def _posterior(s2, yw, Gw, eps, L, u, v, lsum):
    """One particle's Gaussian posterior of the adapted proposal: Lam = I / s2 + Gw^T Gw =
    L L^T (Cholesky, row by row, into L), u = L^-1 Gw^T yw (into u), v = L^-T (u + eps)
    (into v); returns (u.u, log det Lam + lsum). yw (D,), Gw (D, g), eps and v (g,)."""
    D, g = Gw.shape[0], Gw.shape[1]
    for r in range(g):
        for c in range(r + 1):
            a = 1.0 / s2 if r == c else 0.0
            for d in range(D):
                a += Gw[d, r] * Gw[d, c]
            for k in range(c):
                a -= L[r, k] * L[c, k]
            L[r, c] = math.sqrt(a) if r == c else a / L[c, c]
    uu = 0.0
    logdet = lsum
    for r in range(g):
        a = 0.0
        for d in range(D):
            a += Gw[d, r] * yw[d]
        for k in range(r):
            a -= L[r, k] * u[k]
        u[r] = a / L[r, r]
        uu += u[r] * u[r]
        logdet += 2.0 * math.log(L[r, r])
    for r in range(g - 1, -1, -1):  # L^T v = u + eps
        a = u[r] + eps[r]
        for k in range(r + 1, g):
            a -= L[k, r] * v[k]
        v[r] = a / L[r, r]
    return uu, logdet


@njit(cache=True, nogil=True, fastmath=False)
def adapted_range(s2, yw, Gw, eps, v_out, ll_out, start, stop):
    """:func:`mbde_core.estimators.particle.proposal.adapted_noise` for the particles start ..
    stop - 1: Lam = I / s2 + Gw^T Gw, b = Gw^T yw, L L^T = Lam, u = L^-1 b,
    v = L^-T (u + eps), ll = -(yy - u.u) / 2 - (log det Lam + g log s2) / 2 (for g = 1 the
    closed form of the numpy code: v = b / lam + eps / sqrt(lam)); eps (N, g) drawn by the
    caller as the numpy code draws it."""
    D, g = Gw.shape[1], Gw.shape[2]
    lsum = g * math.log(s2)
    L = np.empty((g, g))
    u = np.empty(g)
    for i in range(start, stop):
        yy = 0.0
        for d in range(D):
            yy += yw[i, d] * yw[i, d]
        if g == 1:
            lam = 1.0 / s2
            b = 0.0
            for d in range(D):
                lam += Gw[i, d, 0] * Gw[i, d, 0]
                b += Gw[i, d, 0] * yw[i, d]
            v_out[i, 0] = b / lam + eps[i, 0] / math.sqrt(lam)
            ll_out[i] = -0.5 * (yy - b * b / lam) - 0.5 * math.log(s2 * lam)
            continue
        uu, logdet = _posterior(s2, yw[i], Gw[i], eps[i], L, u, v_out[i], lsum)
        ll_out[i] = -0.5 * (yy - uu) - 0.5 * logdet


@njit(cache=True, nogil=True)
def comb_range(cdf, u, n, idx_out, start, stop):
    """Systematic resampling's ancestors of the comb points start .. stop - 1: idx_out[k] =
    the number of cdf entries <= (k + u) / n (numpy's searchsorted(side='right')), at most
    len(cdf) - 1; one binary search for the first point, then a merge walk."""
    N = cdf.shape[0]
    if start >= stop:
        return
    x = (float(start) + u) / n
    lo, hi = 0, N
    while lo < hi:
        mid = (lo + hi) // 2
        if cdf[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    j = lo
    for k in range(start, stop):
        x = (float(k) + u) / n
        while j < N and cdf[j] <= x:
            j += 1
        idx_out[k] = j if j < N else N - 1


@njit(cache=True, nogil=True)
def gather_range(src, idx, out, start, stop):
    """out[:, k] = src[:, idx[k]] for k in start .. stop - 1 (batch-last rows (r, N))."""
    for r in range(src.shape[0]):
        for k in range(start, stop):
            out[r, k] = src[r, idx[k]]


@njit(cache=True, nogil=True, fastmath=False)
def _wrap(d):
    u = d + math.pi
    two_pi = 2.0 * math.pi
    if not (u >= 0.0 and u < two_pi):
        u = u - two_pi * math.floor(u / two_pi)
    return u - math.pi


@njit(cache=True, nogil=True, fastmath=False)
def branch_sums(w, q, qd, iz, label, angular, sin_z, cos_z, mz, mx, stage, acc, b0, b1):
    """Blocks b0 .. b1 - 1 (of len(acc) fixed blocks) of the per-branch sums of the
    regularisation kernel's covariance (resampling.branch_covariances), one ``stage``:
    0: acc[b, k] = [sum w, sum w z (linear columns), sum w sin z, sum w cos z] (3g + 1);
    1: [sum w dev, sum w zd] (2g; dev = z - mz[k], wrapped at angle columns);
    2: the upper triangle of sum w (x - mx[k]) (x - mx[k])^T, x = [dev, zd] ((2g)^2)."""
    N, g, B = q.shape[0], iz.shape[0], acc.shape[0]
    d = 2 * g
    x = np.empty(d)
    for b in range(b0, b1):
        lo, hi = b * N // B, (b + 1) * N // B
        for k in range(acc.shape[1]):
            for j in range(acc.shape[2]):
                acc[b, k, j] = 0.0
        for i in range(lo, hi):
            lb = label[i]
            wi = w[i]
            if stage == 0:
                acc[b, lb, 0] += wi
                for c in range(g):
                    if angular[c]:
                        acc[b, lb, 1 + g + c] += wi * sin_z[i, c]
                        acc[b, lb, 1 + 2 * g + c] += wi * cos_z[i, c]
                    else:
                        acc[b, lb, 1 + c] += wi * q[i, iz[c]]
                continue
            for c in range(g):
                dz = q[i, iz[c]] - mz[lb, c]
                x[c] = _wrap(dz) if angular[c] else dz
                x[g + c] = qd[i, iz[c]]
            if stage == 1:
                for r in range(d):
                    acc[b, lb, r] += wi * x[r]
                continue
            for r in range(d):
                x[r] -= mx[lb, r]
            for r in range(d):
                wr = wi * x[r]
                for c in range(r, d):
                    acc[b, lb, r * d + c] += wr * x[c]


@njit(cache=True, nogil=True, fastmath=False)
def block_total(acc, out):
    """out[k, j] = sum over blocks of acc[b, k, j], added in block order."""
    for k in range(acc.shape[1]):
        for j in range(acc.shape[2]):
            s = 0.0
            for b in range(acc.shape[0]):
                s += acc[b, k, j]
            out[k, j] = s


@njit(cache=True, nogil=True, fastmath=False)
def adapted_one(s2, r, W, G, w, eps, lim, v_out, ll_out, bad_out, wild_out, xacc, b0, b1):
    """One reading's whole adapted proposal for the particles of blocks b0 .. b1 - 1 (of
    len(xacc) fixed blocks): yw = W r, Gw = W G (a particle with a non-finite one is ``bad``:
    zeros, log-evidence -inf), then :func:`adapted_range`'s v and ll, ``wild`` = bad or
    max|v| > lim, and the block sums sum_i w_i G_i G_i^T (D, D) of the reading's noise term."""
    N, D, g = G.shape[0], G.shape[1], G.shape[2]
    B = xacc.shape[0]
    lsum = g * math.log(s2)
    yw = np.empty(D)
    Gw = np.empty((D, g))
    L = np.empty((g, g))
    u = np.empty(g)
    for b in range(b0, b1):
        lo, hi = b * N // B, (b + 1) * N // B
        for d in range(D):
            for k in range(D):
                xacc[b, d, k] = 0.0
        for i in range(lo, hi):
            wi = w[i]
            for d in range(D):
                for k in range(D):
                    s = 0.0
                    for c in range(g):
                        s += G[i, d, c] * G[i, k, c]
                    xacc[b, d, k] += wi * s
            fin = True
            for d in range(D):
                a = 0.0
                for k in range(D):
                    a += W[d, k] * r[i, k]
                yw[d] = a
                fin = fin and (a - a == 0.0)
                for c in range(g):
                    a = 0.0
                    for k in range(D):
                        a += W[d, k] * G[i, k, c]
                    Gw[d, c] = a
                    fin = fin and (a - a == 0.0)
            if not fin:
                yw[:] = 0.0
                Gw[:, :] = 0.0
            yy = 0.0
            for d in range(D):
                yy += yw[d] * yw[d]
            uu, logdet = _posterior(s2, yw, Gw, eps[i], L, u, v_out[i], lsum)
            vmax = 0.0
            for rr in range(g - 1, -1, -1):
                vmax = max(vmax, abs(v_out[i, rr]))
            ll_out[i] = -0.5 * (yy - uu) - 0.5 * logdet if fin else -np.inf
            bad_out[i] = not fin
            wild_out[i] = (not fin) or not (vmax <= lim)


@njit(cache=True, nogil=True, fastmath=False)
def adapted_one_scalar(s2, r, W, G, w, eps, lim, v_out, ll_out, bad_out, wild_out, xacc, b0, b1):
    """:func:`adapted_one` for one scalar reading of a 1-DOF set (D = g = 1), in closed form:
    lam = 1 / s2 + Gw^2, v = (Gw yw / sqrt(lam) + eps) / sqrt(lam), ll = -(yw^2 - Gw^2 yw^2
    / lam) / 2 - log(s2 lam) / 2 (the numpy code's g = 1 form; 6x faster than the general
    loops, which keep per-particle (D, g) scratch and a Cholesky)."""
    N, B = G.shape[0], xacc.shape[0]
    w00 = W[0, 0]
    inv = 1.0 / s2
    ls2 = math.log(s2)
    for b in range(b0, b1):
        lo, hi = b * N // B, (b + 1) * N // B
        acc = 0.0
        for i in range(lo, hi):
            gi = G[i, 0, 0]
            acc += w[i] * (gi * gi)
            yw = w00 * r[i, 0]
            gw = w00 * gi
            fin = (yw - yw == 0.0) and (gw - gw == 0.0)
            if not fin:
                yw = 0.0
                gw = 0.0
            lam = inv + gw * gw
            L = math.sqrt(lam)
            u = gw * yw / L
            vv = (u + eps[i, 0]) / L
            v_out[i, 0] = vv
            ll_out[i] = -0.5 * (yw * yw - u * u) - 0.5 * (math.log(lam) + ls2) if fin else -np.inf
            bad_out[i] = not fin
            wild_out[i] = (not fin) or not (abs(vv) <= lim)
        xacc[b, 0, 0] = acc


@njit(cache=True, nogil=True, fastmath=False)
def impulse_range(qd, Rc, dzd, out, lo, hi):
    """out[i] = qd[i] + sum_k Rc[k, i] dzd[i, k] for the particles lo .. hi - 1 (the velocity
    impulse R dzd of proposal.velocity_impulse, its sums in the same order)."""
    n, g = qd.shape[1], Rc.shape[0]
    for j in range(n):
        for i in range(lo, hi):
            s = Rc[0, i, j] * dzd[i, 0]
            for k in range(1, g):
                s += Rc[k, i, j] * dzd[i, k]
            out[i, j] = qd[i, j] + s


@njit(cache=True, nogil=True, fastmath=False)
def _val(x, i, col, const):
    return x[i, col] if col >= 0 else const


@njit(cache=True, nogil=True, fastmath=False)
def gyro_range(q, qd, Rc, dt, lq, cq, lv, cv, with_G, pred, G, lo, hi):
    """A gyroscope's reading w = (d_x d'_y - d_y d'_x) / |d|^2 (sensors/gyroscope.py; d = P_j -
    P_i of its body: q column lq[m] or the constant cq[m] for x_j, x_i, y_j, y_i, d' likewise
    from qd with lv, cv) for the particles lo .. hi - 1 into pred (N, 1), and, if with_G, its
    noise Jacobian G[:, 0, k] = w(qd + dt R e_k) - w(qd) (proposal.noise_jacobian's exact
    difference) into G (N, 1, g), Rc (g, N, n) the columns of R."""
    g = Rc.shape[0]
    for i in range(lo, hi):
        dx = _val(q, i, lq[0], cq[0]) - _val(q, i, lq[1], cq[1])
        dy = _val(q, i, lq[2], cq[2]) - _val(q, i, lq[3], cq[3])
        vx = _val(qd, i, lv[0], cv[0]) - _val(qd, i, lv[1], cv[1])
        vy = _val(qd, i, lv[2], cv[2]) - _val(qd, i, lv[3], cv[3])
        s = dx * dx + dy * dy
        w0 = (dx * vy - dy * vx) / s
        pred[i, 0] = w0
        if with_G:
            for k in range(g):
                ex = (qd[i, lv[0]] + dt * Rc[k, i, lv[0]] if lv[0] >= 0 else cv[0]) - \
                     (qd[i, lv[1]] + dt * Rc[k, i, lv[1]] if lv[1] >= 0 else cv[1])
                ey = (qd[i, lv[2]] + dt * Rc[k, i, lv[2]] if lv[2] >= 0 else cv[2]) - \
                     (qd[i, lv[3]] + dt * Rc[k, i, lv[3]] if lv[3] >= 0 else cv[3])
                G[i, 0, k] = (dx * ey - dy * ex) / s - w0
