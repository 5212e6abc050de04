"""The default-tuning rule's time grid (:mod:`~mbde_core.estimators.options.rule`, module
doc ``step``): the filter step from the motion's frequency and the sensors' periods, and
the interval between two corrections, over which the input states' random walk is set."""
from __future__ import annotations

import math

import numpy as np

STEP_MAX = 0.005   # s
STEP_TURN = 0.05   # rad per step at the motion's frequency


def auto_step(sc, sensors, combines=False) -> float:
    """The rule's step (the rule's module doc, ``step``); combines: the estimator fuses several readings of a
    sensor in one step (:mod:`~mbde_core.estimators.stage.multirate`), then a sensor whose
    period T fits at least 3 times into h_max sets step = n T, n the largest odd whole
    number <= h_max / T (odd: the slot centred on t_k holds readings at symmetric offsets)."""
    h_max = min(STEP_MAX, STEP_TURN / float(np.max(sc.w)))
    periods = [1.0 / s.rate for s in sensors if getattr(s, "rate", 0) and s.rate > 0]
    if not periods:
        return h_max
    T = min(periods)
    n = int(math.floor(h_max / T + 1e-9))
    if combines and n >= 3:
        return T * (n if n % 2 else n - 1)
    return T / math.ceil(T / h_max - 1e-9)


def update_interval(step: float, sensors) -> float:
    """The time between two corrections: the step, or the fastest sensor's period when the
    step divides it (the dynamics need the shorter step, the readings come no faster). The
    input states' density is that of their increment over this interval (the rule's module
    doc, ``inputs: auto``), so a step shortened for the dynamics leaves the inputs' random
    walk as it is. On paper 004's slider-crank (1 kHz accelerometer, step 0.5 ms, torque
    unknown) the density over the step made the UKF and DIEKFpm lag the servo's torque
    ripple (mean NEES/dim 15 and 8.4, seed 100, 3 s); the readings' likelihood is largest
    near the density over the period (psd x1 / x2 / x4 / x16 of the step's: -2 log L per
    reading 0.84 / 0.57 / 0.78 / 1.81, UKF)."""
    periods = [1.0 / s.rate for s in sensors if getattr(s, "rate", 0) and s.rate > 0]
    return max(step, min(periods)) if periods else step
