"""A lock on a wrong offset seen in the acceleration noise, and the alternative it points to.

The lock detector of :mod:`.recovery` watches the readings' innovations. A cloud can sit on
a wrong position with every innovation small: when the readings give the velocities
(gyroscopes) and the positions only through the dynamics (an accelerometer's channels are
widened by the noise rule, :mod:`.scales`, until a 0.08 rad offset of a pendulum is 0.1
sigma), the adapted proposal (:mod:`.proposal`) draws at each step the acceleration
noise v that makes the particle's velocity agree with the gyroscopes, and a collapsed
cloud keeps its offset for as long as the noise pays for it (the open 2-DOF chain with an
IMU on each link of issue 43: -0.08 rad in both angles for 9 s, NEES ~100).

**The statistic**: on a correct track the weighted mean noise E_w[v] of the readings
(zdd = f(z, zd) + v, paper 000 eq. 13) averages to the model error, which is small
beside sigma_a; on a position offset dz = z_true - z it is f(z_true, zd) - f(z, zd) ~ J dz
(J = df/dz at the cloud's most probable particle) at every step, of one sign. Over the
last ``time`` seconds the detector keeps b = mean E_w[v] / sigma_a and the least-squares
offset that explains the noise, dz = (sum J^T J + lambda I)^-1 sum J^T E_w[v] (J
evaluated every ``EVERY`` updates by finite differences of the model's accelerations,
positions solved on the particle's branch from its own q; lambda = 1e-6 x trace / g).
It fires when rms(b) > ``limit`` (``recovery.bias``), the window is full, dz is at
least ``MIN_SHIFT`` (angles [rad]; lengths x the length scale) and at least ``SPREAD``
times the cloud's own standard deviation in some coordinate (a cloud that spans the
alternative finds it by its weights; a collapsed one cannot).

**The remedy** (:func:`shift_inject`): copies of the cloud moved by dz (each particle's z +
dz solved on its own branch, its velocity re-drawn from the velocity readings as the
lock's local copies of :mod:`.recovery`) join the cloud with ``SHARE`` of the
prior weight, each group weighted by its evidence of this update's readings; the next
readings decide (the copies need less noise to follow the gyroscopes, so they gain
weight while the noise bias was the offset's; when it was the model's, they lose it).
A running Gaussian follower (:mod:`.refine`) is kept: the copies are a test the weights
decide, and the follower-vs-cloud test drops it if they win (the speed-step slider-crank
with its torque read: unmodelled slider friction biases the noise and the detector fires
once at ~1 s; dropping the follower for it published the cloud and delayed the acquisition
0.1 s -> 1.06 s on 5 of 5 seeds).
A fired detector waits ``time`` x 2^k before it may fire again (k: the firings of the last
``BACKOFF_RESET`` seconds), so that a bias the model causes costs a few injections only.
"""
from __future__ import annotations

import collections
import math

import numpy as np

from mbde_core.engine import kinematics
from mbde_core.estimators.particle import proposal as prop
from mbde_core.estimators.particle import likelihood, weights
from mbde_core.estimators.particle.likelihood import lse

EVERY = 2            # updates between two evaluations of J (and samples of the noise)
MIN_SHIFT = 0.01     # [rad; lengths: x length scale] smallest offset worth a test
SPREAD = 3.0         # dz must exceed this many of the cloud's standard deviations
SHARE = 0.3          # prior share of the shifted copies
EPS = 1e-4           # [rad; lengths: x length scale] finite-difference step of J
BACKOFF_RESET = 10.0  # [s]


