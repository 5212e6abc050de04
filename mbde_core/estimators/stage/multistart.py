"""Multi-start re-acquisition of a local (Gaussian) observer that lost the mechanism.

A Kalman observer is local: after a long sensor gap (predicted open loop, its covariance
covering the whole circle), or when its gate's re-acquisition rule had to widen it that
far, the first readings pull it to the nearest state that explains them, which with
weakly observable sensors (one gyroscope) is often a wrong one, and it then stays there
confidently (measured by ``mbde bench faults``). A particle filter re-acquires globally
by itself; for the local observers the stage runs a bank of copies instead:

- candidates: the estimate's z on a grid of ``candidates`` points (per coordinate
  M = candidates^(1/g) points; a coordinate whose 3-sigma range covers the circle gets
  the whole circle, else the 3-sigma range), each assembled on the estimate's assembly
  branch (the branch atlas of :mod:`pf_init`), with sigma_z = half the grid spacing and
  the estimate's zd with a standard deviation of at least |zd| (a lost estimate's
  velocity is as doubtful as its position);
- every candidate runs the same predictions and updates as a shallow copy of the
  estimator (shared model, own state) for ``window`` seconds; its score is the sum over
  its updates of min(NIS, cap) + log det S, i.e. -2 log-likelihood of its innovations
  (the prediction-error decomposition, robust with the cap: the largest gate threshold),
  a gate-rejected reading counting cap + its last log det S; the estimates emitted
  meanwhile are those of the best-scoring candidate;
- at the end the winner's state becomes the estimator's (the same object: the nodes and
  replay keep their reference);
- after a gap of a passive linkage (gravity its only known force, no force limits) the
  candidates whose mechanical energy T + V exceeds what the mechanism had before the gap
  (plus a margin) are not emitted nor adopted (:func:`energy_ceiling`): friction only
  takes energy out, so a candidate that fits the readings by a motion above that energy
  (balanced at an unstable equilibrium where the sensors are blind) is impossible.

The bank also decides between hypotheses that are not a grid: after a backward time jump
(:mod:`stage`) the track may go on (the clock stepped while the mechanism moved on) or
start again (the recording looped). ``keep=True`` makes the estimator itself, with its
state and covariance, member 0 of the bank, next to copies started at ``starts`` (there:
the initial guess); the same score decides, the others starting at ``prior`` (-2 log of
the prior odds of member 0; negative: the others are favoured. The stage gives the
hypothesis the stamps suggest the odds of one gate rejection, cap, so that the other
must explain the readings clearly better before it is emitted). The score is the log-likelihood of each
hypothesis given the readings of the window (prediction-error decomposition),

    -2 log p(y_1..y_n | H) = sum_k [ nu_k^T S_k^-1 nu_k + log det S_k ] + const,

so the hypothesis whose one-step predictions explain the readings best wins, whatever
its state: a track continued at the wrong time, or an initial guess at rest where the
mechanism moves, both accumulate large normalised innovations (or gate rejections, cap
+ log det S each).

Lost: some independent coordinate's standard deviation exceeds ``LOST_SIGMA`` (angles
[rad]) or ``LOST_SIGMA`` x the mechanism's length scale (lengths)
(:func:`~mbde_core.estimators.innovation.is_lost`; the scores:
:mod:`~mbde_core.estimators.innovation`).
"""
from __future__ import annotations

import copy
import math

import numpy as np

from mbde_core.estimators.base import EstimatorInterface, InitialState, UpdateResult
from mbde_core.estimators.innovation import DEFAULT_CAP, accepted_score, is_lost, rejected_score, scored
from mbde_core.estimators.options.mechanism_scales import cached_scales
from mbde_core.estimators.particle.prior import atlas_for

ENERGY_MARGIN = 0.25  # of the range of V: the margin of the energy ceiling (energy_ceiling)


