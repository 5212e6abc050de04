"""The default-tuning rule: filter step, plant noise, initial and sensor sigmas from the
mechanism and its sensors (the options whose value is ``auto``).

An option set to ``auto`` (the built-in default, and ``config/estimators/default.yaml``)
is replaced, when the estimator is built for a mechanism and its sensors, by this rule;
an explicit number in a user config overrides it (e.g. ``config/estimators/paper003.yaml``,
the numbers of paper 003's benchmark). Scales (:mod:`mechanism_scales`, all per
independent coordinate, in its units): a_g the RMS acceleration of the known forces at
rest, a the RMS total acceleration (with the velocity terms at the characteristic speed v
and the force limits a_f), w_g = sqrt(a_g / ell), w = a / v, ell = 1 rad (angles) or the
longest body (lengths). Inputs of the rule (option ``rule``): ``model_error`` eps
(default 0.1: the known forces are trusted to 10 %, e.g. paper 003's gravity error of
1 m/s^2) and ``force_limits`` {coordinate: F_max} (unknown motor or hand forces [N, N m],
also taken from a simulated scenario's speed controller ``torque_limit`` and target speed).

- ``step``: h_max = min(5 ms, 0.05 / max w) (the motion turns by ~0.05 rad per step at
  its frequency), then the fastest sensor period T divided into whole steps,
  step = T / ceil(T / h_max): readings land on the grid (a 1 kHz encoder fused on a 5 ms
  grid is fused up to 2.5 ms off its stamp: mean NEES 170-4e5 on ``pendulum_release``) or,
  for an observer that combines a sensor's readings of a step into one (the Kalman
  observers but the ADE-KF: ``combines_readings``, :mod:`~mbde_core.estimators.stage.
  multirate`: the least-squares intercept at the grid time, its variance R/n), the largest
  odd multiple n T <= h_max when n >= 3 (a 1 kHz encoder on the released pendulum: 5 ms;
  RMSE 0.21 -> 0.17 mrad, NEES/dim 0.49 -> 0.54 over three release angles, a fifth of
  the steps);
- ``plant_noise.acceleration_psd`` q = q_model + q_force + q_disc [unit^2/s^3]:
  q_model = (eps a_g)^2 / w_g -- a model error of eps times the known accelerations,
  correlated over the pendulum time 1/w_g, as white noise of the same low-frequency
  power (the density of a process of variance s^2 and correlation time tau is ~s^2 tau);
  q_force = a_f^2 / w -- the unknown forces up to their limits over the motion's time
  scale; q_disc = 0.75 a^2 w dt^2 for a transition whose velocity update is first order
  (forward Euler, ``constant_acceleration``: local zd error dt^2/2 zddd), 0 for second and
  higher orders (Heun, trapezoidal, midpoint, rk4). The 0.75 is the forward-Euler value
  of the position error (below) times w dt, calibrated on ``pf_sim`` (the UKF with the
  constant-acceleration transition needs q ~ 3 at 2.5 ms, ~15 at 5 ms);
- ``plant_noise.velocity_psd`` = a^2 dt^3 / 4 for a transition whose position update is
  first order (forward Euler, symplectic Euler): its local error dt^2/2 zdd in z as white
  noise on z' (density (dt^2 a / 2)^2 / dt); 0 otherwise;
- ``initial_sigma``: z = 0.05 ell (3 deg, or 5 % of the longest body), zd = 0.05 v;
- ``sensor_sigma`` of every sensor that reads accelerations (accelerometers, IMUs) and is
  not listed: the channels that depend on zdd or read gravity are widened by the model's
  error in predicting them (:mod:`sensor_scales`),
  sigma^2 = sigma_noise^2 + (eps rms(h))^2 f / w_g + sum_k (rms(dh/dzdd_k) a_f,k)^2,
  f the sensor's rate: a model error shows in an accelerometer's reading directly
  (gravity, and every unmodelled force through zdd), not only through the state, and it persists
  over 1/w_g, i.e. over f / w_g readings (without the widening: mean NEES 6e3 on ``fourbar_imu``);
- ADE-KF (``adekf``): its unknown inputs absorb the force errors, so no q_force and the
  accelerometers are widened for the gravity term only; q_model stays (an input random
  walk lags a force that depends on z), q_disc is the forward-Euler zd error in full,
  (a w)^2 dt^3 / 4, and the position error goes to ``velocity_psd`` as above (0.0014 on
  the paper-004 slider-crank, the hand-tuned 3e-4 of adekf.yaml); ``r_a`` =
  (F_c w' dt)^2, the per-step increment of an input of size F_c that changes at
  w' = max(w, v / ell) (the rate at which a z-dependent force changes), ``jump_sigma`` and
  the inputs' ``sigma0`` = F_c, with F_c the largest force limit, or eps m_z a_g (the model
  error as a generalized force) without one. On the paper-004 slider-crank (5 N m motor
  at 40-60 rad/s, 1 kHz): r_a = 0.09 (N m)^2, against the hand-tuned 0.05 of adekf.yaml.
- ``inputs: auto`` (the observers with input states, UKF, DEKF, errorEKF, VI-EKF, CEKF,
  :mod:`input_states`): one random-walk generalized force per force-limited independent
  coordinate k, sigma0 = F_k (its limit) and density psd = r_a / dt = (F_k w' dt)^2 / dt,
  the ADE-KF's per-step increment as a density (:func:`auto_inputs`; dt: the step, or the
  readings' period if the step subdivides it, :func:`input_interval`, not for the PF); with input jumps
  (``input_jump_nis`` > 0: the steps of a saturating controller are the jumps' part) the
  random walk is left the smooth part, psd = (min(f_r,k, F_k w')^2 + (eps F_k w')^2) dt,
  the per-step increment of the holding force's ripple (f_r, :mod:`mechanism_scales`: the
  rate of the force that keeps the linkage at speed v, what a speed-controlled motor
  supplies; capped at the limit's rate, which a motor of limit F cannot exceed) plus eps
  of the limit's rate. On those coordinates a_f leaves q_force and the accelerometer
  widening (its unknown force is the input's; with an input on every coordinate the
  accelerometers are widened for gravity only, as for the ADE-KF), the other terms are
  the estimator's own (q_model, its q_disc). Without force limits: no inputs and every
  value as above. An explicit ``inputs`` list is used as given, the a_f terms leaving the
  coordinates it names (with ``inputs: []`` they stay). On the paper-004 slider-crank
  (5 N m motor, 40-60 rad/s): psd = 90 (N m)^2/s, or 28.8 with jumps (f_r = 167 N m/s at
  60 rad/s: the holding torque's RMS 1.32 N m, at twice the crank speed; the simulated
  motor's torque about its mean: 0.62 / 0.96 / 1.37 N m at 40 / 50 / 60 rad/s, the holding
  torque's 0.59 / 0.92 / 1.32), sigma0 = 5 N m, q = 2.7 rad^2/s^3 (was 1.4e5) and the
  slider accelerometer's 0.05 m/s^2 (was widened to 133).
- a measured torque (a known-input sensor, :mod:`mbde_core.sensors.effort`) is no unknown
  force (except for the ADE-KF, whose input state carries it, :mod:`~mbde_core.estimators.
  kalman.adekf_effort`): its coordinate's a_f leaves q_force, the accelerometer widening
  and the particle filters' sigma_a, and the particle filters' ``inputs: auto`` adds no
  unknown input there (the Kalman observers' keeps theirs: it takes a friction the model
  lacks: without it the DIEKFpm gave 0.032 rad on 0.3 s of paper 004's slider-crank with
  the torque read, with it < 0.02, test_known_inputs). Measured on
  the moving speed-step slider-crank (seed 1, after 1 s): the PF's UKF follower with the
  motor's a_f in its q_force 0.060 rad, without 0.0022.
  A Kalman observer's coordinate whose force a known-input sensor measures keeps an input
  state for the residual only, a force of eps of the motor's limit changing at w'
  (:func:`residual_inputs`).

The transitions' orders (z update, zd update) are the estimator class's ``transition_orders``;
which parts of the rule apply, its traits' ``noise_rule`` family (:mod:`~mbde_core.estimators.traits`).
The shipped scenarios' values and what they give are in the README (Defaults that
transfer, ``mbde bench transfer``).
"""
from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np

