"""Matplotlib pictures of the marker shapes, and the ``mbde render`` animation of bags.

:func:`draw_shapes` draws :class:`mbde_core.viz.markers.Shape` primitives in data units
(line widths, sphere diameters and text heights in metres, as RViz draws the same
markers), so a frame of ``mbde render`` is the RViz view of the same instant.

A bag is read into :class:`Track` objects, one per source: the ground truth
(``/mbde/ground_truth``), every estimate (``/mbde/<name>/state``, with
``/mbde/<name>/particles`` if present: the estimates bag of ``mbde replay`` or a bag
recorded from the live nodes), and optionally in-memory replay runs (``mbde render
--estimators``: :mod:`mbde_core.cli.cmd_render` runs them, this module only draws). Each
frame shows, for every source, its latest state at the frame time.
"""
from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field

import numpy as np

from mbde_core.config.paths import resolve
from mbde_core.errors import DataError
from mbde_core.model.mechanism import load_mechanism
from mbde_core.rosio.bag import BagReader
from mbde_core.rosio.convert import (
    MECHANISM_STATE, PARTICLE_SET, cloud_from_particle_set, snapshot_from_mechanism_state, string_from_msg)
from mbde_core.scenario.description import DESCRIPTION_TOPIC, scenario_from_description
from mbde_core.viz.markers import MechanismDrawer, estimate_shapes, truth_shapes

TRUTH_TOPIC = "/mbde/ground_truth"


# ------------------------------------------------------------------------------ drawing
def _units_to_points(ax) -> float:
    """Typographic points per data unit along x (axes with equal scales)."""
    fig = ax.figure
    x0, x1 = ax.get_xlim()
    width_in = ax.get_position().width * fig.get_figwidth()
    return width_in * 72.0 / (x1 - x0)


def draw_shapes(ax, shapes) -> None:
    """Draw shapes on ax in z order (limits must be set first: sizes are in data units)."""
    from matplotlib.collections import EllipseCollection, LineCollection

    k = _units_to_points(ax)
    for s in sorted(shapes, key=lambda s: s.z):
        if s.empty:
            continue
        xy = np.asarray(s.xy, float)
        if s.kind == "lines":
            segs = xy.reshape(-1, 2, 2)
            colors = s.colors[::2] if s.colors is not None else [s.color]
            ax.add_collection(LineCollection(segs, colors=colors, linewidths=max(s.size * k, 0.3),
                                             capstyle="round", zorder=10 + s.z))
        elif s.kind == "points":
            n = len(xy)
            ax.add_collection(EllipseCollection(np.full(n, s.size), np.full(n, s.size), np.zeros(n), units="xy",
                                                offsets=xy, offset_transform=ax.transData,
                                                facecolors=[s.color], zorder=10 + s.z))
        elif s.kind == "text":
            ax.text(xy[0, 0], xy[0, 1], s.text, color=s.color[:3], alpha=s.color[3], fontsize=max(s.size * k, 4),
                    family="monospace", va="bottom", ha="left", zorder=10 + s.z)


# ------------------------------------------------------------------------------ tracks
@dataclass
class Track:
    """One source's states over time: stamps (K,), snapshots, particle clouds [(t, cloud)]."""

    source: str
    stamps: list = field(default_factory=list)
    snaps: list = field(default_factory=list)
    cloud_stamps: list = field(default_factory=list)
    clouds: list = field(default_factory=list)

    def at(self, t: float):
        """(latest snapshot with stamp <= t or None, latest cloud or None)."""
        i = bisect.bisect_right(self.stamps, t) - 1
        j = bisect.bisect_right(self.cloud_stamps, t) - 1
        return (self.snaps[i] if i >= 0 else None), (self.clouds[j] if j >= 0 else None)


def _source_of(topic: str) -> str | None:
    """'/mbde/ukf/state' -> 'ukf' (also '/ukf/state', '/x/mbde/ukf/particles')."""
    parts = [p for p in topic.split("/") if p]
    if len(parts) >= 2 and parts[-1] in ("state", "particles"):
        return parts[-2]
    return None


