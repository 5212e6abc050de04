"""The dynamics part of :meth:`AugmentedModel.evaluate <mbde_core.minimal.augmented.AugmentedModel.evaluate>`
for one degree of freedom, on Python floats (the ADE-KF's hot path).

With g = 1 the map's J, H2, H3 are columns (n,), M_m = J^T M J a number, and the
equations of :mod:`mbde_core.minimal.augmented` become sums over n natural coordinates::

    qd = J zd,  H2zd = H2 zd,  c = H2zd zd,  f_n = Q + S a - M c,
    zdd = (J^T f_n) / M_m,  qdd = J zdd + c,
    rho = f_n - M J zdd,  H2zdd = H2 zdd,  H3zz = H3 zd zd,
    dzdd/dz  = (rho . H2 + J . (-M H3zz - M H2zdd)) / M_m,
    dzdd/dzd = (J . (-2 M H2zd)) / M_m,   dzdd/da = (J^T S) / M_m.

Each numpy call on these (n,) and (n, n) arrays costs ~1-2 us, about what the whole
product costs on floats (n ~ 5), and evaluate makes ~40 of them twice per filter step.
Applies without loads (their Jacobians) and with a constant input projection S (no
``torque`` inputs); the values equal the numpy path's to rounding (the sums run in
another order than BLAS's).
"""
from __future__ import annotations

from operator import mul

import numpy as np

from mbde_core.sensors.accelerometer import Accelerometer
from mbde_core.sensors.base import linearize_one
from mbde_core.sensors.gyroscope import Gyroscope


def applies(model) -> bool:
    return model.g == 1 and not model.mech.loads and not model._torques


def dynamics(model, t, x, jet, jacobians: bool):
    """(q, qd, qdd, zdd, S, extra) as evaluate's numpy path computes them; extra is None
    without ``jacobians``, else (dz = dzdd/[z, zd, a] (2 + na), J, H2zd, H2zdd, H3zz), lists
    of floats (:func:`transition`, :func:`readings`). M c, M H2 zdd, M H3[zd, zd] and M H2 zd are taken as
    (M H2) zd^2, (M H2) zdd, (M H3) zd^2 and (M H2) zd: three products with M instead of
    five (equal to rounding)."""
    na = model.na
    M, S, Scols, Q = model._M_rows, model._S_rows, model._S_cols, model._Q_rows
    xl = x.tolist()
    zd, a = xl[1], xl[2 : 2 + na]
    zz = zd * zd
    J = jet.J[0][:, 0].tolist()
    H2 = jet.H2[0][:, 0, 0].tolist()
    MJ = [_dot(Mi, J) for Mi in M]
    MH2 = [_dot(Mi, H2) for Mi in M]
    H2zd = [h * zd for h in H2]
    c = [v * zd for v in H2zd]
    fn = [Qi + _dot(Si, a) - m * zz for Qi, Si, m in zip(Q, S, MH2)]
    Mm_inv = 1.0 / _dot(J, MJ)
    zdd = Mm_inv * _dot(J, fn)
    qdd = [j * zdd + ci for j, ci in zip(J, c)]
    out = (jet.q[0], np.array([j * zd for j in J]), np.array(qdd), np.array([zdd]), model._S0[: model.mech.n])
    if not jacobians:
        return out + (None,)
    H3 = jet.H3[0][:, 0, 0, 0].tolist()
    MH3 = [_dot(Mi, H3) for Mi in M]
    rho = [f - v * zdd for f, v in zip(fn, MJ)]
    r_z = _dot(rho, H2) + _dot(J, [-(m3 * zz) - m2 * zdd for m3, m2 in zip(MH3, MH2)])
    r_zd = _dot(J, [-2.0 * (m2 * zd) for m2 in MH2])
    dz = [Mm_inv * r for r in [r_z, r_zd] + [_dot(J, col) for col in Scols]]
    return out + ((dz, J, H2zd, [h * zdd for h in H2], [h * zd * zd for h in H3]),)


def transition(model, dz) -> np.ndarray:
    """A = F* (nx, nx) from dz = [dzdd/dz, dzdd/dzd, dzdd/da] (floats), as
    :meth:`AugmentedModel._with_A` builds it (A[0, 1] = 1, row 1 = dz; a' = b with input rates)."""
    A = model._A0.copy()
    A[1, : len(dz)] = dz
    return A


def readings(model, lin, names, terms):
    """h and H (eqs. 47-49) of the named sensors at lin, from terms = (dz, J, H2 zd, H2 zdd,
    H3[zd, zd]) (floats) of :func:`dynamics`. With g = 1 the chain rule's factors are
    columns: dq/dx = [J, 0, 0], dqd/dx = [H2zd, J, 0] and
    dqdd/dx = [J dz_0 + (H2zdd + H3zz), J dz_1 + 2 H2zd, J dz_a], so each row of H is a
    few dot products of the sensor's (dh/dq, dh/dqd, dh/dqdd) rows with these columns
    (the numpy path's matrix products, summed in another order: equal to rounding), the
    terms of a Jacobian that is zero (a gyroscope's dh/dqdd, an accelerometer's dh/dqd)
    left out. Gyroscopes and accelerometers give their rows on floats (``linearize_floats``)."""
    dz, J, H2zd, H2zdd, H3zz = terms
    nx, ndz = model.nx, len(dz)
    cols_qdd = [[j * dz[0] + (a + b) for j, a, b in zip(J, H2zdd, H3zz)],
                [j * dz[1] + 2.0 * h for j, h in zip(J, H2zd)]] + [[j * d for j in J] for d in dz[2:]]
    q, qd, qdd = lin.q, lin.qd, lin.qdd
    ql, qdl, qddl = q.tolist(), qd.tolist(), qdd.tolist()
    pad = [0.0] * (nx - ndz)
    hs, Hs = [], []
    for nm in names:
        s = model.sensors[nm]
        if type(s) is Gyroscope:  # dh/dqdd = 0
            hk, rq, rqd = s.linearize_floats(ql, qdl)
            hs.append(hk)
            Hs.append([_dot(rq, J) + _dot(rqd, H2zd), _dot(rqd, J)] + [0.0] * (ndz - 2) + pad)
            continue
        if type(s) is Accelerometer:  # dh/dqd = 0
            hk, Hq, Hqdd = s.linearize_floats(ql, qddl)
            hs += hk
            for rq, rqdd in zip(Hq, Hqdd):
                Hs.append([_dot(rq, J) + _dot(rqdd, cols_qdd[0])] + [_dot(rqdd, c) for c in cols_qdd[1:]] + pad)
            continue
        hk, Hq, Hqd, Hqdd = linearize_one(s, q, qd, qdd)
        hs += np.atleast_1d(hk).tolist()
        for rq, rqd, rqdd in zip(Hq.tolist(), Hqd.tolist(), Hqdd.tolist()):
            Hs.append([_dot(rq, J) + _dot(rqd, H2zd) + _dot(rqdd, cols_qdd[0]),
                       _dot(rqd, J) + _dot(rqdd, cols_qdd[1])] + [_dot(rqdd, c) for c in cols_qdd[2:]] + pad)
    lin.h = np.array(hs, dtype=float)
    lin.H = np.array(Hs, dtype=float).reshape(len(Hs), nx)
    return lin


def _dot(a, b) -> float:
    return sum(map(mul, a, b))