def candidates(est, snap, count: int, floor: InitialState) -> list[InitialState]:
    """Initial states of the bank (module doc); floor: the configured initial standard
    deviations (lower bounds of the candidates')."""
    mech = est.mech
    g = len(snap.z)
    angular = np.isin(mech.independent, mech.rel_columns)
    cov = np.asarray(snap.cov, dtype=float)
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    sd_z = np.where(np.isfinite(sd[:g]), sd[:g], np.inf)
    m = max(int(math.floor(count ** (1.0 / g) + 1e-9)), 1)
    axes, spacing = [], np.empty(g)
    for k in range(g):
        full = angular[k] and 3.0 * sd_z[k] >= math.pi
        if full:
            pts = snap.z[k] + 2.0 * math.pi * np.arange(m) / m
            spacing[k] = 2.0 * math.pi / m
        else:
            half = min(3.0 * sd_z[k], math.pi if angular[k] else 3.0 * mech.length_scale)
            pts = snap.z[k] + np.linspace(-half, half, m) if m > 1 else np.array([snap.z[k]])
            spacing[k] = 2.0 * half / max(m - 1, 1)
        axes.append(pts)
    Z = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, g)
    z0 = mech.q0[mech.independent]
    lo = np.where(angular, -math.pi, z0 - mech.length_scale)
    hi = np.where(angular, math.pi, z0 + mech.length_scale)
    atlas = atlas_for(mech, lo, hi, angular, 72 if g == 1 else max(4, int(round(400 ** (1.0 / g)))))
    code = atlas.codes_of(np.asarray(snap.q, dtype=float)[None])[0]
    labels = atlas.labels[atlas.codes == code]
    if labels.size == 0:
        labels = atlas.labels
    sig_z = np.maximum(0.5 * spacing, floor.sigma_z)
    # the velocity of a lost estimate is as doubtful as its position: at least its own size
    # (an unknown velocity, infinite sd: the initial guess's, not 1e6 rad/s, which made the
    # candidates' sigma points diverge)
    sd_zd = np.where(np.isfinite(sd[g:]), sd[g:], 0.0)
    v = _speed(mech)
    zd0 = np.clip(np.asarray(snap.zd, dtype=float), -2.0 * v, 2.0 * v)
    sig_zd = np.maximum(np.clip(np.maximum(sd_zd, np.abs(snap.zd)), v, 2.0 * v), floor.sigma_zd)
    out = []
    for label in labels:
        Zw = np.where(angular, (Z + math.pi) % (2.0 * math.pi) - math.pi, Z)
        q, ok = atlas.assemble(Zw, np.full(len(Zw), label))
        for zi, qi, good in zip(Zw, q, ok):
            if good:
                out.append(InitialState(zi.copy(), zd0.copy(), sig_z.copy(), sig_zd.copy(),
                                        qi.copy(), int(label)))
    return out


def energy_ceiling(est, snap) -> float | None:
    """The largest mechanical energy E = T + V the mechanism can have after a silence that
    started at the estimate ``snap``, or None if the bound does not hold or is unknown.

    A passive mechanism -- the model's known forces are gravity alone (no loads: no motor,
    spring or scripted force) and no unknown force is expected (the default tuning's force
    limits, :mod:`mechanism_scales`, are 0) -- cannot gain energy: friction, whether the
    model knows it or not, only takes energy out (dE/dt = zd^T Q_nc <= 0). So after the
    silence E <= E(snap) + margin, with margin = ``ENERGY_MARGIN`` x the range of V over
    the swept configurations (the model's forces are trusted to the noise rule's 10 %:
    paper 003's gravity error of 1 m/s^2 makes the model's V off by 10 % of its range, and
    an estimate's own error). A candidate above it fits the readings by an impossible
    motion: pf_rig_branch1 after a 2 s gap, the rig at rest at its stable equilibrium (the
    rocker at a dead point, the gyro blind to the crank) and a candidate balanced at the
    unstable one (the rocker's other dead point, 0.73 J higher, also blind) fit the
    readings equally well (scores -433.4 and -434.7 over 0.3 s); the energy tells them
    apart. None if ``snap`` is lost (its energy is unknown)."""
    mech = est.mech
    if getattr(mech, "loads", None) or snap is None or is_lost(est, snap):
        return None
    sc = _scales(mech)
    if np.any(np.asarray(sc.a_f, float) > 0):
        return None
    V = mech.potential_energy(sc.configurations)
    span = float(np.max(V) - np.min(V)) if np.size(V) else 0.0
    try:
        e0 = float(mech.energy(np.asarray(snap.q, float), np.asarray(snap.qd, float)))
    except (ValueError, ArithmeticError):
        return None
    return e0 + ENERGY_MARGIN * span if math.isfinite(e0) and span > 0 else None


def _scales(mech):
    """The mechanism scales the default tuning used if cached on the model, else the
    scales without force limits."""
    return cached_scales(mech)[0]


def _speed(mech) -> np.ndarray:
    """The mechanism's characteristic speed v (g,) (:mod:`mechanism_scales`): the one the
    default tuning used if cached on the model, else the scales without force limits."""
    return np.maximum(np.asarray(_scales(mech).v, dtype=float), 1e-6)


