"""The augmented minimal-coordinate model of the ADE-KF (paper 004 sec. 4, eqs. 28-56).

State x = [z, zd, a] (eq. 29): minimal coordinates z = q_m (g,), their rates (g,) and the
unknown inputs a (n_a,). With a coordinate map q = g_n(z) (J = dq/dz, H2 = d2q/dz2,
H3 = d3q/dz3, :mod:`mbde_core.minimal`), the constant natural-coordinate mass matrix M,
the applied forces Q(t, q, qd) and the input projection a_n = S_n(q) a (eq. 52):

    qd  = J zd                                              (eq. 26)
    c   = H2[zd, zd]                 (the velocity term of qdd; the engine's R'zd)
    M_m = J^T M J,   G_m[zd, zd] = J^T M c,   u_m = J^T Q,   a_m = J^T S_n a   (eqs. 23-25, 53)
    zdd = M_m^-1 (u_m + a_m - G_m[zd, zd]) = M_m^-1 J^T f_n,   f_n = Q + S_n a - M c   (eq. 31)
    qdd = J zdd + c                                         (eq. 27)

Continuous transition Jacobian F* = d[zd, zdd, 0]/dx (eqs. 34-41, with rho = f_n - M J zdd =
Q + S_n a - M qdd the force the constraints carry and H2_k = dJ/dz_k):

    M_m dzdd/dz_k  = H2_k^T rho + J^T (df_n/dz_k - M H2_k zdd)
        df_n/dz_k  = (dQ/dq + d(S_n a)/dq) J_k + dQ/dqd H2_k zd - M H3_k[zd, zd]
    M_m dzdd/dzd_j = J^T (dQ/dqd J_j - 2 M H2_j zd)        (eq. 36)
    M_m dzdd/da    = J^T S_n                                (eqs. 37, 56)

(this is eq. 35 with eqs. 38-41 and 54 expanded; dQ/dq, dQ/dqd are the loads' analytic
Jacobians, zero for gravity). The discrete forward-Euler transition is
x+ = x + dt [zd, zdd, 0] (eq. 33), F = I + dt F* (eq. 34).

Measurements (eqs. 44-51): every sensor is h(q, qd, qdd) with analytic Jacobians
(:mod:`mbde_core.sensors`): accelerometers read e_k . (a_P - g) at an offset point P of a
body (the affine map of eq. 51) along body-frame axes (the rotation of eq. 50) or along
fixed axes (points, slider tracks). Then H = dh/dx by the chain rule::

    dq/dx   = [J, 0, 0]
    dqd/dx  = [H2 zd, J, 0]
    dqdd/dx = [H2 zdd + J dzdd/dz + H3[zd, zd], J dzdd/dzd + 2 H2 zd, J dzdd/da]   (eqs. 47-49)

Input projection S_n (eq. 52, App. A eqs. 59-63 in the plane), one column per input:

- ``coordinate``: a generalized force on a natural coordinate (e.g. the motor torque on
  the crank angle theta): the unit vector of that coordinate (constant);
- ``torque``: a torque T on a body with basis points i, j (d = r_j - r_i, |d| = L): the
  couple T J d / L^2 at j and its opposite at i (J = [[0, -1], [1, 0]], the planar
  Theta_b of eqs. 61-62); q-dependent, d(S_n a)/dq enters eq. 54;
- ``force``: a force along a fixed unit direction at a moving point (constant).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.errors import ConfigError
from mbde_core.minimal import augmented_g1
from mbde_core.sensors.base import linearize_one


@dataclass
class InputSpec:
    """One unknown input: kind 'coordinate' | 'torque' | 'force', its reported name,
    the coordinate column / body / point, the force direction (unit), and the filter's
    random-walk variance per step r_a, initial value and initial standard deviation."""

    kind: str
    name: str
    column: int = -1
    body: int = -1
    point: int = -1
    direction: tuple = (1.0, 0.0)
    r_a: float | None = None
    initial: float = 0.0
    sigma0: float = 1.0


def parse_inputs(mech, items, file: str = "<config>", path: str = "adekf.inputs") -> list[InputSpec]:
    """InputSpecs from config items ({coordinate: name} | {torque: body} | {force: point,
    direction: [x, y]}, each with optional r_a, initial, sigma0). An empty list gives one
    generalized force per independent coordinate."""
    if not items:
        return [InputSpec("coordinate", mech.coordinate_names[c], column=int(c)) for c in mech.independent]
    out = []
    for k, item in enumerate(items):
        where = f"{path}[{k}]"
        if not isinstance(item, dict):
            raise ConfigError(file, where, "expected a mapping such as {coordinate: theta, r_a: 1.5e-4}")
        kinds = [key for key in ("coordinate", "torque", "force") if key in item]
        allowed = {"coordinate", "torque", "force", "direction", "r_a", "initial", "sigma0", "name"}
        extra = set(item) - allowed
        if len(kinds) != 1 or extra:
            raise ConfigError(file, where, "give exactly one of coordinate / torque / force"
                              + (f" (unknown keys: {', '.join(sorted(extra))})" if extra else ""))
        kind = kinds[0]
        num = {}
        for key in ("r_a", "initial", "sigma0"):
            if key in item and item[key] is not None:
                try:
                    num[key] = float(item[key])
                except (TypeError, ValueError):
                    raise ConfigError(file, f"{where}.{key}", f"expected a number, got {item[key]!r}") from None
        if num.get("r_a", 0.0) < 0 or num.get("sigma0", 1.0) < 0:
            raise ConfigError(file, where, "r_a and sigma0 must be >= 0")
        ref = item[kind]
        try:
            if kind == "coordinate":
                col = mech.coordinate_index(ref)
                spec = InputSpec(kind, mech.coordinate_names[col], column=col)
            elif kind == "torque":
                b = mech.body_index(ref)
                spec = InputSpec(kind, f"{mech.body_names[b]}.torque", body=b)
            else:
                p = mech.point_index(ref)
                if mech.spec.points[p].fixed:
                    raise KeyError(f"point {ref!r} is fixed")
                d = np.asarray(item.get("direction", [1.0, 0.0]), dtype=float).reshape(2)
                if not np.linalg.norm(d) > 0:
                    raise KeyError("direction must be non-zero")
                d = d / np.linalg.norm(d)
                spec = InputSpec(kind, f"{mech.point_names[p]}.force", point=p, direction=(float(d[0]), float(d[1])))
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(file, f"{where}.{kind}", str(exc.args[0]) if exc.args else "invalid") from None
        if "name" in item:
            spec.name = str(item["name"])
        spec.r_a = num.get("r_a")
        spec.initial = num.get("initial", 0.0)
        spec.sigma0 = num.get("sigma0", 1.0)
        out.append(spec)
    return out


@dataclass
class Linearization:
    """The model at one augmented state x (single state).

    q, qd, qdd (n,); zdd (g,); A = F* (nx, nx) continuous transition Jacobian (or None);
    h (d,) and H (d, nx) of the requested sensors (or None); S (n, n_a) input projection.
    """

    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    zdd: np.ndarray
    S: np.ndarray
    A: np.ndarray | None = None
    h: np.ndarray | None = None
    H: np.ndarray | None = None


class AugmentedModel:
    """x = [z, zd, a] -> zdd, F*, h, H for a mechanism, its sensors, a coordinate map and inputs."""

    def __init__(self, mech, sensors, cmap, inputs: list[InputSpec], input_rates: bool = False):
        self.mech = mech
        self.sensors = sensors
        self.map = cmap
        self.inputs = list(inputs)
        self.g = mech.dof
        self.na = len(self.inputs)
        self.input_rates = bool(input_rates) and self.na > 0
        self.nx = 2 * self.g + self.na * (2 if self.input_rates else 1)
        n = mech.n
        S = np.zeros((n + 1, self.na))
        self._torques = []
        for k, spec in enumerate(self.inputs):
            if spec.kind == "coordinate":
                S[spec.column, k] = 1.0
            elif spec.kind == "force":
                S[mech.px[spec.point], k] += spec.direction[0]
                S[mech.py[spec.point], k] += spec.direction[1]
            else:
                i, j, L = mech.body_basis[spec.body]
                self._torques.append((k, i, j, mech.px[i], mech.py[i], mech.px[j], mech.py[j], L * L))
        self._S0 = S
        self._g1 = augmented_g1.applies(self)  # the dynamics on floats (augmented_g1)
        if self._g1:
            self._M_rows, self._S_rows, self._S_cols = mech.M.tolist(), S[:n].tolist(), S[:n].T.tolist()
            self._Q_rows = mech.forces(0.0, mech.q0, mech.qd0).tolist()  # constant without loads
            self._A0 = self._with_A(Linearization(*[None] * 5), np.zeros((self.g, 2 * self.g + self.na))).A

    # -- input projection (eq. 52, App. A) ------------------------------------------------------
    def input_matrix(self, q: np.ndarray) -> np.ndarray:
        """S_n(q): (n, n_a)."""
        if not self._torques:
            return self._S0[: self.mech.n]
        S = self._S0.copy()
        P = self.mech.points(q)
        for k, i, j, xi, yi, xj, yj, L2 in self._torques:
            dx, dy = P[j] - P[i]
            S[xj, k] += -dy / L2
            S[yj, k] += dx / L2
            S[xi, k] -= -dy / L2
            S[yi, k] -= dx / L2
        return S[: self.mech.n]

    def input_q_jacobian(self, q: np.ndarray, a: np.ndarray) -> np.ndarray | None:
        """d(S_n a)/dq (n, n), None when S_n is constant."""
        if not self._torques:
            return None
        n = self.mech.n
        K = np.zeros((n + 1, n + 1))
        for k, _, _, xi, yi, xj, yj, L2 in self._torques:
            c = a[k] / L2
            for row, sr in ((xj, 1.0), (xi, -1.0)):  # f_x = -c d_y
                K[row, yj] += -c * sr
                K[row, yi] += c * sr
            for row, sr in ((yj, 1.0), (yi, -1.0)):  # f_y = c d_x
                K[row, xj] += c * sr
                K[row, xi] += -c * sr
        return K[:n, :n]

    # -- the model ----------------------------------------------------------------------------
    def jet(self, z, q_guess=None, order: int = 3):
        """The coordinate map at z (g,) (a batch of one)."""
        return self.map.evaluate(np.asarray(z, dtype=float), order=order, q_guess=q_guess)

    def evaluate(self, t: float, x: np.ndarray, jet, names=None, jacobians: bool = True) -> Linearization:
        """Dynamics (and Jacobians, and the named sensors' h, H) at x with the map's jet at x[:g]."""
        mech, g, na = self.mech, self.g, self.na
        x = np.asarray(x, dtype=float)
        if self._g1:
            q, qd, qdd, zdd, S, extra = augmented_g1.dynamics(self, t, x, jet, jacobians)
            lin = Linearization(q, qd, qdd, zdd, S)
            if extra is None:
                return self._readings(lin, names, None)
            lin.A = augmented_g1.transition(self, extra[0])
            return augmented_g1.readings(self, lin, names, extra) if names else lin
        zd, a = x[g : 2 * g], x[2 * g : 2 * g + na]
        q, J = jet.q[0], jet.J[0]
        H2 = jet.H2[0]
        M = mech.M
        qd = J @ zd
        H2zd = H2 @ zd                                  # (n, g): column k = H2_k zd = dqd/dz_k
        c = H2zd @ zd
        Q = mech.forces(t, q, qd)
        S = self.input_matrix(q)
        fn = Q + S @ a - M @ c
        MJ = M @ J
        Mm_inv = np.linalg.inv(J.T @ MJ)
        zdd = Mm_inv @ (J.T @ fn)
        qdd = J @ zdd + c
        lin = Linearization(q, qd, qdd, zdd, S)
        if not jacobians:
            return self._readings(lin, names, None)
        H3 = jet.H3[0]
        rho = fn - MJ @ zdd
        H2zdd = H2 @ zdd                                # column k = H2_k zdd
        H3zz = (H3 @ zd) @ zd                           # column k = H3_k[zd, zd]
        dfn_dz = -M @ H3zz
        dfn_dzd = -2.0 * M @ H2zd
        if mech.loads:
            Kq, Cq = mech.force_jacobians(t, q, qd)
            dfn_dz = dfn_dz + Kq @ J + Cq @ H2zd
            dfn_dzd = dfn_dzd + Cq @ J
        dSa = self.input_q_jacobian(q, a)
        if dSa is not None:
            dfn_dz = dfn_dz + dSa @ J
        rhs = np.concatenate([np.tensordot(rho, H2, axes=(0, 0)) + J.T @ (dfn_dz - M @ H2zdd),
                              J.T @ dfn_dzd, J.T @ S], axis=1)
        dzdd = Mm_inv @ rhs                             # (g, nx): [dzdd/dz, dzdd/dzd, dzdd/da]
        return self._readings(self._with_A(lin, dzdd), names, (J, H2zd, H2zdd, H3zz, dzdd))

    def _with_A(self, lin: Linearization, dzdd) -> Linearization:
        """lin with A = F* from dzdd (g, 2g + na) = [dzdd/dz, dzdd/dzd, dzdd/da]."""
        g, na = self.g, self.na
        A = np.zeros((self.nx, self.nx))
        A[:g, g : 2 * g] = np.eye(g)
        A[g : 2 * g, : 2 * g + na] = dzdd
        if self.input_rates:                            # a' = b (the input rates), b' = noise
            A[2 * g : 2 * g + na, 2 * g + na :] = np.eye(na)
        lin.A = A
        return lin

    def _readings(self, lin: Linearization, names, terms) -> Linearization:
        """lin with h (and H by the chain rule, eqs. 47-49, from terms = (J, H2 zd, H2 zdd,
        H3[zd, zd], dzdd) when given) of the named sensors."""
        if not names:
            return lin
        mech, g, na = self.mech, self.g, self.na
        q, qd, qdd = lin.q, lin.qd, lin.qdd
        if terms is None:
            lin.h = np.concatenate([self.sensors[nm].h(q, qd, qdd) for nm in names])
            return lin
        J, H2zd, H2zdd, H3zz, dzdd = terms
        nx = self.nx
        dq = np.zeros((mech.n, nx))
        dq[:, :g] = J
        dqd = np.zeros((mech.n, nx))
        dqd[:, :g] = H2zd
        dqd[:, g : 2 * g] = J
        dqdd = np.zeros((mech.n, nx))
        dqdd[:, : 2 * g + na] = J @ dzdd
        dqdd[:, :g] += H2zdd + H3zz
        dqdd[:, g : 2 * g] += 2.0 * H2zd
        hs, Hs = [], []
        for nm in names:
            hk, Hq, Hqd, Hqdd = linearize_one(self.sensors[nm], q, qd, qdd)
            hs.append(hk)
            Hs.append(Hq @ dq + Hqd @ dqd + Hqdd @ dqdd)
        lin.h = np.concatenate(hs)
        lin.H = np.concatenate(Hs, axis=0)
        return lin
