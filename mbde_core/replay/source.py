"""A bag as ``mbde replay`` reads it: model and sensors first, then readings and ground
truth streamed in chunks, so memory does not grow with the bag.

:func:`open_source` reads only the bag's metadata and its ``/mbde/description`` (or the
``--mechanism`` / ``--sensors`` files) into a small picklable :class:`ReplaySource`.
:func:`stream` then yields :class:`Chunk` s: the readings (Measurements in the bag's
order, i.e. as they arrived when it was recorded: the estimator stage re-sorts them with
its reorder window and detects stamp anomalies exactly as the live node does, which a
sort here would hide: a backward stamp jump would be merged into the old time) and the
ground-truth samples of that stretch of the bag. Malformed messages are counted per
sensor and skipped. The readings of known inputs (a measured motor torque,
``sensors.inputs``) come in the same stream, as Measurements of their sensor names.
"""
from __future__ import annotations

import itertools
import os
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from mbde_core.config.yamlnode import Node
from mbde_core.errors import DataError
from mbde_core.estimators.assess.metrics import truth_at
from mbde_core.model.mechanism import load_mechanism
from mbde_core.replay.decode import EffortDecoder, ReadingDecoder, TruthDecoder
from mbde_core.rosio.bag import BagReader
from mbde_core.rosio.convert import JOINT_STATE, MECHANISM_STATE, snapshot_from_mechanism_state, string_from_msg
from mbde_core.scenario.description import scenario_from_description
from mbde_core.sensors.config import load_sensor_file, load_sensors

DESCRIPTION_TOPIC = "/mbde/description"
TRUTH_TOPIC = "/mbde/ground_truth"
TRUTH_JOINTS_TOPIC = "/mbde/ground_truth/joint_states"
CHUNK = 4096  # raw messages per decoded chunk


@dataclass
class ReplayModel:
    """A bag's model, sensors, initial guess and time span (shared by ReplaySource and
    :class:`mbde_core.replay.inputs.ReplayInputs`)."""

    bag: str
    mechanism: object  # the estimators' Mechanism
    sensors: object  # SensorSet on that mechanism
    initial_z: np.ndarray
    initial_zd: np.ndarray
    initial_q: np.ndarray
    initial_branch: int | None
    scenario: object | None
    start: float
    end: float

    @property
    def duration(self) -> float:
        return max(self.end - self.start, 0.0)


@dataclass
class ReplaySource(ReplayModel):
    """What a replay needs to know before reading the data (picklable, no open files).

    ``topics``: {topic: (type, message count)} from the bag's metadata; ``expected``:
    {sensor name: message count on its topic}.
    """

    topics: dict = field(default_factory=dict)
    expected: dict = field(default_factory=dict)
    reference: object = None  # mbde_core.replay.reference.ReferenceTrajectory (--reference smoother)
    notes: list = field(default_factory=list)  # one-line warnings about the bag (e.g. unusable ground truth)

    @property
    def has_truth(self) -> bool:
        return TRUTH_TOPIC in self.topics

    @property
    def sensor_topics(self) -> list[str]:
        return [t for t in dict.fromkeys(s.topic for s in self.sensors) if t in self.topics]

    @property
    def read_sensors(self) -> list:
        """Every sensor whose readings a replay reads: the measurement sensors and the
        known inputs (a measured motor torque: ``sensors.inputs``)."""
        return list(self.sensors) + list(getattr(self.sensors, "inputs", []))


