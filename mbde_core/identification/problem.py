"""The joint state and parameter problem: the smoother's rows of every recording plus
dense parameter columns (paper 001 eqs. 3.15, 3.25).

Unknowns: the states of all recordings stacked along the block axis (recording r owns
blocks [off_r, off_r + N_r); no row couples two recordings, so the block-tridiagonal
information matrix of :mod:`mbde_core.trajectory.normal` simply has zero coupling blocks
at the seams) and P parameters shared by all of them. The parameters enter as scaled
unknowns u = p / s (s = |p0|, or for a parameter starting at 0 a scale that gives its
column the size of the others': :func:`column_scales`), so that the projection and the
rank test work on columns of comparable size.

Residual rows are those of :class:`mbde_core.trajectory.problem.SmootherProblem` (prior,
eom, integrator, one block per sensor) with the mechanism of the current parameters.
Parameter columns (the dense part of eq. 3.25):

- dynamic parameters enter the ``eom`` rows only, r = (zdd - f(z, zd; p)) / sigma_a:
  dr/dp = -(dzdd/dp) / sigma_a with the analytic sensitivity of
  :meth:`ParameterizedMechanism.accel_sensitivity`;
- geometric parameters change the position problem and with it every row: their
  columns are central differences of all rows with the mechanism rebuilt at p +- h;
- the gain K of a known input (:mod:`.inputs`: u = K y, the recorded control signal y)
  enters the eom rows only: dr/dK = -(G_d y) / sigma_a (dzdd/dK = G_d y).

A trial point whose parameters make the mechanism file invalid (e.g. I0 < m |cog|^2)
or whose position problem fails gets an infinite cost, and the solver shortens the step.
Box bounds: a step is projected onto the box (``retract``).
"""
from __future__ import annotations

import numpy as np

from mbde_core.errors import ConfigError
from mbde_core.trajectory.normal import RowBlock


def _infinite(b: int) -> list:
    return [RowBlock("invalid", np.array([0]), np.full((1, 1), np.inf), np.zeros((1, 1, b)))]


