"""The natural-coordinate multibody model of a planar linkage.

q = [x, y of every moving point (in YAML order), relative coordinates]. The model gives
the constraints Phi(q) (:mod:`constraints`), the constant mass matrix M
(:mod:`inertia`), generalized forces Q(t, q, qd) = Q_gravity + loads, and energies.
Every evaluator is batched: ``q`` may be (n,) or (N, n); results gain the same leading
axis. Kinematics and dynamics live in :mod:`mbde_core.engine`.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, replace as dc_replace

import numpy as np

from mbde_core.errors import ConfigError
from mbde_core.engine import coordinates, kinematics
from mbde_core.engine.kinematics import require_time
from mbde_core.model import kernels
from mbde_core.model.constraints import assemble_constraints
from mbde_core.model.drivers import DriverSet
from mbde_core.model.inertia import assemble_inertia, body_point_coefficients
from mbde_core.model.loader import load_mechanism_spec
from mbde_core.model.loads import LoadSet
from mbde_core.model.spec import MechanismSpec


@dataclass
class Assembly:
    """An assembled configuration: q (n,), qd (n,) consistent with the constraints."""

    q: np.ndarray
    qd: np.ndarray


class Mechanism:
    """Natural-coordinate model built from a :class:`MechanismSpec`.

    Attributes: n (coordinates), m (independent constraint rows), dof (= n - m),
    coordinate_names, point_names, body_names, M (n, n), independent (dof,) indices of z
    in q, dependent (m,) indices, q0/qd0 the assembled initial state.
    """

    def __init__(self, spec: MechanismSpec):
        self._kernels = None  # generated fast kernels (codegen), built once z is chosen
        self._stale = False
        self.spec = spec
        self.name = spec.name
        pts = spec.points
        self.n_points = len(pts)
        moving = [i for i, p in enumerate(pts) if not p.fixed]
        self.moving_points = np.array(moving, dtype=np.intp)
        self.n_rel = len(spec.relative_coordinates)
        self.n = n = 2 * len(moving) + self.n_rel
        px = np.full(self.n_points, n, dtype=np.intp)
        py = np.full(self.n_points, n, dtype=np.intp)
        for k, i in enumerate(moving):
            px[i], py[i] = 2 * k, 2 * k + 1
        self.px, self.py = px, py
        self.fixed_xy = spec.point_xy()
        self.coordinate_names = spec.coordinate_names()
        self.point_names = [p.name for p in pts]
        self.body_names = [b.name for b in spec.bodies]
        self.rel_columns = np.arange(2 * len(moving), n, dtype=np.intp)
        self.angle_columns = self.rel_columns  # all relative coordinates are angles
        self.gravity = np.array(spec.gravity, dtype=float)
        self.length_scale = max(b.length for b in spec.bodies)

        # -- constraints -------------------------------------------------------------
        self.constraints, driver_rows = assemble_constraints(spec, n, px, py, self.fixed_xy, self.rel_columns)
        self.drivers = DriverSet([], (), 0)  # filled once the independent rows are known

        # -- mass matrix and gravity --------------------------------------------------------
        self.body_basis = [(b.points[0], b.points[1], b.length) for b in spec.bodies]
        self.M, self.Q_gravity = assemble_inertia(spec, n, px, py)
        # the generated kernels embed these values: make accidental in-place edits fail
        self.M.setflags(write=False)
        self.Q_gravity.setflags(write=False)
        self.loads = LoadSet(spec.loads, n, px, py, spec.bodies)

        # -- rank, independent coordinates, assembly -----------------------------------------
        q_guess = self._raw_q0()
        self.keep_rows = coordinates.independent_rows(self, q_guess)
        self.m = len(self.keep_rows)
        if spec.drivers:
            kept = {int(r): k for k, r in enumerate(self.keep_rows)}
            lost = [d.name for d in spec.drivers if driver_rows[d.name] not in kept]
            if lost:
                raise ConfigError(spec.file, "driving_constraints", f"{', '.join(lost)}: redundant with the other constraints")
            self.drivers = DriverSet([kept[driver_rows[d.name]] for d in spec.drivers], spec.drivers, self.m)
        self.dof = n - self.m
        if self.dof < 1:
            raise ConfigError(spec.file, "planar_bodies", f"the linkage has no degree of freedom (n = {n} coordinates, {self.m} independent constraints)")
        for col, val in spec.initial_position.items():
            q_guess[col] = val
        if spec.independent is not None:
            self.independent = np.array(spec.independent, dtype=np.intp)
            if len(self.independent) != self.dof:
                raise ConfigError(spec.file, "independent_coordinates", f"the linkage has {self.dof} degree(s) of freedom but {len(self.independent)} independent coordinate(s) are listed")
            if not coordinates.is_valid_choice(self, q_guess, self.independent):
                raise ConfigError(spec.file, "independent_coordinates", "these coordinates do not determine the configuration at the initial position (singular dependent block)")
        else:
            self.independent = coordinates.choose_independent(self, q_guess)
        self.dependent = np.setdiff1d(np.arange(n), self.independent)
        self._kernels = kernels.build(self)
        self._stale = False
        for col in spec.initial_position:
            if col not in self.independent:
                raise ConfigError(spec.file, f"initial_position.{self.coordinate_names[col]}", f"only independent coordinates ({', '.join(self.independent_names)}) can be given")
        q0, ok = kinematics.solve_position(self, q_guess[self.independent], q_guess, t=0.0)
        if not ok:
            res = float(np.max(np.abs(self.phi(q0, 0.0))))
            raise ConfigError(spec.file, "points", f"the linkage cannot be assembled at the initial position (constraint residual {res:.3g} after Newton-Raphson)")
        self.q0 = q0
        zd0 = np.zeros(self.dof)
        for col, val in spec.initial_velocity.items():
            where = np.nonzero(self.independent == col)[0]
            if where.size == 0:
                raise ConfigError(spec.file, f"initial_velocity.{self.coordinate_names[col]}", f"only independent coordinates ({', '.join(self.independent_names)}) can be given")
            zd0[where[0]] = val
        self.qd0 = kinematics.velocity(self, q0, zd0, t=0.0)

    # ------------------------------------------------------------------------------------
    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> "Mechanism":
        return cls(load_mechanism_spec(path))

    # -- generated kernels (see mbde_core.model.codegen) ------------------------------------
    def _fast(self):
        """The generated kernels, or None (generic code only).

        Kernels embed M, the constraints, the loads and the choice of z: replacing one of
        those attributes after construction marks this mechanism's kernels stale and they
        are regenerated on the next use (M and Q_gravity are read-only arrays, so they
        cannot be edited in place).
        """
        K = self._kernels
        if K is not None and self._stale:
            K = kernels.build(self)
            object.__setattr__(self, "_kernels", K)
            object.__setattr__(self, "_stale", False)
        return K

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)
        if name in kernels.KERNEL_INPUTS:
            object.__setattr__(self, "_stale", True)

    def __copy__(self):
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)  # shares the (immutable) kernels
        return new

    def __deepcopy__(self, memo):
        new = object.__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = value if key == "_kernels" else copy.deepcopy(value, memo)
        new.M.setflags(write=False)
        new.Q_gravity.setflags(write=False)
        return new

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_kernels"] = state["_kernels"] is not None  # compiled code does not pickle
        return state

    def __setstate__(self, state):
        rebuild = state.pop("_kernels", False)
        self.__dict__.update(state)
        object.__setattr__(self, "_kernels", kernels.build(self) if rebuild else None)
        object.__setattr__(self, "_stale", False)

    def _raw_q0(self) -> np.ndarray:
        q = np.zeros(self.n)
        xy = self.fixed_xy
        for i in self.moving_points:
            q[self.px[i]], q[self.py[i]] = xy[i]
        for k, r in enumerate(self.spec.relative_coordinates):
            d = xy[r.points[1]] - xy[r.points[0]]
            q[self.rel_columns[k]] = np.arctan2(d[1], d[0])
        return q

    @property
    def independent_names(self) -> list[str]:
        return [self.coordinate_names[i] for i in self.independent]

    def coordinate_index(self, ref) -> int:
        """Index into q of a coordinate given by index or name; raises KeyError/IndexError."""
        if isinstance(ref, (int, np.integer)):
            if not 0 <= int(ref) < self.n:
                raise IndexError(f"coordinate index {ref} out of range 0..{self.n - 1}")
            return int(ref)
        s = str(ref)
        if s.lstrip("-").isdigit():
            return self.coordinate_index(int(s))
        if s in self.coordinate_names:
            return self.coordinate_names.index(s)
        raise KeyError(f"unknown coordinate {s!r} (coordinates: {', '.join(self.coordinate_names)})")

    def body_index(self, ref) -> int:
        if isinstance(ref, (int, np.integer)):
            return int(ref)
        return self.body_names.index(str(ref))

    def point_index(self, ref) -> int:
        if isinstance(ref, (int, np.integer)):
            return int(ref)
        return self.point_names.index(str(ref))

    # -- geometry ---------------------------------------------------------------------------
    def points(self, q: np.ndarray) -> np.ndarray:
        """Positions of all points: (n_points, 2) for q (n,), (N, n_points, 2) for q (N, n)."""
        q = np.asarray(q, dtype=float)
        single = q.ndim == 1
        qb = q[None] if single else q
        P = np.empty((qb.shape[0], self.n_points, 2))
        P[:] = self.fixed_xy
        nm = len(self.moving_points)
        P[:, self.moving_points] = qb[:, : 2 * nm].reshape(-1, nm, 2)
        return P[0] if single else P

    def point_velocities(self, qd: np.ndarray) -> np.ndarray:
        """Velocities of all points (zero for fixed ones), shaped like :meth:`points`."""
        qd = np.asarray(qd, dtype=float)
        single = qd.ndim == 1
        qb = qd[None] if single else qd
        V = np.zeros((qb.shape[0], self.n_points, 2))
        nm = len(self.moving_points)
        V[:, self.moving_points] = qb[:, : 2 * nm].reshape(-1, nm, 2)
        return V[0] if single else V

    def body_point_matrix(self, body: int, local) -> tuple[np.ndarray, list[int]]:
        """C (2, 4) and the basis points [i, j] with r(local) = C [r_i; r_j] for a body-frame point."""
        i, j, L = self.body_basis[body]
        return body_point_coefficients(L, local), [i, j]

    def body_angle(self, q: np.ndarray, body: int) -> np.ndarray:
        """Absolute angle [rad] of a body's x axis (first -> second point); (N,) or scalar."""
        P = self.points(q)
        i, j, _ = self.body_basis[body]
        d = P[..., j, :] - P[..., i, :]
        return np.arctan2(d[..., 1], d[..., 0])

    # -- constraints ------------------------------------------------------------------------
    def _batch(self, q):
        q = np.asarray(q, dtype=float)
        return (q[None], True) if q.ndim == 1 else (q, False)

    def phi(self, q: np.ndarray, t: float | None = None) -> np.ndarray:
        """Constraint residuals Phi(q, t): (m,) or (N, m) (t: needed with driving constraints)."""
        K = self._fast()
        if K is not None:
            out = K.evaluate("phi", q)
        else:
            qb, single = self._batch(q)
            out = self.constraints.phi(qb, self.points(qb))
            if len(self.keep_rows) != self.constraints.m:
                out = out[:, self.keep_rows]
            out = out[0] if single else out
        if self.drivers:
            out = out - self.drivers.offset(require_time(self, t))
        return out

    @property
    def rheonomic(self) -> bool:
        """True if the mechanism has time-dependent driving constraints."""
        return bool(self.drivers)

    def phi_q(self, q: np.ndarray) -> np.ndarray:
        """Constraint Jacobian: (m, n) or (N, m, n)."""
        K = self._fast()
        if K is not None:
            return K.dense_jacobian(q)
        qb, single = self._batch(q)
        out = self.constraints.jacobian(qb, self.points(qb))
        if len(self.keep_rows) != self.constraints.m:
            out = out[:, self.keep_rows]
        return out[0] if single else out

    def phi_q_dot_qd(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """(d Phi_q / dt) qd: (m,) or (N, m) -- the right-hand side term of the acceleration problem."""
        K = self._fast()
        if K is not None:
            return K.evaluate("jdot", q, qd)
        qb, single = self._batch(q)
        qdb = np.asarray(qd, dtype=float).reshape(qb.shape)
        out = self.constraints.jacobian_dot_qd(qb, qdb, self.points(qb), self.point_velocities(qdb))
        if len(self.keep_rows) != self.constraints.m:
            out = out[:, self.keep_rows]
        return out[0] if single else out

    # -- forces and energy -------------------------------------------------------------------
    def forces(self, t: float, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """Generalized forces Q(t, q, qd) = gravity + loads: (n,) or (N, n)."""
        if not self.loads:  # constant
            shape = np.shape(q)
            return self.Q_gravity.copy() if len(shape) == 1 else np.broadcast_to(self.Q_gravity, shape).copy()
        K = self._fast()
        if K is not None:
            return K.evaluate("forces", q, qd, t=t)
        qb, single = self._batch(q)
        if not self.loads:
            Q = np.broadcast_to(self.Q_gravity, qb.shape).copy()
        else:
            qdb = np.asarray(qd, dtype=float).reshape(qb.shape)
            Q = self.Q_gravity + self.loads.forces(t, qb, qdb, self.points(qb), self.point_velocities(qdb))
        return Q[0] if single else Q

    def force_jacobians(self, t: float, q: np.ndarray, qd: np.ndarray):
        """(dQ/dq, dQ/dqd): (n, n) each, or (N, n, n). Gravity is constant."""
        qb, single = self._batch(q)
        qdb = np.asarray(qd, dtype=float).reshape(qb.shape)
        if not self.loads:
            K = np.zeros((qb.shape[0], self.n, self.n))
            C = np.zeros_like(K)
        else:
            K, C = self.loads.jacobians(t, qb, qdb, self.points(qb), self.point_velocities(qdb))
        return (K[0], C[0]) if single else (K, C)

    def kinetic_energy(self, qd: np.ndarray) -> np.ndarray:
        qd = np.asarray(qd, dtype=float)
        return 0.5 * np.einsum("...i,ij,...j->...", qd, self.M, qd)

    def potential_energy(self, q: np.ndarray) -> np.ndarray:
        """Gravitational potential energy V = -sum m g . r_cog [J]; scalar or (N,)."""
        P = self.points(q)
        V = np.zeros(P.shape[:-2])
        for b, (i, j, L) in zip(self.spec.bodies, self.body_basis):
            C = body_point_coefficients(L, b.cog)
            r = P[..., i, :] @ C[:, :2].T + P[..., j, :] @ C[:, 2:].T
            V = V - b.mass * (r @ self.gravity)
        for s in self.spec.sliders:
            V = V - s.mass * (P[..., s.point, :] @ self.gravity)
        return V

    def energy(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """Total mechanical energy T + V [J]."""
        return self.kinetic_energy(qd) + self.potential_energy(q)

    # -- model variants -------------------------------------------------------------------------
    def modified(self, *, gravity=None, body_scale: dict | None = None) -> "Mechanism":
        """A copy with model errors (paper 003 sec. 2, paper 000 sec. 6.1.2).

        gravity: new gravity vector (2,). body_scale: {body name or index: (length_factor,
        mass_factor)}; a body's length and cog scale with length_factor, its mass with
        mass_factor and I0 with mass_factor * length_factor^2. Moving points of that body
        beyond its first point are moved accordingly before re-assembly.
        """
        spec = self.spec
        if gravity is not None:
            spec = spec.replace(gravity=tuple(float(g) for g in gravity))
        if body_scale:
            bodies = list(spec.bodies)
            points = list(spec.points)
            for ref, (lf, mf) in body_scale.items():
                bi = self.body_index(ref)
                b = bodies[bi]
                p0 = np.array([points[b.points[0]].x, points[b.points[0]].y])
                for k in b.points[1:]:
                    pk = points[k]
                    if not pk.fixed:
                        new = p0 + lf * (np.array([pk.x, pk.y]) - p0)
                        points[k] = dc_replace(pk, x=float(new[0]), y=float(new[1]))
                bodies[bi] = dc_replace(
                    b,
                    length=b.length * lf,
                    mass=b.mass * mf,
                    I0=b.I0 * mf * lf**2,
                    cog=(b.cog[0] * lf, b.cog[1] * lf),
                )
            spec = spec.replace(bodies=tuple(bodies), points=tuple(points))
        if spec.independent is None:
            spec = spec.replace(independent=tuple(int(i) for i in self.independent))
        return Mechanism(spec)

    def with_independent(self, independent) -> "Mechanism":
        """The same mechanism with the independent coordinates z = q[independent]."""
        return Mechanism(self.spec.replace(independent=tuple(int(i) for i in independent)))


def load_mechanism(path: str | os.PathLike) -> Mechanism:
    """Load a mechanism YAML file into a :class:`Mechanism` (ConfigError on any problem)."""
    return Mechanism.from_yaml(path)
