"""What makes a replay's estimates bag viewable in Foxglove or RViz: TF and markers.

Topics added to the estimates bag (the same ones the live nodes publish, so a bag of a
live run and a replay look alike):

- ``/tf_static`` (latched): static frames of the truth and of every estimator's tree
  (ground links, sensor mounts; :class:`mbde_core.viz.frames.MechanismFrames`);
- ``/tf``: ``world`` -> ``<estimator>/<body>`` at every estimate, and (with ground truth
  in the source bag) ``world`` -> ``<body>`` of the truth at most every ``TRUTH_TF_PERIOD``;
- ``/mbde/model/markers`` (latched): fixed pivots and slider tracks;
- ``/mbde/ground_truth/markers`` and ``/mbde/<estimator>/markers`` every
  ``marker_period`` of data time: the pictures of :mod:`mbde_core.viz.markers`.

:func:`view_topics` lists them, :func:`view_events` yields ``(stamp, topic, message)`` in
stamp order, to be merged with the other messages of the bag.
"""
from __future__ import annotations

import heapq
import types

from mbde_core.rosio.tf import TF_MESSAGE, TF_STATIC_TOPIC, TF_TOPIC, tf_message
from mbde_core.viz.frames import MechanismFrames
from mbde_core.viz.markers import MARKER_ARRAY, MechanismDrawer, estimate_shapes, marker_array, truth_shapes

MODEL_MARKERS = "/mbde/model/markers"
TRUTH_MARKERS = "/mbde/ground_truth/markers"
TRUTH_TF_PERIOD = 0.01  # s: truth frames at <= 100 Hz (TF consumers interpolate)
MARKER_PERIOD = 0.1  # s: 10 Hz of data time, as the live nodes' marker_rate


def view_topics(runs, has_truth: bool) -> list[tuple[str, str, str]]:
    """[(topic, type, qos)] of the viewable topics of an estimates bag."""
    out = [(TF_STATIC_TOPIC, TF_MESSAGE, "transient_local"), (TF_TOPIC, TF_MESSAGE, "reliable"),
           (MODEL_MARKERS, MARKER_ARRAY, "transient_local")]
    if has_truth:
        out.append((TRUTH_MARKERS, MARKER_ARRAY, "reliable"))
    out += [(f"/mbde/{r.name}/markers", MARKER_ARRAY, "reliable") for r in runs]
    return out


def _every(stamps, period: float):
    """Indices of a stamp sequence thinned to at most one per ``period`` [s]."""
    nxt = None
    for k, t in enumerate(stamps):
        if nxt is None or t >= nxt - 1e-9:
            nxt = t + period
            yield k


def view_events(factory, inputs, runs, frame_id: str = "world", marker_period: float = MARKER_PERIOD):
    """(stamp [s], topic, message) of every viewable topic, in stamp order."""
    mech = inputs.mechanism
    drawer = MechanismDrawer(mech)
    truth = inputs.truth
    static = []
    streams = []
    if truth is not None:
        frames = MechanismFrames(mech, inputs.sensors, world=frame_id)
        static += frames.static()
        streams.append(_truth_events(factory, frames, drawer, truth, frame_id, marker_period))
    for r in runs:
        frames = MechanismFrames(mech, inputs.sensors, world=frame_id, prefix=f"{r.name}/")
        static += frames.static()
        streams.append(_estimate_events(factory, frames, drawer, r, frame_id, marker_period))
    t0 = inputs.start
    yield t0, TF_STATIC_TOPIC, tf_message(factory, static, t0)
    yield t0, MODEL_MARKERS, marker_array(factory, drawer.ground(), frame_id, t0)
    yield from heapq.merge(*streams, key=lambda e: e[0])


def _truth_events(factory, frames, drawer, truth, frame_id, marker_period):
    tf_due = set(_every(truth.t, TRUTH_TF_PERIOD))
    marker_due = set(_every(truth.t, marker_period))
    for k in sorted(tf_due | marker_due):
        t = float(truth.t[k])
        if k in tf_due:
            yield t, TF_TOPIC, tf_message(factory, frames.moving(truth.q[k]), t)
        if k in marker_due:
            snap = types.SimpleNamespace(q=truth.q[k], branch=int(truth.branch[k]), branch_probabilities=None)
            yield t, TRUTH_MARKERS, marker_array(factory, truth_shapes(drawer, snap), frame_id, t)


def _estimate_events(factory, frames, drawer, run, frame_id, marker_period):
    topic = f"/mbde/{run.name}/markers"
    clouds = {id(c): c for _, c in run.particles}
    by_stamp = {c.stamp: c for c in clouds.values()}
    stamps = [rec.estimate.stamp for rec in run.records]
    marker_due = set(_every(stamps, marker_period))
    for k, rec in enumerate(run.records):
        snap = rec.estimate
        t = float(snap.stamp)
        yield t, TF_TOPIC, tf_message(factory, frames.moving(snap.q), t)
        if k in marker_due:
            shapes = estimate_shapes(drawer, run.name, snap, by_stamp.get(snap.stamp))
            yield t, topic, marker_array(factory, shapes, frame_id, t)


class ViewWriter:
    """Writes the viewable topics into an open BagWriter, interleaved in stamp order with
    the caller's messages: ``until(stamp)`` before writing a message of that stamp,
    ``finish()`` at the end."""

    def __init__(self, bag, factory, inputs, runs, frame_id: str = "world"):
        for topic, typename, qos in view_topics(runs, inputs.truth is not None):
            bag.add_topic(topic, typename, qos)
        self.bag = bag
        self._events = view_events(factory, inputs, runs, frame_id)
        self._next = next(self._events, None)

    def until(self, stamp: float) -> None:
        while self._next is not None and self._next[0] <= stamp:
            t, topic, msg = self._next
            self.bag.write(topic, t, msg)
            self._next = next(self._events, None)

    def finish(self) -> None:
        self.until(float("inf"))
