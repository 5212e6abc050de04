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
:func:`mbde_core.identification.projection.leverages`. The search for the acceleration
sigma (:class:`SigmaSearch`) and its floor (:func:`discretization_sigma`) are here too.
"""
from __future__ import annotations

import numpy as np

from mbde_core.identification.projection import leverages
from mbde_core.trajectory.factors import Integrator


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


def rescale(problems, scheme, relaxation, sigma_a, sensor_factor):
    """Set every recording's sigma_a (g,) (integrator sigmas follow) and rescale sensor
    whitening by 1/sqrt(factor) per channel."""
    for pr in problems:
        pr.sigma_a = np.array(sigma_a, dtype=float)
        pr.integrator = Integrator(pr.g, pr.readings.dt, scheme, pr.sigma_a, relaxation)
        for s in pr.readings.sensors:
            f = sensor_factor.get(s.name)
            if f is not None:
                s.whiten = np.diag(1.0 / np.sqrt(f)) @ s.whiten


def sensor_sigmas(problems) -> dict:
    """Re-estimated sensor sigmas {name: (d,)} from the final whitening (diagonal part)."""
    out = {}
    for s in problems[0].readings.sensors:
        C = np.linalg.inv(s.whiten.T @ s.whiten)
        out[s.name] = [float(v) for v in np.sqrt(np.diag(C))]
    return out


class SigmaSearch:
    """Root of phi(s) = log(variance factor of the eom rows) in s = log sigma_a, per
    independent coordinate (g,).

    Each evaluation is one solve, so the search must be economical and must not stop at
    a spurious fixed point: from a loose start (a filter's plant noise, phi < 0) sigma_a
    descends by ``descend`` per pass (or by Foerstner's step phi / 2 if larger) until
    phi > 0, continuation that also keeps each solve near the previous one; then the
    bracketed root is refined by regula falsi with the Illinois modification. A factor
    above 1 without a bracket takes Foerstner's step up. Converged when |phi| / 2 <
    log(1 + tol) (sigma within tol); at the discretization floor with phi < 0 the search
    stops there.
    """

    def __init__(self, g: int, tol: float, descend: float):
        self.tol = np.log1p(tol)
        self.jump = np.log(descend)
        self.lo = np.full((g, 2), np.nan)  # (s, phi) with phi > 0 (sigma too small)
        self.hi = np.full((g, 2), np.nan)  # (s, phi) with phi < 0 (sigma too large)
        self.side = np.zeros(g)  # side kept last (Illinois)

    def update(self, s, phi, s_floor):
        """(next s (g,), converged) from the current s, phi and the floor log sigma."""
        s, phi = np.asarray(s, float), np.asarray(phi, float)
        done = np.abs(phi) / 2 < self.tol
        at_floor = (phi < 0) & (s <= s_floor + 1e-9)
        nxt = s.copy()
        for k in range(s.size):
            if done[k] or at_floor[k]:
                continue
            if phi[k] > 0:
                self._keep(k, self.lo, s[k], phi[k], +1)
            else:
                self._keep(k, self.hi, s[k], phi[k], -1)
            (sl, pl), (sh, ph) = self.lo[k], self.hi[k]
            if np.isfinite(sl) and np.isfinite(sh):
                nxt[k] = sl - pl * (sh - sl) / (ph - pl)
            elif phi[k] < 0:
                nxt[k] = s[k] + min(phi[k] / 2, -self.jump)
            else:
                nxt[k] = s[k] + min(phi[k] / 2, self.jump)
        return np.maximum(nxt, s_floor), bool(np.all(done | at_floor))

    def _keep(self, k, store, s, phi, side):
        if self.side[k] == side:  # the other end was kept twice: Illinois halves its phi
            other = self.hi if side > 0 else self.lo
            other[k, 1] *= 0.5
        self.side[k] = side
        store[k] = (s, phi)


def discretization_sigma(jp, X) -> np.ndarray:
    """Floor (g,) of the re-estimated acceleration sigma: the Newmark linear-acceleration
    scheme's truncation error as an acceleration, dt^2 z^(4) / 12 ~ (second difference of
    zdd) / 12, RMS over the recordings. Below it the eom residuals measure the scheme's
    error, not disturbances (paper 001 sec. 4.9, shadow parameters)."""
    g = jp.g
    d2 = [np.diff(Xr[:, 2 * g:], 2, axis=0) for Xr in jp.split(X) if Xr.shape[0] > 2]
    if not d2:
        return np.zeros(g)
    return np.sqrt(np.mean(np.concatenate(d2) ** 2, axis=0)) / 12.0
