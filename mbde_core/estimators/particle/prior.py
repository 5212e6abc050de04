"""Particle initialisation for the particle filter: the branch atlas and the priors.

Paper 000 sec. 5.2, eq. 22: without prior knowledge every particle draws its independent
coordinates, velocities (and accelerations) uniformly within physical limits and its
assembly branch uniformly from the branch set. Each particle must then carry a full,
assembled configuration q on its own branch (the particle's branch is explicit in q).

Solving the position problem for N arbitrary (z, branch) pairs from random Newton starts
(:meth:`BranchTool.assemble`) costs tens of starts per particle. :class:`BranchAtlas`
does it with one start: it stores, on a grid of z covering the prior's ranges, one
assembled configuration per branch (found once by :meth:`BranchTool.enumerate` and
completed by continuation from neighbouring nodes); a particle starts Newton from the
nearest node's configuration on its branch, and its branch is verified by the
orientation signature (:meth:`BranchTool.signature`). The rare failures fall back to
random starts; (z, branch) pairs that do not assemble at all are redrawn, so the
uniform prior is uniform over the *feasible* set of (z, branch).

Everything is vectorised over particles (numpy on (N, n) arrays).
"""
from __future__ import annotations

import weakref

import numpy as np

from mbde_core.engine import kinematics
from mbde_core.engine.branches import BranchTool

TWO_PI = 2.0 * np.pi


def signature_codes(sig: np.ndarray) -> np.ndarray:
    """(N,) integer code of branch signatures sig (N, s) in {-1, 0, +1}; -1 if any sign is 0."""
    sig = np.asarray(sig, dtype=np.int64)
    if sig.shape[1] == 0:
        return np.zeros(sig.shape[0], dtype=np.int64)
    w = 3 ** np.arange(sig.shape[1], dtype=np.int64)
    code = (sig + 1) @ w
    return np.where(np.any(sig == 0, axis=1), -1, code)


class SignatureCodes:
    """Fast (N,) signature codes of configurations q (N, n): the selected orientation
    signs of :class:`BranchTool` evaluated straight from the columns of q (a few numpy
    operations on (N,) arrays), equal to ``signature_codes(tool.signature(q))``."""

    def __init__(self, tool: BranchTool):
        mech = tool.mech
        col = {int(p): 2 * j for j, p in enumerate(mech.moving_points)}
        fixed = np.asarray(mech.fixed_xy, dtype=float)

        def point(p):
            p = int(p)
            return ("q", col[p]) if p in col else ("c", fixed[p])

        self.terms = []
        for c in tool.selected:
            cand = tool.candidates[c]
            if cand[0] == "triangle":
                _, a, k, cc = cand
                self.terms.append(("triangle", point(a), point(k), point(cc)))
            else:
                _, a, k, d = cand
                self.terms.append(("slider", point(a), point(k), np.asarray(d, dtype=float)))
        self.weights = 3 ** np.arange(len(self.terms), dtype=np.int64)

    @staticmethod
    def _xy(q, pt):
        if pt[0] == "q":
            return q[:, pt[1]], q[:, pt[1] + 1]
        return pt[1][0], pt[1][1]

    def __call__(self, q: np.ndarray) -> np.ndarray:
        q = np.atleast_2d(q)
        code = None
        zero = None
        for wk, term in zip(self.weights, self.terms):
            if term[0] == "triangle":
                ax, ay = self._xy(q, term[1])
                kx, ky = self._xy(q, term[2])
                cx, cy = self._xy(q, term[3])
                v = (kx - ax) * (cy - ky) - (ky - ay) * (cx - kx)
            else:
                ax, ay = self._xy(q, term[1])
                kx, ky = self._xy(q, term[2])
                d = term[3]
                v = (kx - ax) * d[0] + (ky - ay) * d[1]
            sg = np.sign(v if isinstance(v, np.ndarray) and v.shape == (q.shape[0],) else np.broadcast_to(v, (q.shape[0],)))
            part = (sg + 1.0) * wk
            code = part if code is None else code + part
            zero = (sg == 0) if zero is None else zero | (sg == 0)
        if code is None:
            return np.zeros(q.shape[0], dtype=np.int64)
        out = code.astype(np.int64)
        if zero.any():
            out[zero] = -1
        return out