def load_tracks(bags, mechanism_file: str | None = None):
    """(truth_mech, estimator_mech, {source: Track}) from one or more bags.

    The mechanisms come from the first ``/mbde/description`` found (truth model and the
    estimator's model with its model errors), or from ``mechanism_file`` for both.
    """
    truth_mech = est_mech = None
    if mechanism_file:
        truth_mech = est_mech = load_mechanism(resolve(mechanism_file, "mechanism file"))
    tracks: dict[str, Track] = {}
    for bag in bags:
        with BagReader(bag) as reader:
            topics = {t: ty for t, ty, _ in reader.topics()}
            if truth_mech is None and DESCRIPTION_TOPIC in topics:
                for _, _, msg in reader.messages([DESCRIPTION_TOPIC]):
                    scenario = scenario_from_description(string_from_msg(msg), f"{bag}:{DESCRIPTION_TOPIC}")
                    truth_mech, est_mech = scenario.truth_mechanism(), scenario.estimator_mechanism()
                    break
            wanted = {}
            for topic, typ in topics.items():
                if typ == MECHANISM_STATE and topic == TRUTH_TOPIC:
                    wanted[topic] = ("truth", "state")
                elif typ in (MECHANISM_STATE, PARTICLE_SET) and _source_of(topic):
                    wanted[topic] = (_source_of(topic), "state" if typ == MECHANISM_STATE else "particles")
            if not wanted:
                continue
            for topic, _, msg in reader.messages(list(wanted)):
                source, kind = wanted[topic]
                tr = tracks.setdefault(source, Track(source))
                try:
                    if kind == "state":
                        snap = snapshot_from_mechanism_state(msg)
                        tr.stamps.append(snap.stamp)
                        tr.snaps.append(snap)
                    else:
                        cloud = cloud_from_particle_set(msg)
                        tr.cloud_stamps.append(cloud.stamp)
                        tr.clouds.append(cloud)
                except DataError:
                    continue
    if truth_mech is None:
        raise DataError(f"{', '.join(map(str, bags))}: no {DESCRIPTION_TOPIC} in the bag(s): give --mechanism")
    for tr in tracks.values():
        order = np.argsort(tr.stamps, kind="stable")
        tr.stamps = [tr.stamps[i] for i in order]
        tr.snaps = [tr.snaps[i] for i in order]
        order = np.argsort(tr.cloud_stamps, kind="stable")
        tr.cloud_stamps = [tr.cloud_stamps[i] for i in order]
        tr.clouds = [tr.clouds[i] for i in order]
    return truth_mech, est_mech, {k: v for k, v in tracks.items() if v.snaps}


def tracks_from_runs(runs) -> dict[str, Track]:
    """Tracks of in-memory replay runs (:class:`mbde_core.replay.runner.EstimatorRun`)."""
    out = {}
    for r in runs:
        tr = Track(r.name)
        tr.snaps = [rec.estimate for rec in r.records]
        tr.stamps = [s.stamp for s in tr.snaps]
        tr.cloud_stamps = [c.stamp for _, c in r.particles]
        tr.clouds = [c for _, c in r.particles]
        out[r.name] = tr
    return out


