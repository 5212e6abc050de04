"""A Gaussian observer that follows the particle filter's converged cloud (option ``refine``).

A component of :class:`mbde_core.estimators.particle.filter.ParticleFilter` (its
``follower``), told of the cloud's life events. The particle filter is what
finds the mechanism from an unknown start: the assembly branch, a multimodal posterior,
the recovery after a lost track. Once its cloud has one mode, a Gaussian observer on the
same readings tracks that mode better than a few hundred particles do: near rest, where
a gyroscope reads ~0 and z is learnt only slowly from the dynamics, the UKF keeps what
every reading taught it in its covariance while resampling forgets it (measured, ``mbde
bench pf --only multidof``: the PF cloud's steady-state error of z is 1.2-1.4x, at the
90th percentile 1.6-2.0x and at worst 2.8-3.7x that of a UKF started at the truth; the
cloud's spread equals the UKF's, its mean is off). Hence a two-stage design, as hybrid
localisers use a particle filter for global localisation and a Gaussian filter for
tracking (cf. Thrun, Burgard & Fox 2005, Probabilistic Robotics, on Markov/MCL versus
EKF localisation; Gustafsson et al. 2002, "Particle filters for positioning, navigation
and tracking", on handing the linear-Gaussian part to a Kalman filter): the cloud keeps
running, and while it agrees with the follower the follower's estimate is published.

- **seed** (after every update while no follower runs): the cloud has one mode, i.e. the
  most probable branch holds ``branch_probability`` of the weight, every independent
  coordinate's standard deviation is below ``sigma_z`` (angles [rad]; lengths: x the
  mechanism's length scale), no annealing is under way and the lock detector is quiet;
  then the follower (``estimator``, a Kalman observer, with ``options`` over its own
  defaults, ``auto`` resolved by the same rule as ``mbde replay``'s; no input states
  unless ``options`` give ``inputs``: it shares the cloud's model, in which an unknown
  motor is acceleration noise -- with the UKF's default input on adekf_slider_crank the
  particle filter's RMSE went from 0.57 to 1.82 rad) starts from the
  cloud's weighted mean on its most probable branch with the cloud's covariance of
  [z, zd] (x_0 = E[x], P_0 = Cov[x]: the moment-matched Gaussian, the best Gaussian
  approximation of the cloud in Kullback-Leibler divergence KL(p || N));
- **follow**: it predicts and updates with the readings the cloud gets (its own gate);
- **check**: after each update the squared Mahalanobis distance between the two
  estimates, d^2 = (x_f - x_c)^T (P_f + P_c)^-1 (x_f - x_c) (angles wrapped), is tested
  against the chi-square quantile ``agree`` of 2g degrees of freedom; failed for
  ``disagree_time`` seconds in a row, the readings of those seconds decide: each filter's
  -2 log-likelihood of its innovations, sum of min(NIS, cap) + log det S (the
  prediction-error score of the multi-start bank, :mod:`multistart`; the cloud's from
  the Gaussian of its weighted predictions); the cloud better: the follower is dropped
  (counted, ``drops``) and seeded again from the cloud; the follower better: the cloud is
  drawn again from the follower's Gaussian on its branch (``redraws``; measured on
  pf_rig_branch0 seed 17: the cloud drifted 0.1 rad off while the follower stayed with a
  UKF started at the truth, and was then locked twice). A lock of the cloud (:mod:`.recovery`)
  is the cloud's own remedy, which drops the follower: redrawing the cloud from a follower
  whose innovations passed the lock test instead was tried and lost fivebar_encoder seed 9
  (14 redraws onto a follower 0.1-0.3 rad off, 9 locks; with the injection the cloud
  found the state at once);
- **trust**: with the stage's trust monitor (:mod:`mbde_core.estimators.stage.trust`, given by
  the stage through :meth:`ParticleFilter.attach_trust`), a fresh monitor judges the
  follower's own updates from its seed on; a LOST verdict, or DEGRADED for the monitor's
  window (1 s; a seed's first updates may be briefly DEGRADED while the follower settles:
  dropped at once, pf_rig_branch0 acquired 0.16 s -> 1.2 s later), drops it (``trust``)
  and the cloud is published for the monitor's window before a new seed;
- **drop** also when the cloud starts over or changes its hypotheses (a uniform
  re-initialisation, a recovery, a lock injection, a restart hypothesis, a clock jump),
  when its most probable branch changes, and when the follower's numbers are not finite
  or its covariance covers the circle (:func:`multistart.is_lost`);
- **name**: ``diagnostics()['label']`` says which published the estimate, e.g. ``pf -> ukf at
  0.31 s`` (first seeded 0.31 s after the start; ``followed_s``: the seconds the follower
  published), in replay's table, report and metrics.json;
- **publish** (``estimate()``): with a follower running, z, zd, zdd, q, qd, qdd and the
  covariance of [z, zd] are the follower's, the branch probabilities the cloud's;
  otherwise the cloud's (``cloud_estimate()``, always available: eq. 19-20 of paper 000).
  The particles (``particles()``, RViz) are always the cloud's.

``estimator: none`` turns it off: the estimate is the cloud's, bit-identical to the
filter without a follower. A mechanism with time-dependent driving constraints has no
follower (the Kalman observers do not support them; ``diagnostics()['refine']`` says so).
"""
from __future__ import annotations

