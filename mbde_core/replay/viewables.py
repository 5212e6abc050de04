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

from mbde_core.estimators.registry import traits
from mbde_core.rosio.cdr_batch import Layout
from mbde_core.rosio.stamps import sec_to_stamp
from mbde_core.rosio.tf import TF_MESSAGE, TF_STATIC_TOPIC, TF_TOPIC, tf_message
from mbde_core.viz.frames import MechanismFrames, yaw_quaternion
from mbde_core.viz.marker_cdr import MarkerArrayTemplate
from mbde_core.viz.marker_msgs import MARKER_ARRAY, marker_array
from mbde_core.viz.markers import MechanismDrawer, estimate_shapes

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
        self._layout = None  # of the /tf messages (same frames at every estimate)
        self._markers = MarkerArrayTemplate(self.store)  # markers: CDR from plain values or a template
        self.style = _style(name)

    def encode(self, batch) -> list[list[tuple[int, bytes]]]:
        out = [[(2, data)] for data in self._tf(batch)]
        for k, rec in enumerate(batch):
            snap = rec.estimate
            t = float(snap.stamp)
            if self._next_marker is None or t >= self._next_marker - 1e-9:
                self._next_marker = t + MARKER_PERIOD
                data = self._markers.serialize(estimate_shapes(self.drawer, self.name, snap, style=self.style), self.frame, t)
                out[k].append((3, data))
        return out

    def _tf(self, batch) -> list[bytes]:
        """/tf CDR of every record: the first message is built and serialised by rosbags
        (:func:`tf_message`), the others written into copies of it
        (:class:`~mbde_core.rosio.cdr_batch.Layout`): the same bytes, a batch at a time."""
        if not batch:
            return []
        stamps = [float(r.estimate.stamp) for r in batch]
        if self._layout is None:
            first = tf_message(self.factory, self.frames.moving(batch[0].estimate.q), stamps[0])
            self._layout = Layout(self.store, TF_MESSAGE, self.store.serialize_cdr(first, TF_MESSAGE))
        poses = self.frames.moving_poses([r.estimate.q for r in batch])
        stamp = [sec_to_stamp(t) for t in stamps]
        sec, nsec = [s for s, _ in stamp], [n for _, n in stamp]
        vals = {}
        for f, (x, y, yaw) in enumerate(poses):
            p = f"transforms[{f}]."
            vals[p + "header.stamp.sec"], vals[p + "header.stamp.nanosec"] = sec, nsec
            vals[p + "transform.translation.x"], vals[p + "transform.translation.y"] = x, y
            quat = [yaw_quaternion(a) for a in yaw]
            for c, axis in enumerate("xyzw"):
                vals[p + "transform.rotation." + axis] = [v[c] for v in quat]
        return [row.tobytes() for row in self._layout.encode(vals, len(batch))]


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


def _style(name: str):
    """The estimator's traits (its colour and label slot), or None for another source."""
    try:
        return traits(name)
    except KeyError:
        return None
