"""The multibody model at every step of a trajectory, with exact first derivatives.

For the states x_i = [z_i, zd_i, zdd_i] (g each) of N steps at once, :meth:`MultibodyModel.
evaluate` returns a :class:`StepEval`:

- q_i by the position problem (Newton from the previous iterate's q_i: the assembly
  branch is kept), qd_i = R zd_i, qdd_i = R zdd_i + R'zd_i (with the *variable* zdd_i);
- f_i = f(t_i, z_i, zd_i), the R-matrix forward dynamics (paper 000 eq. 12, paper 003
  eq. 3), and F_i = df/d[z, zd] (g, 2g);
- the tangent maps of the motion, T_q = dq/dx, T_qd = dqd/dx, T_qdd = dqdd/dx (n, 3g):

      dq/dz = R,   dqd/dz_k = d(R zd)/dz_k,  dqd/dzd = R,
      dqdd/dz_k = (dR/dz_k) zdd + d(R'zd)/dz_k,  dqdd/dzd = d(R'zd)/dzd,  dqdd/dzdd = R,

  so a sensor h(q, qd, qdd) has dh/dx = h_q T_q + h_qd T_qd + h_qdd T_qdd with the
  sensors' analytic Jacobians (:meth:`observe`).

Derivatives. The generated vector kernels (:mod:`mbde_core.model.codegen`) are straight-
line code of +, -, *, /, sin, cos and sqrt (dry friction), so they are analytic functions that numpy also
evaluates on complex arrays. Complex-step differentiation (Squire & Trapp 1998; Martins,
Sturdza & Alonso 2003) gives their directional derivatives exactly (no subtraction, no
truncation error at step h = 1e-30): evaluated at q + i h R_k, the kernel ``post``
(qd = R zd, then the dynamics) returns Im(.)/h = the derivative along the motion's
tangent R_k = dq/dz_k, i.e. d(R zd)/dz_k, df/dz_k, dR/dz_k and d(R'zd)/dz_k at once; at
zd + i h e_k it returns df/dzd_k and d(R'zd)/dzd_k. That is 2g complex kernel calls per
evaluation, batched over all steps. Larger dependent blocks (>= 3x3) go through a
complex-capable elimination (the source is compiled once more for that namespace).
Mechanisms without generated kernels use the generic engine and central differences
(relative step 1e-6, documented accuracy ~1e-8).

Inputs: generalized forces u (N, m) on the coordinates of E (n, m) add G u to f, with G =
Mbar^-1 R^T E and d(G u)/dz from the same complex-step tangents dR/dz_k
(:func:`mbde_core.trajectory.inputs.input_terms`); ``StepEval.G`` keeps G for the input
states' columns.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.engine import dynamics, fastpath, kinematics
from mbde_core.trajectory.inputs import input_terms

CS_STEP = 1e-30


@dataclass
class StepEval:
    """The model at N steps (see the module docstring). Shapes: q, qd, qdd (N, n);
    f (N, g); F (N, g, 2g); Tq, Tqd, Tqdd (N, n, 3g); ok (N,) position problem converged;
    G (N, g, m) dzdd/du of the inputs (None without)."""

    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    f: np.ndarray
    F: np.ndarray
    Tq: np.ndarray
    Tqd: np.ndarray
    Tqdd: np.ndarray
    ok: np.ndarray
    G: np.ndarray | None = None


def _solve_dense_complex(A, b):
    """Dense solve for the generated code's >= 3x3 blocks on (N,) complex rows."""
    k = len(b)
    N = max(max((np.size(v) for row in A for v in row), default=1), max(np.size(v) for v in b))
    At = np.empty((N, k, k), dtype=complex)
    Bt = np.empty((N, k), dtype=complex)
    for i in range(k):
        for j in range(k):
            At[:, i, j] = A[i][j]
        Bt[:, i] = b[i]
    X = np.linalg.solve(At, Bt[..., None])[..., 0]
    return tuple(X[:, i] for i in range(k))


_COMPLEX_KERNELS: dict = {}


def complex_kernels(K):
    """The generated ``post``, ``trig``, ``jac`` of kernels K for complex rows (cached)."""
    out = _COMPLEX_KERNELS.get(id(K))
    if out is None or out[0] is not K:
        env = {"sin": np.sin, "cos": np.cos, "sqrt": np.sqrt, "SOLVE": _solve_dense_complex, "__builtins__": {}}
        exec(compile(K.source, "<mbde kernels (complex)>", "exec"), env)  # noqa: S102 - our own generated source
        out = (K, env["trig"], env["jac"], env["post"])
        _COMPLEX_KERNELS[id(K)] = out
        while len(_COMPLEX_KERNELS) > 32:  # bounded: identification builds a mechanism per parameter value
            del _COMPLEX_KERNELS[next(iter(_COMPLEX_KERNELS))]
    return out


