"""Particle-filter defaults from the mechanism and its sensors (the ``null`` options of pf.yaml).

Paper 000's settings (Table 1: sigma_a = 1 m/s^2 on the crank tip = 8 rad/s^2, |zd| <= 40
rad/s, 100 particles) are those of its 0.125 m rig. They do not transfer: on FourBars1
(2/8/5 m, accelerations ~5 rad/s^2) 8 rad/s^2 of noise swamps the dynamics, on a 2 cm
four-bar (crank up to ~70 rad/s, ~500 rad/s^2) both the noise and the velocity range are
far too small. The rules below derive them from the model, on the branch atlas's grid of
assembled configurations (every branch; :mod:`.prior`):

- ``acceleration_sigma`` = ``ACCEL_FRACTION`` (0.5) x a_rms, a_rms = root mean square over
  the grid of the model's independent accelerations at rest, |f(z, 0)| (gravity and the
  known loads at t = 0). The factor is measured, not derived: with paper 003's model
  error (gravity +1 m/s^2, 10 % of the forces) the multi-DOF benchmark converges on every
  scenario for 0.4-0.8 x a_rms (FourBars1: 1 to 4 rad/s^2 work, 16 fails; offset
  slider-crank: 16 to 64 work, 4 fails; five-bar with encoders: 16 works, 4 fails):
  the noise must cover the model error where the forces peak and keep the cloud diverse,
  not only the RMS error. Paper 000 Table 1's 8 rad/s^2 on its rig is 0.09 x a_rms
  (a_rms = 88 rad/s^2; the rule gives 44, with the same tracking accuracy on pf_sim).
  Without forces at rest (a horizontal, unloaded linkage) a_rms is taken at half the
  velocity bound below, where the velocity terms act.
- ``uniform.zd`` = +/- ``VELOCITY_MARGIN`` (1.25) x W_k, W_k = max over the grid of
  sqrt(2 dV (Mbar^-1)_kk): the largest |zd_k| at which the kinetic energy 1/2 zd^T Mbar zd
  (Mbar = R^T M R, paper 003 eq. 3) equals the range dV of the potential energy, i.e. the
  speed a conservative mechanism can reach when released at rest anywhere. Mechanisms
  driven by motors or other inputs the model does not know (config ``uniform.zd``) and
  mechanisms without potential energy (``DEFAULT_SPEED``) need the range set.
- ``sensor_sigma_by_type.accelerometer`` (and the accelerometer channels of an ``imu``):
  the Kalman observers' widening (:mod:`sensor_scales`, eps = 0.1): an accelerometer reads
  the specific force a - g, so an error of the model's gravity or forces biases its
  readings for as long as the error persists (1/w_g), and a filter that took those
  readings as independent would average the bias away. With only paper 003's gravity
  error term, 0.1 |g| (~1 m/s^2), the PF on fourbar_imu was 5-8x less accurate than with
  the gyroscope alone (steady-state RMSE 0.07-0.11 rad); with the rule's 6.4 / 11.8 m/s^2
  it is 0.008 rad, the UKF's.
- ``particles`` (tracking) = ``PARTICLES_PER_DOF`` (300) x g, for vipf as well
  (``VIPF_PARTICLES_PER_DOF``). Measured with ``mbde bench pf --only multidof`` (10 seeds, 13
  scenarios of 1-2 DOF): 100 per DOF converged in 120 of 130 runs, 300 per DOF in 125 (the released rig
  6/10 -> 9/10 and 7/10 -> 9/10, offset slider-crank 9/10 -> 10/10, five-bar with encoders
  9/10 -> 10/10; median steady-state ratio to the UKF 1.29 -> 1.18 on fourbar_gyro) for
  ~10-30 % more CPU (the uniform start's larger cloud dominates the short runs). vipf
  (resampling at every update, paper 002) at 100 per DOF on fourbar_gyro, seeds 0-29:
  steady-state RMSE of z 0.008-0.027 rad from seed to seed (the UKF: 0.014), so one seed's
  ratio of two runs (e.g. ``mbde bench faults``' outliers, 2 % of the readings rejected)
  ranged 0.4-2.6; at 300 per DOF, seeds 0-9: 0.011-0.018 rad clean, per-seed ratio with
  those 2 % dropped 0.89-1.88 (median 1.08), pooled RMSE 0.0140 clean / 0.0161 dropped.
- ``uniform.anneal`` = ``ANNEAL_PER_PAIR`` (0.3 s) x g (g - 1) / 2, per pair of independent
  coordinates (0, 0.3, 0.9 s for 1, 2, 3 DOF): the likelihood is tempered,
  ll x beta with beta rising linearly from 0.1 to 1 over that time after a uniform
  (re)initialisation (annealing, Neal 2001; Deutscher, Blake & Reid 2000), so that a
  multi-DOF posterior's modes are explored before the weights commit: on the five-bar with
  gyroscopes the mirrored motion on the other branch fits the first 0.2 s about as well
  as the truth, and without annealing 1 run in 8 committed to it. One DOF needs none
  (paper 000's rig identifies its branch in < 0.1 s). Three DOF need more than twice two's:
  the 3-DOF loop with gyroscopes released at rest (``sixbar_loop3_gyro``) reads ~0 rad/s
  for its first 0.3 s, so its readings give the initial accelerations f(z) (3 numbers)
  and several z fit them; with 0.6 s (0.3 s x (g - 1)) the
  weights committed to a wrong one at 0.3-0.4 s in 8 of 20 runs (found again by the lock
  detector and a recovery at 0.8-1.3 s, then 5-100x the UKF's error after 1 s); with
  0.9 s the 10 hardest seeds of those 20 converged by 0.68-0.76 s, without a lock
  (``mbde bench pf --only multidof``, README). One coordinate on several assembly branches
  read by position sensors only (an encoder on a four-bar's crank) has the same problem
  with the branch as its second unknown: every particle reads the encoder exactly on
  either branch, the branch shows only through the dynamics (the acceleration each
  branch predicts for the motion read), and untempered weights committed to the wrong
  one: fourbar_encoder seed 5, P(wrong branch) 0.997 at 0.1 s, two lock injections, the
  branch found at 1.39 s; with ANNEAL_PER_PAIR (0.3 s) seeds 1-20 found it at
  0.26-0.47 s (without: 0.21-0.36 s and seed 5 at 1.39 s), tracking RMSE unchanged
  (steel_fourbar_encoder, slider_crank_offset_encoder seeds 1-5: every branch within
  0.12 / 0.285 s, no lock; without: 0.5 s with two locks / 0.375 s with one). A
  velocity or acceleration reading of the linkage (a rocker gyroscope) tells the
  branches apart directly: there annealing only delayed fourbar_gyro (branch at
  0.82-0.91 s instead of 0.54-0.80 s, seeds 1-3) and is not used.
- ``uniform.particles`` (a uniform (re)initialisation) = K x C_z x C_zd, clipped to
  [``INIT_MIN``, ``INIT_MAX``]: K branches, C_z = ``CELLS``^g cells of z unless the
  position readings (encoders, slider positions: at least g channels) place every
  particle on them (:mod:`.proposal`), C_zd = ``VELOCITY_CELLS``^g unless the velocity
  readings (gyroscopes: >= g channels) give zd. Five-bar with gyroscopes: 2 x 48^2 = 4608.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.engine import dynamics, kinematics
from mbde_core.estimators.options.mechanism_scales import mechanism_scales as model_scales
from mbde_core.estimators.options.rule import ACCEL_FRACTION, MODEL_ERROR, VELOCITY_MARGIN
from mbde_core.estimators.options.sensor_scales import widened_sigmas
DEFAULT_SPEED = 20.0       # [unit/s] velocity bound without potential energy
PARTICLES_PER_DOF = 300
VIPF_PARTICLES_PER_DOF = 300  # as the PF: at 100 vipf's seed-to-seed spread on fourbar_gyro was 3x (above)
CELLS = 48                 # z cells per coordinate of a uniform start (~0.13 rad on the circle)
VELOCITY_CELLS = 16        # zd cells per coordinate when no reading gives zd
ANNEAL_PER_PAIR = 0.3      # [s] of tempered likelihood per pair of independent coordinates
INIT_MIN = 1000
INIT_MAX = 100_000


@dataclass
class Scales:
    """What the rules use: a_rms [unit/s^2] (g,), W [unit/s] (g,), dV [J]."""

    a_rms: np.ndarray
    W: np.ndarray
    dV: float


def mechanism_scales(mech, atlas) -> Scales:
    """a_rms and the energy velocity bound W on the atlas's grid (see the module docstring)."""
    q = atlas.q[atlas.has]
    g = mech.dof
    if q.shape[0] == 0:
        return Scales(np.zeros(g), np.full(g, DEFAULT_SPEED), 0.0)
    ev = dynamics.evaluate(mech, 0.0, q, np.zeros_like(q))
    V = np.asarray(mech.potential_energy(q), dtype=float).reshape(-1)
    dV = float(np.nanmax(V) - np.nanmin(V)) if V.size else 0.0
    R = ev.R
    Mbar = np.einsum("nig,ij,njk->ngk", R, np.asarray(mech.M, dtype=float), R)
    try:
        Mi = np.linalg.inv(Mbar)
        diag = np.diagonal(Mi, axis1=1, axis2=2)
        ok = np.all(np.isfinite(diag) & (diag > 0), axis=1)
    except np.linalg.LinAlgError:
        diag, ok = None, np.zeros(q.shape[0], dtype=bool)
    if dV > 0 and ok.any():
        W = np.sqrt(2.0 * dV * diag[ok]).max(axis=0)
    else:
        W = np.full(g, DEFAULT_SPEED)
    f = ev.zdd
    good = np.all(np.isfinite(f), axis=1)
    a = np.sqrt(np.mean(f[good] ** 2, axis=0)) if good.any() else np.zeros(g)
    if not np.all(a > 0):  # no forces at rest: the velocity terms at half the bound
        zd = 0.5 * np.broadcast_to(W, (q.shape[0], g)) * np.where(np.arange(q.shape[0]) % 2, 1.0, -1.0)[:, None]
        qd = kinematics.velocity(mech, q, zd, phi_q=None)
        fv = dynamics.evaluate(mech, 0.0, q, qd).zdd
        gv = np.all(np.isfinite(fv), axis=1)
        av = np.sqrt(np.mean(fv[gv] ** 2, axis=0)) if gv.any() else np.ones(g)
        a = np.where(a > 0, a, np.where(av > 0, av, 1.0))
    return Scales(a, W, dV)


