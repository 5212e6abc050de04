"""Can this sensor set observe what this estimator estimates? Checked before a run.

Every estimator estimates x = [z, zd] (the ADE-KF also its unknown inputs). Before a
replay or a live run, the linearised observability of x at the initial state over a short
horizon T (``HORIZON``) is tested:

    J = sum_k Phi_k^T (sum_s rate_s dt H_s,k^T R_s^-1 H_s,k) Phi_k,

the Fisher information about x(0) of every reading in [0, T] (sensor s read at rate_s;
H_s,k its Jacobian at the predicted state x_k; Phi_k = prod (I + dt A_j) the transition
of the linearised dynamics A = d[zd, f(z, zd)]/dx along the model's motion from the
initial state, the observability matrix of a linear time-varying system, Bar-Shalom et
al. 2001 sec. 3.2, with the readings' noise as weights). Verdicts:

- ``unobservable`` (weak): J is rank deficient (eigenvalues of S J S below 1e-10 of the
  largest, S below): some combination of z and zd does not show in the readings at all
  (e.g. gyroscopes without gravity or loads cannot give z);
- ``weak``: the worst-determined combination (eigenvector of S J S, S = diag of the
  default initial sigmas, :mod:`noise_rule`) has eigenvalue lambda < 1, i.e. T seconds of
  readings shrink its standard deviation by less than a factor sqrt(2)
  (1/sqrt(1 + lambda) > 0.71);
- ``meaningless`` (exit status 2): the sensors lack what the estimator's traits say it
  ``needs`` (:mod:`~mbde_core.estimators.traits`): the ADE-KF without a sensor that reads
  accelerations (its unknown inputs enter only through the accelerations, paper 004 sec. 4.4);
- ``ok`` otherwise. For an estimator whose traits ask for it (``pbh``: the ADE-KF) the PBH
  rank test of its augmented model (paper 004 eqs. 57-58,
  :mod:`mbde_core.minimal.observability`) at the states of the horizon is added (weak if
  rank deficient at all of them); an
  estimator without input states on a linkage with unknown forces of known bounds (a
  motor: ``rule.force_limits`` or a scenario's speed controller) is ``weak`` too (it can
  only take them as plant noise: no Kalman observer without inputs tracks the paper-004
  slider-crank, ``mbde bench transfer``);
- ``weak`` too when the readings cannot tell the motion from its mirror image about a line
  through the fixed points (:mod:`symmetry`: a slider accelerometer along its track with an
  unknown motor, paper 004's slider-crank): the sign of the motion comes only from the
  initial state; or, where no mirror image of the whole linkage exists, when the readings
  cannot tell a reflection of the driven angle (:mod:`coordinate_mirror`: the gyroscope on
  the rod of an offset slider-crank, theta -> pi - theta) and the declared motor limit
  explains the mirrored motion (issue 42's speed-step slider-crank started at rest at pi/2).

A measured torque (a known-input sensor, :mod:`mbde_core.sensors.effort`) is no unknown
force to an estimator that takes it (traits ``known_inputs``): neither warning applies on
its coordinate; to one that cannot take it, the warning says so.

A weak case gives one warning line (stdout of ``mbde replay``, metrics.json
"suitability", the live node's /diagnostics); the run goes on.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from mbde_core.errors import MbdeError
from mbde_core.estimators.assess.coordinate_mirror import coordinate_mirror
from mbde_core.estimators.assess.symmetry import mirror_ambiguity
from mbde_core.estimators.kalman.reduced import ReducedModel
from mbde_core.estimators.options.mechanism_scales import mechanism_scales
from mbde_core.estimators.options.rule import SIGMA_Z, SIGMA_ZD
from mbde_core.estimators.registry import estimator_class, names, traits
from mbde_core.minimal.observability import observability_along

HORIZON = 0.5        # s
RANK_RTOL = 1e-10    # eigenvalues of the prior-scaled information, relative to the largest
WEAK_LAMBDA = 1.0    # information along the worst direction, in units of the prior


class UnsuitableError(MbdeError):
    """The estimator cannot estimate anything meaningful from these sensors (exit status 2)."""


@dataclass
class Suitability:
    """Verdict: level ok | weak | unobservable; message (one line); rank of J, its size,
    the smallest scaled eigenvalue, the posterior/prior sigma ratio of that direction."""

    level: str
    message: str
    rank: int
    n: int
    worst_lambda: float
    sigma_ratio: float
    horizon: float = HORIZON

    @property
    def warning(self) -> bool:
        return self.level != "ok"

    def as_dict(self) -> dict:
        return asdict(self)


def reads_accelerations(sensors) -> list[str]:
    return [s.name for s in sensors if getattr(s, "uses_qdd", False)]


def precheck(name: str, sensors) -> None:
    """Raise UnsuitableError for a meaningless estimator/sensor pair (one line): the sensors
    lack what the estimator's traits say it ``needs``."""

    tr = traits(name)
    if "accelerations" in tr.needs and not reads_accelerations(sensors):
        kinds = ", ".join(f"{s.name} ({type(s).__name__.lower()})" for s in sensors) or "none"
        raise UnsuitableError(f"{name} needs a sensor that reads accelerations (an accelerometer or IMU): "
                              f"{tr.needs_reason}; the sensors are {kinds}")


