"""A mechanism as a function of its identified parameters, and the dynamics' sensitivity.

:class:`ParameterizedMechanism` maps a parameter vector p (P,) to a
:class:`~mbde_core.model.mechanism.Mechanism` by writing p into a copy of the mechanism
YAML document (:mod:`keypath`) and re-reading it, so every expression that uses a
parameter follows it. The coordinate layout and the choice of independent coordinates
z are those of the base mechanism for every p.

Each parameter is classified once:

- ``dynamic``: it changes only masses, inertias, centres of gravity, slider masses,
  gravity or load magnitudes. Then M(p) and Q(p) are affine in it (M_b is linear in
  m, I0 and m cog; Q_gravity in m g and m cog g; damping torques in c), and so
  dM/dp and dQ/dp are taken exactly as a difference of the assembly (exact to rounding
  for an affine dependence; a field that enters through a non-linear expression of the
  YAML gets a central difference with a 1e-6 relative step, ~1e-10 accurate). The sensitivity of
  the reduced accelerations follows analytically from the R-matrix dynamics
  (paper 000 eq. 12, paper 003 eq. 3), zdd = Mbar^{-1} R^T (Q - M R'zd)::

      dzdd/dp = Mbar^{-1} R^T (dQ/dp - dM/dp qdd),   Mbar = R^T M R,  qdd = R zdd + R'zd

  (R, R'zd depend on the geometry only). The tests check it against finite differences
  of the forward dynamics.
- ``geometric``: it moves points or changes lengths (the constraints change). Its
  effect on any residual is taken by central finite differences of that residual with
  the mechanism rebuilt at p +- h (:meth:`mechanism`).
- ``input``: the gain of a known input (a motor's torque per unit of its recorded
  control signal, :mod:`.inputs`): its columns are G_d y / sigma_a on the eom rows;
- a parameter that changes nothing the model uses (e.g. the initial guess of a moving
  point of a body with an explicit length) is ``inert``; its Jacobian column is zero
  and the rank test reports it as not identifiable.
"""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from mbde_core.config.yamlnode import Node
from mbde_core.errors import ConfigError
from mbde_core.identification.keypath import Parameter, apply_values, current_value, parse_bounds, resolve, split_list
from mbde_core.model.inertia import assemble_inertia
from mbde_core.model.loader import spec_from_node
from mbde_core.model.loads import LoadSet
from mbde_core.model.mechanism import Mechanism


