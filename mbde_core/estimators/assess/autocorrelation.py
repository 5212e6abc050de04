"""The mean of a correlated series and its effective sample size, streamed in bounded memory.

The NEES and NIS of successive filter steps are correlated (an error persists over the
dynamics' time scales), so the mean over K steps varies far more than the mean of K
independent values: var(mean) = sigma^2 tau / K with the integrated autocorrelation time

    tau = 1 + 2 sum_{l >= 1} rho(l)                                          (Sokal 1997, eq. 3.19)

and the effective sample size K_eff = K / tau. A chi-square consistency band of the mean
then uses K_eff, not K (:func:`chi2_mean_band`): under consistency each NEES is chi2(d)
(variance 2d), the mean has variance 2d / K_eff, and the scaled chi-square
(d / nu) chi2(nu) with nu = d K_eff has the same mean and variance.

tau is estimated by Sokal's automatic window: the smallest window M with M >= C tau(M)
(C = 5), from the FFT autocorrelation (as emcee's ``integrated_time``). Memory is bounded
by block means: the series is kept as at most 2 ``CAP`` means of blocks of m steps;
when full, neighbouring blocks are merged and m doubles. With block means y (N_b of them)
the variance of the overall mean is var(y) tau_y / N_b, so in steps
tau = m var(y) tau_y / var(x), var(x) the variance of the steps themselves (exact sums).
Blocks shorter than the correlation time keep their correlation, which tau_y counts.
"""
from __future__ import annotations

import numpy as np

from mbde_core.estimators.chi2 import chi2_ppf

WINDOW_C = 5.0  # Sokal's window constant
CAP = 2048  # block means kept: between CAP and 2 CAP
MIN_BLOCKS = 16  # fewer values: tau is not estimated (taken as 1)


def integrated_time(y: np.ndarray, c: float = WINDOW_C) -> float:
    """Integrated autocorrelation time of the series y (N,) with Sokal's automatic window;
    1 for a constant or too short series."""
    y = np.asarray(y, dtype=float)
    n = len(y)
    if n < MIN_BLOCKS:
        return 1.0
    x = y - y.mean()
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(x, n=size)
    acf = np.fft.irfft(f * np.conj(f), n=size)[:n]
    if acf[0] <= 0:
        return 1.0
    rho = acf / acf[0]
    taus = 2.0 * np.cumsum(rho) - 1.0
    window = np.arange(n) >= c * taus
    m = int(np.argmax(window)) if window.any() else n - 1
    tau = taus[m]
    denom = 1.0 - (2 * m + 1 - tau) / n  # the mean's removal, see the module doc
    return float(min(max(tau / denom if denom > 0 else n, 1.0), n))


class SeriesMean:
    """Streaming mean, variance and effective sample size of a series (see module doc).

    :meth:`add` consecutive values (NaN skipped), :meth:`result` at any time:
    ``{"n", "mean", "tau", "n_eff"}``."""

    def __init__(self, cap: int = CAP):
        self.cap = int(cap)
        self.n = 0
        self.s = 0.0
        self.q = 0.0
        self.shift = None  # first value: sums of x - shift (no cancellation)
        self.m = 1  # steps per block
        self.blocks: list[float] = []  # block sums of x - shift
        self.part_s = 0.0  # the open block
        self.part_n = 0

    def add(self, values) -> None:
        x = np.asarray(values, dtype=float).ravel()
        x = x[np.isfinite(x)]
        if not len(x):
            return
        if self.shift is None:
            self.shift = float(x[0])
        y = x - self.shift
        self.n += len(y)
        self.s += float(y.sum())
        self.q += float(np.dot(y, y))
        k = 0
        if self.part_n:  # fill the open block first
            k = min(self.m - self.part_n, len(y))
            self.part_s += float(y[:k].sum())
            self.part_n += k
            if self.part_n == self.m:
                self.blocks.append(self.part_s)
                self.part_s, self.part_n = 0.0, 0
        rest = y[k:]
        full = len(rest) // self.m
        if full:
            self.blocks.extend(rest[: full * self.m].reshape(full, self.m).sum(axis=1).tolist())
        tail = rest[full * self.m:]
        if len(tail):
            self.part_s += float(tail.sum())
            self.part_n += len(tail)
        while len(self.blocks) >= 2 * self.cap:
            self._merge()

    def _merge(self) -> None:
        b = self.blocks
        odd = len(b) % 2
        pairs = np.asarray(b[: len(b) - odd]).reshape(-1, 2).sum(axis=1).tolist()
        if odd:  # the last block starts the open block of the new size
            self.part_s += b[-1]
            self.part_n += self.m
        self.m *= 2
        self.blocks = pairs
        if self.part_n >= self.m:
            self.blocks.append(self.part_s)
            self.part_s, self.part_n = 0.0, 0

    def result(self) -> dict:
        if not self.n:
            return {"n": 0, "mean": None, "tau": None, "n_eff": None}
        mean = self.s / self.n
        var = self.q / self.n - mean * mean
        tau = 1.0
        y = np.asarray(self.blocks) / self.m
        if len(y) >= MIN_BLOCKS and var > 0:
            tau_y = integrated_time(y)
            tau = float(np.clip(self.m * np.var(y) * tau_y / var, 1.0, self.n))
        return {"n": self.n, "mean": mean + self.shift, "tau": tau, "n_eff": self.n / tau}


def chi2_mean_band(dof: float, n_eff: float, p: float = 0.95) -> tuple[float, float]:
    """Two-sided band at probability p of the mean of a chi2(dof) series with effective
    sample size n_eff: the quantiles of (dof / nu) chi2(nu), nu = dof n_eff."""
    a = (1.0 - p) / 2.0
    nu = max(float(n_eff), 1e-9) * float(dof)
    lo, hi = chi2_ppf([a, 1.0 - a], nu)
    return float(lo * dof / nu), float(hi * dof / nu)