class BranchAtlas:
    """One assembled configuration per branch on a grid of independent coordinates.

    Parameters
    ----------
    mech: Mechanism; lo, hi: (g,) grid bounds of z; angular: (g,) bool (angle
    coordinates whose range covers the full circle wrap around); nodes: grid nodes per
    coordinate; seed: seed of the BranchTool's random Newton starts.

    Attributes: tool (BranchTool), labels (K,) the branch labels found, codes (K,) their
    signature codes, q (M, K, n) node configurations (NaN where a branch does not
    assemble at a node), has (M, K) bool.
    """

    def __init__(self, mech, lo, hi, angular, nodes: int = 72, seed: int = 0):
        self.mech = mech
        self.t = 0.0  # the atlas is built at t = 0 (driving constraints); assemble() takes t
        self.g = mech.dof
        self.lo = np.asarray(lo, dtype=float).reshape(self.g)
        self.hi = np.asarray(hi, dtype=float).reshape(self.g)
        ang = np.asarray(angular, dtype=bool).reshape(self.g)
        self.periodic = ang & (self.hi - self.lo >= TWO_PI - 1e-9)
        self.m = np.full(self.g, max(int(nodes), 2), dtype=np.int64)
        self.step = np.where(self.periodic, TWO_PI / self.m, (self.hi - self.lo) / (self.m - 1))
        self.tool = BranchTool(mech, seed=seed, t=self.t)
        self._codes = SignatureCodes(self.tool)
        axes = [self.lo[k] + self.step[k] * np.arange(self.m[k]) for k in range(self.g)]
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, self.g)
        self.z_nodes = grid
        found = []  # (node, q) of every enumerated assembly
        for i, (qs, _) in enumerate(self.tool.enumerate_many(grid)):  # one batched solve of every node
            found.extend((i, q) for q in qs)
        if not found:
            raise ValueError(f"{mech.name}: no assembly found anywhere in the z range [{self.lo}, {self.hi}]")
        nodes_idx = np.array([i for i, _ in found])
        qs = np.array([q for _, q in found])
        codes = signature_codes(self.tool.signature(qs))
        known = signature_codes(np.array(self.tool.signatures, dtype=np.int64).reshape(len(self.tool.signatures), -1))
        self.labels = np.array([k for k, c in enumerate(known) if c in set(codes[codes >= 0])], dtype=np.int64)
        self.codes = known[self.labels]
        M, K, n = grid.shape[0], len(self.labels), mech.n
        self.q = np.full((M, K, n), np.nan)
        self.has = np.zeros((M, K), dtype=bool)
        for col, c in enumerate(self.codes):
            sel = codes == c
            self.q[nodes_idx[sel], col] = qs[sel]
            self.has[nodes_idx[sel], col] = True
        self._continue()

    # -- construction ------------------------------------------------------------------------
    def _neighbours(self, idx: np.ndarray) -> list[np.ndarray]:
        """Flat indices of the 2g axis neighbours of flat node indices idx (-1 if outside)."""
        sub = np.array(np.unravel_index(idx, tuple(self.m))).T  # (M, g)
        out = []
        for k in range(self.g):
            for d in (-1, 1):
                s = sub.copy()
                s[:, k] += d
                if self.periodic[k]:
                    s[:, k] %= self.m[k]
                inside = np.all((s >= 0) & (s < self.m), axis=1)
                flat = np.full(len(idx), -1, dtype=np.int64)
                flat[inside] = np.ravel_multi_index(tuple(s[inside].T), tuple(self.m))
                out.append(flat)
        return out

    def _continue(self, passes: int = 8) -> None:
        """Fill missing (node, branch) entries by Newton from an assembled neighbour."""
        mech = self.mech
        for _ in range(passes):
            changed = False
            for col, code in enumerate(self.codes):
                missing = np.nonzero(~self.has[:, col])[0]
                if missing.size == 0:
                    continue
                for nb in self._neighbours(missing):
                    todo = missing[(nb >= 0) & ~self.has[missing, col]]
                    src = nb[(nb >= 0) & ~self.has[missing, col]]
                    good = self.has[src, col]
                    todo, src = todo[good], src[good]
                    if todo.size == 0:
                        continue
                    q, ok = kinematics.solve_position(mech, self.z_nodes[todo], self.q[src, col], t=self.t)
                    ok = ok & (signature_codes(self.tool.signature(q)) == code)
                    self.q[todo[ok], col] = q[ok]
                    self.has[todo[ok], col] = True
                    changed |= bool(ok.any())
            if not changed:
                break

    # -- queries -------------------------------------------------------------------------------
    def column(self, labels: np.ndarray) -> np.ndarray:
        """(N,) atlas column of branch labels (-1 for labels the atlas does not know)."""
        lut = np.full(max(int(self.labels.max()), int(np.max(labels, initial=0))) + 1, -1, dtype=np.int64)
        lut[self.labels] = np.arange(len(self.labels))
        labels = np.asarray(labels, dtype=np.int64)
        return np.where(labels >= 0, lut[np.clip(labels, 0, None)], -1)

    def node(self, z: np.ndarray) -> np.ndarray:
        """(N,) flat index of the grid node nearest to z (N, g); a non-finite z maps to the
        first node (its particle is dropped by the caller's finiteness checks)."""
        u = (np.asarray(z, dtype=float) - self.lo) / self.step
        k = np.rint(np.where(np.isfinite(u), u, 0.0)).astype(np.int64)
        k = np.where(self.periodic, k % self.m, np.clip(k, 0, self.m - 1))
        return np.ravel_multi_index(tuple(k.T), tuple(self.m))

    def codes_of(self, q: np.ndarray) -> np.ndarray:
        """(N,) signature codes of configurations q (N, n)."""
        return self._codes(q)

    def label_codes(self) -> np.ndarray:
        """(max label + 1,) code per label (-2 for labels not in the atlas)."""
        out = np.full(int(self.labels.max()) + 1, -2, dtype=np.int64)
        out[self.labels] = self.codes
        return out

    def assemble(self, z: np.ndarray, labels: np.ndarray, rng: np.random.Generator | None = None,
                 fallback_starts: int = 16, t: float | None = None):
        """(q (N, n), ok (N,)) on the requested branches, Newton from the nearest node, at
        time t (default the atlas's, 0; matters with driving constraints only).

        rng: Generator of the random Newton starts of the fallback (default: the
        atlas's own, seeded at construction); pass the caller's for reproducible runs.
        """
        mech = self.mech
        z = np.atleast_2d(np.asarray(z, dtype=float))
        labels = np.asarray(labels, dtype=np.int64).reshape(-1)
        N = z.shape[0]
        q = np.zeros((N, mech.n))
        ok = np.zeros(N, dtype=bool)
        if N == 0:
            return q, ok
        col = self.column(labels)
        node = self.node(z)
        has = (col >= 0) & self.has[node, np.clip(col, 0, None)]
        if has.any():
            guess = self.q[node[has], col[has]]
            qq, good = kinematics.solve_position(mech, z[has], guess, t=self.t if t is None else t)
            codes = self.label_codes()
            good &= self.codes_of(qq) == codes[labels[has]]
            q[has] = qq
            ok[has] = good
        bad = ~ok & (col >= 0)
        if bad.any():  # random Newton starts for the few that did not converge on their branch
            own = self.tool.rng
            if rng is not None:
                self.tool.rng = rng
            try:
                qq, good = self.tool.assemble(z[bad], labels[bad], starts=fallback_starts, t=t)
            finally:
                self.tool.rng = own
            good &= np.all(np.isfinite(qq), axis=1)
            q[bad] = np.where(good[:, None], qq, q[bad])
            ok[bad] = good
        return q, ok


