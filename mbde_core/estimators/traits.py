"""What the rest of mbde needs to know about an estimator besides its options: its traits.

Every estimator class declares ``traits = Traits(...)`` next to its option defaults; the
code outside the estimator reads them instead of keying on estimator names:

- ``cost``: its CPU per simulated second relative to the others (``mbde replay`` submits
  the expensive (bag, estimator) runs first, :mod:`mbde_core.replay.pipeline`);
- ``color``, ``slot``: the rgba of its markers and the row of its label above the
  mechanism (:mod:`mbde_core.viz.markers`, RViz and ``mbde render``); None: a colour and
  a row picked from its name;
- ``tunable``: the options ``mbde tune`` fits (``plant_noise``, ``sensor_sigma``: on the
  innovation likelihood of a Gaussian observer; ``acceleration_sigma``: on the particle
  filter's own marginal likelihood) (:mod:`mbde_core.cli.cmd_tune`);
- ``input_states``: it takes the common ``inputs`` option (unknown generalized forces as
  random-walk states, :mod:`~mbde_core.estimators.kalman.input_states`), whose ``auto``
  the default-tuning rule fills (one per force-limited coordinate);
- ``known_inputs``: it takes the readings of known-input sensors (a measured motor torque,
  :mod:`mbde_core.sensors.effort`) as known generalized forces with their uncertainty,
  held by the stage between readings (:mod:`~mbde_core.estimators.stage.inputs`); replay
  and the live node feed it those readings (otherwise they are counted, not fed);
- ``noise_rule``: the family of the default-tuning rule that resolves its ``auto``
  options (:mod:`~mbde_core.estimators.options.rule`): ``kalman`` (plant noise from the
  model error, the unknown forces and the transition's order; accelerometers widened),
  ``adekf`` (its inputs absorb the force errors: no force term, accelerometers widened
  for gravity only, the input noise ``r_a`` and ``jump_sigma``), ``particle`` (no plant
  noise; an unknown motor widens the uniform start's velocities and the acceleration
  noise; its Gaussian follower is resolved as a ``kalman`` one);
- ``needs``: what the sensor set must offer for the estimator to mean anything (checked
  before a run, :func:`~mbde_core.estimators.assess.suitability.precheck`):
  ``accelerations`` (a sensor that reads them: the ADE-KF's inputs show only there);
  ``needs_reason`` says why;
- ``drivers``: it supports time-dependent driving constraints (:mod:`mbde_core.model.drivers`);
- ``local``: a local (Gaussian) observer, which re-acquires globally only with the stage's
  multi-start bank (:mod:`~mbde_core.estimators.stage.multistart`); a particle filter
  re-acquires by itself;
- ``follower``: it can be the particle filter's Gaussian follower (``refine.estimator``,
  :mod:`~mbde_core.estimators.particle.refine`);
- ``pbh``: the suitability check adds the PBH rank test of its augmented input model
  (paper 004 eq. 58; the built estimator's ``model``).
"""
from __future__ import annotations

from dataclasses import dataclass

NOISE_RULES = ("kalman", "adekf", "particle")
KALMAN_TUNABLE = ("plant_noise", "sensor_sigma")  # what `mbde tune` fits of a Gaussian observer


@dataclass(frozen=True)
class Traits:
    """An estimator's traits (see the module docstring)."""

    cost: float = 2.0
    color: tuple | None = None
    slot: int | None = None
    tunable: tuple = ()
    input_states: bool = False
    known_inputs: bool = False
    noise_rule: str = "kalman"
    needs: frozenset = frozenset()
    needs_reason: str = ""
    drivers: bool = False
    local: bool = True
    follower: bool = False
    pbh: bool = False

    def __post_init__(self):
        if self.noise_rule not in NOISE_RULES:
            raise ValueError(f"noise_rule must be one of {', '.join(NOISE_RULES)}, got {self.noise_rule!r}")
        if self.color is not None and len(self.color) != 4:
            raise ValueError(f"color must be rgba (4 numbers), got {self.color!r}")
