"""Quantiles of the chi-square distribution without importing scipy.stats.

scipy.stats takes ~0.3-0.5 s to import (hundreds of distributions and their docstrings);
the consistency bands and gates of mbde only need the chi-square quantile function,
which is scipy.stats.chi2.ppf's own formula: F^-1(p; k) = 2 P^-1(k/2, p), with P^-1 the
inverse of the regularized lower incomplete gamma function (scipy.special.gammaincinv),
so the values are the same.
"""
from __future__ import annotations

import numpy as np
from scipy.special import gammaincinv


def chi2_ppf(p, k):
    """Chi-square quantile of probability p (scalar or array) with k degrees of freedom."""
    out = 2.0 * gammaincinv(np.asarray(k, dtype=float) / 2.0, np.asarray(p, dtype=float))
    return out if np.ndim(out) else float(out)