def _rows(vals, N: int, dtype=float) -> np.ndarray:
    """(k, N) array from k kernel outputs ((N,) arrays or Python numbers)."""
    out = np.empty((len(vals), N), dtype=dtype)
    for k, v in enumerate(vals):
        out[k] = v
    return out


def _matrix(rows, N: int, g: int, dtype=float) -> np.ndarray:
    """(N, n, g) from n kernel rows of g entries."""
    out = np.empty((N, len(rows), g), dtype=dtype)
    for i, row in enumerate(rows):
        for k, v in enumerate(row):
            out[:, i, k] = v
    return out


def _tangents(R: np.ndarray, n: int, g: int):
    """(Tq, Tqd, Tqdd (N, n, 3g), F (N, g, 2g)) with the blocks that are R set (dq/dz,
    dqd/dzd, dqdd/dzdd) and the others zero, to be filled."""
    N = R.shape[0]
    Tq, Tqd, Tqdd = np.zeros((N, n, 3 * g)), np.zeros((N, n, 3 * g)), np.zeros((N, n, 3 * g))
    Tq[:, :, :g] = R
    Tqd[:, :, g:2 * g] = R
    Tqdd[:, :, 2 * g:] = R
    return Tq, Tqd, Tqdd, np.zeros((N, g, 2 * g))


def _input_gain(mech, R, E) -> np.ndarray:
    """G = Mbar^-1 R^T E (N, g, m) at R (N, n, g)."""
    M = np.asarray(mech.M, dtype=float)
    Mbar = np.einsum("nig,ij,njh->ngh", R, M, R)
    return np.linalg.solve(Mbar, np.einsum("nig,im->ngm", R, E))