from mbde_core.errors import ConfigError
from mbde_core.estimators.options.common import AUTO, MODEL_ERROR, Rule
from mbde_core.estimators.options.inputs import input_interval
from mbde_core.estimators.options.mechanism_scales import mechanism_scales
from mbde_core.estimators.options.sensor_scales import widened_sigmas

STEP_MAX = 0.005   # s
STEP_TURN = 0.05   # rad per step at the motion's frequency
SIGMA_Z = 0.05     # of ell
SIGMA_ZD = 0.05    # of v
RULE_DEFAULTS = Rule.defaults()
# the particle filters' part (an unknown motor, :func:`_particle_motor`; their own rules of
# :mod:`~mbde_core.estimators.particle.scales` use the same numbers)
ACCEL_FRACTION = 0.5       # sigma_a = ACCEL_FRACTION x the RMS model acceleration at rest
VELOCITY_MARGIN = 1.25     # the uniform start's velocity range: +- VELOCITY_MARGIN x the speed scale


def model_error(cfg: dict) -> float:
    """eps of the options ``cfg``: ``rule.model_error`` (MODEL_ERROR for an estimator
    without the ``rule`` options: the particle filters)."""
    return float(cfg["rule"]["model_error"]) if "rule" in cfg else MODEL_ERROR


