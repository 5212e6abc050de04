"""Fast paths of the engine on a mechanism's generated kernels.

:mod:`mbde_core.model.codegen` compiles, per mechanism, straight-line code for Phi,
Phi_q, (Phi_q)' qd, the solves with the dependent block, the generalized forces and the
R-matrix dynamics. This module runs the engine's algorithms on them in two layouts:

- single state: Python lists of floats through the ``scalar`` kernels (no numpy call
  inside a Newton iteration or a dynamics evaluation);
- batch: batch-last (structure of arrays) (n, N) arrays through the ``vector`` kernels:
  every generated statement is one numpy operation over all N states, on contiguous rows.

The public functions of :mod:`kinematics`, :mod:`dynamics` and the integrators dispatch
here when the mechanism has kernels (:func:`kernels`) and the call uses nothing the
kernels do not cover (an explicit ``phi_q``, another set of independent coordinates);
otherwise, and whenever a single-state kernel meets an arithmetic exception (exactly
singular block, infinite input), the generic numpy code runs. Both agree to rounding.

Batched results are returned as transposed views ``x.T`` of the batch-last arrays:
(N, n) arrays in Fortran order, so chaining steps never copies (``x.T`` of such an array
is again contiguous). The integrator backends that run the algorithms' arithmetic on
one state or on a batch (``Single``, ``Batch``, ``Stage``, ``Context``) are in
:mod:`mbde_core.engine.step_backends`.
"""
from __future__ import annotations

import ctypes
import math
import os
import sys

import numpy as np

SCALAR_ERRORS = (ArithmeticError, ValueError)  # raised by math/float ops on bad input


def kernels(mech):
    """The mechanism's generated kernels, or None (generic code must be used)."""
    fast = getattr(mech, "_fast", None)
    return None if fast is None else fast()


# ----------------------------------------------------------------------------------------
# large batches and the C allocator
#
# A batched kernel call creates ~100 short-lived (N,) temporaries. With glibc's default
# malloc settings, freeing them shrinks the heap (trim threshold 128 kB) and the next
# ones grow it again: every temporary of N >~ 5000 values then costs page faults, which
# doubles the time of a batched RK4 step. ``tune_allocator`` raises the trim threshold
# (256 MB) and the mmap threshold (32 MB, glibc's own upper bound for its adaptive
# threshold) once per process, with two mallopt calls through ctypes; freed memory is
# then kept for reuse instead of being returned to the OS at once. Set the environment
# variable MBDE_MALLOC_TUNING=0 to leave the allocator alone: batches then run in chunks
# of CHUNK_UNTUNED states, whose temporaries stay small (slower, ~1.5x at N = 1e4).

# Batches of up to SMALL_BATCH states (e.g. a UKF's sigma points) run state by state on
# the scalar kernels: numpy's fixed cost per operation (~0.5 us) exceeds a whole scalar
# evaluation below ~12 states (measured crossover).
SMALL_BATCH = 12
CHUNK_TUNED = 65536  # bounds the temporaries' memory (~50 live (N,) arrays)
CHUNK_UNTUNED = 2048
_TUNED: bool | None = None


def tune_allocator() -> bool:
    """Apply the malloc settings above (glibc only, once); True if they are in effect."""
    global _TUNED
    if _TUNED is None:
        _TUNED = False
        if os.environ.get("MBDE_MALLOC_TUNING", "1") != "0" and sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None)
                libc.gnu_get_libc_version  # noqa: B018 - glibc only
                m_trim_threshold, m_mmap_threshold = -1, -3
                _TUNED = bool(libc.mallopt(m_trim_threshold, 256 << 20)) and bool(libc.mallopt(m_mmap_threshold, 32 << 20))
            except (OSError, AttributeError):
                _TUNED = False
    return _TUNED


def chunk_size(N: int) -> int:
    """States per chunk for a batch of N (tunes the allocator for large batches)."""
    if N <= CHUNK_UNTUNED:
        return N
    return CHUNK_TUNED if tune_allocator() else CHUNK_UNTUNED


