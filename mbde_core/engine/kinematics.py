"""Position, velocity and acceleration problems, the R matrix and R'z'.

With z = q[independent] and the dependent coordinates q_d (García de Jalón & Bayo 1994,
ch. 4; paper 003 eq. 2; paper 000 eq. 12):

- position: Phi(q_d; z) = 0, Newton-Raphson  Phi_q,d dq_d = -Phi;
- velocity: Phi_q qd = 0  ->  Phi_q,d qd_d = -Phi_q,z zd, i.e. qd = R zd with
  R[z] = I and R[d] = -Phi_q,d^{-1} Phi_q,z;
- acceleration: Phi_q qdd = -(Phi_q)' qd  ->  qdd = R zdd + R'zd with
  (R'zd)[z] = 0 and (R'zd)[d] = -Phi_q,d^{-1} (Phi_q)' qd.

With time-dependent driving constraints (:mod:`mbde_core.model.drivers`) the time t is
needed (a ValueError without it): the position problem solves Phi_s(q) = c(t), and the
velocity and acceleration gain the particular solutions of c'(t) and c''(t)
(:func:`particular`).

Every function accepts a single state (q: (n,)) or a batch (q: (N, n)); results keep
that leading axis. How they run:

- batch, mechanism with generated kernels (:mod:`fastpath`): batch-last evaluation of
  the generated straight-line code (results are Fortran-ordered (N, n) views);
- single state: Phi, Phi_q from the kernels, then the dense algebra below without a
  batch axis and with LAPACK solves -- bit-for-bit the results of the batched generic
  code for N = 1, at a fraction of its overhead (the integrators' inner loops use the
  faster generated solves instead, equal to rounding);
- otherwise (no kernels, an explicit ``phi_q`` or ``independent``): the generic code.
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.engine import fastpath
from mbde_core.engine.fastpath import phi_tol as _phi_tol
from mbde_core.engine.linalg import solve


def require_time(mech, t):
    """t as a float; a ValueError naming the mechanism if it has drivers and t is None."""
    if t is None:
        if getattr(mech, "drivers", None):
            raise ValueError(f"mechanism {mech.name!r} has time-dependent driving constraints: the time t is needed")
        return 0.0
    return float(t)


def _offset(mech, t):
    """The drivers' c(t) (m,) or None (no drivers)."""
    return mech.drivers.offset(require_time(mech, t)) if getattr(mech, "drivers", None) else None


def solve_position(mech, z, q_guess, *, max_iter: int = 30, independent=None, t=None):
    """Solve Phi(q) = 0 for the dependent coordinates with z fixed.

    z: (g,) or (N, g); q_guess: (n,) or (N, n) (its z entries are overwritten).
    Returns (q, ok) with ok a bool (or (N,) bool array): converged to |Phi| <= 1e-12 L^2.
    Steps are limited to one mechanism length so far-away guesses do not blow up.
    t: time (needed with driving constraints).
    """
    off = _offset(mech, t)
    offl = None if off is None else off.tolist()
    K = fastpath.kernels(mech) if independent is None else None
    q_guess = np.asarray(q_guess, dtype=float)
    if K is not None and q_guess.ndim == 2:
        N = q_guess.shape[0]
        Z = np.asarray(z, dtype=float).reshape(N, mech.dof)
        if 0 < N <= fastpath.SMALL_BATCH:
            try:
                res = [fastpath.s_position(mech, K, Z[k].tolist(), q_guess[k].tolist(), max_iter, offl) for k in range(N)]
                return np.array([r[0] for r in res]).reshape(N, mech.n), np.array([r[1] for r in res], dtype=bool)
            except fastpath.SCALAR_ERRORS:
                pass  # the batched code handles singular and non-finite states
        q, ok, _, _ = fastpath.v_position(mech, K, Z.T, fastpath.soa(q_guess, mech.n), max_iter, copy=False, offset=offl)
        return q.T, ok
    iz = mech.independent if independent is None else np.asarray(independent)
    dep = mech.dependent if independent is None else np.setdiff1d(np.arange(mech.n), iz)
    q = np.array(q_guess, dtype=float, copy=True)
    single = q.ndim == 1
    if single:
        q = q[None]
    q[:, iz] = np.asarray(z, dtype=float).reshape(q.shape[0], len(iz))
    if single and K is not None:
        try:
            return _solve_position_single(mech, K, q[0], max_iter, off)
        except fastpath.SCALAR_ERRORS:
            pass  # non-finite input: the generic code below decides
    tol = _phi_tol(mech)
    max_step = mech.length_scale
    with np.errstate(all="ignore"):
        for _ in range(max_iter):
            phi = mech.phi(q, t)
            err = np.max(np.abs(phi), axis=1)
            done = ~(err > tol)  # NaN counts as done (failed): it never converges
            if done.all():
                break
            J = mech.phi_q(q)[:, :, dep]
            try:
                dq = solve(J, -phi)
            except np.linalg.LinAlgError:
                dq = _lstsq_batch(J, -phi)
            dq[done] = 0.0
            norm = np.max(np.abs(dq), axis=1)
            big = norm > max_step
            if big.any():
                dq[big] *= (max_step / norm[big])[:, None]
            q[:, dep] += dq
    phi = mech.phi(q, t)
    ok = np.all(np.abs(phi) <= 1e3 * tol, axis=1) & np.all(np.isfinite(q), axis=1)
    return (q[0], bool(ok[0])) if single else (q, ok)


