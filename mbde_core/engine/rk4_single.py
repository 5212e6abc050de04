"""The classical RK4 step of one state written directly against the scalar kernels.

:class:`mbde_core.engine.integrators.RK4` runs one algorithm text on every backend
(:class:`step_backends.Single`, :class:`step_backends.Batch`, the generic arrays); for one state
that text costs more in its indirections (backend methods, :class:`step_backends.Stage`
dictionaries, closures) than in the generated kernels it calls. :func:`rk4_step` is the
same algorithm on Python lists, with the same operations in the same order, so its
results are those of ``RK4.step`` on the :class:`step_backends.Single` backend bit for bit.
With x = [z, zd], f the R-matrix dynamics and a1 = f(x0) (+ v)::

    x2 = x0 + h/2 F(x0),  x3 = x0 + h/2 F(x2),  x4 = x0 + h F(x3),
    x1 = x0 + h/6 (F(x0) + 2 F(x2) + 2 F(x3) + F(x4)),   F(x) = [zd, f(x) (+ v)],

each stage's q by the position problem (:func:`position`) from the predictors of
``RK4.step``: q0 + h/2 qd0 + h^2/8 R'zd0, then q2 + R (z3 - z2), then
q3 + R (z4 - z3) + h^2/8 R'zd3, then q4 + R (z1 - z4).

Mechanisms with drivers are not handled here (the caller uses ``RK4.step``).
Arithmetic exceptions of the kernels (exactly singular block, non-finite input)
propagate as in :func:`fastpath.s_position`: the caller falls back to the generic code.
"""
from __future__ import annotations

from mbde_core.engine.fastpath import s_position

MAX_ITER = 30  # Newton iterations of each stage's position problem (as RK4's)


def _rmul(R, dz):
    """R dz (n,) for R as n rows of g (as step_backends.Single.rmul)."""
    if len(dz) == 1:
        d = dz[0]
        return [row[0] * d for row in R]
    return [sum(r * d for r, d in zip(row, dz)) for row in R]


def _axpy(x, a, y):
    return [xi + a * yi for xi, yi in zip(x, y)]


def rk4_step(mech, K, t, q, qd, qdd, h, v=None, ctx=None):
    """One RK4 step of a single state (lists of floats; see the module doc).

    qdd: the accelerations at (q, qd) without v (or None: evaluated); v: extra zdd (g
    floats) or None; ctx: (tr, J, R) of the kernels at q if known (as computed from q).
    Returns (q1, qd1, qdd1, ok, (tr1, J1, R1, zdd1, rd1)): the state at t + h, its
    accelerations without v and the kernel values there.
    """
    if K.g == 1:
        return _rk4_step1(mech, K, t, q, qd, qdd, h, v, ctx)
    S = K.scalar
    iz = K.iz
    tv = K.time_values
    post = S.post
    z0 = [q[i] for i in iz]
    zd0 = [qd[i] for i in iz]
    if ctx is None:
        tr = S.trig(q)
        J = S.jac(q, tr)
        R = None
    else:
        tr, J, R = ctx
    if qdd is None:
        a1, _, _, rd = S.dynamics_t(J, tr, q, qd, tv(t), None)
        a1 = list(a1)
    else:
        a1 = [qdd[i] for i in iz]
        if R is None:
            R = S.rmatrix(J, tr)
        rd = [x - y for x, y in zip(qdd, _rmul(R, a1))]  # qdd = R zdd + R'zd
    if v is not None:
        a1 = [x + y for x, y in zip(a1, v)]
    hh = 0.5 * h
    # stage 2: z0 + h/2 zd0 is on the path z0 + s zd0 (zdd = 0) through q0
    z2, zd2 = _axpy(z0, hh, zd0), _axpy(zd0, hh, a1)
    q2, ok2, tr2, J2 = s_position(mech, K, z2, _axpy(_axpy(q, hh, qd), 0.125 * h * h, rd), MAX_ITER)
    _, zdd2, _, R2, _ = post(J2, tr2, q2, zd2, tv(t + hh), v, False)
    # stage 3: z3 - z2 = O(h^2): first order from q2
    z3, zd3 = _axpy(z0, hh, zd2), _axpy(zd0, hh, zdd2)
    guess = [a + b for a, b in zip(q2, _rmul(R2, [a - b for a, b in zip(z3, z2)]))]
    q3, ok3, tr3, J3 = s_position(mech, K, z3, guess, MAX_ITER)
    _, zdd3, _, R3, rd3 = post(J3, tr3, q3, zd3, tv(t + hh), v, False)
    # stage 4: z4 - z3 = h/2 zd3 + O(h^3): second order from q3
    z4, zd4 = _axpy(z0, h, zd3), _axpy(zd0, h, zdd3)
    guess = _axpy([a + b for a, b in zip(q3, _rmul(R3, [a - b for a, b in zip(z4, z3)]))], 0.125 * h * h, rd3)
    q4, ok4, tr4, J4 = s_position(mech, K, z4, guess, MAX_ITER)
    _, zdd4, _, R4, _ = post(J4, tr4, q4, zd4, tv(t + h), v, False)
    # result: z1 - z4 = O(h^2): first order from q4
    c = h / 6.0
    z1 = [x + c * (p + 2.0 * u + 2.0 * w + s) for x, p, u, w, s in zip(z0, zd0, zd2, zd3, zd4)]
    zd1 = [x + c * (p + 2.0 * u + 2.0 * w + s) for x, p, u, w, s in zip(zd0, a1, zdd2, zdd3, zdd4)]
    guess = [a + b for a, b in zip(q4, _rmul(R4, [a - b for a, b in zip(z1, z4)]))]
    q1, ok, tr1, J1 = s_position(mech, K, z1, guess, MAX_ITER)
    qd1, zdd1, qdd1, R1, rd1 = post(J1, tr1, q1, zd1, tv(t + h), None, True)
    return q1, qd1, qdd1, ok and ok2 and ok3 and ok4, (tr1, J1, R1, zdd1, rd1)