def soa(x, n: int) -> np.ndarray:
    """Batch-last (n, N) contiguous array of a batch (N, n) (free for our own outputs).

    Every batched entry point converts its input here, so large batches also tune the
    allocator (see above) before their first kernel call.
    """
    out = np.ascontiguousarray(np.asarray(x, dtype=float).reshape(-1, n).T)
    if out.shape[1] > CHUNK_UNTUNED and _TUNED is None:
        tune_allocator()
    return out


def phi_tol(mech) -> float:
    return 1e-14 * max(1.0, mech.length_scale**2)


def stack(vals, N: int) -> np.ndarray:
    """(k, N) array from k values, each an (N,) array or a float (broadcast)."""
    out = np.empty((len(vals), N))
    for k, v in enumerate(vals):
        out[k] = v
    return out


def maxabs(vals) -> float:
    """max |v| of floats, NaN if any is NaN (as numpy's max)."""
    m = 0.0
    for v in vals:
        a = abs(v)
        if a > m:
            m = a
        elif a != a:
            return a
    return m


# ----------------------------------------------------------------------------------------
# single state (lists of floats)


def s_position(mech, K, z, guess, max_iter: int, offset=None):
    """Newton-Raphson for the dependent coordinates, one state.

    z: g floats; guess: n floats; offset: the drivers' c(t) (m floats) or None (solves
    Phi_s(q) = c, :mod:`mbde_core.model.drivers`). Returns (q list, ok, tr, J) with the semantics of
    :func:`kinematics.solve_position`, tr and J (``jac``) at the returned q. Raises
    ArithmeticError/ValueError on an exactly singular block or non-finite input (the
    caller falls back to the generic code).
    """
    S = K.scalar
    q = list(guess)
    for k, c in enumerate(K.iz):
        q[c] = float(z[k])
    tol = phi_tol(mech)
    max_step = mech.length_scale
    dep = K.dep
    tr = S.trig(q)
    for it in range(max_iter + 1):
        if it and not K.angles_fixed:
            tr = S.trig(q)
        ph, J = S.phijac(q, tr)
        if offset is not None:
            ph = [p - c for p, c in zip(ph, offset)]
        if it == max_iter or not maxabs(ph) > tol:  # converged (NaN also stops: it never converges)
            break
        dq = S.newton_step(J, tr, ph)
        norm = maxabs(dq)
        if norm > max_step:
            f = max_step / norm
            dq = [d * f for d in dq]
        for c, d in zip(dep, dq):
            q[c] += d
    ok = maxabs(ph) <= 1e3 * tol and math.isfinite(sum(q))  # NaN fails both tests
    return q, ok, tr, J


def s_forces(mech, K, t, q, qd, extra_Q=None):
    """Q (n floats) = gravity + loads (+ extra_Q)."""
    Q = K.scalar.forces(q, qd, K.time_values(t))
    if extra_Q is not None:
        Q = [a + float(b) for a, b in zip(Q, extra_Q)]
    return Q


def s_dynamics(mech, K, t, q, qd, tr, J, extra_Q=None, ez=None):
    """Generated R-matrix dynamics of one state: (zdd, qdd, R, rdzd, Mbar, Qbar)."""
    return K.scalar.dynamics(J, tr, q, qd, s_forces(mech, K, t, q, qd, extra_Q), ez)


# ----------------------------------------------------------------------------------------
# batch (batch-last arrays)