def _solve_position_single(mech, K, q, max_iter, off=None):
    """The Newton iteration above for one state, on the generated kernels.

    Phi and Phi_q come from the scalar kernels (the same numbers as the generic
    evaluators), the step from LAPACK on the dense dependent block as above: the
    iterates are those of the generic code, bit for bit, without its array overhead.
    """
    S = K.scalar
    x = q.tolist()
    tol = _phi_tol(mech)
    max_step = mech.length_scale
    ph = None
    for _ in range(max_iter):
        tr = S.trig(x)
        ph = S.phi(x, tr)
        if off is not None:
            ph = [p - c for p, c in zip(ph, off.tolist())]
        if not fastpath.maxabs(ph) > tol:  # converged (NaN also stops: it never converges)
            break
        Jd = K.dense_dependent(S.jac_values(x, tr))
        r = -np.array(ph)
        try:
            dq = solve(Jd, r)
        except np.linalg.LinAlgError:
            dq = np.linalg.lstsq(Jd, r, rcond=None)[0]
        norm = fastpath.maxabs(dq.tolist())
        if norm > max_step:
            dq *= max_step / norm
        for c, d in zip(K.dep, dq.tolist()):
            x[c] += d
        ph = None
    if ph is None:
        ph = S.phi(x, S.trig(x))
        if off is not None:
            ph = [p - c for p, c in zip(ph, off.tolist())]
    lim = 1e3 * tol
    ok = all(abs(v) <= lim for v in ph) and all(map(math.isfinite, x))
    return np.array(x), ok


def _lstsq_batch(J, rhs):
    out = np.zeros((J.shape[0], J.shape[2]))
    for k in range(J.shape[0]):
        out[k] = np.linalg.lstsq(J[k], rhs[k], rcond=None)[0]
    return out


def _batched_kernel(mech, q, phi_q, fn, *args):
    """Rows of the generated ``fn(J, tr, *args)`` at a batch q (N, n), or None.

    None: use the dense code (single state, explicit phi_q or no kernels). args are
    (N, k) arrays, passed batch-last.
    """
    K = fastpath.kernels(mech) if phi_q is None and q.ndim == 2 else None
    if K is None:
        return None
    if 0 < q.shape[0] <= fastpath.SMALL_BATCH:
        S = K.scalar
        try:
            rows = []
            for k in range(q.shape[0]):
                x = q[k].tolist()
                tr = S.trig(x)
                rows.append(getattr(S, fn)(S.jac(x, tr), tr, *[a[k].tolist() for a in args]))
            return _Rows(rows)
        except fastpath.SCALAR_ERRORS:
            pass
    V = K.vector
    x = fastpath.soa(q, mech.n)
    with np.errstate(all="ignore"):
        tr = V.trig(x)
        return getattr(V, fn)(V.jac(x, tr), tr, *[fastpath.soa(a, a.shape[-1]) for a in args])