def _rk4_step1(mech, K, t, q, qd, qdd, h, v=None, ctx=None):
    """:func:`rk4_step` of a one-dof mechanism: z, zd and their stages as floats instead
    of one-element lists (the same operations in the same order)."""
    S = K.scalar
    c0 = K.iz[0]
    tv = K.time_values
    post = S.post
    z0, zd0 = q[c0], qd[c0]
    if ctx is None:
        tr = S.trig(q)
        J = S.jac(q, tr)
        R = None
    else:
        tr, J, R = ctx
    if qdd is None:
        a1, _, _, rd = S.dynamics_t(J, tr, q, qd, tv(t), None)
        a1 = a1[0]
    else:
        a1 = qdd[c0]
        if R is None:
            R = S.rmatrix(J, tr)
        rd = [x - row[0] * a1 for x, row in zip(qdd, R)]  # qdd = R zdd + R'zd
    if v is not None:
        a1 = a1 + v[0]
    hh = 0.5 * h
    c2 = 0.125 * h * h
    # stage 2: z0 + h/2 zd0 is on the path z0 + s zd0 (zdd = 0) through q0
    z2, zd2 = z0 + hh * zd0, zd0 + hh * a1
    q2, ok2, tr2, J2 = s_position(mech, K, (z2,), [(x + hh * y) + c2 * r for x, y, r in zip(q, qd, rd)], MAX_ITER)
    _, zdd2, _, R2, _ = post(J2, tr2, q2, (zd2,), tv(t + hh), v, False)
    zdd2 = zdd2[0]
    # stage 3: z3 - z2 = O(h^2): first order from q2
    z3, zd3 = z0 + hh * zd2, zd0 + hh * zdd2
    d = z3 - z2
    q3, ok3, tr3, J3 = s_position(mech, K, (z3,), [x + row[0] * d for x, row in zip(q2, R2)], MAX_ITER)
    _, zdd3, _, R3, rd3 = post(J3, tr3, q3, (zd3,), tv(t + hh), v, False)
    zdd3 = zdd3[0]
    # stage 4: z4 - z3 = h/2 zd3 + O(h^3): second order from q3
    z4, zd4 = z0 + h * zd3, zd0 + h * zdd3
    d = z4 - z3
    q4, ok4, tr4, J4 = s_position(mech, K, (z4,), [(x + row[0] * d) + c2 * r for x, row, r in zip(q3, R3, rd3)], MAX_ITER)
    _, zdd4, _, R4, _ = post(J4, tr4, q4, (zd4,), tv(t + h), v, False)
    # result: z1 - z4 = O(h^2): first order from q4
    c = h / 6.0
    z1 = z0 + c * (zd0 + 2.0 * zd2 + 2.0 * zd3 + zd4)
    zd1 = zd0 + c * (a1 + 2.0 * zdd2 + 2.0 * zdd3 + zdd4[0])
    d = z1 - z4
    q1, ok, tr1, J1 = s_position(mech, K, (z1,), [x + row[0] * d for x, row in zip(q4, R4)], MAX_ITER)
    qd1, zdd1, qdd1, R1, rd1 = post(J1, tr1, q1, (zd1,), tv(t + h), None, True)
    return q1, qd1, qdd1, ok and ok2 and ok3 and ok4, (tr1, J1, R1, zdd1, rd1)
