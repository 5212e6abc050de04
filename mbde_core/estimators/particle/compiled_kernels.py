"""The compiled kernels of :mod:`mbde_core.estimators.particle.compiled` (imported only when numba is
importable; see there for what they compute and their determinism)."""
import math

import numpy as np
from numba import njit, prange

BLOCKS = 64  # fixed reduction blocks: the results do not depend on the thread count



@njit(cache=True, parallel=True, fastmath=False)
def moments(w, q, qd, qdd, v, sin_z, cos_z, iz, angular, mean_out, cov_out):
    """Weighted means of z, zd, zdd = qdd[:, iz] + v (circular for angular columns, from
    sin_z, cos_z (N, g): their values at the angle columns, any at the others) into
    mean_out (3, g), and the weighted covariance of [z - zm (wrapped to [-pi, pi)),
    zd - zdm] into cov_out (2g, 2g) (symmetric; no kernel term)."""
    N, g = q.shape[0], iz.shape[0]
    B = min(BLOCKS, N)
    acc = np.zeros((B, 5, g))  # sum w z, w sin z, w cos z, w zd, w zdd
    for b in prange(B):
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
    tot = np.zeros((5, g))
    for b in range(B):
        for r in range(5):
            for k in range(g):
                tot[r, k] += acc[b, r, k]
    for k in range(g):
        mean_out[0, k] = math.atan2(tot[1, k], tot[2, k]) if angular[k] else tot[0, k]
        mean_out[1, k] = tot[3, k]
        mean_out[2, k] = tot[4, k]
    d = 2 * g
    cacc = np.zeros((B, d, d))
    two_pi = 2.0 * math.pi
    for b in prange(B):
        lo, hi = b * N // B, (b + 1) * N // B
        x = np.empty(d)
        loc = np.zeros((d, d))
        for i in range(lo, hi):
            for k in range(g):
                dz = q[i, iz[k]] - mean_out[0, k]
                if angular[k]:
                    u = dz + math.pi
                    if not (u >= 0.0 and u < two_pi):
                        u = u - two_pi * math.floor(u / two_pi)
                    dz = u - math.pi
                x[k] = dz
                x[g + k] = qd[i, iz[k]] - mean_out[1, k]
            wi = w[i]
            for r in range(d):
                wr = wi * x[r]
                for c in range(r, d):
                    loc[r, c] += wr * x[c]
        for r in range(d):
            for c in range(r, d):
                cacc[b, r, c] = loc[r, c]
    for r in range(d):
        for c in range(r, d):
            s = 0.0
            for b in range(B):
                s += cacc[b, r, c]
            cov_out[r, c] = s
            cov_out[c, r] = s