def has_auto(cfg: dict) -> bool:
    """Whether any option of ``cfg`` (nested) is ``auto``."""
    for v in cfg.values():
        if v == AUTO or (isinstance(v, dict) and has_auto(v)):
            return True
    return False


def force_limits(mech, cfg: dict, context=None, where=("<estimator config>", "")) -> np.ndarray:
    """(g,) unknown-force bounds on the independent coordinates: the config's
    ``rule.force_limits`` (by coordinate name) over the context's (a scenario's motor);
    where: (file, key path) of the options, for the error of an unknown coordinate."""
    out = np.zeros(mech.dof)
    if context is not None and context.get("force_limits") is not None:
        out = np.maximum(out, np.asarray(context["force_limits"], float))
    names = list(mech.independent_names)
    for key, value in (cfg["rule"]["force_limits"] if "rule" in cfg else {}).items():
        if key not in names:
            file, path = where
            raise ConfigError(file, f"{path + '.' if path else ''}rule.force_limits.{key}",
                              f"not an independent coordinate (choose from {', '.join(names)})")
        out[names.index(key)] = float(value)
    return out


def rule_scales(mech, cfg: dict, context=None, where=("<estimator config>", "")):
    speed = None if context is None else context.get("speed")
    return mechanism_scales(mech, force_limits(mech, cfg, context, where), speed)


