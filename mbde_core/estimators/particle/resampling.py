"""Resampling schemes of the particle filter (paper 000 sec. 5.1, line 13 of Algorithm 1).

Each scheme draws n ancestor indices (default n = N) from normalised weights w (N,)
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
"""
from __future__ import annotations

import numpy as np

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


def systematic(w: np.ndarray, rng: np.random.Generator, n: int | None = None) -> np.ndarray:
    """(n,) indices: the comb (k + u)/n, k = 0..n-1, with one uniform offset u."""
    n = w.size if n is None else int(n)
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


def resample(scheme: str, w: np.ndarray, rng: np.random.Generator, n: int | None = None) -> np.ndarray:
    """Ancestor indices (n,) (default n = len(w)) by the named scheme (see module docstring)."""
    w = np.asarray(w, dtype=float)
    if scheme == "systematic":
        return systematic(w, rng, n)
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
    return float(min(1.0 / np.einsum("n,n->", w, w), w.size))  # no BLAS (see pf_outputs.wsum)
