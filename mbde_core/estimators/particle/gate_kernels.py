"""The compiled kernel of the particle gate's d^2 for a scalar reading
(:func:`mbde_core.estimators.particle.compiled.gate_d2`; imported only when numba is
importable). The formulas of :func:`mbde_core.estimators.particle.likelihood.predictive_d2`'s
scalar branch in two passes per reference, without its (K, N) temporaries: fewer calls at
the default 300-800 particles (fourbar_gyro's PF step 4 % less CPU, fivebar_encoder's
~14 %); at 1e4 particles the same CPU as numpy (numba's scalar exp costs ~3x numpy's
vectorised one, so terms below exp(CUT) are skipped: libm's underflow path is slower still)."""
import math

import numpy as np
from numba import njit

from mbde_core.estimators.particle.compiled_kernels import _wrap

CUT = -50.0  # exp(-50) = 2e-22: below half an ulp of the sums (>= 1, the largest term is exp(0)) even
#               summed over 1e5 particles; skipping it avoids libm's slow underflow path


@njit(cache=True, nogil=True, fastmath=False)
def _res(a, b, angular):
    """a - b, wrapped to [-pi, pi) when ``angular`` (the other kernels' wrap)."""
    return _wrap(a - b) if angular else a - b


@njit(cache=True, nogil=True, fastmath=False)
def gate_d2(ll, logw, w, p, w0, angular, cand):
    """d^2 = -2 [lse(logw + ll) - max_k lse_i(logw_i - (w0 res(p_k, p_i))^2 / 2)] over the
    references k: the candidates ``cand`` and the particle whose prediction is nearest the
    weighted mean sum_i w_i p_i (the first of equals, as np.argmin)."""
    N = p.shape[0]
    m = -np.inf
    for i in range(N):
        a = logw[i] + ll[i]
        if a > m:
            m = a
    mt = m if np.isfinite(m) else 0.0
    s = 0.0
    for i in range(N):
        x = logw[i] + ll[i] - mt
        if x > CUT:
            s += math.exp(x)
    top = math.log(s) + mt if s > 0.0 else -np.inf
    mean = 0.0
    for i in range(N):
        mean += w[i] * p[i]
    near, dmin = 0, np.inf
    for i in range(N):
        e = _res(p[i], mean, angular) * w0
        if e * e < dmin:
            dmin, near = e * e, i
    K = cand.shape[0]
    ref = -np.inf
    for k in range(K + 1):
        pr = p[cand[k]] if k < K else p[near]
        m = -np.inf
        for i in range(N):
            e = _res(pr, p[i], angular) * w0
            a = logw[i] - 0.5 * (e * e)
            if a > m:
                m = a
        if not np.isfinite(m):
            m = 0.0
        s = 0.0
        for i in range(N):
            e = _res(pr, p[i], angular) * w0
            x = logw[i] - 0.5 * (e * e) - m
            if x > CUT:
                s += math.exp(x)
        v = math.log(s) + m if s > 0.0 else -np.inf
        if math.isnan(v):
            return np.nan
        if v > ref:
            ref = v
    return -2.0 * (top - ref)