def auto_step(sc, sensors, combines=False) -> float:
    """The rule's step (module doc); combines: the estimator fuses several readings of a
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


def auto_psd(cls, cfg: dict, sc, dt: float, covered=None) -> tuple[np.ndarray, np.ndarray]:
    """(acceleration_psd, velocity_psd) (g,) of the rule (module doc) for estimator class
    ``cls`` (its traits' ``noise_rule`` and ``transition_orders``); covered (g,) bool: the
    coordinates whose unknown forces are input states (no q_force there)."""
    eps = model_error(cfg)
    pz, pv = cls.transition_orders(cfg)
    adekf = cls.traits.noise_rule == "adekf"
    if adekf:
        dt = dt / max(1, int(cfg["substeps"]))
    a, w = sc.a, sc.w
    q_vel = a**2 * dt**3 / 4.0 if pz == 1 else 0.0 * a
    q_model = (eps * sc.a_g) ** 2 / sc.w_g
    if adekf:  # its inputs absorb the unknown forces; the zd error of its Euler step
        return q_model + (a * w) ** 2 * dt**3 / 4.0, q_vel
    q_disc = 0.75 * a**2 * w * dt**2 if pv == 1 else 0.0 * a
    a_f = sc.a_f if covered is None else np.where(covered, 0.0, sc.a_f)
    return q_model + a_f**2 / sc.w + q_disc, q_vel


def resolve_config(cls, cfg: dict, mech, sensors, context=None, where=("<estimator config>", "")) -> dict:
    """A copy of the validated options ``cfg`` of estimator class ``cls`` with every
    ``auto`` replaced by the rule (module doc) for ``mech`` and ``sensors``; ``cfg`` itself
    if nothing is ``auto`` and no sensor is widened. context: {"force_limits": (g,),
    "speed": (g,)} from a scenario (:func:`scenario_context`) or None; where: (file, key
    path) of the options (named by the errors). The class's traits choose the rule's
    family (``noise_rule``), its ``transition_orders`` the discretisation terms."""
    family = cls.traits.noise_rule
    widen = _widened_sensors(cls, cfg, sensors)
    motor = family == "particle" and (context is not None or bool((cfg.get("rule") or {}).get("force_limits")))
    if not has_auto(cfg) and not widen and not motor:
        return cfg
    out = copy.deepcopy(cfg)
    sc = rule_scales(mech, cfg, context, where)
    covered, limits = _covered(cls, out, mech, context, where)
    measured = measured_coordinates(mech, sensors)
    sk = sc  # the scales of the unknown forces: a measured torque is known (a_f 0 there)
    if measured.any() and family != "adekf":
        sk = dataclasses.replace(sc, a_f=np.where(measured, 0.0, sc.a_f))
        if limits is not None and family == "particle":  # the Kalman observers keep theirs (a friction's share)
            limits = np.where(measured, 0.0, limits)
    if motor:  # the acceleration noise keeps covering the unknown motor with input states too (particle/inputs.py)
        _particle_motor(out, sk)
    if out["step"] == AUTO:
        out["step"] = auto_step(sc, sensors, combines=getattr(cls, "combines_readings", False))
    pn = out.get("plant_noise") or {}
    q_acc, q_vel = auto_psd(cls, out, sk, float(out["step"]), covered)
    if pn.get("acceleration_psd") == AUTO:
        pn["acceleration_psd"] = _scalar_or_list(q_acc)
    if pn.get("velocity_psd") == AUTO:
        pn["velocity_psd"] = _scalar_or_list(q_vel)
    sig = out.get("initial_sigma") or {}
    if sig.get("z") == AUTO:
        sig["z"] = _scalar_or_list(SIGMA_Z * sc.ell)
    if sig.get("zd") == AUTO:
        sig["zd"] = _scalar_or_list(SIGMA_ZD * sc.v)
    if family == "adekf":
        _adekf_inputs(out, sc, mech)
    if out.get("inputs") == AUTO:
        jumps = bool(out.get("input_jump_nis", 0))  # the particle filters: none (their jumps are redraws)
        out["inputs"] = auto_inputs(mech, sc, limits, input_interval(float(out["step"]), sensors, family == "particle"), model_error(out) if jumps else None)
        if cls.traits.known_inputs and measured.any():  # a measured torque leaves a residual force
            names = [n for n, m in zip(mech.independent_names, measured) if m]
            out["inputs"] = residual_inputs(out["inputs"], names, model_error(out), input_rate(sc), float(out["step"]))
    if widen:
        eps = model_error(out)
        all_inputs = family == "adekf" or (covered is not None and bool(covered.all()))
        a_f = sk.a_f if covered is None else np.where(covered, 0.0, sk.a_f)
        out["sensor_sigma"] = dict(out.get("sensor_sigma") or {})
        out["sensor_sigma"].update(widened_sigmas(mech, sensors, widen, sc, eps, gravity_only=all_inputs, a_f=a_f))
    return out


def measured_coordinates(mech, sensors) -> np.ndarray:
    """(g,) bool: the independent coordinates a known-input sensor (a measured torque,
    :mod:`mbde_core.sensors.effort`) drives."""
    cols = {int(s.coordinate) for s in getattr(sensors, "inputs", ())}
    return np.array([int(c) in cols for c in np.asarray(mech.independent)], dtype=bool)


def residual_inputs(items: list, measured: list, eps: float, rate: float, step: float) -> list:
    """``inputs: auto`` with the input state of each measured coordinate scaled to the
    *residual* force: what the measured torque leaves unexplained -- the model's error on
    that coordinate and the unmodelled loads (friction) -- a force of size eps F (eps of the
    motor's limit F) that depends on z and so changes at the motion's rate w' (``rate``,
    :func:`input_rate`): sigma0 = eps F and psd = (eps F w')^2 step, the ADE-KF's rule for
    r_a (module doc) for a force of that size; no limit, no holding-torque ripple (a speed
    controller's ripple is the motor's, which the reading gives). The measured torque enters
    as a known input (zero-order hold, its reading's variance); the state keeps the coordinate
    ``covered`` (no q_force, accelerometers widened for gravity only) as the ADE-KF's inputs
    absorb the force errors. Dropping the state instead (plant noise q_model + q_disc only)
    loses paper 004's slider-crank on its mirror: the slider accelerometer, widened for the
    whole model error (0.05 -> 71 m/s^2), no longer tells the direction of rotation. Keeping
    the motor-sized state (sigma0 = limit, its random walk and jumps) next to the held reading
    counted the motor twice: NEES/dim 0.6-0.7 (gyroscope) and 0.02-0.07 (accelerometer).
    eps^2 of the motor's random walk with jumps (eps of the holding torque's ripple rate, a
    property of the speed controller, not of the residual: psd 0.29 against 0.9 (N m)^2/s
    here) left paper 004's slider-crank overconfident: seeds 100-103 (DEKF 101-103) x 3 s,
    UKF / errorEKF / DEKF 0.0071-0.0091 / 0.012-0.014 / 0.013-0.015 rad, NEES/dim 2.2-5.9;
    with this rate 0.0019-0.0029 / 0.0022-0.0036 / 0.0026-0.0032 rad, NEES/dim 0.08-0.14
    (cautious). The true slider friction (-0.05 +- 0.04 N m on the crank, changing at 3 N m/s
    RMS) is within reach of both: what the larger walk takes is more than the friction (1.5x
    the rate: 0.0020 rad, NEES/dim 0.04; not identified)."""
    out = []
    for item in items:
        if item["coordinate"] in measured:
            force = eps * float(item["sigma0"])
            item = {"coordinate": item["coordinate"], "psd": (force * rate) ** 2 * step, "sigma0": force}
        out.append(item)
    return out


def _covered(cls, cfg: dict, mech, context, where):
    """(covered (g,) bool or None, force limits (g,) or None): the force-limited independent
    coordinates whose unknown force is an input state -- every one for ``inputs: auto``,
    those an explicit list names otherwise (None: no input states)."""
    items = cfg.get("inputs")
    if not cls.traits.input_states or not items:
        return None, None
    limits = force_limits(mech, cfg, context, where)
    if items == AUTO:
        return limits > 0, limits
    named = {str(i.get("coordinate")) for i in items if isinstance(i, dict)}
    return (limits > 0) & np.array([n in named for n in mech.independent_names]), limits


def input_rate(sc) -> float:
    """w' = max(w, v / ell): the rate at which an input that depends on z changes (the
    ADE-KF's rule, module doc)."""
    return float(np.max(np.maximum(sc.w, sc.v / sc.ell)))


def auto_inputs(mech, sc, limits, step: float, eps: float | None = None) -> list:
    """``inputs: auto`` of the observers with input states (errorekf, viekf, ukf, dekf, cekf):
    one random-walk generalized force per force-limited independent coordinate k (limits
    (g,) > 0), sigma0 = F_k (its limit) and the density of the per-step increment
    (module doc): psd = (F_k w')^2 step, the limit's rate (the ADE-KF's r_a / step), or,
    with input jumps (``eps`` given: the model error), psd = (min(f_r,k, F_k w')^2 +
    (eps F_k w')^2) step, the holding force's ripple plus eps of the limit's rate; [] without
    force limits. The ripple is capped at the limit's rate: a motor of limit F cannot supply
    a holding force that changes faster (without the cap, a 1 N m limit on the five-bar's
    cranks, whose gravity holding torque changes at 2300 N m/s, gave psd 5500 (N m)^2/s, a
    random-walk step of 2.3 N m per 1 ms, and the UKF lost the linkage, mean NEES 8.5e3)."""
    w = input_rate(sc)
    if eps is None:
        rates = [float(F) * w for F in limits]
    else:
        rates = [math.hypot(min(float(fr), float(F) * w), eps * float(F) * w) for F, fr in zip(limits, sc.f_r)]
    return [{"coordinate": name, "psd": r * r * step, "sigma0": float(F), "limit": float(F)}
            for name, F, r in zip(mech.independent_names, limits, rates) if F > 0]


def _widened_sensors(cls, cfg: dict, sensors) -> list[str]:
    """Acceleration-reading sensors whose sigma the rule widens (not listed in sensor_sigma;
    none for the particle filters: they widen their own, :mod:`~mbde_core.estimators.particle.scales`)."""
    if cls.traits.noise_rule == "particle" or not model_error(cfg):
        return []
    if "sensor_sigma" not in cfg:
        return []
    listed = cfg.get("sensor_sigma") or {}
    return [s.name for s in sensors if getattr(s, "uses_qdd", False) and s.name not in listed]


def _adekf_inputs(out: dict, sc, mech) -> None:
    eps = model_error(out)
    F_c = float(np.max(np.maximum(sc.a_f * sc.m_z, eps * sc.m_z * sc.a_g)))
    w = input_rate(sc)  # an input that depends on z changes at rate v
    if out["r_a"] == AUTO:
        out["r_a"] = (F_c * w * float(out["step"])) ** 2
        if not out.get("inputs"):  # one generalized force per independent coordinate, sigma0 = F_c
            out["inputs"] = [{"coordinate": n, "sigma0": F_c} for n in mech.independent_names]
    if out["jump_sigma"] == AUTO:
        out["jump_sigma"] = F_c


def _particle_motor(out: dict, sc) -> None:
    """A motor the model does not know (a scenario's speed controller, ``context``) for the
    particle filters, whose own rules (:mod:`pf_scale`) see only the model's forces: the
    uniform start's velocity range covers 1.25 x the characteristic speed v (which
    includes the motor's target speed), and the acceleration noise covers the motor's
    torque, sigma_a = sqrt((0.5 a_g)^2 + max a_f^2) (a_g: the RMS acceleration of the known
    forces, a_f: the torque limit over the reduced mass; 0 where the torque is measured),
    also with input states: the adapted proposal draws that noise given the readings, the
    blind random walk of the inputs alone lags the motor (:mod:`mbde_core.estimators.
    particle.inputs`). Explicit options stay."""
    uni = out["uniform"]
    if not uni["zd"] and np.any(sc.v > 0):
        uni["zd"] = [[-float(w), float(w)] for w in VELOCITY_MARGIN * sc.v]
    if out["acceleration_sigma"] is None and np.any(sc.a_f > 0):
        a_g = ACCEL_FRACTION * float(np.sqrt(np.mean(sc.a_g**2)))
        out["acceleration_sigma"] = float(math.hypot(a_g, float(np.max(sc.a_f))))


def _scalar_or_list(v: np.ndarray):
    v = np.asarray(v, float)
    return float(v[0]) if np.allclose(v, v[0], rtol=1e-12, atol=0) else [float(x) for x in v]


def scenario_context(scenario) -> dict | None:
    """Rule inputs a simulated scenario adds: the limits of the forces its model does not
    know on the independent coordinates -- its speed controller's torque limit (and largest
    target speed on the driven coordinate), and the peak |value| over the run of each
    unmodelled load of ``type: motor`` on a coordinate (a torque profile or a pulse signal,
    on the scenario's step grid; a ``generalized_force`` there is a disturbance, not a
    motor) -- None without any."""
    ctl = getattr(scenario, "controller", None)
    raw = (getattr(scenario, "raw", None) or {}).get("unmodelled_loads") or []
    loads = list(getattr(scenario, "unmodelled_loads", ()))
    drives = [ld for item, ld in zip(raw, loads) if len(raw) == len(loads) and isinstance(item, dict)
              and item.get("type") == "motor" and ld.kind == "generalized_force"]
    if ctl is None and not drives:
        return None
    mech = scenario.estimator_mechanism()
    ind = list(np.asarray(mech.independent))
    fl, sp = np.zeros(mech.dof), np.zeros(mech.dof)
    ts = np.linspace(0.0, float(scenario.duration), 201)
    if ctl is not None and ctl.coordinate in ind:
        k = ind.index(ctl.coordinate)
        if math.isfinite(ctl.torque_limit):
            fl[k] = ctl.torque_limit
        sp[k] = max(abs(float(ctl.target(t))) for t in ts)
    grid = np.arange(0.0, float(scenario.duration) + 0.5 * float(scenario.step), float(scenario.step))
    for ld in drives:
        if ld.coordinate in ind:
            k = ind.index(ld.coordinate)
            fl[k] = max(fl[k], max(abs(float(ld.value[0](t))) for t in grid))
    if not fl.any() and not sp.any():
        return None
    return {"force_limits": fl, "speed": sp}
