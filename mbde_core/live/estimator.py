"""Core of the ``estimator`` node: the replay stage fed from subscriptions (ROS-free).

:class:`LiveEstimator` owns the estimator and its
:class:`~mbde_core.estimators.stage.core.EstimatorStage` -- the stage ``mbde replay`` runs,
built the same way (model, sensors and initial guess from the scenario / description,
options validated and resolved by :mod:`mbde_core.estimators.configure`, seeded generator) -- and
turns its steps into messages through a message factory. The node only forwards
messages and clock readings to it and publishes what it hands back; the pure-Python
tests drive it with ``rosbags`` messages and compare it with ``mbde replay``.

Time: readings are processed in header-stamp order (``reorder_window`` re-sorts small
arrival inversions between topics). The node clock only matters when readings are
overdue: when no new reading has arrived for two periods of the slowest sensor + the
reorder window + ``OVERDUE_MARGIN`` (measured on the node clock from the newest
reading's arrival, so clock offsets and transport delays do not matter), the filter
predicts on, by the silence at most ``max_prediction``, so outputs keep coming during
sensor gaps while readings that are merely in flight are never overtaken. The clock is compared
with the stamps on arrival ("stamp lag"); when they disagree by more than
``CLOCK_TOLERANCE`` (a bag played without ``--clock``, a driver stamping with another
clock) the clock is ignored and the diagnostics say why.

Robustness (each case counted, shown in /diagnostics, nothing crashes): malformed
messages (``sensor_reading`` raises DataError), non-finite values and stamps, late
(out-of-order) readings, Mahalanobis-gate rejections, exceptions of the estimator
(counted, logged, the estimator restarts at the next reading) and non-finite estimates
(not published; restart). Resets: backward time jumps (stage or clock), long gaps, the
``~/reset`` service.
"""
from __future__ import annotations

import collections
import math
import time as _time
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from mbde_core.errors import ConfigError, DataError
from mbde_core.estimators import estimator_rng, make_estimator
from mbde_core.estimators.assess.suitability import assess, precheck
from mbde_core.estimators.configure import as_spec, resolve
from mbde_core.estimators.options.frozen import Options
from mbde_core.estimators.options.widening import widening_line
from mbde_core.estimators.options.rule import force_limits, resolve_config, scenario_context
from mbde_core.estimators.stage.core import EstimatorStage, StageCounters
from mbde_core.live import estimator_status
from mbde_core.live.backlog import STALLED, Backlog
from mbde_core.live.diagnostics import Status, Throttle
from mbde_core.live.estimator_status import Window
from mbde_core.replay.runner import initial_state, rule_widening
from mbde_core.rosio.convert import particle_set_msg
from mbde_core.rosio.sensor_io import estimate_messages, sensor_reading
from mbde_core.rosio.tf import tf_message
from mbde_core.viz.frames import MechanismFrames
from mbde_core.viz.marker_msgs import marker_array
from mbde_core.viz.markers import MechanismDrawer, estimate_shapes
from mbde_core.live.estimator_options import EstimatorOptions, default_config_file, load_config  # noqa: F401 (re-exported)

CLOCK_TOLERANCE = 2.0  # s: |clock - stamp| on arrival beyond this = different clocks
OVERDUE_MARGIN = 0.05  # s: transport jitter tolerated before the clock drives predictions


@dataclass
class SensorStats:
    """Per-sensor arrival statistics (arrivals: monotonic times of the current window)."""

    name: str
    topic: str
    msg_type: str
    expected_rate: float
    frame_id: str = ""  # the configured frame of the readings
    received: int = 0
    malformed: int = 0
    last_error: str = ""
    frame_mismatch: int = 0  # readings whose header.frame_id is not frame_id
    last_frame: str = ""
    first_stamp: float | None = None
    last_stamp: float | None = None
    arrivals: list = field(default_factory=list)


