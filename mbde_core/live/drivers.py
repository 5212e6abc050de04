"""Core of the virtual sensor drivers (``imu_driver``, ``encoder_driver``): readings of the
simulator's ground truth with the configured noise, rate, frame_id and covariances.

Each driven sensor samples the ground-truth stream (mbde_msgs/MechanismState: q, qd,
qdd of the true model) on its own time grid, anchored at the first sample and
re-anchored when time jumps back (a looping simulation): a sample is taken from the
first ground-truth message at or after each grid instant. The reading is the sensor's
measurement function h(q, qd, qdd) on the truth model (a known-input sensor, a measured
motor torque: the true input force on its coordinate from the message's input_forces,
divided by its gain) passed through its noise model
(:class:`mbde_core.sensors.base.NoiseSampler`) fed by the simulator's per-sensor noise
stream (:func:`mbde_core.simulator.noise_rng`): with the scenario's seed, and ground
truth on every reading instant (the simulator's default rate), the readings are the
ones ``mbde simulate`` writes into a bag, bit for bit. Messages are built by the bag
writer's builder (:func:`mbde_core.simulator.bag.sensor_message_builder`: REP 145
covariances from the noise model).
"""
from __future__ import annotations

import numpy as np

from mbde_core.errors import ConfigError, DataError
from mbde_core.live.simulator import stamp_msg
from mbde_core.rosio.convert import IMU, JOINT_STATE, snapshot_from_mechanism_state
from mbde_core.rosio.stamps import ns_to_sec
from mbde_core.simulator.bag import sensor_message_builder
from mbde_core.simulator.core import noise_rng

KINDS = {"imu_driver": IMU, "encoder_driver": JOINT_STATE}
TOLERANCE_NS = 1000  # a ground-truth sample this close before a grid instant counts as on it
PHI_TOLERANCE = 1e-6  # relative constraint residual of a ground-truth q of this model


class SensorDriver:
    """One virtual sensor.

    sensor: a Sensor on the truth model; rate [Hz] (None = the sensor's); seed: noise
    seed (None = no noise); frame_id: '' = the sensor's.
    """

    def __init__(self, sensor, factory, rate: float | None = None, seed: int | None = 0, frame_id: str = ""):
        self.sensor = sensor
        self.rate = float(rate or sensor.rate)
        self.period_ns = max(1, int(round(1e9 / self.rate)))
        self.seed = seed
        self._factory = factory
        self.frame_id = frame_id or sensor.frame_id
        if frame_id and frame_id != sensor.frame_id:
            import copy

            s = copy.copy(sensor)
            s.frame_id = frame_id
            self._build = sensor_message_builder(s, factory)
        else:
            self._build = sensor_message_builder(sensor, factory)
        self.anchor_ns: int | None = None
        self.last_ns: int | None = None
        self.next_ns: int | None = None
        self.sampler = None
        self.published = 0
        self.dropped = 0  # readings lost by the noise model's dropout
        self._restart_noise()

    def _restart_noise(self) -> None:
        self.sampler = None if self.seed is None else self.sensor.noise.sampler(noise_rng(self.seed, self.sensor.name))

    def sample(self, stamp_ns: int, q, qd, qdd, effort=None):
        """The message of a reading at this ground-truth sample, or None (not due / dropped);
        effort (n,): the true generalized input forces (what a known-input sensor reads)."""
        if self.last_ns is not None and stamp_ns < self.last_ns:  # time went back: start over
            self.anchor_ns = self.next_ns = None
            self._restart_noise()
        self.last_ns = stamp_ns
        if self.next_ns is not None and stamp_ns < self.next_ns - TOLERANCE_NS:
            return None
        if self.anchor_ns is None:
            self.anchor_ns = stamp_ns
        k = (stamp_ns - self.anchor_ns + TOLERANCE_NS) // self.period_ns + 1
        self.next_ns = self.anchor_ns + k * self.period_ns
        t = stamp_ns / 1e9
        if getattr(self.sensor, "is_input", False):
            value = self.sensor.reading(np.zeros(len(q)) if effort is None else effort)
        else:
            value = self.sensor.h(q, qd, qdd)
        if self.sampler is not None:
            value = self.sampler.apply(t, value)
            if value is None:
                self.dropped += 1
                return None

        self.published += 1
        msg = self._build(ns_to_sec(stamp_ns), value)
        msg.header.stamp = stamp_msg(self._factory, stamp_ns)  # exact at any epoch
        return msg


