"""Assembly branches: enumerate the configurations q of a linkage for given z, and label them.

For a given z the position problem Phi(q_d; z) = 0 has a finite set of solutions, one per
assembly branch (paper 000 sec. 2.2 and Fig. 3: two for a four-bar). They are found by
Newton-Raphson from many seeded random starts, vectorised as one batch, and deduplicated.

Labels must be consistent along a motion, where q changes continuously. A branch is
identified by the orientation signs of "joint triangles": for every point shared by two
bodies, the sign of cross(P_k - P_a, P_c - P_k) with P_a, P_c the neighbouring points
(for a dyad apex this sign flips exactly between the two assemblies), plus, for sliders,
the side of the slider along its track. Only candidate signs that separate the branches
at every sampled z are kept (the crank-side triangle of a four-bar flips during a
normal revolution and is discarded). Label 0 is the branch of the configuration in the
YAML file; the other signatures follow in lexicographic order.
"""
from __future__ import annotations

import itertools

import numpy as np

from mbde_core.engine import kinematics


class BranchTool:
    """Branch enumeration and labelling for one mechanism.

    Parameters: mech (Mechanism); starts: random Newton starts per enumeration; seed.
    Attributes: candidates (list of descriptors), selected (indices of the signs used),
    signatures (list of sign tuples; index = label).
    """

    def __init__(self, mech, starts: int = 48, samples: int = 12, seed: int = 0, t: float = 0.0):
        self.mech = mech
        self.t = float(t)  # the time of the position problems (driving constraints)
        self.starts = starts
        self.rng = np.random.default_rng(seed)
        self.candidates = self._candidates()
        self._box = self._bounding_box()
        self.selected = self._select(samples)
        sig0 = tuple(int(v) for v in self.signature(mech.q0[None])[0])
        self.signatures = [sig0]

    # -- geometry of candidates ----------------------------------------------------------
    def _candidates(self):
        """Sign candidates: the joint triangle (a, k, c) at every moving point k shared by two
        bodies (a, c their other points), then the slider sides. Bodies contribute their first
        two points first (the triangles that label linkages of two-point bodies); the other
        points of bodies with three or more points follow as extra candidates, used only where
        the first ones cannot tell every assembly apart (:meth:`_select`)."""
        spec = self.mech.spec

        def triangles(pairs_of):
            neighbours: dict[int, list[tuple[int, int]]] = {}
            for bi, b in enumerate(spec.bodies):
                for i, j in pairs_of(b.points):
                    neighbours.setdefault(i, []).append((bi, j))
                    neighbours.setdefault(j, []).append((bi, i))
            out = []
            for k, lst in sorted(neighbours.items()):
                if spec.points[k].fixed:
                    continue
                for (b1, a), (b2, c) in itertools.combinations(lst, 2):
                    if b1 != b2 and a != c:
                        out.append(("triangle", a, k, c))
            return out, neighbours

        first, neighbours = triangles(lambda pts: [(pts[0], pts[1])])
        cands = list(first)
        for s in spec.sliders:
            for bi, a in neighbours.get(s.point, []):
                cands.append(("slider", a, s.point, s.direction))
        every, _ = triangles(lambda pts: list(itertools.combinations(pts, 2)))
        self.n_first = len(cands)  # candidates from here on: the extra ones
        cands += [c for c in every if c not in cands]
        return cands

    def _bounding_box(self):
        xy = self.mech.fixed_xy
        reach = sum(b.length for b in self.mech.spec.bodies)
        lo = xy.min(axis=0) - reach
        hi = xy.max(axis=0) + reach
        return lo, hi

    def _raw_signs(self, q: np.ndarray) -> np.ndarray:
        """(N, n_candidates) signs in {-1, 0, +1} of every candidate at q (N, n)."""
        P = self.mech.points(q)
        out = np.zeros((q.shape[0], len(self.candidates)))
        for c, cand in enumerate(self.candidates):
            if cand[0] == "triangle":
                _, a, k, cc = cand
                u = P[:, k] - P[:, a]
                v = P[:, cc] - P[:, k]
                out[:, c] = np.sign(u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0])
            else:
                _, a, k, d = cand
                out[:, c] = np.sign((P[:, k] - P[:, a]) @ np.asarray(d))
        return out.astype(np.int64)

    def signature(self, q: np.ndarray) -> np.ndarray:
        """(N, n_selected) branch-discriminating signs of configurations q (N, n)."""
        q = np.atleast_2d(q)
        return self._raw_signs(q)[:, self.selected] if len(self.selected) else np.zeros((q.shape[0], 0), dtype=np.int64)

    # -- enumeration -----------------------------------------------------------------------------
    def solve_all(self, z: np.ndarray, starts: int | None = None) -> np.ndarray:
        """All distinct assembled configurations (K, n) for independent coordinates z (g,)."""
        mech = self.mech
        S = starts or self.starts
        lo, hi = self._box
        guess = np.empty((S, mech.n))
        nm = len(mech.moving_points)
        guess[:, : 2 * nm] = self.rng.uniform(np.tile(lo, nm), np.tile(hi, nm), size=(S, 2 * nm))
        guess[:, mech.rel_columns] = self.rng.uniform(-np.pi, np.pi, size=(S, mech.n_rel))
        guess[0] = mech.q0
        q, ok = kinematics.solve_position(mech, np.broadcast_to(z, (S, mech.dof)), guess, max_iter=60, t=self.t)
        q = q[ok & self._angles_consistent(q)]
        return self._dedupe(q)

    def solve_many(self, zs: np.ndarray) -> list[np.ndarray]:
        """[solve_all(z) for z in zs (M, g)] in one batched position solve: the same random
        starts drawn in the same order, and each state's Newton iterations stop when it
        converges (independent of the batch), so the same configurations (M x fewer calls)."""
        mech = self.mech
        S, n = self.starts, mech.n
        zs = np.asarray(zs, dtype=float).reshape(-1, mech.dof)
        M = zs.shape[0]
        lo, hi = self._box
        nm = len(mech.moving_points)
        guess = np.empty((M, S, n))
        for i in range(M):
            gi = guess[i]
            gi[:, : 2 * nm] = self.rng.uniform(np.tile(lo, nm), np.tile(hi, nm), size=(S, 2 * nm))
            gi[:, mech.rel_columns] = self.rng.uniform(-np.pi, np.pi, size=(S, mech.n_rel))
            gi[0] = mech.q0
        q, ok = kinematics.solve_position(mech, np.repeat(zs, S, axis=0), guess.reshape(M * S, n), max_iter=60, t=self.t)
        good = (ok & self._angles_consistent(q)).reshape(M, S)
        q = q.reshape(M, S, n)
        return [self._dedupe(q[i][good[i]]) for i in range(M)]

    def _angles_consistent(self, q):
        """Reject solutions whose angle coordinate points opposite to its segment (theta + pi)."""
        mech = self.mech
        if mech.n_rel == 0:
            return np.ones(q.shape[0], dtype=bool)
        P = mech.points(q)
        good = np.ones(q.shape[0], dtype=bool)
        for k, r in enumerate(mech.spec.relative_coordinates):
            d = P[:, r.points[1]] - P[:, r.points[0]]
            th = q[:, mech.rel_columns[k]]
            good &= d[:, 0] * np.cos(th) + d[:, 1] * np.sin(th) > 0
        return good

    def _dedupe(self, q):
        mech = self.mech
        qq = q.copy()
        if mech.n_rel:
            qq[:, mech.rel_columns] = np.angle(np.exp(1j * qq[:, mech.rel_columns]))
        out = []
        tol = 1e-6 * mech.length_scale
        for row, key in zip(q, qq):
            if not any(np.max(np.abs(key - o[1])) < tol for o in out):
                out.append((row, key))
        return np.array([o[0] for o in out]).reshape(-1, mech.n)

    def _select(self, samples: int) -> list[int]:
        """Candidate signs that tell the assemblies apart, a greedy minimal set. Preferred:
        signs that separate the assemblies at every sampled z (a sign that flips along a
        motion, as the crank-side triangle of a four-bar, never does), first the triangles of
        the bodies' first two points; where those cannot tell every assembly apart (several
        loops, bodies with three or more points), signs that separate them at some sampled z
        are added, so that distinct assemblies get distinct labels."""
        mech = self.mech
        if not self.candidates:
            return []
        strict = np.ones(len(self.candidates), dtype=bool)
        some = np.zeros(len(self.candidates), dtype=bool)
        defined = np.ones(len(self.candidates), dtype=bool)  # never 0 (collinear) at a sampled assembly
        motion = np.zeros(len(self.candidates))  # how much a candidate's neighbours move
        z0 = mech.q0[mech.independent]
        sample_signs = []
        for s in range(samples):
            z = z0.copy() if s == 0 else z0 + self._z_perturbation()
            sols = self.solve_all(z)
            if len(sols) < 2:
                continue
            signs = self._raw_signs(sols)
            strict &= np.ptp(signs, axis=0) > 0  # takes both values among the assemblies
            some |= np.ptp(signs, axis=0) > 0
            defined &= np.all(signs != 0, axis=0)
            P = mech.points(sols)
            for c, cand in enumerate(self.candidates):
                motion[c] += np.ptp(P[:, cand[1]], axis=0).sum()
                if cand[0] == "triangle":
                    motion[c] += np.ptp(P[:, cand[3]], axis=0).sum()
            sample_signs.append(signs)
        if not sample_signs:
            return []
        extra = np.arange(len(self.candidates)) >= self.n_first
        some &= defined
        groups = (strict & ~extra, strict & extra, some & ~strict & ~extra, some & ~strict & extra)
        order = [int(c) for g in groups for c in sorted(np.nonzero(g)[0], key=lambda c: motion[c])]
        # Greedy minimal set, dyad apexes (neighbours fixed across assemblies) first.
        chosen: list[int] = []
        for c in order:
            trial = chosen + [c]
            if not chosen or any(_n_distinct(sg[:, trial]) > _n_distinct(sg[:, chosen]) for sg in sample_signs):
                chosen = trial
            if all(_n_distinct(sg[:, chosen]) == len(sg) for sg in sample_signs):
                break
        return sorted(chosen)

    def _z_perturbation(self):
        mech = self.mech
        out = np.empty(mech.dof)
        for k, col in enumerate(mech.independent):
            if col in mech.rel_columns:
                out[k] = self.rng.uniform(-np.pi, np.pi)
            else:
                out[k] = self.rng.uniform(-0.5, 0.5) * mech.length_scale
        return out

    # -- labels -------------------------------------------------------------------------------
    def label(self, q: np.ndarray) -> np.ndarray:
        """(N,) branch labels of configurations q (N, n); new signatures get new labels.

        New signatures are registered first and the labels read after (the signatures after
        label 0 are kept sorted, so a label read before a later insertion could be stale:
        two distinct assemblies of one call would share it)."""
        rows = [tuple(int(v) for v in srow) for srow in self.signature(np.atleast_2d(q))]
        new = {row for row in rows if 0 not in row and row not in self.signatures}
        if new:
            self.signatures[1:] = sorted(self.signatures[1:] + sorted(new))
        out = np.empty(len(rows), dtype=np.int64)
        for r, row in enumerate(rows):
            out[r] = -1 if 0 in row else self.signatures.index(row)  # -1: on a singular (flattened) configuration
        return out

    def enumerate(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(qs (K, n), labels (K,)) of every assembly at z, sorted by label."""
        return self._sorted(self.solve_all(np.asarray(z, dtype=float)))

    def enumerate_many(self, zs: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """[enumerate(z) for z in zs (M, g)] with one batched solve (:meth:`solve_many`)."""
        return [self._sorted(sols) for sols in self.solve_many(zs)]

    def _sorted(self, sols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(solutions, labels) sorted by label (stable)."""
        if len(sols) == 0:
            return sols, np.zeros(0, dtype=np.int64)
        labels = self.label(sols)
        order = np.argsort(labels, kind="stable")
        return sols[order], labels[order]

    def count(self, z=None) -> int:
        """Number of assembly branches at z (default: the initial z)."""
        z = self.mech.q0[self.mech.independent] if z is None else z
        return len(self.solve_all(np.asarray(z, dtype=float)))

    def assemble(self, z: np.ndarray, labels: np.ndarray, starts: int = 16, t: float | None = None):
        """Configurations on requested branches: z (N, g), labels (N,) -> (q (N, n), ok (N,)),
        at time t (default the tool's).

        Vectorised over particles: ``starts`` random Newton starts each; ok is False where
        no solution with that label exists (e.g. z outside the branch's range).
        """
        mech = self.mech
        z = np.atleast_2d(np.asarray(z, dtype=float))
        labels = np.asarray(labels).reshape(-1)
        N = z.shape[0]
        lo, hi = self._box
        nm = len(mech.moving_points)
        guess = np.empty((N, starts, mech.n))
        guess[..., : 2 * nm] = self.rng.uniform(np.tile(lo, nm), np.tile(hi, nm), size=(N, starts, 2 * nm))
        guess[..., mech.rel_columns] = self.rng.uniform(-np.pi, np.pi, size=(N, starts, mech.n_rel))
        guess[:, 0] = mech.q0
        qs, ok = kinematics.solve_position(mech, np.repeat(z, starts, axis=0), guess.reshape(N * starts, mech.n), max_iter=60,
                                           t=self.t if t is None else t)
        ok &= self._angles_consistent(qs)
        lab = np.full(N * starts, -2, dtype=np.int64)
        if ok.any():
            lab[ok] = self.label(qs[ok])
        match = (lab.reshape(N, starts) == labels[:, None]) & ok.reshape(N, starts)
        first = np.argmax(match, axis=1)
        found = match[np.arange(N), first]
        q = qs.reshape(N, starts, mech.n)[np.arange(N), first]
        return q, found


def _n_distinct(rows: np.ndarray) -> int:
    return len({tuple(r) for r in rows})
