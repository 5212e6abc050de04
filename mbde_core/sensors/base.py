"""Sensor base class and noise model.

A sensor is a measurement function h(q, qd, qdd) of the natural coordinates, with
analytic Jacobians dh/dq, dh/dqd, dh/dqdd, all batched over a leading axis:
q, qd, qdd (N, n) -> h (N, d), Jacobians (N, d, n). Single states (n,) are accepted and
give (d,) / (d, n).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def wrap_angle(a):
    """Wrap angles to [-pi, pi).

    The floating-point remainder is slow (~7 ns per value); when every a + pi already
    lies in [0, 2 pi) (deviations about a mean, residuals) it is the identity (fmod is
    exact), so two reductions decide to skip it. The result is the same either way.
    """
    t = np.asarray(a) + np.pi
    if t.size and t.min() >= 0.0 and t.max() < 2.0 * np.pi:  # False with a NaN
        return t - np.pi
    return t % (2.0 * np.pi) - np.pi


@dataclass
class NoiseModel:
    """Measurement noise of one sensor, per channel (arrays of shape (d,)).

    sigma: white Gaussian standard deviation. bias: constant bias. bias_rw: random-walk
    bias density [unit/sqrt(s)] (the bias integrates white noise of that density).
    quantization: step of the reading (0 = none); readings are step * round(v / step).
    dropout: probability that a sample is lost (0..1).
    """

    sigma: np.ndarray
    bias: np.ndarray
    bias_rw: np.ndarray
    quantization: np.ndarray
    dropout: float = 0.0

    @staticmethod
    def white(sigma, dim: int | None = None) -> "NoiseModel":
        s = np.atleast_1d(np.asarray(sigma, dtype=float))
        if dim is not None and s.size == 1:
            s = np.full(dim, float(s[0]))
        z = np.zeros_like(s)
        return NoiseModel(s, z.copy(), z.copy(), z.copy(), 0.0)

    def variance(self) -> np.ndarray:
        """Per-channel variance seen by an estimator: sigma^2 + step^2 / 12 (quantization)."""
        return self.sigma**2 + self.quantization**2 / 12.0

    def sampler(self, rng: np.random.Generator) -> "NoiseSampler":
        return NoiseSampler(self, rng)


@dataclass
class NoiseSampler:
    """Stateful noise generator (random-walk bias) for one sensor stream."""

    model: NoiseModel
    rng: np.random.Generator
    rw: np.ndarray = field(default=None)
    t_last: float | None = None

    def __post_init__(self):
        self.rw = np.zeros_like(self.model.sigma)
        self._random_walk = bool(np.any(self.model.bias_rw > 0))
        self._quantized = bool(np.any(self.model.quantization > 0))

    def apply(self, t: float, value: np.ndarray) -> np.ndarray | None:
        """Noisy reading of the true ``value`` (d,) at time t, or None if dropped."""
        m = self.model
        if self.t_last is not None and self._random_walk:
            dt = max(t - self.t_last, 0.0)
            self.rw = self.rw + m.bias_rw * np.sqrt(dt) * self.rng.standard_normal(self.rw.shape)
        self.t_last = t
        out = value + m.bias + self.rw + m.sigma * self.rng.standard_normal(value.shape)
        q = m.quantization
        if self._quantized:
            step = np.where(q > 0, q, 1.0)
            out = np.where(q > 0, step * np.round(out / step), out)
        if m.dropout > 0 and self.rng.random() < m.dropout:
            return None
        return out


def linearize_one(s, q, qd, qdd):
    """(h (d,), dh/dq, dh/dqd, dh/dqdd (d, n)) of sensor ``s`` at one state: its fused
    single-state ``linearize(q, qd, qdd)`` (floats, all four at once) if it has one, else
    its ``h`` and ``jacobians``."""
    fused = getattr(s, "linearize", None)
    if fused is not None:
        return fused(q, qd, qdd)
    return (s.h(q, qd, qdd),) + tuple(s.jacobians(q, qd, qdd))


class Sensor:
    """Base class. Subclasses set the attributes below and implement ``_h``/``_jac``.

    Attributes: name, kind, dim, channels (message channel names: 'gyro_z', 'accel_x',
    'accel_y' for sensor_msgs/Imu, or the joint name for sensor_msgs/JointState),
    msg_type, topic, frame_id, rate [Hz], noise (NoiseModel), angular (d,) bool mask of
    channels that are angles (residuals are wrapped), uses_qd, uses_qdd.
    """

    kind = "sensor"
    msg_type = "sensor_msgs/msg/Imu"
    uses_qd = False
    uses_qdd = False

    def __init__(self, mech, name: str, *, rate: float, noise: NoiseModel, frame_id: str, topic: str):
        self.mech = mech
        self.name = name
        self.rate = float(rate)
        self.noise = noise
        self.frame_id = frame_id
        self.topic = topic
        self.angular = np.zeros(self.dim, dtype=bool)

    # -- to be provided by subclasses -----------------------------------------------------
    dim = 1
    channels: list[str] = []

    def _h(self, q, qd, qdd):  # (N, n) -> (N, d)
        raise NotImplementedError

    def _jac(self, q, qd, qdd):  # -> three (N, d, n+1) arrays (column n = fixed points)
        raise NotImplementedError

    # -- public, batched -----------------------------------------------------------------------
    @property
    def period(self) -> float:
        return 1.0 / self.rate

    def h(self, q, qd=None, qdd=None) -> np.ndarray:
        """Noise-free reading: (d,) or (N, d)."""
        qb, qdb, qddb, single = self._batch(q, qd, qdd)
        out = self._h(qb, qdb, qddb)
        return out[0] if single else out

    def h_many(self, q, pairs, memo: dict | None = None) -> list:
        """[h(q, qd_k, qdd_k) for (qd_k, qdd_k) in pairs], each (N, d), for a batch q (N, n):
        several readings at one configuration (the particle filter's noise Jacobian). The
        same values as :meth:`h`; a sensor with a factor of q alone (an accelerometer's
        axes) overrides it to compute that factor once, and keeps it in ``memo`` (a dict
        the caller owns and empties whenever q changes) for the next call at that q."""
        return [self.h(q, qd, qdd) for qd, qdd in pairs]

    def jacobians(self, q, qd=None, qdd=None):
        """(dh/dq, dh/dqd, dh/dqdd), each (d, n) or (N, d, n)."""
        qb, qdb, qddb, single = self._batch(q, qd, qdd)
        n = self.mech.n
        Hq, Hqd, Hqdd = (J[:, :, :n] for J in self._jac(qb, qdb, qddb))
        return (Hq[0], Hqd[0], Hqdd[0]) if single else (Hq, Hqd, Hqdd)

    def residual(self, measured, predicted) -> np.ndarray:
        """measured - predicted, with angle channels wrapped to [-pi, pi)."""
        r = np.asarray(measured, dtype=float) - np.asarray(predicted, dtype=float)
        if self.angular.any():
            r = np.where(self.angular, wrap_angle(r), r)
        return r

    def covariance(self) -> np.ndarray:
        """Nominal measurement covariance (d, d) from the noise model."""
        return np.diag(self.noise.variance())

    def _batch(self, q, qd, qdd):
        q = np.asarray(q, dtype=float)
        single = q.ndim == 1
        qb = q[None] if single else q
        z = np.zeros_like(qb) if qd is None or qdd is None else None
        qdb = z if qd is None else np.asarray(qd, dtype=float).reshape(qb.shape)
        qddb = z if qdd is None else np.asarray(qdd, dtype=float).reshape(qb.shape)
        return qb, qdb, qddb, single

    def _zeros(self, N):
        n1 = self.mech.n + 1
        return np.zeros((N, self.dim, n1)), np.zeros((N, self.dim, n1)), np.zeros((N, self.dim, n1))

    def describe(self) -> dict:
        """Plain description (stored in bags next to the data)."""
        return {"name": self.name, "type": self.kind, "topic": self.topic, "frame_id": self.frame_id,
                "rate": self.rate, "channels": list(self.channels), "msg_type": self.msg_type}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.dim}ch @ {self.rate:g} Hz on {self.topic}>"