def open_source(bag, mechanism_file: str | None = None, sensors_file: str | None = None) -> ReplaySource:
    """The model, sensors and initial guess of a replay of ``bag`` (DataError/ConfigError)."""
    with BagReader(bag) as reader:
        topics = {t: (ty, n) for t, ty, n in reader.topics()}
        notes = _truth_topics(bag, topics)
        start, end = reader.start or 0.0, reader.end or 0.0
        scenario = None
        if mechanism_file is None:
            if DESCRIPTION_TOPIC not in topics:
                raise DataError(f"{bag}: no {DESCRIPTION_TOPIC} in the bag: give --mechanism (and --sensors)")
            text = None
            for _, _, msg in reader.messages([DESCRIPTION_TOPIC]):
                text = string_from_msg(msg)
                break
            scenario = scenario_from_description(text, f"{bag}:{DESCRIPTION_TOPIC}")
            mech, sensors = scenario.estimator_mechanism(), scenario.estimator_sensors()
            init = scenario.estimator_initial_state()
            z0, zd0, q0, branch0 = init.z, init.zd, init.q, init.branch
        else:
            mech = load_mechanism(mechanism_file)
            if sensors_file is not None:
                sensors = load_sensor_file(sensors_file, mech)
            else:
                sensors = load_sensors(Node(mech.spec.sensors, mech.spec.file, "sensors"), mech)
            if len(sensors) == 0:
                raise DataError(f"{mechanism_file}: no sensors: give --sensors or a `sensors:` section")
            z0, zd0, q0, branch0 = mech.q0[mech.independent], mech.qd0[mech.independent], mech.q0, None
            if TRUTH_TOPIC in topics:  # ground truth but no description: start from the truth
                for _, _, msg in reader.messages([TRUTH_TOPIC]):
                    try:
                        snap = snapshot_from_mechanism_state(msg)
                    except DataError:
                        continue
                    z0, zd0 = snap.z, snap.zd
                    break
        _check_sensor_topics(bag, reader, topics, list(sensors) + list(getattr(sensors, "inputs", [])),
                             mechanism_file is not None)
    src = ReplaySource(os.fspath(bag), mech, sensors, np.asarray(z0, float), np.asarray(zd0, float),
                       np.asarray(q0, float), branch0, scenario, start, end, topics=topics, notes=notes)
    src.expected = {s.name: topics.get(s.topic, (None, 0))[1] for s in src.read_sensors}
    return src


PROBE = 20  # messages of a sensor topic decoded before the run: one must be a reading


def _truth_topics(bag, topics: dict) -> list[str]:
    """Drop a ground truth the replay cannot use from ``topics`` (wrong type, no messages);
    returns the one-line notes saying so (the run goes on without truth metrics)."""
    notes = []
    for topic, want in ((TRUTH_TOPIC, MECHANISM_STATE), (TRUTH_JOINTS_TOPIC, JOINT_STATE)):
        if topic not in topics:
            continue
        typ, count = topics[topic]
        if typ != want:
            notes.append(f"{bag}: {topic} holds {typ} messages, not {want}: ignored"
                         + (" (no ground-truth metrics)" if topic == TRUTH_TOPIC else ""))
            del topics[topic]
        elif count == 0 and topic == TRUTH_TOPIC:
            notes.append(f"{bag}: {topic} has no messages: no ground-truth metrics")
            del topics[topic]
    if TRUTH_TOPIC not in topics:
        topics.pop(TRUTH_JOINTS_TOPIC, None)
    return notes


def _check_sensor_topics(bag, reader, topics: dict, sensors, from_files: bool) -> None:
    """DataError (one line) unless every sensor of the model has readable messages of its
    type in the bag: a sensor without readings is a model the bag does not fit."""
    problems = []
    for s in sensors:
        typ, count = topics.get(s.topic, (None, 0))
        if typ is None:
            problems.append(f"{s.name}: no topic {s.topic}")
        elif typ != s.msg_type:
            problems.append(f"{s.name}: {s.topic} holds {typ}, not {s.msg_type}")
        elif count == 0:
            problems.append(f"{s.name}: no messages on {s.topic}")
        else:
            dec, datas = ReadingDecoder(reader.typestore, typ, s), []
            for _, _, _, data in reader.raw_messages([s.topic]):
                datas.append(data)
                if len(datas) >= PROBE:
                    break
            if not any(m is not None for m in dec.decode(datas)):
                why = dec.reason or "malformed"
                problems.append(f"{s.name}: none of the first {len(datas)} messages on {s.topic} is a reading ({why})")
    if problems:
        hint = ("give --sensors with the sensors this bag has" if from_files else
                "the bag does not hold the readings its description declares")
        raise DataError(f"{bag}: no readable messages for sensor " + "; ".join(problems) + f" ({hint})")


@dataclass
class Chunk:
    """readings: Measurements in bag order; truth: [(t, {q, qd, qdd, z, zd, zdd, branch,
    inputs, input_names, effort (n,) or None})] in bag order."""

    readings: list
    truth: list