class LiveEstimator:
    """See the module docstring.

    scenario: a :class:`~mbde_core.scenario.Scenario` (its estimator model, sensors and
    initial guess are used); options: :class:`EstimatorOptions`; factory: message
    factory; publish(key, msg) with key in ``state``, ``joint_states``, ``particles``,
    ``markers``, ``tf`` (TFMessage for /tf); log(level, text) with level in 'info',
    'warn', 'error';
    wall: monotonic clock [s] (rates and diagnostics windows).
    """

    KEYS = ("state", "joint_states", "particles", "markers", "tf")

    def __init__(self, scenario, options: EstimatorOptions, factory, publish, log=None, wall=_time.monotonic):
        self.scenario = scenario
        self.opt = options
        self.factory = factory
        self.publish = publish
        self.log = log or (lambda level, text: None)
        self.wall = wall
        self.mech = scenario.estimator_mechanism()
        self.sensors = scenario.estimator_sensors()
        if len(self.sensors) == 0:
            raise ConfigError(scenario.file, "sensors", "the model has no sensors: nothing to estimate from")
        from dataclasses import replace

        # `auto` options from the default-tuning rule, as `mbde replay` resolves them (once)
        context = scenario_context(scenario)
        spec = options.config  # before the rule: what it widened (below)
        try:
            if not isinstance(options.config, Options):
                options = replace(options, config=resolve(as_spec(options.name, options.config), self.mech, self.sensors,
                                                          context))
        except ModuleNotFoundError as exc:
            raise ConfigError("<parameters>", "estimator",
                              f"estimator {options.name!r} is not available in this installation ({exc})") from None
        self.opt = options
        precheck(options.name, self.sensors)  # a meaningless pair: one line, exit status 2
        init = scenario.estimator_initial_state()
        # exactly what `mbde replay` uses (mbde_core.replay.runner.initial_state)
        self.initial = initial_state(SimpleNamespace(mechanism=self.mech, initial_z=np.asarray(init.z, float),
                                                     initial_zd=np.asarray(init.zd, float),
                                                     initial_q=np.asarray(init.q, float),
                                                     initial_branch=init.branch), options.config)
        self.est = make_estimator(options.name, self.mech, self.sensors, options.config,
                                  rng=estimator_rng(options.seed, options.name))
        self.step = float(options.config.step)
        # observability of [z, zd] (and inputs) at the initial state, as `mbde replay` reports it
        self.suitability = assess(options.name, self.mech, self.sensors, self.initial, self.step, self.est,
                                  force_limits=force_limits(self.mech, options.config.as_dict(), context))
        if self.suitability.warning:
            self.log("warn", self.suitability.message)
        widened = rule_widening(self.mech, self.sensors, spec, options.name, options.config)
        self.widening_note = widening_line({options.name: widened})
        if self.widening_note:  # the channels the default noise rule made nearly useless, said once
            self.log("info", self.widening_note)
        self.frame_id = options.frame_id or scenario.frame_id
        self.topics: dict[str, list] = {}
        self.topic_types: dict[str, str] = {}
        self.stats: dict[str, SensorStats] = {}
        # the measured torques too if the estimator takes them as known inputs (replay's feeding, runner.unused_inputs)
        known = list(self.sensors.inputs) if self.est.traits.known_inputs else []
        for s in list(self.sensors) + known:
            if self.topic_types.setdefault(s.topic, s.msg_type) != s.msg_type:
                raise ConfigError(scenario.file, f"sensors.{s.name}.topic",
                                  f"{s.topic} carries {self.topic_types[s.topic]} for another sensor, not {s.msg_type}")
            self.topics.setdefault(s.topic, []).append(s)
            self.stats[s.name] = SensorStats(s.name, s.topic, s.msg_type, s.rate, s.frame_id)
        self.slowest_period = max(1.0 / s.rate for s in self.sensors)
        self.counters = StageCounters()
        self.resets: collections.Counter = collections.Counter()
        self.errors = 0
        self.last_error = ""
        self.non_finite_estimates = 0
        self.published = collections.Counter()
        self.throttle = Throttle(10.0, wall)
        self.backlog = Backlog()
        self._prev_tick: float | None = None  # wall time of the previous tick
        self._drawer = None
        self.stage = None
        self._new_stage()
        self.window = Window(wall(), self.counters.as_dict())
        self.lag = None  # clock - stamp on arrival (min over recent readings)
        self._recent: dict = {}  # NIS and step-time lines of the last period with steps
        self.clock_mismatch = False
        self._after_jump = False  # the clock jumped back, no reading of the new timeline yet

        # REP 105: <frame_id> -> <prefix><body> on /tf, sensor mounts on /tf_static
        self.frames = MechanismFrames(self.mech, self.sensors, world=self.frame_id, prefix=options.tf_prefix)

    def static_tf(self, stamp: float = 0.0):
        """The TFMessage for /tf_static: the estimate's ground links and sensor mounts."""
        return tf_message(self.factory, self.frames.static(), stamp)

    # -- stage ------------------------------------------------------------------------------
    def _new_stage(self) -> None:
        self.stage = EstimatorStage.for_estimator(self.est, lambda t: self.initial,
                                                backward_jump=self.opt.backward_jump, max_gap=self.opt.max_gap,
                                                reorder_window=self.opt.reorder_window, on_step=self._on_step,
                                                keep=False)
        self.stage.counters = self.counters  # counters survive resets
        self.newest: float | None = None
        self.newest_arrival: float | None = None
        self.latest = None  # last StepRecord
        self.latest_cloud = None
        self._next = {k: -math.inf for k in self.KEYS}
        self._pending_reset = None

    def reset(self, reason: str, detail: str = "", keep_readings: bool = False) -> None:
        """Forget the estimate; the next reading starts a new track from the initial guess.

        reason: counted in the diagnostics ('reset service', 'clock jumped back', ...);
        detail: added to the log line only. keep_readings: the readings received but not
        yet fused (reorder buffer, the reading being processed when the estimator failed)
        go to the new track (after an estimator failure; not after a clock jump or the
        reset service, whose readings belong to the old timeline)."""
        self.resets[reason] += 1
        self.window.resets += 1
        carry = self.stage.buffered() if keep_readings else []
        self._new_stage()
        self.stage.requeue(carry)
        if reason == "clock jumped back":
            # readings of the old timeline may still be in flight (a looping simulator, a
            # bag loop): they must not pass for stamps of another clock, nor start a track
            self.lag = None
            self.window.lag_min = math.inf
            self._after_jump = True
        self.log("info", f"estimator reset ({reason}{' ' + detail if detail else ''}); the next reading restarts "
                 "it from the initial guess")

    @property
    def time(self) -> float | None:
        """Filter time [s] (None before the first reading)."""
        return self.stage.time

    @property
    def model_name(self) -> str:
        return self.mech.name

    # -- input ------------------------------------------------------------------------------
    def on_message(self, topic: str, msg, now: float | None = None, queued: float | None = None) -> None:
        """A message arrived on a sensor topic; now: node clock [s] (None if unknown);
        queued: how long it waited in the reader queue [s] (None if unknown): a node that
        falls behind skips readings evenly (:mod:`mbde_core.live.backlog`)."""
        arrival = self.wall()
        for sensor in self.topics.get(topic, ()):
            st = self.stats[sensor.name]
            st.received += 1
            st.arrivals.append(arrival)
            if not self.backlog.admit(sensor.name, queued):
                if self.throttle("behind"):
                    self.log("warn", self.backlog.warning())
                continue
            try:
                m = sensor_reading(sensor, msg)
            except (DataError, ValueError) as exc:
                st.malformed += 1
                st.last_error = str(exc)
                if self.throttle(("malformed", sensor.name)):
                    self.log("warn", f"skipping a malformed message on {topic} ({exc})")
                continue
            self._check_frame(sensor, st, topic, msg)
            if self._after_jump and now is not None and math.isfinite(m.stamp):
                if m.stamp > now + self.opt.backward_jump:  # stamped before the clock jumped back
                    self.counters.out_of_order += 1
                    continue
                self._after_jump = False
            if math.isfinite(m.stamp):
                if st.first_stamp is None:
                    st.first_stamp = m.stamp
                    self.log("info", f"receiving {sensor.name} on {topic} (first stamp {m.stamp:.3f} s)")
                st.last_stamp = m.stamp
                if now is not None:
                    lag = now - m.stamp
                    self.window.lag_min = min(self.window.lag_min, lag)
                    if self.lag is None:
                        self.lag = lag
            self._guard(self.stage.feed, m)
            newest = self.stage.newest  # the stage's stream time: a reading held as from the future is not in it
            if newest is not None and newest != self.newest:
                self.newest = newest
                self.newest_arrival = now  # node clock when the newest reading arrived

    def _check_frame(self, sensor, st: SensorStats, topic: str, msg) -> None:
        """Count a reading whose header.frame_id is not the sensor's configured frame_id
        (an empty frame_id of a JointState is accepted: joint states rarely carry one). The
        reading is still used: the frame only places the sensor in TF."""
        frame = getattr(getattr(msg, "header", None), "frame_id", None)
        if frame is None or frame == sensor.frame_id or (frame == "" and sensor.msg_type.endswith("/JointState")):
            return
        st.frame_mismatch += 1
        st.last_frame = frame
        self.window.frame_mismatch += 1
        if self.throttle(("frame", sensor.name)):
            self.log("warn", f"{sensor.name}: reading on {topic} in frame {frame!r}, configured frame_id "
                     f"{sensor.frame_id!r} (set the sensor's frame_id or the driver's); counted, reading used")

    def tick(self, now: float | None) -> None:
        """The node clock reads ``now`` [s]: predict through overdue readings (see module doc);
        not on the first tick after the node was stalled (readings may wait in its queue)."""
        prev, self._prev_tick = self._prev_tick, self.wall()
        if prev is not None and self._prev_tick - prev > STALLED:
            return
        if now is None or self.newest is None or self.stage.time is None or self.lag is None:
            return
        self.clock_mismatch = abs(self.lag) > CLOCK_TOLERANCE
        if self.clock_mismatch:
            if self.throttle("clock"):
                self.log("warn", self.clock_hint())
            return
        if self.newest_arrival is None:
            return
        # time since the newest reading arrived: independent of clock offsets and transport delays
        silence = now - self.newest_arrival
        if silence <= self.opt.reorder_window + 2.0 * self.slowest_period + OVERDUE_MARGIN:
            return
        target = self.newest + min(silence, self.opt.max_prediction)
        if target - self.opt.reorder_window > self.stage.time + self.step:
            self._guard(self.stage.advance_to, target)

    def clock_hint(self) -> str:
        lag = self.lag if self.lag is not None else float("nan")
        return (f"reading stamps are {lag:+.3f} s behind the node clock: they come from another clock "
                f"(bag played without --clock and use_sim_time, or a driver stamping with another clock); "
                f"the filter runs on the readings alone")

    def _guard(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:  # an estimator failure must not take the node down
            self.errors += 1
            self.window.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            if self.throttle("error"):
                self.log("error", f"{self.opt.name} failed ({self.last_error}); restarting at the next reading")
            self._pending_reset = "estimator error"
        if self._pending_reset:
            reason, self._pending_reset = self._pending_reset, None
            self.reset(reason, keep_readings=True)  # estimator error or non-finite estimate

    # -- output -----------------------------------------------------------------------------
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

    # -- diagnostics ------------------------------------------------------------------------
    def waiting_for(self) -> list[SensorStats]:
        """Sensors that have not delivered a valid reading yet."""
        return [st for st in self.stats.values() if st.first_stamp is None]

    def status(self, name: str, now: float | None = None, extra_problems=()) -> Status:
        """The diagnostic status of the last period (and start a new period); see
        :func:`mbde_core.live.estimator_status.status`."""
        return estimator_status.status(self, name, now, extra_problems)