class _Rows(list):
    """Per-state kernel outputs of a small batch (see :func:`_batched_kernel`)."""


def _vectors(vals, N) -> np.ndarray:
    """(N, k) array from a kernel output: rows of N values, or per-state rows."""
    if isinstance(vals, _Rows):
        return np.array(vals, dtype=float).reshape(N, -1)
    return fastpath.stack(vals, N).T


def _blocks(mech, q, phi_q):
    """(Phi_q,d, Phi_q,z) at q (n,) or (N, n): slices of phi_q (or of mech.phi_q(q)).

    For one state with generated kernels, built directly from the kernel's non-zeros
    (the same numbers as slicing the dense Jacobian, without building it).
    """
    K = fastpath.kernels(mech) if (phi_q is None and q.ndim == 1) else None
    if K is not None:
        S = K.scalar
        x = q.tolist()
        try:
            vals = S.jac_values(x, S.trig(x))
            return K.dense_dependent(vals), K.dense_independent(vals)
        except fastpath.SCALAR_ERRORS:
            pass
    J = mech.phi_q(q) if phi_q is None else np.asarray(phi_q, dtype=float)
    return J[..., mech.dependent], J[..., mech.independent]


def r_matrix(mech, q, phi_q=None):
    """R: (n, g) or (N, n, g) with qd = R zd (columns span the null space of Phi_q)."""
    q = np.asarray(q, dtype=float)
    rows = _batched_kernel(mech, q, phi_q, "rmatrix")
    if isinstance(rows, _Rows):
        return np.array(rows, dtype=float).reshape(q.shape[0], mech.n, mech.dof)
    if rows is not None:
        out = np.empty((q.shape[0], mech.n, mech.dof))
        for i, row in enumerate(rows):
            for k, v in enumerate(row):
                out[:, i, k] = v
        return out
    Jd, Jz = _blocks(mech, q, phi_q)
    R = np.zeros(q.shape[:-1] + (mech.n, mech.dof))
    R[..., mech.independent, np.arange(mech.dof)] = 1.0
    R[..., mech.dependent, :] = -solve(Jd, Jz)
    return R


def particular(mech, q, b, phi_q=None):
    """x (n,) or (N, n) with x[z] = 0 and Phi_q,d x[d] = b (m,): the driving constraints'
    particular velocity (b = c'(t)) and acceleration (b = c''(t)) solutions."""
    q = np.asarray(q, dtype=float)
    b = np.asarray(b, dtype=float)
    out = np.zeros_like(q)
    if q.ndim == 2:
        vals = _batched_kernel(mech, q, phi_q, "dsolve", np.broadcast_to(b, (q.shape[0], b.size)))
        if vals is not None:
            out[:, mech.dependent] = _vectors(vals, q.shape[0])
            return out
    Jd, _ = _blocks(mech, q, phi_q)
    out[..., mech.dependent] = solve(Jd, np.broadcast_to(b, q.shape[:-1] + b.shape).copy())
    return out


def _driver_term(mech, q, t, k, phi_q):
    """The particular solution of c'(t) (k = 0) or c''(t) (k = 1), or 0 without drivers."""
    if not getattr(mech, "drivers", None):
        return 0.0
    return particular(mech, q, mech.drivers.rates(require_time(mech, t))[k], phi_q)


def velocity(mech, q, zd, phi_q=None, t=None):
    """qd = R zd (+ the drivers' particular velocity at t): (n,) or (N, n) from zd (g,) or (N, g)."""
    q = np.asarray(q, dtype=float)
    if getattr(mech, "drivers", None):
        return _velocity(mech, q, zd, phi_q) + _driver_term(mech, q, t, 0, phi_q)
    return _velocity(mech, q, zd, phi_q)


def _velocity(mech, q, zd, phi_q):
    zd = np.asarray(zd, dtype=float).reshape(q.shape[:-1] + (mech.dof,))
    vals = _batched_kernel(mech, q, phi_q, "velocity", zd)
    if vals is not None:
        return _vectors(vals, q.shape[0])
    Jd, Jz = _blocks(mech, q, phi_q)
    qd = np.zeros_like(q)
    qd[..., mech.independent] = zd
    rhs = -np.einsum("...ij,...j->...i", Jz, zd)
    qd[..., mech.dependent] = solve(Jd, rhs)
    return qd