class MultiStart(EstimatorInterface):
    """The bank: the stage drives it instead of ``est`` meanwhile, so it implements the
    whole estimator interface (:class:`~mbde_core.estimators.base.EstimatorInterface`),
    each method on its members (the estimates, particles and diagnostics are the best
    member's)."""

    def __init__(self, est, t: float, starts: list, window: float, cap: float, keep: bool = False,
                 prior: float = 0.0, ceiling: float | None = None):
        """keep: the estimator itself (its current state, at ``t``) is member 0 (module doc);
        prior: -2 log of the prior odds of member 0 against each other member, the score the
        others start with (with ``keep``; < 0 favours them); ceiling: the largest mechanical
        energy [J] a member may have to be emitted or adopted (:func:`energy_ceiling`)."""
        self.ceiling = ceiling
        self.est = est
        self.sensors = est.sensors
        self.t0 = float(t)
        self.window = float(window)
        self.cap = float(cap) if cap > 0 else DEFAULT_CAP
        self.members = [est] if keep else []
        for init in starts:
            member = copy.copy(est)  # shared model and configuration; reset() gives it its own state
            try:
                member.reset(t, init)
            except (ValueError, ArithmeticError, np.linalg.LinAlgError):
                continue
            self.members.append(member)
        self.scores = np.zeros(len(self.members))
        if keep and prior:
            self.scores[1:] = float(prior)
        self.logdet = np.zeros(len(self.members))  # last log det S of each (for its rejected readings)
        self.known = np.zeros(len(self.members), dtype=bool)  # whether it has one yet
        self.best = 0

    def __len__(self) -> int:
        return len(self.members)

    @property
    def t(self) -> float:
        return self.members[self.best].t

    @property
    def mech(self):
        return self.est.mech

    @property
    def traits(self):
        return self.est.traits

    def reset(self, t: float, init: InitialState) -> None:
        """A restart of the estimator ends the bank's decision: the estimator, reset, is its
        only member."""
        self.est.reset(t, init)
        self.members = [self.est]
        self.scores, self.logdet, self.known = np.zeros(1), np.zeros(1), np.zeros(1, dtype=bool)
        self.best = 0
        self.t0 = float(t)

    def add_restart_hypotheses(self, reason: str, ceiling: float | None = None) -> bool:
        """Every live member carries the restart as its own hypotheses if it can (a particle
        filter); True if one did. The Kalman observers cannot (False): the bank, still
        deciding, goes on (the stage then starts no other bank)."""
        done = [m.add_restart_hypotheses(reason, ceiling) for k, m in enumerate(self.members)
                if math.isfinite(self.scores[k])]
        return any(done)

    def particles(self):
        return self.members[self.best].particles()

    def diagnostics(self) -> dict:
        return self.members[self.best].diagnostics()

    def expect_steps(self, steps: int) -> None:
        for member in self.members:
            member.expect_steps(steps)

    def set_known_inputs(self, values, variances) -> None:
        """The held known inputs (stage.inputs) for every member's next step."""
        for member in self.members:
            member.set_known_inputs(values, variances)

    def predict(self, dt: float) -> None:
        for k, member in enumerate(self.members):
            if math.isfinite(self.scores[k]):
                try:
                    with np.errstate(all="ignore"):  # a diverging candidate's overflow is scored, not printed
                        member.predict(dt)
                except Exception:  # noqa: BLE001 - a failing candidate is out
                    self.scores[k] = math.inf

    def update(self, measurements, gates=None) -> UpdateResult:
        """Every member's update; scores (module doc). A rejected reading costs cap + the
        member's last log det S; a member that has accepted nothing yet (no log det S of
        its own) is charged the largest log det S of the members that accepted in this
        update: a rejection never costs less than the worst acceptance (with 0 a track
        whose first reading after a backward jump was rejected scored cap = 23.9 against
        NIS + log det S ~ -7 of a wrong initial guess, which then led the first steps)."""
        results = [None] * len(self.members)
        for k, member in enumerate(self.members):
            if not math.isfinite(self.scores[k]):
                continue
            try:
                with np.errstate(all="ignore"):  # non-finite NIS / log det S are charged the cap below
                    res = member.update(measurements, gates)
            except Exception:  # noqa: BLE001
                self.scores[k] = math.inf
                continue
            results[k] = res
            if res.accepted and scored(res):
                self.logdet[k] = res.logdet
                self.known[k] = True
            self.scores[k] += accepted_score(res, self.cap, self.logdet[k])
        seen = [r.logdet for r in results if r is not None and r.accepted and r.logdet is not None and math.isfinite(r.logdet)]
        ref = max(seen) if seen else 0.0
        for k, res in enumerate(results):
            if res is not None:
                self.scores[k] += rejected_score(res, self.cap, self.logdet[k] if self.known[k] else max(ref, self.logdet[k]))
        self.best = self._admissible_best()
        best = results[self.best]
        return best if best is not None else UpdateResult([], [m.sensor for m in measurements])

    def _admissible_best(self) -> int:
        """The best-scoring member whose energy is within the ceiling (the best if none is)."""
        order = np.argsort(self.scores, kind="stable")
        if self.ceiling is None:
            return int(order[0])
        mech = self.est.mech
        for k in order:
            if not math.isfinite(self.scores[k]):
                break
            snap = self.members[k].estimate()
            try:
                energy = float(mech.energy(np.asarray(snap.q, float), np.asarray(snap.qd, float)))
            except (ValueError, ArithmeticError):
                continue
            if energy <= self.ceiling:
                return int(k)
        return int(order[0])

    def estimate(self):
        return self.members[self.best].estimate()

    def rebase(self, t: float) -> None:
        for member in self.members:
            member.rebase(t)
        self.t0 = float(t)

    def reacquire(self, inflation: float) -> None:
        for member in self.members:
            member.reacquire(inflation)

    def done(self, t: float) -> bool:
        return t - self.t0 >= self.window - 1e-12 or not np.isfinite(self.scores).any()

    def adopt(self) -> None:
        """The winner's state becomes the estimator's (same object for every holder)."""
        winner = self.members[self.best]
        if np.isfinite(self.scores[self.best]) and winner is not self.est:
            self.est.__dict__.update(winner.__dict__)