class MultibodyModel:
    """A mechanism (the smoother's model, possibly with model errors) and its sensors."""

    def __init__(self, mech, sensors):
        self.mech = mech
        self.sensors = sensors
        self.g = mech.dof
        self.n = mech.n
        self.angular = np.isin(mech.independent, mech.rel_columns)  # (g,) angle coordinates
        self._tv_key = None
        self._tv = ()

    # -- time functions of the loads, per step ------------------------------------------------
    def _time_values(self, K, t: np.ndarray):
        if not K.time_fns:
            return ()
        key = (t.shape[0], float(t[0]), float(t[-1]))
        if key != self._tv_key:
            self._tv = tuple(np.array([fn(float(ti)) for ti in t]) for fn in K.time_fns)
            self._tv_key = key
        return self._tv

    # -- evaluation -------------------------------------------------------------------------------
    def evaluate(self, t: np.ndarray, X: np.ndarray, q_guess: np.ndarray, E=None, U=None) -> StepEval:
        """The model at steps t (N,), states X (N, >= 3g: [z, zd, zdd, ...]), position
        guesses q_guess (N, n); inputs U (N, m) on the coordinates of E (n, m) (or None)."""
        K = fastpath.kernels(self.mech)
        if E is not None and E.shape[1] == 0:
            E = U = None
        if K is not None:
            return self._evaluate_kernels(K, np.asarray(t, float), X, q_guess, E, U)
        return self._evaluate_generic(np.asarray(t, float), X, q_guess, E, U)

    def _evaluate_kernels(self, K, t, X, q_guess, E=None, U=None) -> StepEval:
        mech, g, n = self.mech, self.g, self.n
        N = X.shape[0]
        V = K.vector
        Z = np.ascontiguousarray(X[:, :g].T)
        ZD = [np.ascontiguousarray(X[:, g + k]) for k in range(g)]
        zdd = X[:, 2 * g:3 * g]
        G = np.array(q_guess, dtype=float).T.copy()
        q, ok, tr, J = fastpath.v_position(mech, K, Z, G, 30, copy=False)
        tv = self._time_values(K, t)
        with np.errstate(all="ignore"):
            qd_r, f_r, _, R_r, rd_r = V.post(J, tr, q, ZD, tv, None, False)
        qd = _rows(qd_r, N).T
        f = _rows(f_r, N).T
        R = _matrix(R_r, N, g)
        rd = _rows(rd_r, N).T
        Tq, Tqd, Tqdd, F = _tangents(R, n, g)
        _, ctrig, cjac, cpost = complex_kernels(K)
        h = CS_STEP
        dRs = np.empty((N, n, g, g)) if E is not None else None
        with np.errstate(all="ignore"):
            for k in range(g):  # along dq = R_k dz_k
                qc = q + (1j * h) * R[:, :, k].T
                trc = ctrig(qc)
                qd_c, f_c, _, R_c, rd_c = cpost(cjac(qc, trc), trc, qc, ZD, tv, None, False)
                Tqd[:, :, k] = _rows(qd_c, N, complex).imag.T / h
                F[:, :, k] = _rows(f_c, N, complex).imag.T / h
                dR = _matrix(R_c, N, g, complex).imag / h
                drd = _rows(rd_c, N, complex).imag.T / h
                Tqdd[:, :, k] = np.einsum("nij,nj->ni", dR, zdd) + drd
                if dRs is not None:
                    dRs[..., k] = dR
            for k in range(g):  # along zd_k
                ZDc = [z.astype(complex) for z in ZD]
                ZDc[k] = ZDc[k] + 1j * h
                _, f_c, _, _, rd_c = cpost(J, tr, q, ZDc, tv, None, False)
                F[:, :, g + k] = _rows(f_c, N, complex).imag.T / h
                Tqdd[:, :, g + k] = _rows(rd_c, N, complex).imag.T / h
        qdd = np.einsum("nij,nj->ni", R, zdd) + rd
        Gm = None
        if E is not None:
            Gm, GU, dGU = input_terms(np.asarray(mech.M, dtype=float), R, dRs, E, U)
            f = f + GU
            F[:, :, :g] += dGU
        return StepEval(q.T.copy(), qd, qdd, f, F, Tq, Tqd, Tqdd, ok, Gm)

    def _generic_parts(self, t, z, zd, q_guess, E=None, U=None):
        """(q, ok, qd, f, R, rd) by the generic engine (per-step times); f with the inputs'
        G U if E is given."""
        mech = self.mech
        q, ok = kinematics.solve_position(mech, z, np.array(q_guess, dtype=float))
        R = kinematics.r_matrix(mech, q)
        qd = np.einsum("nij,nj->ni", R, zd)
        if mech.spec.loads:  # loads may depend on time: one evaluation per step
            parts = [dynamics.evaluate(mech, float(ti), q[i:i + 1], qd[i:i + 1]) for i, ti in enumerate(t)]
            f = np.concatenate([p.zdd for p in parts])
            rd = np.concatenate([p.rdzd for p in parts])
        else:
            ev = dynamics.evaluate(mech, 0.0, q, qd)
            f, rd = ev.zdd, ev.rdzd
        if E is not None:
            f = f + np.einsum("ngm,nm->ng", _input_gain(mech, R, E), U)
        return q, ok, qd, f, R, rd

    def _evaluate_generic(self, t, X, q_guess, E=None, U=None) -> StepEval:
        g, n = self.g, self.n
        N = X.shape[0]
        z, zd, zdd = X[:, :g], X[:, g:2 * g], X[:, 2 * g:3 * g]
        q, ok, qd, f, R, rd = self._generic_parts(t, z, zd, q_guess, E, U)
        Tq, Tqd, Tqdd, F = _tangents(R, n, g)
        for k in range(2 * g):
            x = np.hstack([z, zd])
            step = 1e-6 * np.maximum(1.0, np.abs(x[:, k]))
            out = []
            for s in (1.0, -1.0):
                xs = x.copy()
                xs[:, k] += s * step
                qs, _, qds, fs, Rs, rds = self._generic_parts(t, xs[:, :g], xs[:, g:], q, E, U)
                out.append((qds, fs, np.einsum("nij,nj->ni", Rs, zdd) + rds))
            d = [(a - b) / (2 * step[:, None]) for a, b in zip(out[0], out[1])]
            if k < g:
                Tqd[:, :, k] = d[0]
            F[:, :, k] = d[1]
            Tqdd[:, :, k] = d[2]
        qdd = np.einsum("nij,nj->ni", R, zdd) + rd
        return StepEval(q, qd, qdd, f, F, Tq, Tqd, Tqdd, ok, None if E is None else _input_gain(self.mech, R, E))

    # -- sensors --------------------------------------------------------------------------------
    def observe(self, name: str, ev: StepEval, idx: np.ndarray):
        """(h (K, d), dh/dx (K, d, 3g)) of sensor ``name`` at steps idx (K,)."""
        s = self.sensors[name]
        q, qd, qdd = ev.q[idx], ev.qd[idx], ev.qdd[idx]
        h = s.h(q, qd, qdd)
        Hq, Hqd, Hqdd = s.jacobians(q, qd, qdd)
        H = Hq @ ev.Tq[idx] + Hqd @ ev.Tqd[idx]
        if s.uses_qdd:
            H += Hqdd @ ev.Tqdd[idx]
        return h, H

    def innovation(self, name: str, measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        """predicted - measured (K, d), angle channels wrapped."""
        return -self.sensors[name].residual(measured, predicted)