class Stream:
    """Iterate a source's chunks (see module doc); afterwards ``counts`` {sensor: readings}
    and ``skipped`` {what: messages} hold the totals."""

    def __init__(self, source: ReplaySource, chunk: int = CHUNK, truth: bool = True):
        self.source, self.chunk = source, int(chunk)
        self.truth = truth and source.has_truth
        self.counts = {s.name: 0 for s in source.read_sensors}
        self.skipped: dict[str, int] = {}
        self.effort_ok = True

    def __iter__(self):
        src = self.source
        with BagReader(src.bag) as reader:
            store = reader.typestore
            decoders: dict[str, list] = {}
            for s in src.read_sensors:
                if s.topic in src.topics:
                    decoders.setdefault(s.topic, []).append(ReadingDecoder(store, src.topics[s.topic][0], s))
            want = list(decoders)
            truth_dec = effort_dec = None
            if self.truth:
                truth_dec = TruthDecoder(store, src.topics[TRUTH_TOPIC][0])
                want.append(TRUTH_TOPIC)
                if TRUTH_JOINTS_TOPIC in src.topics:
                    effort_dec = EffortDecoder(store, src.topics[TRUTH_JOINTS_TOPIC][0], src.mechanism.coordinate_names)
                    want.append(TRUTH_JOINTS_TOPIC)
            base = 0
            truth_wait: deque = deque()  # truth samples waiting for their joint-state effort
            efforts: deque = deque()
            raw = reader.raw_messages(want)
            while True:
                batch = list(itertools.islice(raw, self.chunk))
                if not batch:
                    break
                by_topic: dict[str, list] = {}
                where: dict[str, list] = {}
                ready: list = []  # (bag position, sensor index on the topic, Measurement)
                for i, (topic, _, _, data) in enumerate(batch):
                    by_topic.setdefault(topic, []).append(data)
                    where.setdefault(topic, []).append(base + i)
                base += len(batch)
                for topic, datas in by_topic.items():
                    if topic == TRUTH_TOPIC:
                        truth_wait.extend(x for x in truth_dec.decode(datas) if x is not None)
                    elif topic == TRUTH_JOINTS_TOPIC:
                        efforts.extend(effort_dec.decode(datas))
                    else:
                        for j, dec in enumerate(decoders[topic]):
                            for pos, m in zip(where[topic], dec.decode(datas)):
                                if m is not None:
                                    self.counts[m.sensor] += 1
                                    ready.append((pos, j, m))
                truth = self._pair(truth_wait, efforts, effort_dec is not None)
                ready.sort(key=lambda item: item[:2])
                yield Chunk([m for _, _, m in ready], truth)
            truth = self._pair(truth_wait, efforts, effort_dec is not None)
            for _, row in truth_wait:  # truth samples without a joint-state message
                row["effort"] = None
            truth += list(truth_wait)
            yield Chunk([], truth)
            self.effort_ok &= not efforts and not truth_wait and effort_dec is not None
            for decs in decoders.values():
                for dec in decs:
                    if dec.skipped:
                        self.skipped[dec.sensor.name] = self.skipped.get(dec.sensor.name, 0) + dec.skipped
            for topic, n in reader.skipped.items():
                self.skipped[f"undecodable {topic}"] = n


    def _pair(self, truth_wait: deque, efforts: deque, joints: bool) -> list:
        """Truth samples given their effort, in bag order (the n-th joint-state message
        belongs to the n-th MechanismState, as mbde simulate writes them)."""
        out = []
        while truth_wait and (efforts or not joints):
            t, row = truth_wait.popleft()
            row["effort"] = efforts.popleft() if joints else None
            self.effort_ok &= row["effort"] is not None
            out.append((t, row))
        return out


class TruthWindow:
    """The ground truth near the estimates being evaluated: samples are appended in time
    order and dropped once no later estimate can need them. :meth:`at` interpolates
    linearly (angles unwrapped over the window, then wrapped), as
    :func:`mbde_core.estimators.assess.metrics.truth_at` does over a whole series."""

    def __init__(self, angular: np.ndarray):
        self.angular = np.asarray(angular, bool)
        self.t: list[float] = []
        self.rows: list[dict] = []

    def extend(self, samples) -> None:
        for t, row in samples:
            self.t.append(t)
            self.rows.append(row)

    @property
    def last(self) -> float:
        return self.t[-1] if self.t else -np.inf

    def at(self, stamps: np.ndarray, fields=("z", "zd", "zdd")) -> dict:
        """{field: (K, .) truth at stamps} (+ 'effort' if every sample has it, else None)."""
        t = np.array(self.t)
        out = {}
        for f in fields:
            vals = np.array([r[f] for r in self.rows])
            out[f] = truth_at(stamps, t, vals, self.angular if f == "z" else None)
        eff = [r.get("effort") for r in self.rows]
        out["effort"] = None if any(e is None for e in eff) else truth_at(stamps, t, np.array(eff))
        return out

    def drop_before(self, t: float) -> None:
        """Forget samples not needed for stamps >= t (keeps the last one at or before t)."""
        k = int(np.searchsorted(self.t, t, side="right")) - 1
        if k > 0:
            del self.t[:k]
            del self.rows[:k]