class JointProblem:
    """Solver protocol of :mod:`mbde_core.trajectory.solver` over (X (N, b), u (P,)).

    pm: :class:`~mbde_core.identification.model.ParameterizedMechanism`; recordings:
    list of :class:`~mbde_core.trajectory.problem.SmootherProblem` (one per recording,
    each with its own MultibodyModel, same mechanism structure); prior: optional
    (centre, sigma) of independent Gaussian priors on the scaled unknowns (rows
    ``param_prior``: the early stages of a growing horizon keep parameters that a short
    window cannot determine near their start); sensor_factory:
    mech -> SensorSet, rebuilds the sensors on a mechanism with changed geometry (body
    lengths move accelerometer offsets); None keeps the recordings' sensors.
    """

    def __init__(self, pm, recordings, active=None, sensor_factory=None, scale=None, prior=None):
        self.pm = pm
        self.sensor_factory = sensor_factory  # mech -> SensorSet (geometric parameters)
        self._sensors = (None, None)
        self.recs = list(recordings)
        self.b = self.recs[0].b
        self.g = self.recs[0].g
        self.sizes = [r.N for r in self.recs]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)])
        self.N = int(self.offsets[-1])
        self.scale = np.where(np.abs(pm.p0) > 0, np.abs(pm.p0), 1.0) if scale is None else np.asarray(scale, float)
        self.active = np.ones(pm.P, bool) if active is None else np.asarray(active, bool)
        self.P = int(self.active.sum())
        self.fixed_p = pm.p0.copy()  # values of the inactive parameters
        self.evaluations = 0
        self.prior = prior  # (centre u (P,), sigma (P,)) of a Gaussian prior on the unknowns, or None

    # -- parameters -------------------------------------------------------------------------
    def params(self, u) -> np.ndarray:
        """Full parameter vector p (P_all,) from the active scaled unknowns u (P,)."""
        p = self.fixed_p.copy()
        p[self.active] = np.asarray(u, dtype=float) * self.scale[self.active]
        return p

    def unknowns(self, p) -> np.ndarray:
        return np.asarray(p, dtype=float)[self.active] / self.scale[self.active]

    def split(self, X) -> list:
        return [X[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:])]

    # -- solver protocol ----------------------------------------------------------------------
    def evaluate(self, X, u=None) -> list:
        p = self.params(self.unknowns(self.fixed_p) if u is None else u)
        self.evaluations += 1
        try:
            mech = self.pm.mechanism(p)
        except ConfigError:
            return _infinite(self.b)
        rows = []
        try:
            for rec, Xr, off in zip(self.recs, self.split(X), self.offsets[:-1]):
                self._use(rec, mech)
                self._inputs(rec, p)
                rr = rec.evaluate(Xr)
                if any(rb.name == "assembly" for rb in rr):
                    return _infinite(self.b)
                if self.P:
                    self._dynamic_columns(rec, Xr, rr, p)
                rows += [_shift(rb, off) for rb in rr]
            if self.P:
                self._geometric_columns(X, p, rows)
        except ConfigError:  # no valid neighbour to differentiate at (p at the edge of validity)
            return _infinite(self.b)
        if self.prior is not None and self.P:
            centre, sigma = self.prior
            w = 1.0 / np.asarray(sigma, dtype=float)
            rows.append(RowBlock("param_prior", np.array([0]), ((np.asarray(u, float) - centre) * w)[None],
                                 np.zeros((1, self.P, self.b)), None, np.diag(w)[None]))
        return rows

    def _inputs(self, rec, p) -> None:
        """The recording's known inputs u = K y at the parameters p (its ``direct`` forces)."""
        known = getattr(rec, "known", None)
        if known is not None:
            rec.direct = (known.E, known.forces(self.gains(known, p)))

    def gains(self, known, p) -> np.ndarray:
        """(k,) the gains of a recording's known inputs: identified ones from p."""
        out = known.gains.copy()
        for k, par in enumerate(self.pm.params):
            if self.pm.kinds[k] == "input":
                name = par.label.split(".")[1]
                if name in known.names:
                    out[known.names.index(name)] = p[k]
        return out

    def _dynamic_columns(self, rec, Xr, rows, p):
        g = self.g
        ev = rec._trial
        R = ev.Tq[:, :, :g]
        qdd_f = ev.qdd + np.einsum("nij,nj->ni", R, ev.f - Xr[:, 2 * g:])
        dyn = np.array([k == "dynamic" for k in self.pm.kinds])
        S = np.zeros((Xr.shape[0], g, self.pm.P))
        if np.any(dyn & self.active):
            S = self.pm.accel_sensitivity(p, rec.t, ev.q, ev.qd, R, qdd_f)
        known = getattr(rec, "known", None)
        for k, par in enumerate(self.pm.params):  # dzdd/dK = G_d y of a known input's gain
            if self.pm.kinds[k] == "input" and known is not None and par.label.split(".")[1] in known.names:
                c = known.names.index(par.label.split(".")[1])
                S[:, :, k] = ev.G[:, :, ev.G.shape[2] - known.k + c] * known.Y[:, c][:, None]
        w = 1.0 / rec.sigma_a
        for k, rb in enumerate(rows):
            if rb.name == "eom":
                Jp = -(S * w[None, :, None])[:, :, self.active] * self.scale[self.active]
                rows[k] = RowBlock(rb.name, rb.idx, rb.r, rb.Ji, rb.Jn, Jp)

    def _geometric_columns(self, X, p, rows):
        act = np.flatnonzero(self.active)
        geo = [j for j, k in enumerate(act) if self.pm.kinds[k] == "geometric"]
        if not geo:
            return
        for rb in rows:  # every row depends on geometric parameters
            if rb.Jp is None:
                rows[rows.index(rb)] = RowBlock(rb.name, rb.idx, rb.r, rb.Ji, rb.Jn, np.zeros(rb.r.shape + (self.P,)))
        h = self.pm.steps(p)
        for j in geo:
            k = act[j]
            cols = []
            for sgn in (1.0, -1.0):
                pk = p.copy()
                pk[k] += sgn * h[k]
                rr = self._rows_at(X, pk)
                cols.append(rr)
            for rb, plus, minus in zip(rows, cols[0], cols[1]):
                rb.Jp[:, :, j] = (plus.r - minus.r) / (2 * h[k]) * self.scale[k]

    def _rows_at(self, X, p) -> list:
        mech = self.pm.mechanism(p)
        out = []
        for rec, Xr, off in zip(self.recs, self.split(X), self.offsets[:-1]):
            self._use(rec, mech)
            self._inputs(rec, p)
            trial, guess = rec._trial, rec.q_guess
            rr = rec.evaluate(Xr)
            rec._trial, rec.q_guess = trial, guess
            if any(rb.name == "assembly" for rb in rr):
                raise ConfigError(self.pm.file, "", "the linkage does not assemble next to this trial point")
            out += [_shift(rb, off) for rb in rr]
        return out

    def _use(self, rec, mech) -> None:
        """Evaluate recording ``rec`` with mechanism ``mech`` (and its sensors)."""
        if rec.model.mech is not mech:
            rec.model.mech = mech
            rec.model._tv_key = None  # load time functions may depend on a parameter: re-evaluate them
        if self.sensor_factory is not None and any(k == "geometric" for k in self.pm.kinds):
            if self._sensors[0] is not mech:
                self._sensors = (mech, self.sensor_factory(mech))
            rec.model.sensors = self._sensors[1]

    def accept(self, X, u=None) -> None:
        for rec in self.recs:
            rec.accept(None)

    def retract(self, X, dX, u, du):
        lo = self.pm.lower[self.active] / self.scale[self.active]
        hi = self.pm.upper[self.active] / self.scale[self.active]
        return X + dX, np.clip(u + du, lo, hi)


def _shift(rb: RowBlock, off: int) -> RowBlock:
    if off == 0:
        return rb
    return RowBlock(rb.name, np.asarray(rb.idx) + int(off), rb.r, rb.Ji, rb.Jn, rb.Jp)


def column_scales(pm, recordings, X, sensor_factory=None) -> np.ndarray:
    """Scales s (P,) of the unknowns u = p / s: |p0|, and for parameters starting at 0
    (e.g. a damping not yet in the file) the scale that makes the RMS of their Jacobian
    column equal the median RMS of the others' (1 if none has a value)."""
    scale = np.where(np.abs(pm.p0) > 0, np.abs(pm.p0), 1.0)
    zero = pm.p0 == 0
    if not np.any(zero):
        return scale
    jp = JointProblem(pm, recordings, sensor_factory=sensor_factory, scale=scale)
    sq, count = np.zeros(pm.P), 0
    for rb in jp.evaluate(X, jp.unknowns(pm.p0)):
        if rb.Jp is not None and np.all(np.isfinite(rb.r)):
            sq += np.sum(rb.Jp.reshape(-1, pm.P) ** 2, axis=0)
            count += rb.r.size
    rms = np.sqrt(sq / max(count, 1))
    ref = np.median(rms[~zero]) if np.any(~zero & (rms > 0)) else 1.0
    scale[zero] = np.where(rms[zero] > 0, ref / np.where(rms[zero] > 0, rms[zero], 1.0), 1.0)
    return scale