class BiasDetector:
    """The noise-bias test of the module docstring (``limit`` 0: off)."""

    def __init__(self, limit: float, time: float):
        self.limit, self.T = float(limit), float(time)
        self.hist = collections.deque()  # (t, b (g,), JtJ or None, Jtv or None)
        self.since = 0.0
        self.fired: list = []  # times of the last firings (backoff)
        self.count = 0
        self.last = None  # rms(b) over the window (diagnostics)

    def restart(self, t: float) -> None:
        self.hist.clear()
        self.since = float(t)

    def shift(self, dt: float) -> None:
        self.since += dt
        self.hist = collections.deque((a + dt, *rest) for a, *rest in self.hist)
        self.fired = [a + dt for a in self.fired]

    def __call__(self, pf) -> np.ndarray | None:
        """The update just fused: the offset dz (g,) to test, or None."""
        if not self.limit > 0 or pf.sigma_a <= 0 or not pf.adapted:
            return None
        if pf.lock.since > self.since:  # a new set or an injection: the window starts again with the lock's
            self.restart(pf.lock.since)
        t = pf.t
        self.count += 1
        if self.count % EVERY:
            return None
        w = pf.weights()
        J = jacobian(pf, int(np.argmax(w)))
        if J is None:
            return None
        hist = self.hist
        hist.append((t, J, np.einsum("n,ng->g", w, pf.v)))  # not w @ v: no multithreaded BLAS (outputs.wsum)
        while hist and hist[0][0] < t - self.T - 1e-12:
            hist.popleft()
        self.fired = [a for a in self.fired if a > t - BACKOFF_RESET]
        wait = self.T * 2.0 ** len(self.fired) if self.fired else self.T
        g = pf.g
        if t - self.since < wait - 1e-12 or len(hist) <= 2 * g:
            return None
        Js = np.array([h[1] for h in hist])
        vs = np.array([h[2] for h in hist])
        A = np.einsum("kij,kil->jl", Js, Js)
        r = np.einsum("kij,ki->j", Js, vs)
        lam = 1e-6 * max(float(np.trace(A)), 1e-300) / g
        try:
            dz = np.linalg.solve(A + lam * np.eye(g), r)
        except np.linalg.LinAlgError:
            return None
        res = vs - np.einsum("kij,j->ki", Js, dz)
        s2 = float(np.sum(res**2)) / max(res.size - g, 1)
        self.last = float(dz @ A @ dz) / max(s2, 1e-300)
        if not self.last > self.limit:
            return None
        scale = np.where(pf.angular, 1.0, pf.mech.length_scale)
        sd = np.sqrt(np.clip(np.diag(np.cov(pf.z.T, aweights=w).reshape(g, g)), 0.0, None))
        if not (np.all(np.isfinite(dz)) and np.any((np.abs(dz) >= MIN_SHIFT * scale) & (np.abs(dz) >= SPREAD * sd))):
            return None
        self.fired.append(t)
        self.restart(t)
        return dz


def jacobian(pf, i: int) -> np.ndarray | None:
    """J = df/dz (g, g) of the model's independent accelerations at particle i's (z, zd), by
    central differences, the positions solved on its branch from its own q (None if a
    position problem fails)."""
    g, iz, mech = pf.g, pf.iz, pf.mech
    scale = np.where(pf.angular, 1.0, mech.length_scale)
    h = EPS * scale
    q0 = pf.q[i]
    z = np.repeat(q0[iz][None], 2 * g, axis=0)
    z[np.arange(g), np.arange(g)] += h
    z[g + np.arange(g), np.arange(g)] -= h
    q, ok = kinematics.solve_position(mech, z, np.repeat(q0[None], 2 * g, axis=0), t=pf.t)
    if not np.all(ok):
        return None
    zd = np.repeat(pf.qd[i, iz][None], 2 * g, axis=0)
    qd = kinematics.velocity(mech, q, zd, t=pf.t)
    f = prop.model_accelerations(mech, pf.t, q, qd)[:, iz]
    J = ((f[:g] - f[g:]) / (2.0 * h[:, None])).T  # J[:, k] = df / dz_k
    return J if np.all(np.isfinite(J)) else None


def shift_inject(pf, dz, measurements, prior_logw) -> bool:
    """Copies of the cloud moved by dz join it (see the module docstring); False (nothing
    done) when no copy assembles or explains the readings."""
    old = (pf.q, pf.qd, pf.qdd, pf.v, pf.label, pf.logw)
    q, ok = kinematics.solve_position(pf.mech, pf.z + dz, pf.q, t=pf.t)
    ok &= np.isfinite(q).all(axis=1)
    if not ok.any():
        return False
    lost = (list(pf.lost.hist), pf.lost.since)
    ev_old = getattr(pf, "_log_evidence", 0.0)
    zd = pf.zd[ok]
    pf._set(q[ok], zd, pf.label[ok])
    rd, _ = likelihood.readings(pf, measurements, {})
    s = pf.sigma_a * pf.bias.T  # as the lock's local copies (recovery.local_copies)
    ll = weights.fresh(pf, rd, keep_z=True, zd_prior=(zd, np.full(pf.g, s * s)) if s > 0 else None)
    lw = prior_logw[ok] + ll
    ev = lse(lw)
    if math.isfinite(ev):
        groups = [(old[:5], old[5], 1.0 - SHARE, ev_old), ((pf.q, pf.qd, pf.qdd, pf.v, pf.label), lw - ev, SHARE, ev)]
        lg = np.array([math.log(sh) + e for _, _, sh, e in groups])
        lg = lg - lse(lg)
        pf.q, pf.qd, pf.qdd, pf.v, pf.label = (np.concatenate(x) for x in zip(*(g[0] for g in groups)))
        pf.logw = np.concatenate([g[1] + x for g, x in zip(groups, lg)])
        pf.counts["locks"] += 1
        pf.recovery_reasons["bias"] += 1
    else:  # no copy explains the readings: the cloud as it was
        pf.q, pf.qd, pf.qdd, pf.v, pf.label, pf.logw = old
    pf.follower.keep()  # the cloud's hypotheses stay, the copies are a test (module doc)
    pf.N = pf.q.shape[0]
    pf._fresh = False
    pf._unique = pf.N
    pf.propagator.drop()
    pf.lost.hist.extend(lost[0])
    pf.lost.since = lost[1]
    pf.lock.restart(pf.t)
    return math.isfinite(ev)