def information(mech, sensors, z0, zd0, q0, step: float, horizon: float = HORIZON, t0: float = 0.0, visited=None):
    """J (2g, 2g): the readings' information about x(0) over the horizon (module doc);
    visited: a list that receives the model's states x = [z, zd] along the horizon (every
    ``horizon / 10`` s)."""

    model = ReducedModel(mech, sensors)
    names = [s.name for s in sensors]
    g = mech.dof
    dt = max(float(step), horizon / 200.0)
    Rinv = np.linalg.inv(model.covariance(names))
    rates = np.concatenate([np.full(s.dim, float(s.rate)) for s in sensors])
    W = Rinv * np.sqrt(np.outer(rates, rates)) * dt
    x = np.concatenate([np.asarray(z0, float), np.asarray(zd0, float)])
    st, ok = model.solve_full(t0, x[:g], x[g:], q0)
    if not ok:
        raise ValueError("the initial state cannot be assembled")
    Phi = np.eye(2 * g)
    J = np.zeros((2 * g, 2 * g))
    t = t0
    every = max(1, int(round(horizon / dt)) // 10)
    for k in range(int(round(horizon / dt)) + 1):
        if visited is not None and k % every == 0:
            visited.append(x.copy())
        _, H, _ = model.linearize(names, t, st)
        HP = H @ Phi
        J += HP.T @ W @ HP
        A = model.transition_jacobian(t, x, st.q, "full")
        Phi = (np.eye(2 * g) + dt * A) @ Phi
        x_new = np.concatenate([x[:g] + dt * x[g:] + 0.5 * dt * dt * st.zdd, x[g:] + dt * st.zdd])
        t += dt
        st, ok = model.solve_full(t, x_new[:g], x_new[g:], model.guess(st, x_new[:g] - x[:g]))
        x = x_new
        if not ok:
            break
    return 0.5 * (J + J.T)


def assess(name: str, mech, sensors, init, step: float, est=None, horizon: float = HORIZON,
           force_limits=None, options=None) -> Suitability:
    """The verdict for estimator ``name`` with ``sensors`` from the initial state ``init``
    (an :class:`~mbde_core.estimators.base.InitialState`); est: the built estimator (the
    ADE-KF's augmented model is read from it); force_limits: (g,) bounds of unknown forces
    (the rule's, :func:`~mbde_core.estimators.options.rule.force_limits`); options: its
    resolved options (default: the built estimator's)."""

    precheck(name, sensors)
    g = mech.dof
    labels = [f"{n}" for n in mech.independent_names] + [f"{n}_dot" for n in mech.independent_names]
    used = ", ".join(s.name for s in sensors)
    visited = []
    J = information(mech, sensors, init.z, init.zd, init.q_hint if init.q_hint is not None else mech.q0, step, horizon,
                    visited=visited)
    sc = mechanism_scales(mech)
    S = np.diag(np.concatenate([SIGMA_Z * sc.ell, np.maximum(SIGMA_ZD * sc.v, SIGMA_Z * sc.ell)]))
    lam, V = np.linalg.eigh(S @ J @ S)
    top = float(lam[-1])
    rank = int(np.sum(lam > RANK_RTOL * top)) if top > 0 else 0
    worst = float(max(lam[0], 0.0))
    ratio = float(1.0 / np.sqrt(1.0 + worst))
    direction = _describe(V[:, 0], labels)
    if rank < 2 * g:
        level = "unobservable"
        msg = (f"{name}: the readings of {used} over {horizon:g} s from the initial state do not determine "
               f"{direction} (observability rank {rank} of {2 * g}): that combination drifts with the model")
    elif worst < WEAK_LAMBDA:
        level = "weak"
        msg = (f"{name}: weakly observable from {used}: {horizon:g} s of readings from the initial state leave "
               f"{direction} with {100 * ratio:.0f} % of its initial sigma (observability rank {rank} of {2 * g})")
    else:
        level, msg = "ok", f"{name}: observable from {used} (rank {rank} of {2 * g}, worst direction {direction} " \
                           f"to {100 * ratio:.0f} % of its initial sigma in {horizon:g} s)"
    out = Suitability(level, msg, rank, 2 * g, worst, ratio, horizon)
    cls = _class(name)
    if cls.traits.pbh and est is not None and out.level == "ok":
        out = _adekf_pbh(est, visited, out)
    force_limits, unused = _unknown_forces(cls, mech, sensors, force_limits)
    if force_limits is not None and np.any(np.asarray(force_limits) > 0) \
            and not cls.estimates_inputs(options if options is not None else getattr(est, "options", None)):
        limits = ", ".join(f"{n} {f:g}" for n, f in zip(mech.independent_names, force_limits) if f > 0)
        msg = (f"{name}: unknown forces up to {limits} (N, N m) act on the linkage and {name} has no input "
               f"states{unused}: it can only treat them as plant noise ({_input_advice()})")
        if out.level != "ok":  # a weak verdict already: the input's warning too, on the same line
            msg = out.message + "; also " + msg.split(": ", 1)[1]
        out = Suitability("weak" if out.level == "ok" else out.level, msg, rank, 2 * g, worst, ratio, horizon)
    everywhere = force_limits is not None and bool(np.all(np.asarray(force_limits) > 0))
    mirror = mirror_ambiguity(mech, sensors, everywhere)
    if mirror is not None:
        return _with_mirror(name, mech, out, mirror, used, everywhere)
    cm = coordinate_mirror(mech, sensors, force_limits if everywhere else None)
    if cm is not None:
        start = (" and the initial state is its own mirror (at rest on the mirror line): the direction of the motion "
                 "is a coin toss" if cm.fixed(init.z, init.zd) else "")
        torque = ", ".join(f"{n} {f:.2g}" for n, f in zip(mech.independent_names, cm.torque))
        msg = (f"{name}: the readings of {used} are the same for the motion and its mirror {cm.describe(mech)} (rates "
               f"reversed), and the unknown forces within the declared limits explain it (the mirrored motion needs "
               f"{torque} N m typically){start}; an estimator may follow the wrong one and the gate will not see it: "
               "measure the motor torque (an effort sensor), add a sensor that tells them apart (an encoder on "
               "the driven joint), or start from the known moving state")
        if out.level != "ok":
            msg = out.message + "; also " + msg.split(": ", 1)[1]
        out = Suitability("weak" if out.level == "ok" else out.level, msg, rank, 2 * g, worst, ratio, horizon)
    return out


def _unknown_forces(cls, mech, sensors, force_limits):
    """(force limits (g,) of the forces the estimator does not know, note): a measured
    torque (a known-input sensor on an independent coordinate) is known to an estimator
    whose traits take ``known_inputs``; the note names the measured torques it cannot take."""
    inputs = list(getattr(sensors, "inputs", ()))
    if force_limits is None or not inputs:
        return force_limits, ""
    if not cls.traits.known_inputs:
        return force_limits, f" and cannot take the measured torque of {', '.join(s.name for s in inputs)}"
    limits = np.array(force_limits, dtype=float)
    for s in inputs:
        hit = np.flatnonzero(np.asarray(mech.independent) == s.coordinate)
        limits[hit] = 0.0
    return limits, ""


def _with_mirror(name: str, mech, base: Suitability, mirror, used: str, everywhere: bool) -> Suitability:
    """``weak`` with the mirror ambiguity (:mod:`symmetry`) added to the verdict's line."""
    zs = ", ".join(mech.independent_names)
    why = "an unknown force on every coordinate explains either" if everywhere else "the model's forces are mirror symmetric too"
    msg = (f"{name}: the readings of {used} are the same for the motion and its mirror image about "
           f"{mirror.describe()} ({zs} mirrored; {why}): an estimator that does not know the initial state "
           "(pf's uniform start) ends on either with equal chance, one that loses track may come back on the mirror; "
           "start from the known initial state or add a sensor that tells them apart (a gyroscope or an encoder)")
    if base.level != "ok":
        msg = base.message + "; also " + msg.split(": ", 1)[1]
    return Suitability("weak" if base.level == "ok" else base.level, msg, base.rank, base.n, base.worst_lambda,
                       base.sigma_ratio, base.horizon)


def _input_advice() -> str:
    """Which estimators to use instead (by their traits): those that always estimate the
    unknown forces, then those with input states (``inputs: auto``)."""

    always = [n for n in names() if estimator_class(n).estimates_inputs(None)]
    states = [n for n in names() if estimator_class(n).traits.input_states]
    return f"use {' or '.join(always)}, or a Kalman observer -- {', '.join(states)} -- with its default `inputs: auto`"


def _class(name: str):

    return estimator_class(name)


def _adekf_pbh(est, visited, base: Suitability) -> Suitability:
    """The ADE-KF's augmented [z, zd, inputs] model (PBH, paper 004 eq. 58) at the states
    the model visits over the horizon from the initial state (inputs 0): weak if the rank
    is deficient at all of them (at isolated states, e.g. at rest or a dead centre, the
    inputs show as soon as the linkage moves on)."""

    names = reads_accelerations(est.sensors) + [s.name for s in est.sensors if not getattr(s, "uses_qdd", False)]
    na = est.model.nx - 2 * est.g
    states = np.array([np.concatenate([x, np.zeros(na)]) for x in visited])
    rep = observability_along(est.model, names, states)
    if any(r.observable for r in rep.results):
        return base
    r = rep.results[0]
    direction = _describe(np.real(r.direction), rep.state_names)
    return Suitability("weak", f"adekf: its inputs are not observable from {', '.join(names)} over {base.horizon:g} s "
                               f"from the initial state (PBH rank {r.rank} of {r.n}, paper 004 eq. 58; direction "
                               f"{direction}; along the model's unforced motion)", base.rank, base.n, base.worst_lambda, base.sigma_ratio, base.horizon)


def _describe(v, labels) -> str:
    v = np.asarray(v, float)
    v = v / (np.max(np.abs(v)) or 1.0)
    parts = [f"{c:+.2f} {lab}" for c, lab in zip(v, labels) if abs(c) >= 0.1]
    return "[" + " ".join(parts) + "]"