def v_position(mech, K, Z, G, max_iter: int, copy: bool = True, offset=None):
    """Newton-Raphson for N states at once.

    Z: (g, N); G: (n, N) guesses (updated in place if not copy: a float64 C-contiguous
    temporary of the caller); offset: the drivers' c(t) (m floats) or None. Returns (q (n, N), ok (N,), tr). Each state iterates
    until |Phi| <= tol (then its update is zero), as :func:`kinematics.solve_position`.
    A state whose step is not finite (exactly singular block) takes the least-squares
    step instead, as the generic code does when LAPACK reports a singular matrix.
    The bookkeeping of the generic code (per-state convergence, step limit) runs only
    when needed: one reduction tells whether every step is finite and below the
    limit. The kernels' rows are never stacked on this fast path: the per-state
    residual comes from row-wise maxima (:func:`_row_maxabs`), the step is added row
    by row (zeroed first, with ``copyto(where=)``, for the states that converged).
    """
    V = K.vector
    q = np.array(G, dtype=float) if copy else G  # (n, N)
    N = q.shape[1]
    if K.g == 1:
        q[K.iz[0]] = Z[0]
    else:
        q[K.independent] = Z
    tol = phi_tol(mech)
    max_step = mech.length_scale
    tr = V.trig(q)
    with np.errstate(all="ignore"):
        for it in range(max_iter + 1):
            if it and not K.angles_fixed:
                tr = V.trig(q)
            ph, J = V.phijac(q, tr)
            if offset is not None:
                ph = tuple(p - c for p, c in zip(ph, offset))
            err = _row_maxabs(ph, N)  # per state; NaN if any residual is NaN
            if it == max_iter:
                break
            active = err > tol  # NaN counts as done (failed): it never converges
            if not active.any():
                break
            dq = V.newton_step(J, tr, ph)
            if _row_maxabs(dq, N).max(initial=0.0) <= max_step:  # every step finite and small
                done = None if active.all() else ~active
                for r, d in zip(K.dep, dq):
                    if done is not None:
                        np.copyto(d, 0.0, where=done)
                    q[r] += d
            else:
                q[K.dep_rows] += _limited_steps(mech, q, stack(ph, N), stack(dq, N), ~active, max_step)
        ok = (err <= 1e3 * tol) & np.isfinite(q).all(axis=0)
    return q, ok, tr, J


def _row_maxabs(rows, N: int) -> np.ndarray:
    """(N,) max_k |rows[k]| of kernel rows ((N,) arrays or floats); NaN propagates.

    Two operations per row into one buffer, instead of stacking the rows first."""
    first = rows[0]
    out = np.abs(first) if isinstance(first, np.ndarray) else np.full(N, abs(first))
    tmp = np.empty_like(out)
    for r in rows[1:]:
        np.abs(r, out=tmp)
        np.maximum(out, tmp, out=out)
    return out


def _limited_steps(mech, q, ph, dq, done, max_step):
    """Newton steps dq (m, N) made safe: least-squares steps where not finite, zero for
    converged states, limited to max_step (the generic code's rules)."""
    bad = ~np.isfinite(dq).all(axis=0) & ~done
    if bad.any():
        dq[:, bad] = _lstsq_steps(mech, q[:, bad], ph[:, bad])
    dq[:, done] = 0.0
    norm = np.max(np.abs(dq), axis=0)
    big = norm > max_step
    if big.any():
        dq[:, big] *= max_step / norm[big]
    return dq


def _lstsq_steps(mech, q, ph):
    """Least-squares Newton steps (m, k) for states q (n, k) with residuals ph (m, k)."""
    J = mech.constraints.jacobian(q.T, mech.points(q.T))
    if len(mech.keep_rows) != mech.constraints.m:
        J = J[:, mech.keep_rows]
    J = J[:, :, mech.dependent]
    out = np.zeros((J.shape[2], q.shape[1]))
    for k in range(q.shape[1]):
        out[:, k] = np.linalg.lstsq(J[k], -ph[:, k], rcond=None)[0]
    return out


def v_forces(mech, K, t, q, qd, extra_Q=None):
    """Q as n rows (arrays or floats) = gravity + loads (+ extra_Q (n, N))."""
    Q = K.vector.forces(q, qd, K.time_values(t))
    if extra_Q is not None:
        Q = tuple(a + b for a, b in zip(Q, extra_Q))
    return Q


def v_dynamics(mech, K, t, q, qd, tr, J, extra_Q=None, ez=None):
    """Generated R-matrix dynamics of N states (rows of q, qd (n, N))."""
    return K.vector.dynamics(J, tr, q, qd, v_forces(mech, K, t, q, qd, extra_Q), ez)


def finite_ok(ok, idx, *rows) -> None:
    """ok[idx] &= every value of the particles idx finite in each of ``rows`` ((k, N)
    batch-last arrays): a recomputed particle keeps ``ok`` only with a finite result."""
    if len(idx):
        for r in rows:
            ok[idx] &= np.isfinite(r[:, idx]).all(axis=0)
