"""Estimates -> CDR bytes in batches, and the per-estimator part files of a replay.

:class:`EstimateEncoder` turns a run of estimates (MechanismSnapshots of one estimator)
into the bytes of their ``mbde_msgs/MechanismState`` and ``sensor_msgs/JointState``
messages: the first estimate of every shape goes through the ordinary converters
(:func:`mbde_core.rosio.sensor_io.estimate_messages`) and rosbags' serializer, which
gives the template of a :class:`~mbde_core.rosio.cdr_batch.Layout`; the others are
written into copies of it, a batch at a time (bit-identical, test/test_cdr_batch.py).

A *part file* holds one estimator's output messages in time order: records
``<t_ns int64><kind uint8><topic uint16><length uint32><CDR bytes>``; kind 0 = estimate
messages, 1 = particle sets (at equal times, estimates come first, as in the bag).
It describes itself: a topic is declared (kind ``DECLARE``, data ``topic NUL type``) before
its first message, and a finished file ends with a kind ``END`` record, so the replay can
merge the part files into the estimates bag while the estimators still write them
(:func:`read_part` with ``follow``).
"""
from __future__ import annotations

import struct
import time

import numpy as np

from mbde_core.rosio.cdr_batch import Layout
from mbde_core.rosio.convert import JOINT_STATE, MECHANISM_STATE, PARTICLE_SET, particle_set_msg
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.rosio.sensor_io import estimate_messages
from mbde_core.rosio.stamps import NS_PER_S, sec_to_ns, sec_to_stamp

_OPTIONAL = ("cov", "branch_probabilities", "inputs", "input_cov")
_KEY_FIELDS = ("q", "qd", "qdd", "z", "zd", "zdd") + _OPTIONAL


def _size(v) -> int:
    if v is None:
        return 0
    return v.size if isinstance(v, np.ndarray) else int(np.size(v))


