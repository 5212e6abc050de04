"""Marker builder: the picture of a mechanism, its ground truth and its estimates.

Shared by the ROS nodes (``visualization_msgs/MarkerArray`` for RViz, via
:func:`mbde_core.viz.marker_msgs.marker_array`) and by ``mbde render`` (matplotlib, :mod:`mbde_core.viz.render`),
so both show the same picture. Everything lives in the mechanism plane (x, y) of the
frame the states are expressed in; shapes are plain data (:class:`Shape`).

What is drawn (namespace ``<source>/<part>``, ``source`` = ``truth``, ``model`` or the
estimator name):

- ``bars``: every body as its edges (a rigid polygon closes), one line list, and the
  moving points as spheres (``joints``); truth dark grey and wide, under the estimates,
  each estimator thinner in its own colour (its traits' ``color``, passed as ``style``;
  :data:`COLORS` for truth and model);
- ``hypotheses`` (particle filter): the top-K particles by weight, each a faint linkage
  with alpha proportional to its weight (relative to the heaviest, at most
  ``HYPOTHESIS_ALPHA``), coloured by assembly branch (:data:`BRANCH_COLORS`);
- ``ellipses``: the 95 % confidence ellipse of every moving point, propagated from the
  covariance of the independent coordinates: dq = R dz (R = dq/dz, the velocity-problem
  matrix at the estimate), so Sigma_p = R_p P_zz R_p^T (2x2, R_p the point's rows of R),
  and the ellipse {x: (x - p)^T Sigma_p^-1 (x - p) = chi2_2(0.95) = 5.991};
- ``label``: a text with the source name, the branch probabilities and the effective
  sample size (ESS) of a particle filter, or the NIS of a Kalman filter; labels are
  stacked above the mechanism, one slot per source (no overlap between nodes: truth 0,
  an estimator its traits' ``slot``, others a row after ``FIXED_SLOTS`` picked by name);
- ``ground`` (``model`` source, static): fixed pivots with names, slider tracks.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mbde_core.engine import kinematics
from mbde_core.engine.branches import BranchTool

CHI2_2_95 = 5.991464547107979  # chi-square quantile, 2 dof, p = 0.95
HYPOTHESIS_ALPHA = 0.6

COLORS = {
    "truth": (0.25, 0.25, 0.25, 0.45),
    "model": (0.45, 0.45, 0.45, 1.0),
}
EXTRA_COLORS = [(0.09, 0.75, 0.81, 1.0), (0.74, 0.74, 0.13, 1.0), (0.50, 0.50, 0.50, 1.0)]
BRANCH_COLORS = [(0.00, 0.70, 0.85), (0.90, 0.10, 0.60), (0.60, 0.75, 0.10), (0.95, 0.60, 0.00), (0.40, 0.30, 0.80)]
SLOTS = ("truth",)
FIXED_SLOTS = 8  # label rows 0..7: truth and the estimators whose traits give a slot


@dataclass
class Shape:
    """One drawable primitive (one RViz marker).

    kind: 'lines' (vertex pairs = segments; RViz LINE_LIST), 'points' (spheres of
    diameter ``size``; SPHERE_LIST) or 'text' (at xy[0], height ``size``;
    TEXT_VIEW_FACING). ns, id: marker namespace and id (stable between frames).
    xy: (K, 2) vertices [m]; color (4,) rgba; colors: optional (K, 4) per-vertex rgba;
    size: line width / sphere diameter / text height [m]; z: height above the plane
    (draw order: larger on top).
    """

    kind: str
    ns: str
    id: int
    xy: np.ndarray
    color: tuple
    size: float
    text: str = ""
    colors: np.ndarray | None = None
    z: float = 0.0

    @property
    def empty(self) -> bool:
        return self.kind != "text" and len(self.xy) == 0


def color_of(source: str, style=None) -> tuple:
    """The rgba colour of a source: ``style.color`` if given (an estimator's traits), truth
    and model their own, any other label one of EXTRA_COLORS by its name."""
    if style is not None and getattr(style, "color", None) is not None:
        return tuple(style.color)
    if source in COLORS:
        return COLORS[source]
    return EXTRA_COLORS[sum(map(ord, source)) % len(EXTRA_COLORS)]


def slot_of(source: str, style=None) -> int:
    """The label row of a source: ``style.slot`` if given (an estimator's traits), truth 0,
    any other label a row after FIXED_SLOTS by its name."""
    if style is not None and getattr(style, "slot", None) is not None:
        return int(style.slot)
    return SLOTS.index(source) if source in SLOTS else FIXED_SLOTS + sum(map(ord, source)) % 8


@dataclass
class _Geometry:
    edges: np.ndarray  # (E, 2) point index pairs
    fixed: np.ndarray  # fixed point indices
    moving: np.ndarray  # moving point indices
    tracks: list = field(default_factory=list)  # [(origin (2,), unit direction (2,))]


_CIRCLES: dict[int, np.ndarray] = {}


def _circle(segments: int) -> np.ndarray:
    """(2, segments + 1) cos, sin of segments + 1 angles over [0, 2 pi] (cached, read-only)."""
    c = _CIRCLES.get(segments)
    if c is None:
        t = np.linspace(0.0, 2 * np.pi, segments + 1)
        c = np.stack([np.cos(t), np.sin(t)])
        c.setflags(write=False)
        _CIRCLES[segments] = c
    return c


class MechanismDrawer:
    """Shapes of one mechanism (its geometry is read once).

    Sizes scale with the longest body L: bar width 0.02 L, joints 0.045 L, text 0.07 L.
    """

    def __init__(self, mech):
        self.mech = mech
        edges = []
        for b in mech.spec.bodies:
            pts = list(b.points)
            pairs = list(zip(pts, pts[1:]))
            if len(pts) > 2:
                pairs.append((pts[-1], pts[0]))
            for i, j in pairs:
                if not (mech.spec.points[i].fixed and mech.spec.points[j].fixed):
                    edges.append((i, j))
        fixed = [i for i, p in enumerate(mech.spec.points) if p.fixed]
        tracks = []
        for s in mech.spec.sliders:
            d = np.asarray(s.direction, float)
            tracks.append((np.asarray(s.origin, float), d / np.linalg.norm(d)))
        self.geo = _Geometry(np.array(edges, dtype=np.intp).reshape(-1, 2), np.array(fixed, dtype=np.intp),
                             np.asarray(mech.moving_points, dtype=np.intp), tracks)
        L = float(mech.length_scale)
        self.L = L
        self.bar_width = 0.02 * L
        self.joint_size = 0.045 * L
        self.text_size = 0.07 * L
        P0 = mech.points(mech.q0)
        lo, hi = P0.min(axis=0), P0.max(axis=0)
        self.extent = (lo, hi)
        self.label_anchor = np.array([lo[0], hi[1] + 0.35 * L])
        self._particles = None

    # -- bounding box --------------------------------------------------------------------------
    def bounds(self, qs) -> tuple[np.ndarray, np.ndarray]:
        """(lo (2,), hi (2,)) of the points of configurations qs (K, n), fixed points and labels."""
        P = self.mech.points(np.atleast_2d(qs)).reshape(-1, 2)
        lo = np.minimum(P.min(axis=0), self.extent[0])
        hi = np.maximum(P.max(axis=0), self.extent[1])
        return lo, hi

    # -- linkages -------------------------------------------------------------------------------
    def linkage(self, q, source: str, color=None, z: float = 0.0, id0: int = 0, scale: float = 1.0) -> list[Shape]:
        """Bars and joints of one configuration q (n,); scale multiplies the widths."""
        color = tuple(color or color_of(source))
        P = self.mech.points(np.asarray(q, float))
        seg = P[self.geo.edges].reshape(-1, 2)
        return [Shape("lines", f"{source}/bars", id0, seg, color, scale * self.bar_width, z=z),
                Shape("points", f"{source}/joints", id0, P[self.geo.moving], color, scale * self.joint_size,
                      z=z + 1e-3)]

    def linkages(self, qs, rgba, source: str, part: str = "hypotheses", z: float = -0.01, id0: int = 0) -> Shape:
        """Many configurations qs (K, n) as one line list, per-linkage colours rgba (K, 4)."""
        qs = np.atleast_2d(np.asarray(qs, float)).reshape(-1, self.mech.n)
        P = self.mech.points(qs) if len(qs) else np.zeros((0, self.mech.n_points, 2))
        E = len(self.geo.edges)
        seg = P[:, self.geo.edges].reshape(-1, 2)  # (K * E * 2, 2)
        cols = np.repeat(np.asarray(rgba, float).reshape(-1, 4), 2 * E, axis=0)
        base = tuple(np.asarray(rgba, float).reshape(-1, 4)[0]) if len(qs) else (0.0, 0.0, 0.0, 0.0)
        return Shape("lines", f"{source}/{part}", id0, seg, base, 0.6 * self.bar_width, colors=cols, z=z)

    # -- uncertainty ----------------------------------------------------------------------------
    def point_covariances(self, q, cov_z) -> np.ndarray:
        """(M, 2, 2) position covariances of the moving points from P_zz (g, g): R_p P R_p^T."""
        mech = self.mech
        R = kinematics.r_matrix(mech, np.asarray(q, float)[None])[0]  # (n, g)
        rows = np.stack([mech.px[self.geo.moving], mech.py[self.geo.moving]], axis=1)  # (M, 2)
        J = R[rows]  # (M, 2, g)
        return np.einsum("mig,gh,mjh->mij", J, np.asarray(cov_z, float), J)

    def ellipses(self, q, cov_z, source: str, color=None, z: float = 0.02, segments: int = 36,
                 chi2: float = CHI2_2_95) -> Shape:
        """95 % confidence ellipses of the moving points (one line list)."""
        color = tuple(color or color_of(source))
        P = self.mech.points(np.asarray(q, float))[self.geo.moving]
        S = self.point_covariances(q, cov_z)
        circle = _circle(segments)  # (2, s+1)
        # all points at once: eigh and the rings of the (M, 2, 2) stack (the same values
        # as point by point, one numpy call each instead of M)
        w, V = np.linalg.eigh(0.5 * (S + S.transpose(0, 2, 1)))
        keep = np.isfinite(w).all(axis=1)
        if not keep.all():
            P, w, V = P[keep], w[keep], V[keep]
        r = np.sqrt(chi2 * np.clip(w, 0.0, None))  # (M, 2)
        rings = (P[:, :, None] + (V * r[:, None, :]) @ circle).transpose(0, 2, 1)  # (M, s+1, 2)
        xy = np.stack([rings[:, :-1], rings[:, 1:]], axis=2).reshape(-1, 2)
        return Shape("lines", f"{source}/ellipses", 0, xy, color, 0.4 * self.bar_width, z=z)

    # -- text -----------------------------------------------------------------------------------
    def label(self, source: str, text: str, color=None, slot: int | None = None) -> Shape:
        xy = self.label_anchor + np.array([0.0, (slot_of(source) if slot is None else slot) * 1.6 * self.text_size])
        rgba = tuple(color or color_of(source))
        return Shape("text", f"{source}/label", 0, xy[None], rgba[:3] + (max(rgba[3], 0.9),), self.text_size,
                     text=text, z=0.05)

    # -- static geometry ------------------------------------------------------------------------
    def ground(self, source: str = "model") -> list[Shape]:
        """Fixed pivots (spheres + ground hatch + names) and slider tracks."""
        mech = self.mech
        color = color_of(source)
        xy = mech.fixed_xy
        fixed = xy[self.geo.fixed] if len(self.geo.fixed) else np.zeros((0, 2))
        hatch = []
        h = 0.06 * self.L
        for p in fixed:
            base = p + np.array([0.0, -0.7 * h])
            hatch += [base + [-h, 0], base + [h, 0]]
            for k in range(4):
                x0 = base + [-h + k * (2 * h / 3), 0]
                hatch += [x0, x0 + [-0.5 * h, -0.6 * h]]
        for origin, d in self.geo.tracks:
            span = 1.5 * self.L
            hatch += [origin - span * d, origin + span * d]
        shapes = [Shape("points", f"{source}/pivots", 0, fixed, color, 1.4 * self.joint_size, z=-0.02),
                  Shape("lines", f"{source}/ground", 0, np.array(hatch).reshape(-1, 2), color, 0.5 * self.bar_width,
                        z=-0.03)]
        for k in self.geo.fixed:
            shapes.append(Shape("text", f"{source}/names", int(k), (xy[k] + [0.08 * self.L, -0.16 * self.L])[None],
                                color, 0.6 * self.text_size, text=mech.point_names[k], z=-0.02))
        return shapes

    # -- particles ------------------------------------------------------------------------------
    def hypotheses(self, cloud, source: str, top_k: int = 30, hint=None) -> Shape:
        """The top-K particles of a cloud (ParticleCloud) as faint linkages (see module doc).

        hint: an estimate (MechanismSnapshot) whose q seeds the assembly of its branch.
        """
        w = np.asarray(cloud.weight, float)
        K = int(min(top_k, len(w)))
        if K <= 0:
            return self.linkages(np.zeros((0, self.mech.n)), np.zeros((0, 4)), source)
        idx = np.argsort(-w, kind="stable")[:K]
        if self._particles is None:
            self._particles = ParticleAssembler(self.mech)
        branch = np.asarray(cloud.branch)[idx]
        q, ok = self._particles.assemble(np.asarray(cloud.z, float)[idx], branch, hint)
        wmax = float(w[idx].max()) if w[idx].max() > 0 else 1.0
        rgba = np.empty((K, 4))
        for k, (b, wk) in enumerate(zip(branch, w[idx])):
            rgba[k, :3] = BRANCH_COLORS[int(b) % len(BRANCH_COLORS)] if b >= 0 else (0.5, 0.5, 0.5)
            rgba[k, 3] = max(0.04, HYPOTHESIS_ALPHA * float(wk) / wmax)
        return self.linkages(q[ok], rgba[ok], source)


class ParticleAssembler:
    """Configurations q of particles (z, branch label): Newton from the last configuration
    found on the same branch (continuity makes this the usual case), else the batched
    multi-start search of :class:`mbde_core.engine.branches.BranchTool`."""

    def __init__(self, mech):
        self.mech = mech
        self._bt = None
        self.cache: dict[int, np.ndarray] = {}

    @property
    def branches(self):
        if self._bt is None:
            self._bt = BranchTool(self.mech)
        return self._bt

    def assemble(self, z, branch, hint=None):
        """z (K, g), branch (K,) -> (q (K, n), ok (K,))."""
        mech = self.mech
        z = np.atleast_2d(np.asarray(z, float))
        branch = np.asarray(branch, dtype=np.int64).reshape(-1)
        K = len(z)
        q = np.zeros((K, mech.n))
        ok = np.zeros(K, dtype=bool)
        if hint is not None and getattr(hint, "branch", -1) is not None and len(getattr(hint, "q", ())) == mech.n:
            self.cache.setdefault(int(hint.branch), np.asarray(hint.q, float))
        for b in np.unique(branch):
            sel = np.nonzero(branch == b)[0]
            guess = self.cache.get(int(b))
            if guess is None and b < 0 and hint is not None and len(getattr(hint, "q", ())) == mech.n:
                guess = np.asarray(hint.q, float)
            if guess is not None:
                qs, good = kinematics.solve_position(mech, z[sel], np.broadcast_to(guess, (len(sel), mech.n)).copy())
                good = good & np.all(np.isfinite(qs), axis=1)
                if b >= 0 and good.any():
                    good[good] &= self.branches.label(qs[good]) == b
                q[sel[good]], ok[sel[good]] = qs[good], True
            rest = sel[~ok[sel]]
            if len(rest) and b >= 0:
                qs, good = self.branches.assemble(z[rest], np.full(len(rest), b))
                q[rest[good]], ok[rest[good]] = qs[good], True
            done = sel[ok[sel]]
            if len(done):
                self.cache[int(b)] = q[done[0]].copy()
        return q, ok


# ------------------------------------------------------------------------------- scenes
def label_text(source: str, snap=None, cloud=None, nis: float | None = None) -> str:
    """'pf  branch 0: 97.5 %  1: 2.5 %  ESS 412/500' and the like."""
    parts = [source]
    if snap is not None and snap.branch_probabilities is not None and len(snap.branch_probabilities):
        probs = "  ".join(f"{k}: {100 * p:.1f} %" for k, p in enumerate(np.asarray(snap.branch_probabilities)))
        parts.append(f"branch {probs}")
    elif snap is not None and getattr(snap, "branch", -1) >= 0 and source == "truth":
        parts.append(f"branch {snap.branch}")
    if cloud is not None:
        parts.append(f"ESS {cloud.ess:.0f}/{len(cloud.weight)}")
    if nis is not None and np.isfinite(nis):
        parts.append(f"NIS {nis:.2f}")
    return "  ".join(parts)


def truth_shapes(drawer: MechanismDrawer, snap) -> list[Shape]:
    """The ground truth: wide bars (under the estimates) and a label."""
    return drawer.linkage(snap.q, "truth", z=0.0, scale=2.2) + [drawer.label("truth", label_text("truth", snap))]


def estimate_shapes(drawer: MechanismDrawer, source: str, snap, cloud=None, top_k: int = 30,
                    nis: float | None = None, ellipses: bool = True, style=None) -> list[Shape]:
    """An estimate: bars, 95 % ellipses (if it has a covariance), PF hypotheses (if a
    particle cloud is given) and a label. Empty parts are kept (as empty shapes) so the
    marker ids stay the same from frame to frame. style: the estimator's colour and label
    slot (anything with ``color`` and ``slot``: its :class:`~mbde_core.estimators.traits.Traits`)."""
    slot = slot_of(source, style)
    color = color_of(source, style)
    z = 0.005 * (1 + slot % 8)
    # later slots thinner and on top: coinciding estimates stay visible as nested colours
    shapes = drawer.linkage(snap.q, source, color=color, z=z, scale=max(0.45, 1.3 - 0.2 * (slot % 8)))
    g = drawer.mech.dof
    if ellipses:
        cov = None if snap.cov is None else np.asarray(snap.cov, float)
        if cov is not None and cov.shape[0] >= g and np.all(np.isfinite(cov[:g, :g])):
            shapes.append(drawer.ellipses(snap.q, cov[:g, :g], source, color=color, z=z + 0.002))
        else:
            shapes.append(Shape("lines", f"{source}/ellipses", 0, np.zeros((0, 2)), color, 0.0))
    if cloud is not None:
        shapes.append(drawer.hypotheses(cloud, source, top_k, hint=snap))
    shapes.append(drawer.label(source, label_text(source, snap, cloud, nis), color=color, slot=slot))
    return shapes
