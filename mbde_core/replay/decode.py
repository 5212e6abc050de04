"""Batch decoding of a bag's sensor and ground-truth messages (what ``mbde replay`` reads).

Each topic's raw CDR messages are decoded a chunk at a time through a precompiled
:class:`~mbde_core.rosio.cdr_batch.Layout` (one numpy slice per field, see there); a
layout's strings (joint names, coordinate names) are checked once through the ordinary
converters of :mod:`mbde_core.rosio.convert` / :mod:`mbde_core.rosio.sensor_io`, and
messages of another shape go through those converters one by one. Results equal the
per-message path exactly (same floats, stamps ``ns_to_sec(sec * 1e9 + nanosec)``).
"""
from __future__ import annotations

import numpy as np

from mbde_core.errors import DataError
from mbde_core.rosio.bag_reader import deserialize
from mbde_core.rosio.cdr_batch import Layout, LayoutError, stack_rows
from mbde_core.rosio.convert import IMU, IMU_CHANNELS, NOT_PROVIDED, joint_state_values, snapshot_from_mechanism_state
from mbde_core.rosio.sensor_io import sensor_reading
from mbde_core.rosio.stamps import NS_PER_S
from mbde_core.types import Measurement

MAX_LAYOUTS = 8  # shapes remembered per topic; more shapes decode message by message

STAMP = ("header.stamp.sec", "header.stamp.nanosec")


def stamps_ns(dec) -> list[int]:
    """Header stamps [ns] (Python ints, exact) of decoded rows."""
    return [s * NS_PER_S + n for s, n in zip(dec[STAMP[0]].tolist(), dec[STAMP[1]].tolist())]


def to_sec(ns: list[int]) -> list[float]:
    return [t / NS_PER_S for t in ns]  # int / int: correctly rounded, as stamps.ns_to_sec


class TopicDecoder:
    """Decodes the messages of one topic in chunks; subclasses say what a row gives."""

    def __init__(self, store, typename: str):
        self.store, self.typename = store, typename
        self.layouts: list[tuple[Layout, object]] = []  # (layout, what the subclass checked once)
        self.skipped = 0
        self.reason: str | None = None

    def decode(self, datas: list) -> list:
        """Items (subclass-specific) of the messages ``datas`` (bytes), in their order."""
        out: list = [None] * len(datas)
        todo = list(range(len(datas)))
        by_len: dict[int, list[int]] = {}
        for i in todo:
            by_len.setdefault(len(datas[i]), []).append(i)
        for idx in by_len.values():
            rows = stack_rows([bytes(datas[i]) for i in idx])
            left = np.ones(len(idx), dtype=bool)
            tried = 0  # layouts already applied to these rows
            while left.any():
                for layout, info in self.layouts[tried:]:
                    if layout.size == rows.shape[1]:
                        hit = left & layout.matches(rows)
                        if hit.any():
                            sel = np.nonzero(hit)[0]
                            for j, item in zip(sel, self.rows(layout, info, rows[sel])):
                                out[idx[j]] = item
                            left &= ~hit
                tried = len(self.layouts)
                if not left.any():
                    break
                j = int(np.argmax(left))  # the first row no layout fits: learn its shape
                out[idx[j]] = self._single(datas[idx[j]])
                left[j] = False
                if len(self.layouts) == tried:  # nothing learnt: the others one by one
                    for j in np.nonzero(left)[0]:
                        out[idx[j]] = self._single(datas[idx[j]])
                    break
        return out

    def _single(self, data):
        """One message: learn its layout (if shapes are few) or convert it alone."""
        try:
            msg = deserialize(self.store, data, self.typename)
            info = self.check(msg)
        except DataError as exc:
            self.skipped += 1
            self.reason = self.reason or str(exc)
            return None
        if len(self.layouts) < MAX_LAYOUTS:
            try:
                layout = Layout(self.store, self.typename, data)
                self.layouts.append((layout, info))
                return self.rows(layout, info, stack_rows([bytes(data)]))[0]
            except LayoutError:
                pass
        return self.item(msg)

    # -- per message kind
    def check(self, msg):
        """What a layout's strings mean (raises DataError if the message is unusable)."""
        return None

    def rows(self, layout, info, rows) -> list:
        raise NotImplementedError

    def item(self, msg):
        raise NotImplementedError