class EstimateEncoder:
    """CDR bytes of estimates of one mechanism (see module doc)."""

    def __init__(self, mech, frame_id: str = "world", store=None):
        self.mech, self.frame_id = mech, frame_id
        self.factory = RosbagsFactory(store)
        self.store = self.factory.typestore
        self.layouts: dict[tuple, tuple[Layout, Layout, list]] = {}  # shape -> layouts, [(input, coordinate)]

    def _key(self, s) -> tuple:
        return (tuple([_size(getattr(s, f)) for f in _KEY_FIELDS]), tuple(s.input_names))

    def _layouts(self, key, snap):
        if key not in self.layouts:
            state, joints = estimate_messages(self.factory, snap, self.mech, self.frame_id)
            names = self.mech.coordinate_names
            effort_map = [(i, names.index(u)) for i, u in enumerate(snap.input_names) if u in names]
            self.layouts[key] = (Layout(self.store, MECHANISM_STATE, self.store.serialize_cdr(state, MECHANISM_STATE)),
                                 Layout(self.store, JOINT_STATE, self.store.serialize_cdr(joints, JOINT_STATE)),
                                 effort_map)
        return self.layouts[key]

    def encode(self, snaps, trusts=None) -> tuple[list[int], list[bytes], list[bytes]]:
        """(stamps [ns], MechanismState bytes, JointState bytes) of the estimates, in order;
        trusts: their verdicts (None: OK without a reason), see :meth:`_trust`."""
        ns = [sec_to_ns(s.stamp) for s in snaps]
        trusts = [None] * len(snaps) if trusts is None else list(trusts)
        states: list[bytes] = []
        joints: list[bytes] = []
        start = 0
        while start < len(snaps):
            key = self._key(snaps[start])
            stop = start + 1
            while stop < len(snaps) and self._key(snaps[stop]) == key:
                stop += 1
            a, b = self._batch(snaps[start:stop], ns[start:stop], key, trusts[start:stop])
            states += a
            joints += b
            start = stop
        return ns, states, joints

    def _batch(self, snaps, ns, key, trusts):
        ls, lj, effort_map = self._layouts(key, snaps[0])
        n = len(snaps)
        sec = np.array([t // NS_PER_S for t in ns], dtype=np.int64)
        nsec = np.array([t % NS_PER_S for t in ns], dtype=np.int64)
        stamp = {"header.stamp.sec": sec, "header.stamp.nanosec": nsec}
        vals = dict(stamp)
        for f in ("q", "qd", "qdd", "z", "zd", "zdd"):
            if f in ls.slots:
                vals[f] = np.array([getattr(s, f) for s in snaps], dtype=float)
        for f, field in (("cov", "covariance"), ("branch_probabilities", "branch_probabilities"),
                         ("inputs", "input_forces"), ("input_cov", "input_covariance")):
            if field in ls.slots:
                vals[field] = np.array([np.ravel(getattr(s, f)) for s in snaps], dtype=float)
        vals["branch"] = np.array([int(s.branch) for s in snaps])
        if "trust_level" in ls.slots:
            vals["trust_level"] = np.array([0 if v is None else int(v.level) for v in trusts])
        state_rows = ls.encode(vals, n)
        jv = dict(stamp)
        if "position" in lj.slots:
            jv["position"] = vals["q"]
        if "velocity" in lj.slots:
            jv["velocity"] = vals["qd"]
        if "effort" in lj.slots:
            effort = np.zeros((n, self.mech.n))
            for i, c in effort_map:  # as estimate_messages: effort[c] += u, in input order
                effort[:, c] += vals["input_forces"][:, i]
            jv["effort"] = effort
        joint_rows = lj.encode(jv, n)
        states = [r.tobytes() for r in state_rows]
        if "trust_level" in ls.slots:
            states = [self._trust(b, v) for b, v in zip(states, trusts)]
        return states, [r.tobytes() for r in joint_rows]

    @staticmethod
    def _trust(data: bytes, verdict) -> bytes:
        """The message's bytes with its ``trust_reason``: the layout's sample has the empty
        string, MechanismState's last field, so its bytes end with the string's uint32
        length 1 and the NUL; a reason replaces those 5 bytes (CDR: length + 1, the UTF-8
        bytes, NUL; no padding after the last field)."""
        if verdict is None:
            return data
        text = str(verdict.reason).encode()
        return data[:-5] + struct.pack("<I", len(text) + 1) + text + b"\0"


class ParticleSetEncoder:
    """CDR bytes of mbde_msgs/ParticleSet messages of one filter: the first cloud of each
    particle count through :func:`~mbde_core.rosio.convert.particle_set_msg` and rosbags,
    the next ones written into a copy of its bytes (a :class:`Layout`; the same bytes)."""

    def __init__(self, factory, names, frame_id: str = "world"):
        self.factory, self.store = factory, factory.typestore
        self.names, self.frame_id = list(names), frame_id
        self.layouts: dict[tuple, Layout] = {}

    def encode(self, cloud) -> bytes:
        z = np.asarray(cloud.z, dtype=np.float64)
        branch = np.asarray(cloud.branch).ravel()
        key = (z.shape, np.shape(cloud.zd), branch.size, np.size(cloud.weight))
        layout = self.layouts.get(key)
        if layout is None or (branch.size and np.abs(branch).max() >= 2**31):  # the builder checks and raises
            data = self.store.serialize_cdr(particle_set_msg(self.factory, cloud, self.names, self.frame_id), PARTICLE_SET)
            self.layouts[key] = Layout(self.store, PARTICLE_SET, data)
            return bytes(data)
        sec, nsec = sec_to_stamp(cloud.stamp)
        vals = {"header.stamp.sec": [sec], "header.stamp.nanosec": [nsec], "z": z.ravel(),
                "zd": np.asarray(cloud.zd, dtype=np.float64).ravel(), "branch": branch,
                "weight": np.asarray(cloud.weight, dtype=np.float64).ravel(),
                "effective_sample_size": [float(cloud.ess)], "unique_particles": [int(cloud.unique)]}
        return layout.encode({k: v for k, v in vals.items() if k in layout.slots}, 1)[0].tobytes()


_HEAD = struct.Struct("<qBHI")
DECLARE, END = 254, 255  # record kinds: a topic's declaration, the end of a finished file
POLL = 0.02  # s between looks at a part file that is still being written


class PartWriter:
    """Append records (t_ns, kind, topic index, bytes) to a part file (see module doc)."""

    def __init__(self, path: str):
        self.path = path
        self.fh = open(path, "wb", buffering=1 << 20)
        self.count = 0

    def declare(self, topic: int, name: str, typename: str) -> None:
        """Topic index ``topic`` is ``name`` of ``typename`` (before its first message)."""
        data = f"{name}\0{typename}".encode()
        self.fh.write(_HEAD.pack(0, DECLARE, topic, len(data)))
        self.fh.write(data)

    def write(self, t_ns: int, kind: int, topic: int, data: bytes) -> None:
        self.fh.write(_HEAD.pack(t_ns, kind, topic, len(data)))
        self.fh.write(data)
        self.count += 1

    def flush(self) -> None:
        """Make everything written so far readable by a follower."""
        self.fh.flush()

    def close(self) -> None:
        self.fh.write(_HEAD.pack(0, END, 0, 0))
        self.fh.close()


def read_part(path: str, on_declare=None, follow=None):
    """Yield (t_ns, kind, topic index, bytes) of a part file's messages, in file order.

    on_declare(topic index, topic, type) is called for each declaration. follow: None
    reads to the end of the file as it is; else a callable telling whether the writer has
    ended (its task finished or failed): at the end of the data so far the reader waits
    for more until the END record, or until follow() is true and nothing more came
    (a failed writer: what it wrote is kept)."""
    fh = None
    try:
        while fh is None:  # a followed part file may not exist yet
            try:
                fh = open(path, "rb", buffering=0)
            except FileNotFoundError:
                if follow is None or follow():
                    return
                time.sleep(POLL)
        buf, pos = b"", 0
        while True:
            if len(buf) - pos < _HEAD.size or len(buf) - pos < _HEAD.size + _HEAD.unpack_from(buf, pos)[3]:
                ended = follow is None or follow()  # asked before reading: data written before it is seen
                more = fh.read(1 << 20)
                if more:
                    buf = buf[pos:] + more
                    pos = 0
                    continue
                if ended:
                    return
                time.sleep(POLL)
                continue
            t_ns, kind, topic, size = _HEAD.unpack_from(buf, pos)
            start = pos + _HEAD.size
            pos = start + size
            if kind == END:
                return
            if kind == DECLARE:
                if on_declare is not None:
                    name, typename = buf[start:pos].decode().split("\0")
                    on_declare(topic, name, typename)
                continue
            yield t_ns, kind, topic, buf[start:pos]
    finally:
        if fh is not None:
            fh.close()


def write_records_part(path: str, name: str, records, particles, mech, batch: int = 2048) -> list:
    """Part file of an in-memory run (StepRecords and [(step, ParticleCloud)] with stamps),
    e.g. the batch smoother's; returns its [(topic, type)] (see module doc)."""
    enc = EstimateEncoder(mech)
    ns = f"/mbde/{name}"
    topics = [(ns + "/state", MECHANISM_STATE), (ns + "/joint_states", JOINT_STATE)]
    clouds = [(sec_to_ns(c.stamp), enc.store.serialize_cdr(particle_set_msg(enc.factory, c, mech.independent_names, "world"),
                                                           PARTICLE_SET)) for _, c in particles]
    if clouds:
        topics.append((ns + "/particles", PARTICLE_SET))
    part = PartWriter(path)
    for k, (topic, typename) in enumerate(topics):
        part.declare(k, topic, typename)
    c = 0
    for start in range(0, len(records), batch):
        chunk = records[start: start + batch]
        t_ns, states, joints = enc.encode([r.estimate for r in chunk], [getattr(r, "trust", None) for r in chunk])
        for t, a, b in zip(t_ns, states, joints):
            part.write(t, 0, 0, a)
            part.write(t, 0, 1, b)
            while c < len(clouds) and clouds[c][0] <= t:
                part.write(clouds[c][0], 1, 2, clouds[c][1])
                c += 1
    for t, data in clouds[c:]:
        part.write(t, 1, 2, data)
    part.close()
    return topics