import math

import numpy as np
from mbde_core.errors import ConfigError
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.chi2 import chi2_ppf
from mbde_core.estimators.innovation import DEFAULT_CAP, accepted_score, is_lost, rejected_score, scored
from mbde_core.estimators.registry import estimator_class, names, traits
from mbde_core.sensors.base import wrap_angle

REFINE_DEFAULTS = {
    "estimator": "ukf",          # the follower (a Kalman observer) | none
    "options": {},               # its options over its defaults ('auto': the rule, as replay; inputs: [] unless given)
    "branch_probability": 0.99,  # seed: the most probable branch's weight at least this ...
    "sigma_z": 0.2,              # ... and every z's sd below this [rad; lengths: x length scale]
    "agree": 0.99999,            # chi-square probability of the follower-vs-cloud test
    "disagree_time": 0.1,        # [s] of failed tests in a row: the readings decide (drop or redraw)
}


def followers() -> tuple:
    """The estimators that can follow the cloud (their traits' ``follower``)."""
    return tuple(n for n in names() if traits(n).follower)


def _is_follower(name: str) -> bool:
    try:
        return bool(traits(name).follower)
    except KeyError:
        return False


def check_refine(cfg: dict, file: str, path: str) -> None:
    """Validate the ``refine`` options (the follower's own are validated by the options
    pipeline as a nested estimator, :func:`follower_options`)."""
    ref = cfg["refine"]
    name = ref["estimator"]
    if name != "none" and not _is_follower(name):
        raise ConfigError(file, f"{path}.refine.estimator", f"must be one of {', '.join(followers() + ('none',))}, got {name!r}")
    if not 0.0 < float(ref["branch_probability"]) <= 1.0:
        raise ConfigError(file, f"{path}.refine.branch_probability", f"a probability in (0, 1], got {ref['branch_probability']}")
    if not float(ref["sigma_z"]) > 0:
        raise ConfigError(file, f"{path}.refine.sigma_z", f"must be > 0, got {ref['sigma_z']}")
    if not 0.0 < float(ref["agree"]) < 1.0:
        raise ConfigError(file, f"{path}.refine.agree", f"a chi-square probability in (0, 1), got {ref['agree']}")
    if not float(ref["disagree_time"]) >= 0:
        raise ConfigError(file, f"{path}.refine.disagree_time", f"must be >= 0 [s], got {ref['disagree_time']}")
    if not isinstance(ref["options"], dict):
        raise ConfigError(file, f"{path}.refine.options", f"expected a mapping of {name} options, got {ref['options']!r}")


def follower_options(cfg: dict):
    """(name, options, ("refine", "resolved")) of the follower of validated options ``cfg``
    (None: none): ``refine.options`` over the follower's defaults, without input states
    unless they give ``inputs`` (the cloud's model: an unknown motor is acceleration noise,
    not an input state); the pipeline validates and resolves them (the rule with the run's
    context, as replay's) into ``refine.resolved``."""
    ref = cfg["refine"]
    name = ref["estimator"]
    if name == "none":
        return None
    opts = dict(ref["options"])
    if traits(name).input_states and not cfg.get("inputs"):  # with the cloud's input states: its own (auto)
        opts.setdefault("inputs", [])
    return name, opts, ("refine", "resolved")