class ParameterizedMechanism:
    """The mechanism of ``base`` with the parameters ``keys`` free.

    base: the Mechanism (loaded from a YAML file; its ``spec.raw`` document is edited);
    keys: key paths (:mod:`keypath`, ``*`` allowed) as a list or comma-separated text;
    bounds: {key path or pattern: (lower, upper)} or ``'KEY=LO:HI,...'`` text.
    Attributes: params (list of Parameter), p0 (P,) the base values, lower/upper (P,),
    kinds ('dynamic' | 'geometric' | 'inert' per parameter), names (labels).
    """

    def __init__(self, base, keys, bounds=None, cache: int = 8):
        spec = base.spec
        if not isinstance(spec.raw, dict):
            raise ConfigError(spec.file, "", "the mechanism has no YAML document to identify parameters in")
        self.base = base
        self.doc = spec.raw
        self.file = spec.file
        keys = split_list(keys) if isinstance(keys, str) else list(keys)
        if not keys:
            raise ConfigError("--params", "", "no parameter to identify")
        params: list[Parameter] = []
        for k in keys:
            for par in resolve(self.doc, self.file, k, spec):
                if par.key not in {q.key for q in params}:
                    params.append(par)
        bounds = parse_bounds(bounds) if isinstance(bounds, str) or bounds is None else dict(bounds)
        comps = [par for par in params if par.key.startswith("gravity[")]
        if comps and any(par.target[0] in ("gravity", "gravity_tilt") for par in params):
            raise ConfigError(self.file, "gravity", "the gravity magnitude or tilt and gravity components overlap: identify one or the other")
        self.params = [_bounded(par, bounds) for par in params]
        self.params = [_inertia_floor(par, self.params, spec) if not any(_matches(par, b) for b in bounds) else par
                       for par in self.params]
        self._check_bounds_used(bounds)
        self.names = [par.label for par in self.params]
        self.P = len(self.params)
        self.base_gravity = tuple(float(g) for g in spec.gravity)
        if any(par.target[0] in ("gravity", "gravity_tilt") for par in self.params) and math.hypot(*self.base_gravity) == 0.0:
            raise ConfigError(self.file, "gravity", "the gravity magnitude or tilt cannot be identified: the model has no gravity")
        self.p0 = np.array([current_value(par, spec) for par in self.params])
        self.lower = np.array([par.lower for par in self.params])
        self.upper = np.array([par.upper for par in self.params])
        self.independent = tuple(int(i) for i in base.independent)
        self._mechs: OrderedDict = OrderedDict()
        self._dspecs = None
        self._cache = cache
        self.kinds = self._classify()

    # -- building ---------------------------------------------------------------------------
    def document(self, p) -> dict:
        """The mechanism YAML document (a dict) with the parameters set to p (P,)."""
        return apply_values(self.doc, self.params, np.asarray(p, dtype=float), self.base_gravity)

    def spec(self, p):
        """MechanismSpec at p; ConfigError if p makes the file invalid (e.g. I0 < m |cog|^2)."""
        spec = spec_from_node(Node(self.document(p), self.file, ""))
        return spec.replace(independent=self.independent)

    def mechanism(self, p):
        """The Mechanism at p (the last few are cached by value)."""
        key = tuple(float(v) for v in np.asarray(p, dtype=float))
        mech = self._mechs.get(key)
        if mech is None:
            mech = Mechanism(self.spec(key))
            self._mechs[key] = mech
            while len(self._mechs) > self._cache:
                self._mechs.popitem(last=False)
        else:
            self._mechs.move_to_end(key)
        return mech

    def steps(self, p) -> np.ndarray:
        """Central-difference steps (P,): 1e-6 of the magnitude (or of 1e-3 near zero)."""
        p = np.asarray(p, dtype=float)
        return 1e-6 * np.maximum(np.abs(p), 1e-3 * np.maximum(np.abs(self.p0), 1.0))

    def _pm(self, p, k, h):
        """(spec at p - h e_k, spec at p + h e_k, divisor); one-sided, (p, p + h) or
        (p - h, p), where the other side is out of the bounds or makes the file invalid
        (e.g. I0 < m |cog|^2): exact too, the dependence being affine for dynamic
        parameters."""
        def at(delta):
            x = np.array(p, dtype=float)
            x[k] += delta
            if not self.lower[k] <= x[k] <= self.upper[k]:
                return None
            try:
                return self.spec(x)
            except ConfigError:
                return None

        lo, mid, hi = at(-h), None, at(h)
        if lo is not None and hi is not None:
            return lo, hi, 2 * h
        mid = self.spec(p)
        if hi is not None:
            return mid, hi, h
        if lo is not None:
            return lo, mid, h
        raise ConfigError(self.file, self.params[k].key, "no valid value near the current one to differentiate")

    # -- classification ---------------------------------------------------------------------
    def _classify(self) -> list[str]:
        kinds = []
        base = self.spec(self.p0)
        for k, h in enumerate(self.steps(self.p0)):
            if self.params[k].target[0] == "doc" and self.params[k].target[1][0] == "sensors":
                kinds.append("input")  # a known input's gain (mbde_core.identification.inputs)
                continue
            lo, hi, _ = self._pm(self.p0, k, max(h, 1e-3 * max(abs(self.p0[k]), 1e-3)))
            if _geometry(lo) != _geometry(base) or _geometry(hi) != _geometry(base):
                kinds.append("geometric")
            elif _dynamics(lo) != _dynamics(base) or _dynamics(hi) != _dynamics(base):
                kinds.append("dynamic")
            else:
                kinds.append("inert")
        return kinds

    # -- derivatives of the model -------------------------------------------------------------
    def _derivative_specs(self, p) -> list:
        """[(spec at p - h_k, spec at p + h_k, divisor) or None] per parameter (dynamic
        ones only), for the last p asked (one evaluation of the joint problem asks
        several times)."""
        key = tuple(float(v) for v in np.asarray(p, dtype=float))
        if self._dspecs is None or self._dspecs[0] != key:
            out = [self._pm(key, k, h) if self.kinds[k] == "dynamic" else None for k, h in enumerate(self.steps(key))]
            self._dspecs = (key, out)
        return self._dspecs[1]

    def inertia_derivatives(self, p):
        """(dM/dp (P, n, n), dQ_gravity/dp (P, n)); zero for non-dynamic parameters."""
        m = self.base
        dM = np.zeros((self.P, m.n, m.n))
        dQ = np.zeros((self.P, m.n))
        for k, pair in enumerate(self._derivative_specs(p)):
            if pair is None:
                continue
            lo, hi, div = pair
            Ml, Ql = assemble_inertia(lo, m.n, m.px, m.py)
            Mh, Qh = assemble_inertia(hi, m.n, m.px, m.py)
            dM[k] = (Mh - Ml) / div
            dQ[k] = (Qh - Ql) / div
        return dM, dQ

    def force_derivatives(self, p, t, q, qd, dQg=None) -> np.ndarray:
        """dQ/dp (N, n, P) of all generalized forces (gravity + loads) at states q, qd (N, n).

        t: scalar or (N,) times (loads with time functions are evaluated per step);
        dQg: dQ_gravity/dp (P, n) if already known.
        """
        m = self.base
        q = np.atleast_2d(np.asarray(q, dtype=float))
        qd = np.atleast_2d(np.asarray(qd, dtype=float))
        N = q.shape[0]
        t = np.broadcast_to(np.asarray(t, dtype=float), (N,))
        if dQg is None:
            dQg = self.inertia_derivatives(p)[1]
        out = np.broadcast_to(dQg.T[None], (N, m.n, self.P)).copy()
        P_, V_ = m.points(q), m.point_velocities(qd)
        for k, pair in enumerate(self._derivative_specs(p)):
            if pair is None:
                continue
            lo, hi, div = pair
            changed = [i for i, (a, b) in enumerate(zip(lo.loads, hi.loads)) if _load_key(a) != _load_key(b)]
            if not changed:
                continue
            sets = [LoadSet(tuple(s.loads[i] for i in changed), m.n, m.px, m.py, s.bodies) for s in (lo, hi)]
            timed = any(not all(f.is_constant() for f in s.loads[i].value) for s in (lo, hi) for i in changed)
            if timed:
                for j in range(N):
                    sl = slice(j, j + 1)
                    dq = sets[1].forces(t[j], q[sl], qd[sl], P_[sl], V_[sl]) - sets[0].forces(t[j], q[sl], qd[sl], P_[sl], V_[sl])
                    out[j, :, k] += dq[0] / div
            else:
                dq = sets[1].forces(0.0, q, qd, P_, V_) - sets[0].forces(0.0, q, qd, P_, V_)
                out[:, :, k] += dq / div
        return out

    def accel_sensitivity(self, p, t, q, qd, R, qdd) -> np.ndarray:
        """dzdd/dp (N, g, P) of the reduced forward dynamics at states q, qd (N, n).

        R (N, n, g): the R matrix at q; qdd (N, n): the forward-dynamics accelerations
        R f + R'zd of ``mechanism(p)`` there. Columns of non-dynamic parameters are zero
        (geometric ones need finite differences of the whole residual).
        """
        M = self.mechanism(p).M
        dM, dQg = self.inertia_derivatives(p)
        dQ = self.force_derivatives(p, t, q, qd, dQg)  # (N, n, P)
        rhs = dQ - np.einsum("pij,nj->nip", dM, qdd)
        Mbar = np.einsum("nig,ij,njh->ngh", R, M, R)
        return np.linalg.solve(Mbar, np.einsum("nig,nip->ngp", R, rhs))

    # -- bounds -------------------------------------------------------------------------------
    def _check_bounds_used(self, bounds):
        for pattern in bounds:
            if not any(_matches(par, pattern) for par in self.params):
                raise ConfigError("--bounds", pattern, f"matches no identified parameter ({', '.join(p.label for p in self.params)})")

    def clip(self, p) -> np.ndarray:
        return np.clip(np.asarray(p, dtype=float), self.lower, self.upper)


