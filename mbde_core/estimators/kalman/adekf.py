"""ADE-KF: augmented discrete extended Kalman filter in minimal coordinates (paper 004).

State x = [z, zd, a] (eq. 29): the minimal (independent) coordinates z, their rates and
the unknown inputs a (e.g. the motor torque), each input a random walk a' = r_a (eq. 4).
The model is the minimal-coordinate ODE obtained from the natural-coordinate model with a
coordinate map q = g_n(z) (``map: exact`` -- the engine's position problem and the
derivatives of R -- or ``map: learned`` -- the paper's tanh MLP, :mod:`mbde_core.minimal`),
see :mod:`mbde_core.minimal.augmented` for every equation.

Prediction (forward Euler, eqs. 32-34 and 7)::

    x_k^- = x_{k-1}^+ + dt [zd, zdd(x_{k-1}^+), 0]
    P_k^- = F P_{k-1}^+ F^T + R_x,     F = I + dt F*(x_{k-1}^+)   (analytic F*, eqs. 35-41)
    R_x   = blockdiag(Van Loan plant noise on [z, zd] (paper: zero), diag(r_a))

Update (eqs. 6, 8-10) with y = h(x^-) of the sensors (eqs. 44-51, every sensor type of
:mod:`mbde_core.sensors`; the paper uses accelerometers only) and the analytic H
(eqs. 46-49), the gated Joseph-form update of :mod:`kalman`.

r_a (our interpretation, stated with the paper's numbers): R_x of eq. 7 is the covariance
of the discrete process noise added per filter step, so r_a is the *variance of the
random-walk increment of the input per filter step*, in (input unit)^2 -- (N m)^2 for a
torque. Paper 004 sec. 5.2 uses r_a = 1.5e-4 and 5e-3 with a 1 kHz accelerometer; at our
1 ms step that is an increment standard deviation of 0.012 and 0.071 N m per step, i.e. a
continuous random walk of spectral density r_a / dt = 0.15 and 5 (N m)^2/s. Changing
``step`` keeps r_a per step (the paper's quantity); the equivalent density changes.

Beyond the paper (all optional, documented in config/estimators/adekf.yaml, which holds
the values tuned on the simulated slider-crank of paper 004 sec. 5):

- plant noise on [z, zd] (``plant_noise``: densities, Van Loan) for the forward-Euler
  error and unmodelled forces; the paper assumes none;
- input jumps (``jump_nis``, ``jump_sigma``, :meth:`ADEKF._input_jump`): a likelihood-ratio
  test lets the inputs jump when a reading can only be explained by an abrupt input
  change (a saturating speed controller); without it the random walk pushes such a
  change into the angle and speed, and the filter can lock onto the mirror motion;
- outliers (always on, :mod:`adekf_jumps`): a reading over its gate in units of the filter's actual
  innovations is fused, but the state before it is kept for one update; the next
  readings decide (likelihood) whether it was a change of the inputs or an outlier;
- a plausible-state box (always on, :mod:`adekf_bounds`): speeds, inputs and standard deviations
  beyond 10 x the mechanism's scales are bounded, so a lost filter stays finite;
- ``substeps``: several Euler steps per filter step; ``input_rates``: a second-order
  input model a' = b, b' = noise (the "more detailed augmented-state model" the paper
  suggests in sec. 5.2).

Known limit: a slider-crank started at rest at a dead centre is ambiguous for a slider
accelerometer (theta -> -theta gives the same readings, gravity aside); the filter may
then follow the mirrored motion. Start the estimate off the dead centre or know the sign.

A measured motor torque (an ``effort`` sensor) is a known input with its noise, the input
state on its coordinate keeping what the torque does not explain (:mod:`adekf_effort`).

Estimated inputs are reported in the snapshot with ``input_names`` = the names of the
natural coordinates they act on (``coordinate`` inputs, e.g. ``theta``), so they reach
JointState.effort of /mbde/adekf/joint_states and replay's input RMSE; ``torque``
(``<body>.torque``) and ``force`` (``<point>.force``) inputs appear in MechanismState only.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from mbde_core.errors import ConfigError
from mbde_core.estimators.kalman.adekf_bounds import StateBox
from mbde_core.estimators.kalman.adekf_effort import MeasuredInputs
from mbde_core.estimators.base import CovarianceInflation, Estimator, InitialState, UpdateResult, sensor_variances
from mbde_core.estimators.kalman.adekf_jumps import InputJumps
from mbde_core.estimators.kalman.algebra import ekf_update
from mbde_core.estimators.noise import kinematic_plant_noise
from mbde_core.minimal import make_map
from mbde_core.minimal.augmented import AugmentedModel, parse_inputs
from mbde_core.estimators.options.common import (AUTO, FrozenMap, InitialSigma, Options, PlantNoise, Rule,
                                                  StageOptions)
from mbde_core.estimators.options.frozen import thaw
from mbde_core.types import MechanismSnapshot
from mbde_core.estimators.traits import KALMAN_TUNABLE, Traits

MAP_SOURCES = ("exact", "learned")


def _number(v) -> bool:
    """A finite number (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class LearnOptions(Options):
    """The learned coordinate map trained at start-up (:mod:`mbde_core.minimal.learned`)."""

    hidden: tuple = (8, 8)
    samples: int = 0
    order_weights: tuple = (1.0, 1.0, 1.0, 0.0)
    seed: int = 0
    restarts: int = 2
    max_iterations: int = 4000
    time_limit: float = 40.0


@dataclass(frozen=True)
class ADEKFOptions(StageOptions):
    """The ADE-KF's options (config/estimators/adekf.yaml); step: the forward-Euler filter
    step (auto: the rule, e.g. the accelerometer period)."""

    substeps: int = 1                  # forward-Euler steps per filter step (1 = the paper's eq. 33)
    map: str = "exact"                 # minimal-coordinate map: exact | learned
    map_file: str = ""                 # learned: .npz from `mbde learn-map` ('' = train at start-up, seeded)
    learn: LearnOptions = LearnOptions()
    inputs: tuple = ()                 # unknown inputs; () = a generalized force on each independent coordinate
    r_a: float | str = AUTO            # (input unit)^2 per step: random-walk increment variance (paper: 1.5e-4, 5e-3)
    input_rates: bool = False          # also estimate the inputs' rates b (a' = b, b' = noise): x = [z, zd, a, b]
    r_b: float = 0.0                   # (input unit/s)^2 per step: increment variance of the rates
    sigma0_b: float = 0.0              # input unit/s: initial standard deviation of the rates (start at 0)
    jump_nis: float = 16.0             # NIS of a reading above which the inputs may jump (0 = off, the paper)
    jump_sigma: float | str = AUTO     # input units: largest standard deviation of such a jump
    plant_noise: PlantNoise = PlantNoise()  # on [z, zd] (paper: none)
    initial_sigma: InitialSigma = InitialSigma()
    sensor_sigma: FrozenMap = FrozenMap()
    rule: Rule = Rule()                # inputs of the default-tuning rule (auto values: rule.py)


class ADEKF(MeasuredInputs, InputJumps, CovarianceInflation, Estimator):
    name = "adekf"
    Options = ADEKFOptions
    traits = Traits(cost=3.0, color=(0.84, 0.15, 0.16, 1.0), slot=4, tunable=KALMAN_TUNABLE, noise_rule="adekf",
                    known_inputs=True,  # a measured torque as a known input with its noise (adekf_effort)
                    needs=frozenset({"accelerations"}),
                    needs_reason="its unknown inputs show only in the accelerations (paper 004 sec. 4.4)", pbh=True)

    @classmethod
    def validate_config(cls, cfg, file, path):
        if cfg["map"] not in MAP_SOURCES:
            raise ConfigError(file, f"{path}.map", f"must be one of {', '.join(MAP_SOURCES)}, got {cfg['map']!r}")
        for key in ("r_a", "r_b", "sigma0_b", "jump_nis", "jump_sigma"):
            if isinstance(cfg[key], list) or not (cfg[key] == AUTO or cfg[key] >= 0):
                raise ConfigError(file, f"{path}.{key}", f"must be >= 0, got {cfg[key]}")
        if not (cfg["substeps"] >= 1 and float(cfg["substeps"]).is_integer()):
            raise ConfigError(file, f"{path}.substeps", f"a whole number >= 1, got {cfg['substeps']}")
        mf = cfg["map_file"]
        if mf and not os.path.isabs(mf) and file and not file.startswith("<"):
            cfg["map_file"] = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(file)), mf))
        learn = cfg["learn"]
        hidden = learn["hidden"]
        if not hidden or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in hidden):
            raise ConfigError(file, f"{path}.learn.hidden", f"a list of positive integers (units per layer), got {hidden!r}")
        w = learn["order_weights"]
        if not 1 <= len(w) <= 4 or any(not _number(v) or v < 0 for v in w):
            raise ConfigError(file, f"{path}.learn.order_weights", "1 to 4 non-negative weights (derivative orders 0..3)")
        for key, low in (("samples", 0), ("restarts", 0), ("max_iterations", 1), ("seed", 0)):
            v = learn[key]
            if not (v >= low and float(v).is_integer()):
                raise ConfigError(file, f"{path}.learn.{key}", f"a whole number >= {low}, got {v}")
        if not learn["time_limit"] > 0:
            raise ConfigError(file, f"{path}.learn.time_limit", f"must be > 0 [s], got {learn['time_limit']}")
        if not isinstance(cfg["inputs"], list):
            raise ConfigError(file, f"{path}.inputs", "a list of inputs, e.g. [{coordinate: theta}]")
        for k, item in enumerate(cfg["inputs"]):
            if not isinstance(item, dict):
                raise ConfigError(file, f"{path}.inputs[{k}]", "expected {coordinate: name} | {torque: body} | {force: point, direction: [x, y]}")
            for key in ("r_a", "initial", "sigma0"):
                if item.get(key) is not None and not _number(item[key]):
                    raise ConfigError(file, f"{path}.inputs[{k}].{key}", f"a finite number, got {item[key]!r}")

    @classmethod
    def check_run(cls, cfg, mech, sensors, file, path):
        """The inputs name bodies, points and coordinates of the model (before the run)."""
        parse_inputs(mech, cfg["inputs"], file, f"{path}.inputs")

    @classmethod
    def transition_orders(cls, cfg):
        """Its forward-Euler step: first order in z and zd."""
        return (1, 1)

    @classmethod
    def estimates_inputs(cls, options):
        return True

    def __init__(self, mech, sensors, options, rng=None, *, coordinate_map=None):
        super().__init__(mech, sensors, options, rng)
        self.inputs = parse_inputs(mech, thaw(options.inputs))
        self.map = coordinate_map if coordinate_map is not None else self._build_map(mech, options)
        self.model = AugmentedModel(mech, sensors, self.map, self.inputs, bool(options.input_rates))
        self.g, self.na, self.nx = mech.dof, self.model.na, self.model.nx
        r_a = float(options.r_a)
        self.r_a = np.array([s.r_a if s.r_a is not None else r_a for s in self.inputs])
        self.r_b = float(options.r_b)
        self.substeps = max(1, int(options.substeps))
        self.jump_nis = float(options.jump_nis)
        self.jump_var = np.full(len(self.inputs), float(options.jump_sigma) ** 2)
        self.jumps = 0
        self._alt = None             # the outlier hypothesis of a jump (adekf_jumps)
        self.outliers_undone = 0     # suspect readings whose outlier hypothesis won
        self._d2_hist = None         # recent squared distances (consistency, adekf_jumps)
        self.box = StateBox(mech, self.inputs, self.model.nx, float(options.jump_sigma))
        self.bounded = 0
        self.x = np.zeros(self.nx)
        self.P = np.eye(self.nx)
        self.q = mech.q0.copy()
        self.failures = 0
        self._lin = None
        self._Qd = {}
        self._sigma = sensor_variances(options)
        self._init_measured()

    @staticmethod
    def _build_map(mech, options):
        if options.map == "exact":
            return make_map(mech, "exact")
        if options.map_file:
            return make_map(mech, "learned", file=options.map_file)
        return make_map(mech, "learned", options=options.learn.as_dict())

    # -- helpers --------------------------------------------------------------------------------
    def process_noise(self, dt: float) -> np.ndarray:
        """R_x (nx, nx): Van Loan plant noise on [z, zd] plus diag(r_a) on the inputs."""
        if dt not in self._Qd:
            g = self.g
            Q = np.zeros((self.nx, self.nx))
            pn = self.options.plant_noise
            acc, vel = np.asarray(pn.acceleration_psd, float), np.asarray(pn.velocity_psd, float)
            if np.any(acc) or np.any(vel):
                Q[: 2 * g, : 2 * g] = kinematic_plant_noise(g, dt, acc, vel)
            na = self.na
            Q[2 * g : 2 * g + na, 2 * g : 2 * g + na] = np.diag(self.r_a)
            if self.model.input_rates:
                Q[2 * g + na :, 2 * g + na :] = np.eye(na) * self.r_b
            self._Qd[dt] = Q
        return self._Qd[dt]

    def linearize(self, names=None):
        """The model (A, and h, H of ``names``) at the current (t, x); cached."""
        key = (self.t, self.x.tobytes())
        jet = None
        if self._lin is not None and self._lin[0] == key:
            if not names or self._lin[2] == tuple(names):
                return self._lin[1]
            jet = self._lin[3]  # same x (the update after the prediction's estimate): same map jet
        with np.errstate(all="ignore"):
            if jet is None:
                jet = self.map.evaluate(self.x[: self.g], order=3, q_guess=self.q)
                if not bool(jet.ok[0]) or not np.isfinite(jet.q).all():
                    self.failures += 1
                else:
                    self.q = jet.q[0].copy()
            lin = self.model.evaluate(self.t, self.x, jet, names)
        self._lin = (key, lin, tuple(names) if names else None, jet)
        return lin

    # -- interface ------------------------------------------------------------------------------
    def reset(self, t: float, init: InitialState) -> None:
        g = self.g
        self.t = float(t)
        self.q = self.mech.q0.copy() if init.q_hint is None else np.asarray(init.q_hint, dtype=float).copy()
        a0 = np.array([s.initial for s in self.inputs])
        nb = self.nx - 2 * g - self.na                  # input rates (0 or n_a), start at 0
        self.x = np.concatenate([np.asarray(init.z, float).reshape(g), np.asarray(init.zd, float).reshape(g), a0,
                                 np.zeros(nb)])
        sig = np.concatenate([np.broadcast_to(init.sigma_z, (g,)), np.broadcast_to(init.sigma_zd, (g,)),
                              np.array([s.sigma0 for s in self.inputs]), np.full(nb, float(self.options.sigma0_b))])
        self.P = np.diag(sig**2)
        self._lin = None
        self.failures = 0
        self.jumps = 0
        self.bounded = 0
        self._alt = None
        self.outliers_undone = 0
        self._d2_hist = None
        self._applied = None  # a new state: no held torque in its inputs yet (adekf_effort)
        jet = self.map.evaluate(self.x[:g], order=1, q_guess=self.q)
        if not bool(jet.ok[0]):
            raise ValueError("the initial state cannot be assembled")
        self.q = jet.q[0].copy()

    def predict(self, dt: float) -> None:
        if self._alt is not None:  # the outlier hypothesis (adekf_jumps) takes the same steps
            t = self.t
            self._predict(dt)
            t, self.t = self.t, t
            self._swap()
            self._predict(dt)
            self._swap()
            self.t = t
        else:
            self._predict(dt)

    def _predict(self, dt: float) -> None:
        n = self.substeps
        if n == 1:
            return self._euler_known(dt, self.process_noise(dt))
        h = dt / n
        Qh = self.process_noise(dt) / n          # the same noise per filter step, spread evenly
        for _ in range(n):
            self._euler_known(h, Qh)  # with the measured torques (adekf_effort)

    def _euler(self, dt: float, Qd: np.ndarray) -> None:
        """One forward-Euler step (eq. 33) of the mean and the covariance (eq. 7)."""
        g = self.g
        lin = self.linearize()
        F = np.eye(self.nx) + dt * lin.A
        x = self.x.copy()
        x[:g] += dt * self.x[g : 2 * g]
        x[g : 2 * g] += dt * lin.zdd
        if self.model.input_rates:
            x[2 * g : 2 * g + self.na] += dt * self.x[2 * g + self.na :]
        with np.errstate(all="ignore"):
            P = F @ self.P @ F.T + Qd
        self.advance_clock(dt)
        self._lin = None
        if np.isfinite(x).all() and np.isfinite(P).all():  # ndarray.all: no np.all wrapper
            self._keep(x, 0.5 * (P + P.T))
        else:  # keep the last finite state (counted), never propagate NaN
            self.failures += 1
            self._keep(self.x, self.P + Qd)

    def _keep(self, x: np.ndarray, P: np.ndarray) -> None:
        """Take (x, P) as the state, kept in the plausible box (:mod:`adekf_bounds`)."""
        x, P, moved = self.box.apply(x, P)
        self.bounded += moved
        self.x, self.P = x, P

    def _innovation(self, names, dims, o, lin):
        """(y, R): the innovation of the readings o at the linearisation lin, and R (read-only,
        built once per list of sensors: it depends on nothing else)."""
        key = tuple(names)
        memo = self.__dict__.setdefault("_R_memo", {})
        if key not in memo:
            R = np.diag(np.concatenate([np.full(self.sensors[n].dim, self._sigma[n]) if n in self._sigma
                                        else np.diag(self.sensors[n].covariance()) for n in names]))
            R.setflags(write=False)
            memo[key] = (R, np.cumsum([0] + dims[:-1]).tolist())
        R, starts = memo[key]
        y = np.concatenate([self.sensors[n].residual(o[k : k + d], lin.h[k : k + d])
                            for n, k, d in zip(names, starts, dims)])
        return y, R

    def reacquire(self, inflation: float) -> None:
        self._alt = None
        super().reacquire(inflation)

    def update(self, measurements, gates=None):
        names = [m.sensor for m in measurements]
        dims = [self.sensors[n].dim for n in names]
        o = np.concatenate([np.asarray(m.value, float) for m in measurements])
        if self._alt is not None:
            self._decide(names, dims, o, gates)
        lin = self.linearize(names)
        y, R = self._innovation(names, dims, o, lin)
        before = (self.x, self.P, self.q, self._lin) if self._suspect(names, dims, y, lin.H, R, gates) else None
        if self.jump_nis > 0 and self.na:
            self._input_jump(y, lin.H, R)
        with np.errstate(all="ignore"):
            dx, P, res = ekf_update(self.x, self.P, names, dims, y, lin.H, R, gates)
        if not (np.isfinite(dx).all() and np.isfinite(P).all()):
            self.failures += 1
            return UpdateResult([], names)
        if res.accepted:
            self._keep(self.x + dx, P)
            self._lin = None
            self._alt = before  # the outlier hypothesis of a suspect reading (adekf_jumps)
            self._observe(res)
        return res

    def estimate(self) -> MechanismSnapshot:
        g = self.g
        lin = self.linearize()
        snap = MechanismSnapshot(
            stamp=self.t, q=lin.q.copy(), qd=lin.qd.copy(), qdd=lin.qdd.copy(),
            z=self.x[:g].copy(), zd=self.x[g : 2 * g].copy(), zdd=lin.zdd.copy(), cov=self.P[: 2 * g, : 2 * g].copy(),
        )
        if self.na:
            snap.input_names = [s.name for s in self.inputs]
            sl = slice(2 * g, 2 * g + self.na)
            snap.inputs = self.x[sl].copy()
            snap.input_cov = self.P[sl, sl].copy()
        return snap

    def diagnostics(self) -> dict:
        return {"assembly_failures": self.failures, "map": self.map.source, "input_jumps": self.jumps,
                "jumps_undone": self.outliers_undone,
                "bounded": self.bounded, "known_inputs_unused": self.known_unused}