class GaussianFollower:
    """The ``refine`` follower of a particle filter ``pf`` (see the module docstring): ``est``
    the Gaussian observer (None: no follower), ``following`` while it runs on the cloud it
    was seeded from."""

    def __init__(self, pf):
        self.pf = pf
        ref = pf.options.refine
        self.est = None
        self.following = False
        self.generation = 0          # of the cloud: a new particle set was installed (new_cloud)
        self.seeded_generation = None
        self.counts = {"seeds": 0, "drops": 0, "redraws": 0}
        self.drop_reasons = {"disagree": 0, "restart": 0, "branch": 0, "lost": 0, "trust": 0}
        self.trust_monitor = None  # a factory of the stage's trust monitor (attach_trust), if given
        self.monitor, self._hold_until, self.last_trust = None, None, None
        self._degraded_from = None  # since when the follower's monitor says DEGRADED (None: OK)
        self.t0, self.first_at, self.followed = None, None, 0.0  # run start, first seed [s], time published
        name = ref.estimator
        self.no_follower = None
        if name != "none" and getattr(pf.mech, "drivers", None):
            self.no_follower = "driving constraints (the Kalman observers do not support them)"
            name = "none"
        if name == "none":
            return
        self.est = estimator_class(name)(pf.mech, pf.sensors, ref.resolved)  # no randomness
        self._seed_p = float(ref.branch_probability)
        lim = float(ref.sigma_z)
        self._seed_sd = np.where(pf.angular, lim, lim * pf.mech.length_scale)
        self._agree = float(chi2_ppf(float(ref.agree), 2 * pf.g))
        self._disagree_time = float(ref.disagree_time)

    # -- the cloud's life events -------------------------------------------------------------
    def new_cloud(self) -> None:
        """A new particle set was installed (uniform start, recovery, injection)."""
        if self.t0 is None:
            self.t0 = self.pf.t
        self.generation += 1

    def keep(self) -> None:
        """The new particle set keeps the hypotheses of the one the follower was seeded from
        (the offset copies of :func:`.bias.shift_inject` join it with a minority share): a
        running follower goes on; the disagreement test and its trust monitor judge it. Only a
        follower its monitor calls OK is kept: one already DEGRADED is dropped as before (paper
        004's slider-crank with the torque unknown and input states: kept, it drifted to 0.24 rad)."""
        if self.following and self.seeded_generation == self.generation - 1 and self._degraded_from is None:
            self.seeded_generation = self.generation

    def drop(self, reason: str) -> None:
        if self.following:
            self.following = False
            self.counts["drops"] += 1
            self.drop_reasons[reason] += 1

    def rebase(self, t) -> None:
        if self.following:
            self.est.rebase(t)

    # -- follow --------------------------------------------------------------------------------
    def predict(self, dt: float) -> None:
        if self._current():
            self.est.predict(dt)
            self.followed += float(dt)

    def after_update(self, result, measurements, gates) -> None:
        """The cloud fused ``measurements`` (its UpdateResult ``result``): the follower does
        too and the two are compared (check), or a follower is seeded from the cloud."""
        if self.est is None:
            return
        if self._current():
            self._check(result, self.est.update(measurements, gates))
        if not self.following:
            self._seed()

    def _check(self, cloud_result, follower_result) -> None:
        pf = self.pf
        f = self.est.estimate()
        g = pf.g
        if not (np.all(np.isfinite(f.z)) and np.all(np.isfinite(f.zd)) and np.all(np.isfinite(f.cov))) or is_lost(pf, f):
            self.drop("lost")
            return
        c = pf.cloud_estimate()
        if c.branch != self._seeded_branch:
            self.drop("branch")
            return
        if self.monitor is not None:
            v = self.monitor.step(pf.t, follower_result)
            if v.level < 1:
                self._degraded_from = None
            elif self._degraded_from is None:
                self._degraded_from = pf.t
            if v.level >= 2 or (v.level == 1 and pf.t - self._degraded_from >= self.monitor.window):
                self.drop("trust")  # LOST, or DEGRADED for the monitor's window: back to particles
                self.last_trust = v.reason
                self._hold_until = pf.t + self.monitor.window
                return
        dz = f.z - c.z
        dz = np.where(pf.angular, wrap_angle(dz), dz)
        d = np.concatenate([dz, f.zd - c.zd])
        S = c.cov + f.cov[: 2 * g, : 2 * g]
        try:
            m = float(d @ np.linalg.solve(S, d))
        except np.linalg.LinAlgError:
            m = math.inf
        if m > self._agree:
            if self._disagree_from is None:
                self._disagree_from, self._scores = pf.t, [0.0, 0.0]
            self._scores[0] += self._score(cloud_result, 0)
            self._scores[1] += self._score(follower_result, 1)
            if pf.t - self._disagree_from >= self._disagree_time:
                if self._scores[1] < self._scores[0]:  # the readings prefer the follower
                    self._redraw_cloud(f)
                else:
                    self.drop("disagree")
                self._disagree_from = None
        else:
            self._disagree_from = None

    def _score(self, res, k: int) -> float:
        """-2 log-likelihood (+ const) of one update's innovations by the multi-start bank's
        robust score (:func:`~mbde_core.estimators.innovation.accepted_score`,
        :func:`~mbde_core.estimators.innovation.rejected_score`): accepted readings
        min(NIS, cap d) + log det S, each rejected one cap d + the last log det S of the
        same filter (cap = the bank's, d = the update's degrees of freedom)."""
        cap = DEFAULT_CAP * max(res.dof, 1)
        if res.accepted and scored(res):
            self._logdets[k] = res.logdet
        return accepted_score(res, cap, self._logdets[k]) + rejected_score(res, cap, self._logdets[k])

    def _redraw_cloud(self, f) -> None:
        """The follower explained the readings of the disagreement better than the cloud:
        the cloud is drawn again from the follower's Gaussian on its branch (``init:
        gaussian``'s draw, independent coordinates), and the follower goes on."""
        g = self.pf.g
        sd = np.sqrt(np.clip(np.diag(f.cov[: 2 * g, : 2 * g]), 0.0, None))
        try:
            self.pf._init_gaussian(InitialState(f.z, f.zd, sd[:g], sd[g:], f.q, self._seeded_branch))
        except ValueError:  # the follower's state does not assemble on its branch: the cloud is right
            self.drop("disagree")
            return
        self.seeded_generation = self.generation
        self.counts["redraws"] += 1

    def _seed(self) -> None:
        pf = self.pf
        if pf._anneal_from is not None and pf.t - pf._anneal_from < pf.anneal:
            return
        if self._hold_until is not None and pf.t < self._hold_until:  # its trust window after a trust drop
            return
        lock = pf.lock
        if lock.limit > 0 and lock.last is not None and lock.last > lock.limit:
            return
        c = pf.cloud_estimate()
        if c.branch_probabilities is None or float(np.max(c.branch_probabilities)) < self._seed_p:
            return
        g = pf.g
        sd = np.sqrt(np.clip(np.diag(c.cov), 0.0, None))
        if not (np.all(np.isfinite(sd)) and np.all(sd[:g] <= self._seed_sd)):
            return
        f = self.est
        f.t = pf.t
        f.reset(pf.t, InitialState(c.z, c.zd, sd[:g], sd[g:], c.q, c.branch))
        f.P[: 2 * g, : 2 * g] = c.cov
        self.following = True
        self.seeded_generation = self.generation
        self._seeded_branch = c.branch
        self._disagree_from = None
        self._logdets = [0.0, 0.0]
        self.counts["seeds"] += 1
        self.monitor = None if self.trust_monitor is None else self.trust_monitor()
        self._degraded_from = None
        if self.first_at is None:
            self.first_at = pf.t - (pf.t if self.t0 is None else self.t0)

    # -- publish -------------------------------------------------------------------------------
    def _current(self) -> bool:
        """True while a follower runs on the cloud it was seeded from (a new set -- uniform
        start, recovery, injection, reset -- drops it)."""
        if self.following and self.generation != self.seeded_generation:
            self.drop("restart")
        return self.following

    def publish(self, snap):
        """The filter's estimate: the cloud's ``snap`` with, while a follower runs, its
        z, zd, zdd, q, qd, qdd and covariance of [z, zd] (the branch probabilities stay
        the cloud's)."""
        if not self._current():
            return snap
        f = self.est.estimate()
        g = self.pf.g
        snap.q, snap.qd, snap.qdd = f.q, f.qd, f.qdd
        snap.z, snap.zd, snap.zdd = f.z, f.zd, f.zdd
        snap.cov = f.cov[: 2 * g, : 2 * g].copy()
        return snap

    def diagnostics(self) -> dict:
        """The ``refine`` entry of the filter's diagnostics."""
        if self.est is None:
            return {"estimator": "none"} if self.no_follower is None else {"estimator": "none", "reason": self.no_follower}
        out = {"estimator": self.est.name, "following": bool(self.following), **self.counts,
               "drop_reasons": dict(self.drop_reasons), "label": self.label(), "first_at": self.first_at,
               "followed_s": self.followed}
        if self.last_trust is not None:
            out["last_trust_drop"] = self.last_trust
        return out

    def label(self) -> str:
        """How the estimate was made, for tables and reports: ``pf -> ukf at 0.31 s`` (the
        follower first seeded 0.31 s into the run), ``pf`` (never seeded)."""
        name = self.pf.name
        if self.est is None or self.first_at is None:
            return name
        return f"{name} -> {self.est.name} at {self.first_at:.2f} s"