def _matches(par: Parameter, pattern: str) -> bool:
    import fnmatch

    return any(fnmatch.fnmatchcase(s, pattern) for s in (par.label, par.key))


def _bounded(par: Parameter, bounds) -> Parameter:
    from dataclasses import replace

    for pattern, (lo, hi) in bounds.items():
        if _matches(par, pattern):
            return replace(par, lower=float(lo), upper=float(hi))
    return par


def _inertia_floor(par: Parameter, params, spec) -> Parameter:
    """A body's I0 (about its first point) cannot go below m |cog|^2 (the loader rejects
    it): that is its default lower bound when the body's mass and cog are not identified."""
    from dataclasses import replace

    kind, where = par.target
    if kind != "doc" or where[0] != "planar_bodies" or where[2] != "I0":
        return par
    if any(q.target[0] == "doc" and q.target[1][:2] == where[:2] and q.target[1][2] in ("mass", "cog") for q in params):
        return par
    b = spec.bodies[where[1]]
    return replace(par, lower=max(par.lower, b.mass * (b.cog[0] ** 2 + b.cog[1] ** 2)))


def _geometry(spec) -> tuple:
    """What the constraints depend on: fixed points, lengths, polygon shapes, sliders."""
    xy = spec.point_xy()
    fixed = tuple((round(p.x, 15), round(p.y, 15)) for p in spec.points if p.fixed)
    shapes = []
    for b in spec.bodies:
        shapes.append((b.points, b.length))
        if len(b.points) > 2:
            i, j = b.points[:2]
            d = xy[j] - xy[i]
            for k in b.points[2:]:
                e = xy[k] - xy[i]
                shapes.append((float(np.dot(e, d)), float(d[0] * e[1] - d[1] * e[0]), float(np.dot(d, d))))
    sliders = tuple((s.point, s.origin, s.direction) for s in spec.sliders)
    return fixed, tuple(shapes), sliders, tuple(r.points for r in spec.relative_coordinates)


def _load_key(ld) -> tuple:
    return (ld.kind, ld.point, ld.body, ld.body2, ld.coordinate, ld.c, ld.scale, tuple(f.source for f in ld.value),
            tuple(f(0.0) for f in ld.value))


def _dynamics(spec) -> tuple:
    """What M and Q depend on besides the geometry."""
    return (tuple((b.mass, b.I0, tuple(b.cog)) for b in spec.bodies), tuple(s.mass for s in spec.sliders),
            tuple(spec.gravity), tuple(_load_key(ld) for ld in spec.loads))
