"""What ``mbde replay`` reads from a bag: model, sensors, readings, ground truth.

The model and the sensors come from the bag's ``/mbde/description`` (written by
``mbde simulate``: the estimator's model with the scenario's model errors), or from
``--mechanism`` / ``--sensors`` files for bags recorded elsewhere (``--mechanism`` alone
uses the mechanism file's own ``sensors:`` section). Readings are taken from each
sensor's topic with the header stamp; malformed messages are counted and skipped.
Ground truth (``/mbde/ground_truth``) is optional: without it the metrics that need it
are omitted.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mbde_core.replay.source import (DESCRIPTION_TOPIC, TRUTH_JOINTS_TOPIC, TRUTH_TOPIC, ReplayModel,  # noqa: F401
                                     Stream, open_source)
from mbde_core.types import Measurement


@dataclass
class TruthSeries:
    """Ground truth samples: t (K,), q/qd/qdd (K, n), z/zd/zdd (K, g), inputs (K, k)."""

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    z: np.ndarray
    zd: np.ndarray
    zdd: np.ndarray
    branch: np.ndarray
    input_names: list
    inputs: np.ndarray
    effort: np.ndarray | None = None  # (K, n) true generalized input per coordinate


@dataclass
class ReplayInputs(ReplayModel):
    """A whole (short) bag in memory: the model plus every reading and the ground truth."""

    measurements: list[Measurement] = field(default_factory=list)
    truth: TruthSeries | None = None
    skipped: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)  # see ReplaySource.notes


def load_inputs(bag: str, mechanism_file: str | None = None, sensors_file: str | None = None) -> ReplayInputs:
    """Read everything a replay needs from ``bag`` into memory (DataError/ConfigError on
    problems): the short-bag form of :func:`mbde_core.replay.source.open_source` +
    :class:`~mbde_core.replay.source.Stream` (same readings, same order)."""
    src = open_source(bag, mechanism_file, sensors_file)
    stream = Stream(src)
    measurements: list[Measurement] = []
    samples = []
    for chunk in stream:
        measurements += chunk.readings
        samples += chunk.truth
    truth = _truth(samples) if samples else None
    if truth is not None and stream.effort_ok:
        truth.effort = np.array([row["effort"] for _, row in samples], dtype=float)
    return ReplayInputs(src.bag, src.mechanism, src.sensors, src.initial_z, src.initial_zd, src.initial_q,
                        src.initial_branch, src.scenario, src.start, src.end, measurements=measurements, truth=truth,
                        skipped=dict(stream.skipped), counts=dict(stream.counts), notes=list(src.notes))


def _truth(samples) -> TruthSeries:
    stack = lambda a: np.array([row[a] for _, row in samples])  # noqa: E731
    names = samples[0][1]["input_names"]
    inputs = np.array([row["inputs"] for _, row in samples]).reshape(len(samples), -1)
    return TruthSeries(np.array([t for t, _ in samples]), stack("q"), stack("qd"), stack("qdd"), stack("z"), stack("zd"),
                       stack("zdd"), np.array([row["branch"] for _, row in samples]), list(names), inputs)