# ------------------------------------------------------------------------------ frames
class Renderer:
    """Draws frames of tracks: truth with the truth model, estimates with the estimator's."""

    def __init__(self, truth_mech, est_mech, tracks: dict, top_k: int = 30, size=(6.4, 4.8), dpi: int = 100,
                 style_of=None):
        """style_of: name -> the estimator's colour and label slot (its traits), or None."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.truth = MechanismDrawer(truth_mech)
        self.est = MechanismDrawer(est_mech) if est_mech is not truth_mech else self.truth
        self.tracks = tracks
        self.top_k = top_k
        self.style_of = style_of or (lambda name: None)
        self.fig = plt.figure(figsize=size, dpi=dpi)
        self.ax = self.fig.add_axes((0.02, 0.02, 0.96, 0.96))
        self._limits = None

    def order(self) -> list[str]:
        names = [k for k in self.tracks if k != "truth"]
        return (["truth"] if "truth" in self.tracks else []) + sorted(names)

    def time_range(self) -> tuple[float, float]:
        starts = [tr.stamps[0] for tr in self.tracks.values()]
        ends = [tr.stamps[-1] for tr in self.tracks.values()]
        if not starts:
            raise DataError("nothing to render: no ground truth and no estimates in the bag(s)")
        return min(starts), max(ends)

    def shapes_at(self, t: float) -> list:
        shapes = []
        for name in self.order():
            snap, cloud = self.tracks[name].at(t)
            if snap is None:
                continue
            if name == "truth":
                shapes += truth_shapes(self.truth, snap)
            else:
                shapes += estimate_shapes(self.est, name, snap, cloud, self.top_k, style=self.style_of(name))
        return shapes

    def fit_limits(self, t0: float, t1: float) -> None:
        """Axis limits covering every configuration in [t0, t1] and the labels, equal scales."""
        qs = []
        for name, tr in self.tracks.items():
            i0 = bisect.bisect_left(tr.stamps, t0)
            i1 = bisect.bisect_right(tr.stamps, t1)
            sel = tr.snaps[i0:i1:max(1, (i1 - i0) // 200)] or tr.snaps[-1:]
            drawer = self.truth if name == "truth" else self.est
            if sel and drawer is self.truth:
                qs.append(self.truth.mech.points(np.array([s.q for s in sel])).reshape(-1, 2))
            elif sel:
                qs.append(self.est.mech.points(np.array([s.q for s in sel])).reshape(-1, 2))
        P = np.concatenate(qs + [self.truth.mech.fixed_xy[[i for i, p in enumerate(self.truth.mech.spec.points)
                                                            if p.fixed]]] if qs else [np.zeros((1, 2))])
        lo, hi = P.min(axis=0), P.max(axis=0)
        d = self.truth
        top = d.label_anchor[1] + (len(self.order()) + 0.5) * 1.6 * d.text_size
        widest = max((len(self._label_guess(n)) for n in self.order()), default=10)
        hi = np.array([max(hi[0], d.label_anchor[0] + 0.62 * d.text_size * widest), max(hi[1], top)])
        lo = np.minimum(lo, d.label_anchor)
        pad = 0.08 * d.L
        lo, hi = lo - pad, hi + pad
        fw, fh = self.fig.get_figwidth() * 0.96, self.fig.get_figheight() * 0.96
        span = hi - lo
        scale = max(span[0] / fw, span[1] / fh)
        c = 0.5 * (lo + hi)
        half = 0.5 * scale * np.array([fw, fh])
        self._limits = (c - half, c + half)

    def _label_guess(self, name: str) -> str:
        tr = self.tracks.get(name)
        probs = tr.snaps[-1].branch_probabilities if tr and tr.snaps else None
        n = 0 if probs is None else len(probs)
        return name + " " * 8 + "branch " + "0: 100.0 %  " * n + ("ESS 1000/1000" if tr and tr.clouds else "")

    def draw(self, t: float, title: str | None = None) -> None:
        ax = self.ax
        ax.cla()
        lo, hi = self._limits
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_aspect("equal", adjustable="box")
        ax.set_xticks([])
        ax.set_yticks([])
        for side in ax.spines.values():
            side.set_color("0.85")
        draw_shapes(ax, self.truth.ground())
        draw_shapes(ax, self.shapes_at(t))
        if title:
            ax.text(0.99, 0.01, title, transform=ax.transAxes, ha="right", va="bottom", fontsize=8, color="0.3")


MAX_FRAMES = 20000  # of a GIF (about 22 min at 15 fps)


def check_output(out: str) -> str:
    """The picture kind of ``out``: '.gif' (animation) or '.png' (one frame); DataError otherwise."""
    ext = os.path.splitext(out)[1].lower()
    if ext not in (".gif", ".png"):
        raise DataError(f"--out {out}: write a .gif (animation) or a .png (one frame)")
    return ext


def render(truth_mech, est_mech, tracks: dict, out: str, *, fps: float = 15.0, speed: float = 1.0,
           start: float = 0.0, duration: float | None = None, time: float | None = None, top_k: int = 30,
           size=(6.4, 4.8), dpi: int = 100, progress=None, style_of=None) -> dict:
    """Render tracks (:func:`load_tracks`, :func:`tracks_from_runs`) into ``out``: an
    animated GIF (``.gif``) or one PNG frame (``.png``).

    Truth is drawn with ``truth_mech``, estimates with ``est_mech``. start/duration [s]:
    the time window relative to the first state; time [s]: the PNG frame's time (default:
    the window's end). style_of: source name -> its colour and label slot (an estimator's
    traits) or None. Returns {frames, t0, t1, sources}.
    """
    ext = check_output(out)
    r = Renderer(truth_mech, est_mech, tracks, top_k=top_k, size=size, dpi=dpi, style_of=style_of)
    t_first, t_last = r.time_range()
    t0 = t_first + max(0.0, start)
    t1 = t_last if duration is None else min(t_last, t0 + duration)
    if t1 < t0:
        raise DataError(f"--start {start} is after the end of the data ({t_last - t_first:.3f} s)")
    r.fit_limits(t0, t1)
    import matplotlib.pyplot as plt

    sources = r.order()
    try:
        if ext == ".png":
            if time is not None and t_first + time > t_last + 1e-9:
                raise DataError(f"--time {time:g} is after the end of the data ({t_last - t_first:.3f} s)")
            t = t1 if time is None else min(max(t_first + time, t_first), t_last)
            r.draw(t, f"t = {t - t_first:.2f} s")
            r.fig.savefig(out, dpi=dpi)
            return {"frames": 1, "t0": t, "t1": t, "sources": sources}
        from matplotlib.animation import FuncAnimation, PillowWriter

        # (+1e-6: epoch stamps differ from the nominal grid by up to 0.12 us)
        n = max(1, int(np.floor((t1 - t0) * fps / speed + 1e-6)) + 1)
        if n > MAX_FRAMES:
            raise DataError(f"--fps {fps:g} / --speed {speed:g}: {n} frames for {t1 - t0:.3f} s of data, at most "
                            f"{MAX_FRAMES} (raise --speed, lower --fps or shorten --duration)")
        times = t0 + np.arange(n) * speed / fps

        def frame(i):
            r.draw(times[i], f"t = {times[i] - t_first:.2f} s")
            if progress is not None:
                progress(i + 1, n)
            return []

        anim = FuncAnimation(r.fig, frame, frames=n, blit=False, repeat=False)
        anim.save(out, writer=PillowWriter(fps=fps), dpi=dpi)
        return {"frames": n, "t0": t0, "t1": float(times[-1]), "sources": sources}
    finally:
        plt.close(r.fig)