class ReadingDecoder(TopicDecoder):
    """A sensor's readings: items are Measurement or None (malformed, counted in skipped)."""

    def __init__(self, store, typename, sensor):
        super().__init__(store, typename)
        self.sensor = sensor

    def check(self, msg):
        sensor_reading(self.sensor, msg)  # names, stamp, provided blocks of this shape
        if self.sensor.msg_type == IMU:
            return None
        names = list(msg.name)
        return [names.index(c) for c in self.sensor.channels]

    def rows(self, layout, info, rows):
        s = self.sensor
        dec = layout.decode(rows)
        if s.msg_type == IMU:
            cols, bad = [], np.zeros(len(rows), dtype=bool)
            for c in s.channels:
                vec, axis, cov = IMU_CHANNELS[c]
                bad |= dec[cov][:, 0] == NOT_PROVIDED
                cols.append(dec[f"{vec}.{axis}"])
            values = np.stack(cols, axis=1)
        else:
            values = dec[getattr(s, "joint_field", "position")][:, info]
            bad = np.zeros(len(rows), dtype=bool)
        out = []
        for t, v, b in zip(to_sec(stamps_ns(dec)), values, bad):
            if b:
                self.skipped += 1
                self.reason = self.reason or f"{s.name}: Imu message does not provide a requested block"
                out.append(None)
            else:
                out.append(Measurement(t, s.name, v))
        return out

    def item(self, msg):
        try:
            return sensor_reading(self.sensor, msg)
        except DataError as exc:
            self.skipped += 1
            self.reason = self.reason or str(exc)
            return None


TRUTH_FIELDS = ("q", "qd", "qdd", "z", "zd", "zdd")


class TruthDecoder(TopicDecoder):
    """Ground truth MechanismState: items are (t, {q, qd, qdd, z, zd, zdd, branch, inputs})."""

    def check(self, msg):
        snap = snapshot_from_mechanism_state(msg)
        return list(snap.input_names)

    def rows(self, layout, info, rows):
        dec = layout.decode(rows, TRUTH_FIELDS + ("branch", "input_forces") + STAMP)
        t = to_sec(stamps_ns(dec))
        forces = dec["input_forces"]
        if forces.shape[1] == 0:
            forces = np.zeros((len(rows), len(info)))
        return [(t[i], {**{f: dec[f][i] for f in TRUTH_FIELDS}, "branch": int(dec["branch"][i]),
                        "inputs": forces[i], "input_names": info}) for i in range(len(rows))]

    def item(self, msg):
        try:
            s = snapshot_from_mechanism_state(msg)
        except DataError:
            self.skipped += 1
            return None
        inputs = s.inputs if s.inputs is not None else np.zeros(len(s.input_names))
        return (s.stamp, {"q": s.q, "qd": s.qd, "qdd": s.qdd, "z": s.z, "zd": s.zd, "zdd": s.zdd,
                          "branch": s.branch, "inputs": inputs, "input_names": list(s.input_names)})


class EffortDecoder(TopicDecoder):
    """Ground truth JointState: items are the effort (n,) over the given coordinates, or None."""

    def __init__(self, store, typename, names):
        super().__init__(store, typename)
        self.names = list(names)

    def check(self, msg):
        vals = joint_state_values(msg, self.names, "effort")
        have = list(msg.name)
        return None if None in vals else [have.index(n) for n in self.names]

    def rows(self, layout, info, rows):
        if info is None:
            return [None] * len(rows)
        eff = layout.decode(rows, ("effort",))["effort"]
        return list(eff[:, info])

    def item(self, msg):
        try:
            vals = joint_state_values(msg, self.names, "effort")
        except DataError:
            return None
        return None if None in vals else np.array(vals, dtype=float)