_ATLASES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def atlas_for(mech, lo, hi, angular, nodes: int = 72, seed: int = 0) -> BranchAtlas:
    """A BranchAtlas cached per mechanism instance and grid (construction costs ~0.1-1 s)."""
    key = (tuple(np.round(np.asarray(lo, float), 12)), tuple(np.round(np.asarray(hi, float), 12)),
           tuple(bool(a) for a in np.asarray(angular).reshape(-1)), int(nodes), int(seed))
    per = _ATLASES.setdefault(mech, {})
    if key not in per:
        per[key] = BranchAtlas(mech, lo, hi, angular, nodes, seed)
    return per[key]


def prior_box(mech, z_range=None):
    """(z_lo, z_hi, angular, atlas) of a particle filter's uniform prior: ``z_range`` (lo,
    hi) (g,) each, or None: angles [-pi, pi), other coordinates q0 +/- the longest body;
    the BranchAtlas on that box (72 nodes for one DOF, about 400 in all otherwise)."""
    g = mech.dof
    angular = np.isin(mech.independent, mech.rel_columns)
    if z_range is None:
        z0 = mech.q0[mech.independent]
        z_range = (np.where(angular, -np.pi, z0 - mech.length_scale), np.where(angular, np.pi, z0 + mech.length_scale))
    lo, hi = z_range
    nodes = 72 if g == 1 else max(4, int(round(400 ** (1.0 / g))))
    return lo, hi, angular, atlas_for(mech, lo, hi, angular, nodes)


def sample_uniform(atlas: BranchAtlas, N: int, z_lo, z_hi, branches, rng: np.random.Generator,
                   max_rounds: int = 50, t: float | None = None):
    """Uniform prior of paper 000 eq. 22 on (z, branch): (z (N, g), q (N, n), labels (N,)).

    z ~ U(z_lo, z_hi) per coordinate, branch ~ U(branches); pairs that do not assemble
    are redrawn (rejection sampling: uniform over the feasible set). Raises ValueError
    if some particles cannot be placed after ``max_rounds`` rounds.
    """
    g = atlas.g
    z_lo = np.asarray(z_lo, dtype=float).reshape(g)
    z_hi = np.asarray(z_hi, dtype=float).reshape(g)
    branches = np.asarray(branches, dtype=np.int64)
    z = np.empty((N, g))
    q = np.empty((N, atlas.mech.n))
    labels = np.empty(N, dtype=np.int64)
    todo = np.arange(N)
    for _ in range(max_rounds):
        k = todo.size
        z[todo] = z_lo + (z_hi - z_lo) * rng.random((k, g))
        labels[todo] = branches[rng.integers(0, branches.size, k)]
        qq, ok = atlas.assemble(z[todo], labels[todo], rng, t=t)
        q[todo[ok]] = qq[ok]
        todo = todo[~ok]
        if todo.size == 0:
            return z, q, labels
    raise ValueError(f"{todo.size} of {N} particles could not be assembled on branches {branches.tolist()} "
                     f"with z in [{z_lo.tolist()}, {z_hi.tolist()}]: check the uniform ranges")
