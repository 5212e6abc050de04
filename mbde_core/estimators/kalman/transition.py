"""The explicit state transition of the UKF, DEKF and DIEKFpm (option ``transition``).


- ``euler`` -- paper 003 eq. 12, forward Euler: z+ = z + dt zd, zd+ = zd + dt zdd.
  Its local error in z is dt^2/2 zdd per step, a systematic lag of dt/2 times the change
  of zd; on a fast linkage (the paper-000 rig: |zdd| ~ 300 rad/s^2 at dt = 5 ms, 4e-3 rad
  per step) no white plant noise makes the filter consistent (mean NEES 80-5e4 on
  ``pf_sim`` for every acceleration density, measured: README, Defaults that transfer);
- ``constant_acceleration`` -- the exact solution for the acceleration
  held over the step: z+ = z + dt zd + dt^2/2 zdd, zd+ = zd + dt zdd. Same cost, local
  error in z of order dt^3 (jerk); the velocity update is still forward Euler (local error
  dt^2/2 zddd), which the default plant noise covers (:mod:`~mbde_core.estimators.options.rule`);
- ``heun`` (UKF, DEKF and DIEKFpm default) -- a second stage at the constant-acceleration prediction
  x*: zd+ = zd + dt/2 (zdd + zdd*), z+ = z + dt zd + dt^2/6 (2 zdd + zdd*) (explicit
  trapezoidal rule, exact for an acceleration linear in time): local errors O(dt^3) in
  both; one more position problem and dynamics evaluation per state (per sigma point in
  the UKF), +40 % of the UKF's step time. On ``pf_sim`` at 2.5 ms the UKF is consistent
  (mean NEES 0.8-1.1) for any plant noise from 0.1 to 10, where the constant-acceleration
  transition needs ~3 and forward Euler no value works; its innovation likelihood then
  peaks at a consistent density, so ``mbde tune`` finds it.

The transition Jacobian (``transition_jacobian``) is unchanged (the dt^2/2 df/dx terms are
second order). :func:`euler_covariance` propagates a covariance of [z, zd] with the simple
one, [[I, dt I], [0, I]], by blocks (the DIEKFpm's ``transition_jacobian: simple``).
"""
from __future__ import annotations

import numpy as np

from mbde_core.errors import ConfigError

TRANSITIONS = ("euler", "constant_acceleration", "heun")
TRANSITION_DEFAULT = "constant_acceleration"
# (order of the z update, order of the zd update) of each transition (the default-tuning rule's
# q_disc and velocity noise: a first-order update's local error is dt^2/2 of the next derivative)
ORDERS = {"euler": (1, 1), "constant_acceleration": (2, 1), "heun": (2, 2)}


def transition_orders(cfg: dict) -> tuple[int, int]:
    """The orders of the ``transition`` option of ``cfg`` (:data:`ORDERS`)."""
    return ORDERS[cfg["transition"]]


def check_transition(cfg: dict, file: str, path: str) -> None:
    """The ``transition`` option is one of TRANSITIONS."""

    if cfg["transition"] not in TRANSITIONS:
        raise ConfigError(file, f"{path}.transition", f"must be one of {', '.join(TRANSITIONS)}, got {cfg['transition']!r}")


class ExplicitTransition:
    """Mixin of the observers with the ``transition`` option (UKF, DEKF, DIEKFpm): checks it
    after the class's own options (``validate_config`` goes on along the MRO: the known
    and unknown inputs' options next) and gives its orders to the default-tuning rule."""

    @classmethod
    def validate_config(cls, cfg: dict, file: str, path: str) -> None:
        check_transition(cfg, file, path)
        super().validate_config(cfg, file, path)

    @classmethod
    def transition_orders(cls, cfg: dict) -> tuple[int, int]:
        return transition_orders(cfg)


def heun_step(X, zdd0, zdd1, dt: float, g: int):
    """Heun's (explicit trapezoidal) step of x = [z, zd] (N, 2g) from the accelerations at
    the start (zdd0) and at the constant-acceleration prediction (zdd1), (N, g) each:
    zd+ = zd + dt/2 (zdd0 + zdd1), z+ = z + dt zd + dt^2/6 (2 zdd0 + zdd1) (exact for an
    acceleration linear in time)."""
    z, zd = X[:, :g], X[:, g:]
    return np.hstack([z + dt * zd + (dt * dt / 6.0) * (2.0 * zdd0 + zdd1), zd + (0.5 * dt) * (zdd0 + zdd1)])


def position_step(transition: str, z, zd, zdd, dt: float):
    """z+ for the ``transition``; z, zd, zdd: arrays of one shape ((g,), (N, g), (n,))."""
    if transition == "euler":
        return z + dt * zd
    return z + dt * zd + (0.5 * dt * dt) * zdd


def euler_covariance(P, dt, g):
    """Fz P Fz^T with Fz = [[I, dt I], [0, I]] (the Euler step of z, zd), by blocks."""
    A, B, C = P[:g, :g], P[:g, g:], P[g:, g:]
    out = np.empty_like(P)
    Bc = B + dt * C
    out[:g, :g] = A + dt * (B + B.T) + dt * dt * C
    out[:g, g:] = Bc
    out[g:, :g] = Bc.T
    out[g:, g:] = C
    return out
