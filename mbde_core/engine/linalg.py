"""Batched small dense linear solves.

numpy's batched ``linalg.solve`` pays a per-matrix LAPACK call; for the many tiny
systems of particle filters (N ~ 1e3..1e5 systems of size 2..6) a vectorised
elimination over the batch axis is faster:

- m = 2, 3: closed form (Cramer's rule with cofactors; 2x2 Cramer is forward stable,
  3x3 cofactors are accurate for the well-conditioned systems met here) -- one
  vectorised expression per entry, ~5-10x faster than LAPACK's batched solve;
- 4 <= m <= 6: Gaussian elimination with partial pivoting on a batch-last (m, m, N)
  copy, where every elementary operation is a contiguous row update over all N systems.

All paths agree with LAPACK to rounding. The mechanism-specific solves of the engine's
hot paths do not come here: they are generated per mechanism
(:mod:`mbde_core.model.codegen`) and exploit the constraint Jacobian's sparsity.
"""
from __future__ import annotations

import math

import numpy as np

try:  # numpy's own LAPACK gufuncs: what numpy.linalg.solve calls after its checks
    from numpy.linalg import _umath_linalg as _gufuncs
except ImportError:  # pragma: no cover - numpy layout change: use the public function
    _gufuncs = None

_SMALL = 6  # largest system size handled by the vectorised elimination
_MIN_BATCH = 64  # below this, LAPACK's per-matrix loop is cheaper


def solve(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Solve A X = B.

    A: (m, m) or (N, m, m). B: (m,), (m, k), (N, m) or (N, m, k). Returns X shaped like B.
    Raises numpy.linalg.LinAlgError if some A is exactly singular (LAPACK path) or yields
    non-finite values (vectorised path) -- callers treat that particle/state as failed.
    """
    if A.ndim == 2:
        # one system: as the batched path for N = 1 (LAPACK; 1x1 divides), bit for bit
        return B / A[0, 0] if A.shape[0] == 1 else solve_one(A, B)
    vec = B.ndim == 2
    Bm = B[..., None] if vec else B
    N, m = A.shape[0], A.shape[1]
    if m == 1:
        X = Bm / A
    elif m <= _SMALL and N >= _MIN_BATCH:
        X = _eliminate(A, Bm)
    else:
        X = np.linalg.solve(A, Bm)
    return X[..., 0] if vec else X


def solve_one(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """numpy.linalg.solve(A, B) for one float system (A (m, m), B (m,) or (m, k)).

    Calls numpy's LAPACK gufunc directly (the same routine, so the same numbers) without
    the wrapper's argument checks, ~2x faster for the engine's 2..10-sized systems. A
    non-finite result (singular A, non-finite input) is recomputed by numpy.linalg.solve,
    so errors and results are exactly numpy's.
    """
    if _gufuncs is not None and A.dtype == np.float64 and B.dtype == np.float64:
        with np.errstate(all="ignore"):
            X = (_gufuncs.solve1 if B.ndim == 1 else _gufuncs.solve)(A, B)
        if math.isfinite(sum(X.tolist()) if X.ndim == 1 else X.sum()):
            return X
    return np.linalg.solve(A, B)


def _eliminate(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Vectorised solve of (N, m, m) systems with (N, m, k) right-hand sides."""
    m = A.shape[1]
    At = np.ascontiguousarray(np.moveaxis(A, 0, -1))  # (m, m, N)
    Bt = np.ascontiguousarray(np.moveaxis(B, 0, -1))  # (m, k, N)
    if m == 2:
        X = _cramer2(At, Bt)
    elif m == 3:
        X = _cramer3(At, Bt)
    else:
        X = eliminate_batch_last(At, Bt)
    return np.moveaxis(X, -1, 0)


def _cramer2(A, B):
    det = A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]
    X = np.empty_like(B)
    X[0] = (A[1, 1] * B[0] - A[0, 1] * B[1]) / det
    X[1] = (A[0, 0] * B[1] - A[1, 0] * B[0]) / det
    return X


def _cramer3(A, B):
    # cofactors C[i][j] of A; A^-1 = C^T / det
    C00 = A[1, 1] * A[2, 2] - A[1, 2] * A[2, 1]
    C01 = A[1, 2] * A[2, 0] - A[1, 0] * A[2, 2]
    C02 = A[1, 0] * A[2, 1] - A[1, 1] * A[2, 0]
    C10 = A[0, 2] * A[2, 1] - A[0, 1] * A[2, 2]
    C11 = A[0, 0] * A[2, 2] - A[0, 2] * A[2, 0]
    C12 = A[0, 1] * A[2, 0] - A[0, 0] * A[2, 1]
    C20 = A[0, 1] * A[1, 2] - A[0, 2] * A[1, 1]
    C21 = A[0, 2] * A[1, 0] - A[0, 0] * A[1, 2]
    C22 = A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]
    det = A[0, 0] * C00 + A[0, 1] * C01 + A[0, 2] * C02
    X = np.empty_like(B)
    X[0] = (C00 * B[0] + C10 * B[1] + C20 * B[2]) / det
    X[1] = (C01 * B[0] + C11 * B[1] + C21 * B[2]) / det
    X[2] = (C02 * B[0] + C12 * B[1] + C22 * B[2]) / det
    return X


def eliminate_batch_last(At: np.ndarray, Bt: np.ndarray) -> np.ndarray:
    """Gaussian elimination with partial pivoting, batch axis last.

    At: (m, m, N), Bt: (m, k, N), both overwritten. Returns X (m, k, N). Singular systems
    give non-finite values (no exception).
    """
    m = At.shape[0]
    cols = np.arange(At.shape[-1])
    for k in range(m - 1):
        piv = k + np.argmax(np.abs(At[k:, k, :]), axis=0)  # (N,)
        if np.any(piv != k):
            rowk = At[k].copy()
            At[k] = At[piv, :, cols].T
            At[piv, :, cols] = rowk.T
            brow = Bt[k].copy()
            Bt[k] = Bt[piv, :, cols].T
            Bt[piv, :, cols] = brow.T
        inv = 1.0 / At[k, k]
        for i in range(k + 1, m):
            f = At[i, k] * inv
            At[i, k:] -= f * At[k, k:]
            Bt[i] -= f * Bt[k]
    X = np.empty_like(Bt)
    for i in range(m - 1, -1, -1):
        acc = Bt[i].copy()
        for j in range(i + 1, m):
            acc -= At[i, j] * X[j]
        X[i] = acc / At[i, i]
    return X
