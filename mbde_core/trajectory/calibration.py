"""Noise levels from the data and the goodness of fit of a trajectory solution.

Variance components (Foerstner 1979; Koch, Parameter Estimation and Hypothesis Testing in
Linear Models, sec. 3.6; paper 001 eqs. 3.26-3.28 with redundancy numbers): for whitened
rows r = J dx + e with every weight right, E[r_G^T r_G] = n_G - tr(H_GG) over a group G of
rows, H = J (J^T J)^-1 J^T, so the group's variance factor

    s_G^2 = r_G^T r_G / (n_G - tr(H_GG))

is 1 when its sigma is right and s_G^2 times too large a variance otherwise. The hat
matrix's diagonal needs only the blocks of the inverse information that the rows touch:
Sigma_ii for rows on one state, also Sigma_{i,i+1} for rows on two
(:meth:`~mbde_core.trajectory.normal.NormalEquations.marginals`).

The smoother estimates its plant noise this way (groups: the eom rows of each
independent coordinate, sigma_a; the input random walk of each input, sigma_w), by
Foerstner's iteration (:class:`SigmaSearch`); the readings keep their sigmas (the
sensors' noise is what the user declared), and their variance factors, with the
normalised cost of the whole problem, are the goodness of fit (:func:`fit_verdict`).
"""
from __future__ import annotations

import numpy as np

FIT_BAND = (0.5, 2.0)  # normalised cost (chi^2 per redundancy) of a good fit
SENSOR_BAND = (0.25, 4.0)  # variance factor of one sensor's readings


def leverages(rows, marginals, off_diagonal) -> list:
    """Per RowBlock: the hat matrix's diagonal h (K, d) of its rows (no parameters)."""
    out = []
    for rb in rows:
        idx = np.asarray(rb.idx)
        if idx.size == 0:
            out.append(np.zeros(rb.r.shape))
            continue
        h = np.einsum("kdi,kij,kdj->kd", rb.Ji, marginals[idx], rb.Ji)
        if rb.Jn is not None:
            h += 2.0 * np.einsum("kdi,kij,kdj->kd", rb.Ji, off_diagonal[idx], rb.Jn)
            h += np.einsum("kdi,kij,kdj->kd", rb.Jn, marginals[idx + 1], rb.Jn)
        out.append(h)
    return out


def variance_factors(rows, lev) -> dict:
    """{group: (factor s^2 (d,), residual count, redundancy (d,))} per RowBlock name
    (channels separately), pooled over blocks of the same name."""
    sums: dict = {}
    for rb, h in zip(rows, lev):
        if rb.r.size == 0:
            continue
        s = sums.setdefault(rb.name, [0.0, 0, 0.0])
        s[0] = s[0] + np.sum(rb.r * rb.r, axis=0)
        s[1] += rb.r.shape[0]
        s[2] = s[2] + np.sum(h, axis=0)
    out = {}
    for name, (rss, n, hsum) in sums.items():
        red = n - np.asarray(hsum)
        out[name] = (np.asarray(rss) / np.maximum(red, 1e-9), n, red)
    return out


def normalised_cost(rows, n_unknowns: int) -> float:
    """sum r^2 / (residuals - unknowns): 1 in expectation for a right model and weights."""
    M = sum(rb.r.size for rb in rows)
    return float(sum(np.sum(rb.r * rb.r) for rb in rows) / max(M - n_unknowns, 1))


def fit_verdict(factors: dict, chi2: float, converged: bool) -> tuple[str, list]:
    """('converged' | 'poor fit' | 'not converged', [warning lines]) from the variance
    factors of the readings (obs:* and input:* groups) and the normalised cost."""
    warnings = []
    lo, hi = FIT_BAND
    if not lo <= chi2 <= hi:
        warnings.append(f"normalised cost {chi2:.3g} outside [{lo:g}, {hi:g}]: the model with its noise levels "
                        "does not explain the readings")
    slo, shi = SENSOR_BAND
    for name, (f, _, _) in factors.items():
        if not (name.startswith("obs:") or name.startswith("input:")):
            continue
        f = np.atleast_1d(f)
        low = slo if name.startswith("obs:") else 0.0  # a known input's weights include its representativeness
        if np.any(f > shi) or np.any(f < low):
            worst = float(f[np.argmax(np.abs(np.log(np.maximum(f, 1e-300))))])
            warnings.append(f"readings of {name.split(':', 1)[1]} fit with {worst:.3g} x their declared variance "
                            f"(expected 1, band [{slo:g}, {shi:g}])")
    if not converged:
        return "not converged", warnings
    return ("converged" if not warnings else "poor fit"), warnings


class SigmaSearch:
    """Fixed point of the variance components: phi(s) = log(variance factor) = 0 in
    s = log sigma, per group member (k,).

    Foerstner's iteration moves sigma by the square root of its factor (s += phi / 2),
    exact when the group's residuals scale with sigma (phi slope -2). Where they are
    partly absorbed by the solution the slope is shallower and that step too short (e.g.
    an eom noise that an input state on the same coordinate makes redundant: the factor
    falls by 0.6 per pass all the way to the floor), so once a member has two passes its
    step is the secant's, -phi / slope, when the slope is negative (as it must be: more
    variance, smaller factor); every move is limited to a factor ``descend``. The
    members are coupled (the eom rows and the input walk share what the trajectory does
    not explain), so every member moves at every pass and no bracket is kept. Converged
    when |phi| / 2 < log(1 + tol) for every member (sigma within tol); a member at its
    floor with phi < 0 stops there.
    """

    def __init__(self, k: int, tol: float, descend: float):
        self.tol = np.log1p(tol)
        self.jump = np.log(descend)
        self.prev = None  # (s, phi) of the previous pass

    def update(self, s, phi, s_floor):
        """(next s (k,), converged) from the current s, phi and the floor log sigma."""
        s, phi = np.asarray(s, float), np.asarray(phi, float)
        done = np.abs(phi) / 2 < self.tol
        at_floor = (phi < 0) & (s <= s_floor + 1e-9)
        step = phi / 2
        if self.prev is not None:
            ds, dphi = s - self.prev[0], phi - self.prev[1]
            with np.errstate(divide="ignore", invalid="ignore"):
                slope = np.where(np.abs(ds) > 1e-12, dphi / ds, np.nan)
            secant = (slope < -1e-3) & np.isfinite(slope)
            step = np.where(secant, -phi / np.where(secant, slope, 1.0), step)
        self.prev = (s.copy(), phi.copy())
        nxt = s + np.clip(step, -self.jump, self.jump)
        return np.maximum(nxt, s_floor), bool(np.all(done | at_floor))
