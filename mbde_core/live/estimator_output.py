"""The ``estimator`` node core's outputs: the stage's steps turned into messages.

A mixin of :class:`~mbde_core.live.estimator.LiveEstimator`: every emitted step of the
stage (``_on_step``) enters the diagnostics window; a non-finite estimate is never
published (the core restarts); the others are published as MechanismState and
JointState (and /tf), the particle cloud as ParticleSet and the MarkerArray, each
decimated in data time to its rate. The methods use the core's state (``opt``, ``mech``,
``est``, ``factory``, ``publish``, ``frame_id``, ``frames``, ``window``, ``backlog``,
``throttle``, ``_next``, ...).
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.rosio.convert import particle_set_msg
from mbde_core.rosio.sensor_io import estimate_messages
from mbde_core.rosio.tf import tf_message
from mbde_core.viz.marker_msgs import marker_array
from mbde_core.viz.markers import MechanismDrawer, estimate_shapes


class EstimatorOutput:
    """Decimated messages of the stage's steps (mixin of LiveEstimator)."""

    def _due(self, key: str, stamp: float, rate: float) -> bool:
        """Decimation in data time: rate [Hz]; 0 = every step for ``state``, off for the rest."""
        if rate <= 0:
            return key == "state"
        nxt = self._next[key]
        if stamp + 1e-9 >= nxt or stamp < nxt - 2.0 / rate:  # due, or time went back
            self._next[key] = (math.floor(stamp * rate + 1e-6) + 1) / rate
            return True
        return False

    def _on_step(self, rec) -> None:
        w = self.window
        w.steps += 1
        w.cost_sum += rec.cost
        w.cost_max = max(w.cost_max, rec.cost)
        snap = rec.estimate
        w.t_first = snap.stamp if w.t_first is None else w.t_first
        w.t_last = snap.stamp
        if rec.update is not None:
            w.updates += 1
            if rec.update.nis is not None and np.isfinite(rec.update.nis):
                w.nis_sum += float(rec.update.nis)
                w.nis_dof += int(rec.update.dof)
        finite = all(np.all(np.isfinite(a)) for a in (snap.q, snap.qd, snap.z, snap.zd)
                     ) and (snap.cov is None or np.all(np.isfinite(snap.cov)))
        if not finite:
            self.non_finite_estimates += 1
            self._pending_reset = "non-finite estimate"
            if self.throttle("nonfinite"):
                self.log("error", f"{self.opt.name} produced a non-finite estimate at t = {snap.stamp:.3f} s: "
                         "not published, restarting")
            return
        self.latest = rec
        if not self.backlog.publish(rec.update is not None):
            return
        t = snap.stamp
        if self._due("state", t, self.opt.publish_rate):
            state, joints = estimate_messages(self.factory, snap, self.mech, self.frame_id, rec.trust)
            self._emit("state", state)
            self._emit("joint_states", joints)
            if self.opt.publish_tf:
                self._emit("tf", tf_message(self.factory, self.frames.moving(snap.q), state.header.stamp))
        want_cloud = self._due("particles", t, self.opt.particles_rate)
        want_markers = self._due("markers", t, self.opt.marker_rate)
        cloud = None
        if want_cloud or want_markers:
            cloud = self.est.particles()
            if cloud is not None:
                cloud.stamp = t
                self.latest_cloud = cloud
        if want_cloud and cloud is not None:
            self._emit("particles", particle_set_msg(self.factory, cloud, self.mech.independent_names, self.frame_id))
        if want_markers:
            self._emit("markers", self.markers(snap, cloud))

    def _emit(self, key: str, msg) -> None:
        self.published[key] += 1
        self.publish(key, msg)

    def markers(self, snap, cloud=None):
        """MarkerArray of an estimate (bars, ellipses, hypotheses, label)."""
        if self._drawer is None:
            self._drawer = MechanismDrawer(self.mech)
        w = self.window
        nis = w.nis_sum / w.updates if w.updates else None
        shapes = estimate_shapes(self._drawer, self.opt.name, snap, cloud, self.opt.top_k, nis=nis, style=self.est.traits)
        return marker_array(self.factory, shapes, self.frame_id, snap.stamp)