def rdot_zd(mech, q, qd, phi_q=None, t=None, drivers: bool = True):
    """R'zd (+ the drivers' particular acceleration at t if ``drivers``): (n,) or (N, n),
    the acceleration obtained with zdd = 0."""
    q = np.asarray(q, dtype=float)
    if drivers and getattr(mech, "drivers", None):
        return rdot_zd(mech, q, qd, phi_q, drivers=False) + _driver_term(mech, q, t, 1, phi_q)
    qd = np.asarray(qd, dtype=float).reshape(q.shape)
    vals = _batched_kernel(mech, q, phi_q, "acceleration", q, qd, np.zeros(q.shape[:-1] + (mech.dof,)))
    if vals is not None:
        return _vectors(vals, q.shape[0])
    Jd, _ = _blocks(mech, q, phi_q)
    out = np.zeros_like(q)
    out[..., mech.dependent] = solve(Jd, -mech.phi_q_dot_qd(q, qd))
    return out


def acceleration(mech, q, qd, zdd, phi_q=None, t=None):
    """qdd = R zdd + R'zd (+ the drivers' particular acceleration at t): (n,) or (N, n)
    from zdd (g,) or (N, g)."""
    q = np.asarray(q, dtype=float)
    if getattr(mech, "drivers", None):
        drv = _driver_term(mech, q, t, 1, phi_q)
        return _acceleration(mech, q, qd, zdd, phi_q) + drv
    return _acceleration(mech, q, qd, zdd, phi_q)


def _acceleration(mech, q, qd, zdd, phi_q):
    qd = np.asarray(qd, dtype=float).reshape(q.shape)
    zdd = np.asarray(zdd, dtype=float).reshape(q.shape[:-1] + (mech.dof,))
    vals = _batched_kernel(mech, q, phi_q, "acceleration", q, qd, zdd)
    if vals is not None:
        return _vectors(vals, q.shape[0])
    Jd, Jz = _blocks(mech, q, phi_q)
    out = np.zeros_like(q)
    out[..., mech.independent] = zdd
    rhs = -mech.phi_q_dot_qd(q, qd) - np.einsum("...ij,...j->...i", Jz, zdd)
    out[..., mech.dependent] = solve(Jd, rhs)
    return out


def full_state(mech, q_guess, z, zd, zdd=None, t=None):
    """Assemble (q, qd, qdd) from independent (z, zd, zdd) with a nearby guess for q.

    Returns (q, qd, qdd, ok); qdd is None if zdd is None. t: time (with drivers).
    """
    q, ok = solve_position(mech, z, q_guess, t=t)
    J = None if (np.ndim(q) == 2 and fastpath.kernels(mech) is not None) else mech.phi_q(q)
    qd = velocity(mech, q, zd, phi_q=J, t=t)
    qdd = None if zdd is None else acceleration(mech, q, qd, zdd, phi_q=J, t=t)
    return q, qd, qdd, ok


def solve_position_continuation(mech, z, q_start=None, steps: int = 64):
    """q (N, n) at z (N, g) (or (n,) at (g,)), reached by continuation from q_start
    (default: the mechanism's initial configuration) in ``steps`` equal steps of z.

    A single Newton solve from a distant guess may land on another solution (another
    assembly branch, or a relative angle off by pi); small steps stay on the start's
    branch. Raises ValueError if a step fails.
    """
    z = np.asarray(z, dtype=float)
    single = z.ndim == 1
    Z = np.atleast_2d(z)
    q = np.tile(mech.q0 if q_start is None else np.asarray(q_start, dtype=float), (Z.shape[0], 1))
    start = q[:, mech.independent].copy()
    for s in np.linspace(0.0, 1.0, steps + 1)[1:]:
        q, ok = solve_position(mech, start + s * (Z - start), q)
        if not np.all(ok):
            raise ValueError("the configuration cannot be reached by continuation from the initial one")
    return q[0] if single else q