class DriverSet:
    """The drivers of one node: every sensor of a message type (or the named ones).

    scenario: the Scenario (truth model and sensors); executable: 'imu_driver' or
    'encoder_driver'; names: sensor names ([] = all of the kind, reference sensors
    only by name); rate, seed (-1 = the scenario's), noise, frame_id: the node's parameters.
    """

    def __init__(self, scenario, executable: str, factory, names=(), rate: float = 0.0, seed: int = -1,
                 noise: bool = True, frame_id: str = ""):
        kind = KINDS[executable]
        self.mech = scenario.truth_mechanism()
        every = {s.name: s for s in list(scenario.sensors.ordered) + list(scenario.reference_sensors.ordered)}
        if names:
            missing = [n for n in names if n not in every]
            if missing:
                raise ConfigError(scenario.file, "sensors", f"no sensor(s) {', '.join(missing)} in the model "
                                  f"(sensors: {', '.join(every) or 'none'})")
            wrong = [n for n in names if every[n].msg_type != kind]
            if wrong:
                raise ConfigError(scenario.file, "sensors", f"{', '.join(wrong)} publish(es) "
                                  f"{every[wrong[0]].msg_type}, not {kind}: use the other driver")
            chosen = [every[n] for n in names]
        else:
            chosen = [s for s in scenario.sensors.ordered if s.msg_type == kind]
        if frame_id and len(chosen) > 1:
            raise ConfigError("<parameters>", "frame_id", "a frame_id override needs exactly one sensor "
                              "(set the `sensors` parameter)")
        seed_value = None if not noise else (scenario.seed if seed < 0 else int(seed))
        self.drivers = [SensorDriver(s, factory, rate or None, seed_value, frame_id) for s in chosen]
        self.coordinate_names = list(self.mech.coordinate_names)
        # the truth's input forces by name -> coordinate (what a known-input sensor reads)
        self.input_columns = {ld.name: ld.coordinate for ld in self.mech.spec.loads if ld.kind == "generalized_force"}
        self.rejected = 0
        self.last_error = ""

    def __len__(self) -> int:
        return len(self.drivers)

    def on_truth(self, msg) -> list:
        """[(topic, message)] of the readings due at this ground-truth message. A message of
        another model (other coordinate names, or a q off this model's constraints) raises
        DataError (the caller counts and reports it)."""
        snap = snapshot_from_mechanism_state(msg, coordinate_names=self.coordinate_names)
        if snap.q.size == 0 or snap.qd.size == 0 or snap.qdd.size == 0:
            raise DataError("ground truth without q, qd or qdd")
        if self.mech.m:
            residual = float(np.max(np.abs(self.mech.phi(snap.q))))
            if not residual <= PHI_TOLERANCE * self.mech.length_scale:
                raise DataError(f"ground truth off this model's constraints (max |Phi| = {residual:.3g}): "
                                f"is the simulator running another mechanism than {self.mech.name!r}?")
        stamp = msg.header.stamp
        stamp_ns = int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)
        effort = np.zeros(len(snap.q))
        for name, u in zip(snap.input_names, snap.inputs if snap.inputs is not None else ()):
            if name in self.input_columns:
                effort[self.input_columns[name]] += u
        out = []
        for d in self.drivers:
            m = d.sample(stamp_ns, snap.q, snap.qd, snap.qdd, effort)
            if m is not None:
                out.append((d.sensor.topic, m))
        return out
