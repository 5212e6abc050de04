"""Local observability of the ADE-KF model by the PBH rank test (paper 004 sec. 4.4, eqs. 57-58).

For the continuous model x' = f*(x) (x = [z, zd, a], :mod:`.augmented`) linearised at a
state, with F* = df*/dx and H = dh/dx of the fused sensors, the Popov-Belevitch-Hautus
matrix

    O_PBH(s) = [[F* - s I], [H]]                                      (eq. 57)

must have full column rank n_x for every eigenvalue s of F* (eq. 58; only eigenvalues can
lower the rank of the upper block). Numerically: the columns of O_PBH(s) are scaled to
unit norm (a change of units of the states, which does not change the rank), and the
rank is the number of singular values above ``rtol`` times the largest. The test is
repeated at every eigenvalue (and at s = 0, where drift without position sensors shows)
and along a trajectory; the configuration is reported observable when the rank is full
at every state of it. The margin reported is the smallest relative singular value, and
for a rank-deficient state the unobservable direction (the right singular vector).

Trajectory (:func:`steady_states`): the independent coordinates sweep one turn (angles)
or +- one length scale (lengths) at constant rates ``speed``, with the inputs that keep
the rates constant (least squares J^T S a = J^T (M c - Q), zdd = 0).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class PBHResult:
    """Rank test at one state: rank, n_x, smallest relative singular value over the tested
    s, the s where it occurs, the eigenvalues of F*, and the null direction (n_x,) there."""

    rank: int
    n: int
    margin: float
    s_worst: complex
    eigenvalues: np.ndarray
    direction: np.ndarray

    @property
    def observable(self) -> bool:
        return self.rank == self.n


def pbh_test(A: np.ndarray, H: np.ndarray, rtol: float = 1e-8) -> PBHResult:
    """PBH rank test of (F* = A (n, n), H (d, n)) at every eigenvalue of A and at s = 0."""
    n = A.shape[0]
    eig = np.linalg.eigvals(A)
    cand = [0.0 + 0.0j] + [complex(s) for s in eig]
    uniq = []
    for s in cand:
        if all(abs(s - u) > 1e-9 * max(1.0, abs(s)) for u in uniq):
            uniq.append(s)
    worst = (np.inf, 0j, n, np.zeros(n))
    for s in uniq:
        O = np.vstack([A - s * np.eye(n), H]).astype(complex)
        norms = np.linalg.norm(O, axis=0)
        O = O / np.where(norms > 0, norms, 1.0)
        _, sv, Vh = np.linalg.svd(O)
        rel = sv / sv[0] if sv[0] > 0 else np.zeros_like(sv)
        rank = int(np.sum(rel > rtol))
        margin = float(rel[-1]) if rel.size == n else 0.0
        if margin < worst[0]:
            d = np.conj(Vh[-1]) / np.where(norms > 0, norms, 1.0)
            d = d / (np.linalg.norm(d) or 1.0)
            worst = (margin, s, rank, d)
    return PBHResult(worst[2], n, worst[0], worst[1], eig, np.real_if_close(worst[3]))


@dataclass
class ObservabilityReport:
    """PBH results along a trajectory: states (K, n_x), results, observable (all full rank)."""

    names: list
    state_names: list
    states: np.ndarray
    results: list = field(default_factory=list)

    @property
    def observable(self) -> bool:
        return all(r.observable for r in self.results)

    @property
    def full_rank_fraction(self) -> float:
        return float(np.mean([r.observable for r in self.results])) if self.results else 0.0

    @property
    def worst(self) -> int:
        return int(np.argmin([r.margin for r in self.results]))


def steady_states(model, speed, samples: int = 72, t: float = 0.0) -> np.ndarray:
    """States x (K, n_x) along a constant-rate sweep of the independent coordinates."""
    mech, g = model.mech, model.g
    speed = np.broadcast_to(np.asarray(speed, dtype=float), (g,))
    angle = np.isin(mech.independent, mech.rel_columns)
    span = np.where(angle, 2 * np.pi, 2 * mech.length_scale)
    z0 = mech.q0[mech.independent]
    out = []
    q = mech.q0.copy()
    for k in range(samples):
        frac = k / samples
        z = np.where(angle, z0 + span * frac, z0 - mech.length_scale + span * frac)
        jet = model.map.evaluate(z, order=3, q_guess=q)
        q = jet.q[0]
        J, H2 = jet.J[0], jet.H2[0]
        c = (H2 @ speed) @ speed
        qd = J @ speed
        Q = mech.forces(t, q, qd)
        S = model.input_matrix(q)
        if model.na:
            a = np.linalg.lstsq(J.T @ S, J.T @ (mech.M @ c - Q), rcond=None)[0]
        else:
            a = np.zeros(0)
        out.append(np.concatenate([z, speed, a]))
    return np.array(out)


def observability_along(model, names, states, t: float = 0.0, rtol: float = 1e-8) -> ObservabilityReport:
    """PBH test at every state (K, n_x) for the fused sensors ``names``."""
    mech = model.mech
    state_names = ([f"{n}" for n in mech.independent_names] + [f"{n}_dot" for n in mech.independent_names]
                   + [f"input {s.name}" for s in model.inputs])
    rep = ObservabilityReport(list(names), state_names, np.asarray(states, dtype=float))
    q = mech.q0.copy()
    for x in rep.states:
        jet = model.map.evaluate(x[: model.g], order=3, q_guess=q)
        q = jet.q[0]
        lin = model.evaluate(t, x, jet, list(names))
        rep.results.append(pbh_test(lin.A, lin.H, rtol))
    return rep