def acceleration_sigma(scales: Scales) -> float:
    """sigma_a = ACCEL_FRACTION x RMS of a_rms over the coordinates."""
    return float(ACCEL_FRACTION * np.sqrt(np.mean(scales.a_rms**2)))


def velocity_range(scales: Scales):
    """(lo, hi) (g,) of the uniform velocity prior."""
    W = VELOCITY_MARGIN * scales.W
    return -W, W


def tracking_particles(g: int, per_dof: int = PARTICLES_PER_DOF) -> int:
    return int(per_dof) * int(g)


def sensor_covariance(sensor, mech) -> np.ndarray:
    """Sigma_s (d, d) of a sensor without a configured sigma: its noise model; the channels
    of a sensor that reads the accelerations or gravity are widened by the Kalman
    observers' rule (see the module docstring)."""
    R = np.array(sensor.covariance(), dtype=float)
    if getattr(sensor, "uses_qdd", False):
        sig = widened_sigmas(mech, {sensor.name: sensor}, [sensor.name], model_scales(mech), MODEL_ERROR)[sensor.name]
        widened = np.asarray(sig, dtype=float) ** 2
        R[np.diag_indices(sensor.dim)] = np.maximum(np.diag(R), widened)
    return R


def anneal_time(g: int, branches: int = 1, positions_only: bool = False) -> float:
    """Seconds of tempered likelihood after a uniform start: ANNEAL_PER_PAIR x g (g - 1) / 2;
    ANNEAL_PER_PAIR for one coordinate on several branches read by position sensors only
    (the branch is a second unknown, see the module docstring)."""
    g = max(int(g), 1)
    if g == 1 and int(branches) > 1 and positions_only:
        return ANNEAL_PER_PAIR
    return ANNEAL_PER_PAIR * g * (g - 1) / 2


def channels(sensors):
    """(position channels, velocity channels) of a sensor set: readings of q only
    (encoders, slider positions) and readings linear in qd (gyroscopes)."""
    dq = sum(s.dim for s in sensors if not getattr(s, "uses_qd", False) and not s.uses_qdd)
    dqd = sum(s.dim for s in sensors if getattr(s, "uses_qd", False) and not s.uses_qdd)
    return dq, dqd


def initial_particles(g: int, branches: int, sensors) -> int:
    """Particles of a uniform (re)initialisation (see the module docstring)."""
    dq, dqd = channels(sensors)
    cz = 1 if dq >= g else CELLS**g
    czd = 1 if dqd >= g else VELOCITY_CELLS**g
    return int(min(max(branches * cz * czd, INIT_MIN), INIT_MAX))
