"""Noise covariances re-estimated from the residuals (paper 001 eqs. 3.26-3.28).

Paper 001 re-estimates the observation covariance R and the impulse covariance Omega
as sample covariances of the residuals at the solution. A residual fitted by the
smoother is smaller than the noise it represents (the eom residuals of a smoother are
largely absorbed by the trajectory), so the variances here use the redundancy numbers
of the rows (Foerstner 1979 variance-component estimation; Koch, Parameter Estimation
and Hypothesis Testing in Linear Models, sec. 3.6)::

    E[r_G^T r_G] = n_G - tr(H_GG),   H = J (J^T J)^-1 J^T  (whitened rows)

so the variance factor of group G is s_G^2 = r_G^T r_G / (n_G - tr(H_GG)), and the
group's standard deviation is multiplied by s_G. Groups: the eom rows per independent
coordinate (the acceleration noise sigma_a, shared by the recordings) and the readings
per sensor channel (shared by the recordings). The prior and the integrator rows keep
their weights (the integrator's sigmas stay relative to sigma_a). Leverages:
:func:`mbde_core.identification.projection.leverages`.
"""
from __future__ import annotations

import numpy as np

from mbde_core.identification.projection import leverages


def variance_factors(proj, rows) -> dict:
    """{group: (factor s^2 (d,), residual count, redundancy (d,))} for 'eom' and every
    'obs:<sensor>' block (channels separately), pooled over the recordings."""
    names = {rb.name for rb in rows if rb.name == "eom" or rb.name.startswith("obs:")}
    lev = leverages(proj, rows, names)
    sums: dict = {}
    for rb in rows:
        if rb.name in names:
            s = sums.setdefault(rb.name, [0.0, 0])
            s[0] = s[0] + np.sum(rb.r * rb.r, axis=0)
            s[1] += rb.r.shape[0]
    out = {}
    for name, (rss, n) in sums.items():
        redundancy = n - np.sum(lev[name], axis=0)
        out[name] = (np.asarray(rss) / np.maximum(redundancy, 1e-9), n, redundancy)
    return out
