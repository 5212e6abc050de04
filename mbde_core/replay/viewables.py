"""What makes a replay's estimates bag viewable in Foxglove or RViz: TF and markers.

Topics of the estimates bag besides the estimates (the ones the live estimator nodes
publish, so a recording of a live run and a replay look alike):

- ``/tf``: ``world`` -> ``<estimator>/<body>`` at every estimate (REP 105,
  :class:`mbde_core.viz.frames.MechanismFrames`), written by each replay worker into its
  part file (:class:`EstimateView`);
- ``/mbde/<estimator>/markers`` every ``MARKER_PERIOD`` of data time: the picture of
  :mod:`mbde_core.viz.markers` (bars, 95 % ellipses, label);
- ``/tf_static`` (latched): each estimator's sensor mounts (``<estimator>/<frame_id>``
  below ``<estimator>/<body>``) and ground links; ``/mbde/model/markers`` (latched):
  fixed pivots and slider tracks (:func:`static_messages`, written at the bag's start).

The ground truth's frames and markers come with the simulated bag's ground truth (open
both bags, or `mbde render` them together).
"""
from __future__ import annotations

from mbde_core.rosio.tf import TF_MESSAGE, TF_STATIC_TOPIC, TF_TOPIC, tf_message
from mbde_core.viz.frames import MechanismFrames
from mbde_core.viz.markers import MARKER_ARRAY, MechanismDrawer, estimate_shapes, marker_array

MODEL_MARKERS = "/mbde/model/markers"
MARKER_PERIOD = 0.1  # s: 10 Hz of data time, as the live nodes' marker_rate


def frame_of(source) -> str:
    """The fixed frame of a replay: the scenario's frame_id, else world."""
    scenario = getattr(source, "scenario", None)
    return scenario.frame_id if scenario is not None else "world"


class EstimateView:
    """TF and marker messages of one estimator's estimates, serialised for a part file.

    topics: [(topic, type)] it adds; encode(batch) -> per record [(topic index, CDR)],
    topic indices counted after the state and joint_states topics (2, 3)."""

    def __init__(self, name: str, mech, source, encoder):
        self.name = name
        self.frame = frame_of(source)
        self.frames = MechanismFrames(mech, source.sensors, world=self.frame, prefix=f"{name}/")
        self.drawer = MechanismDrawer(mech)
        self.factory, self.store = encoder.factory, encoder.store
        self.topics = [(TF_TOPIC, TF_MESSAGE), (f"/mbde/{name}/markers", MARKER_ARRAY)]
        self._next_marker = None

    def encode(self, batch) -> list[list[tuple[int, bytes]]]:
        out = []
        for rec in batch:
            snap = rec.estimate
            t = float(snap.stamp)
            items = [(2, self.store.serialize_cdr(tf_message(self.factory, self.frames.moving(snap.q), t), TF_MESSAGE))]
            if self._next_marker is None or t >= self._next_marker - 1e-9:
                self._next_marker = t + MARKER_PERIOD
                msg = marker_array(self.factory, estimate_shapes(self.drawer, self.name, snap), self.frame, t)
                items.append((3, self.store.serialize_cdr(msg, MARKER_ARRAY)))
            out.append(items)
        return out


def static_messages(factory, source, names) -> list[tuple[str, str, object]]:
    """[(topic, type, message)] latched at the start of an estimates bag: /tf_static with
    the sensor mounts of every estimator's tree, /mbde/model/markers."""
    frame = frame_of(source)
    mech = source.mechanism
    static = []
    for name in names:
        static += MechanismFrames(mech, source.sensors, world=frame, prefix=f"{name}/").static()
    t0 = source.start
    return [(TF_STATIC_TOPIC, TF_MESSAGE, tf_message(factory, static, t0)),
            (MODEL_MARKERS, MARKER_ARRAY, marker_array(factory, MechanismDrawer(mech).ground(), frame, t0))]
