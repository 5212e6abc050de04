"""PF: particle filter over the dynamic state and the assembly branch (paper 000, Algorithm 1).

Each particle carries a full multibody state on its own assembly branch, its acceleration
noise, branch label B and log-weight (:mod:`.particles`); every step is vectorised over
particles. This module is the filter read top-down; its parts are named where it uses them.

Paper 000's filter converges on its 0.125 m four-bar with a rocker gyroscope; on other
linkages it does not (issue 13: five-bar with two gyroscopes 0.3-1.8 rad RMSE, offset
slider-crank 0.8-1.1 rad, Watt six-bar locked on an anti-phase motion): with two
gyroscopes the readings pin zd given z to 1 deg/s while z is learnt only through the
dynamics, the blind noise draw makes the weights degenerate at every step, and the
cloud collapses in z to ~1e-4 rad while its error drifts to 0.5 rad. One step t -> t + dt
(``predict`` then ``update``) here is Algorithm 1 with the additions that make it work
on any linkage of up to 3 DOF (measured: ``mbde bench pf --only multidof``):

1. lines 2-4, ``predict``: every particle integrated over dt (eq. 14; ``integrator``:
   ``rk4`` as in the paper, ``euler``, ``trapezoidal``, or the variational ``midpoint`` /
   ``symplectic_euler`` of paper 002 sec. 3), on its own branch (the position problem
   starts from its own q); failed position problems are replaced by copies of surviving
   particles with their weights split (``propagation_failures``). Large sets run in
   chunks on a thread pool (:mod:`.propagate`; bit-identical for any thread count); rk4
   runs on numba when compiled or worth compiling (``expect_steps``: numba_kernels.backend).
2. line 5, ``update`` (:mod:`.weights`): the noise of the step is drawn *given the
   readings* -- ``proposal: adapted`` (default; :mod:`.proposal`: the locally optimal
   proposal, Doucet, Godsill & Andrieu 2000 sec. II-D, Pitt & Shephard 1999's full
   adaptation; exact for gyroscopes) -- and the weights multiply the evidence of the
   readings; ``proposal: prior`` is the paper's blind draw v ~ N(0, sigma_a^2) (eq. 13)
   with likelihood weights (eq. 10). Any mix of sensors; Sigma_s: ``sensor_sigma`` by
   name, else ``sensor_sigma_by_type``, else the sensor's noise model (:mod:`.scales`).
3. lines 7-14: normalisation in log space (log-sum-exp), ESS = 1 / sum w_i^2, selective
   resampling when ESS < ``resampling.ess_threshold`` N (:mod:`.resampling`); a set
   enlarged by a uniform start or a lock injection shrinks to ``particles`` by
   KLD-sampling (Fox 2003); the copies are then regularised (:mod:`.resampling`: the
   post-regularised PF of Musso, Oudjane & Le Gland 2001, its kernel moves kept assembled
   on each particle's branch and conditioned on the last readings).

Initialisation (``init``): ``uniform`` (eq. 22, the default): z ~ U(``uniform.z``) (angles:
the circle), zd ~ U(``uniform.zd``), B ~ U(``uniform.branches``), placed by the branch atlas
of :mod:`.prior`, with ``uniform.particles`` particles (dimension-aware: K 48^g unless the
readings give z, :mod:`.scales`); the first update draws z from the position readings
(encoders: iterated-EKF proposal per particle) and zd from the velocity readings
(gyroscopes: the Kalman conditional given z), importance-weighted (:mod:`.proposal`);
for ``uniform.anneal`` seconds the likelihood is tempered (ll x beta, beta 0.1 -> 1;
annealed importance sampling, Neal 2001; the annealed PF of Deutscher, Blake & Reid 2000)
so that the modes of a multi-DOF posterior are explored before the weights commit.
``gaussian``: z ~ N(z0, sigma_z), zd ~ N(zd0, sigma_zd) around the given InitialState, on
its branch (or its q hint's, or uniform).

Defaults from the mechanism and its sensors (:mod:`.scales`, rules in pf.yaml): sigma_a =
0.5 x RMS model acceleration at rest, the velocity range from the potential-energy bound,
300 particles per DOF while tracking (vipf too), accelerometers' sigma widened as the Kalman observers'; paper 000's
Table 1 values are config/estimators/pf_table1.yaml.

Recovery (:mod:`.recovery`): *lost* (every likelihood underflowing or ESS < 5 % N for most
of ``recovery.time``): re-initialisation from the uniform prior; *locked* (the NIS of the
weighted mean prediction, per degree of freedom, above ``recovery.lock_nis`` over
``recovery.lock_time``): fresh uniform particles proposed from the readings are
injected with ``recovery.inject`` of the weight, with velocity readings also a copy of
the cloud with its velocities re-drawn from them, each group weighted by its evidence, and
the readings decide (:mod:`.recovery`; cf. Augmented MCL, Thrun, Burgard & Fox 2005). The
stage's disturbances (a jump back to the first stamp, a silence) inject the same way
(:meth:`add_restart_hypotheses`), but a silence the cloud could not bridge (spread like the
prior) is a fresh start (:mod:`.recovery`). Branch check (``branch_check``): a particle whose
position problem converged on another assembly (near singular configurations) is relabelled
(``branch_jumps``). Gating (``gate``, 0 = off; :mod:`.likelihood`); stage re-acquisition
(:meth:`reacquire`): uniform re-initialisation (reason ``gate``). In the
first second after a uniform start or an injection (the gate's grace, :mod:`.likelihood`) a reading
over the gate waits for the next one to tell outlier from news (:mod:`.weights`), and the
readings the noise proposal moves to (gyroscopes, accelerometers) are fused with a robust
likelihood, a mixture with a flat outlier component (:func:`.likelihood.robust`; cf. the beam
model's p_rand, Thrun, Burgard & Fox 2005 sec. 6.3): a wide cloud predicts an outlier
within its gate, and the particles that happen to explain it must not take the weight.

Outputs (:mod:`.outputs`): weighted mean (eq. 19, circular for angles), covariance of
[z, zd] (PSD by construction), branch probabilities (eq. 20), ``interval(p)``,
``particles()`` (mbde_msgs/ParticleSet), ``diagnostics()``. Once the cloud has one mode a
Gaussian observer (``refine``, default the UKF) is seeded from it and, while the two agree,
``estimate()`` publishes the follower's state and covariance with the cloud's branch
probabilities (:mod:`.refine`: near rest the cloud's mean is 1.2-2.8x further from the
truth than a UKF's; the cloud itself stays in ``cloud_estimate()``).

References: Blanco-Claraco et al. 2014 (paper 000: Algorithm 1, eqs. 10-22); Gordon,
Salmond & Smith 1993 (bootstrap filter); Doucet, Godsill & Andrieu 2000 (optimal and
linearised proposals); Pitt & Shephard 1999 (auxiliary/fully adapted PF); Musso, Oudjane
& Le Gland 2001 (regularised PF); Fox 2003 (KLD-sampling); Neal 2001 (annealed importance
sampling); Deutscher, Blake & Reid 2000 (annealed PF); Thrun, Burgard & Fox 2005
(Probabilistic Robotics: low-variance resampling, Augmented MCL).
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.estimators.base import Estimator, InitialState, UpdateResult
from mbde_core.estimators.particle import likelihood, outputs, recovery, resampling, weights
from mbde_core.estimators.particle.bias import BiasDetector, shift_inject
from mbde_core.estimators.particle import scales as pf_scale
from mbde_core.estimators.particle.likelihood import lse, plain_log_likelihood, position_only, velocity_linear
from mbde_core.estimators.particle.options import (LOG_UNDERFLOW, ParticleOptions, check_config, check_run,
                                                   particle_counts, ranges)
from mbde_core.estimators.particle.inputs import ParticleInputs
from mbde_core.estimators.particle.particles import ParticleSet
from mbde_core.estimators.particle.prior import prior_box
from mbde_core.estimators.particle.propagate import Propagator
from mbde_core.estimators.particle.recovery import LockDetector, LostDetector
from mbde_core.estimators.particle.refine import GaussianFollower, follower_options
from mbde_core.estimators.particle.resampling import effective_sample_size
from mbde_core.estimators.traits import Traits
from mbde_core.types import MechanismSnapshot

__all__ = ["ParticleFilter", "ParticleOptions", "check_config", "LOG_UNDERFLOW"]


class ParticleFilter(ParticleSet, Estimator):
    """Particle filter over (z, zd, zdd, B) (see the module docstring).

    Parameters: mech (the filter's model), sensors (SensorSet), options (:class:`ParticleOptions`,
    config/estimators/pf.yaml), rng (numpy Generator: all randomness). The particle set and
    its arrays: :class:`~mbde_core.estimators.particle.particles.ParticleSet`; the Gaussian
    follower: ``follower`` (:class:`~mbde_core.estimators.particle.refine.GaussianFollower`).
    """

    name = "pf"
    traits = Traits(cost=3.0, color=(0.12, 0.47, 0.71, 1.0), slot=1, tunable=("acceleration_sigma",),
                    input_states=True, known_inputs=True, noise_rule="particle", drivers=True, local=False)  # drivers: every kinematic problem is
    # solved at the filter's time; not local: it re-acquires globally by itself (uniform re-initialisation)
    Options = ParticleOptions
    combines_readings = True  # a sensor faster than the step: one reading per slot (stage.multirate), R scaled (likelihood)
    particles_per_dof = pf_scale.PARTICLES_PER_DOF  # `particles: null` (pf_scale)

    @classmethod
    def validate_config(cls, cfg, file, path):
        check_config(cfg, file, path)

    @classmethod
    def check_run(cls, cfg, mech, sensors, file, path):
        check_run(cfg, mech, sensors, file, path, cls.particles_per_dof)

    @classmethod
    def follower_options(cls, cfg):
        return follower_options(cfg)

    @classmethod
    def own_sensor_sigmas(cls, cfg, mech, sensors) -> dict:
        """{sensor: [sigma per channel]} of the acceleration-reading sensors whose noise the
        filter widens itself (neither ``sensor_sigma`` nor ``sensor_sigma_by_type`` names
        them: :func:`.scales.sensor_covariance`), for the rule's start-of-run line
        (:mod:`~mbde_core.estimators.options.widening`)."""
        listed = cfg.get("sensor_sigma") or {}
        by_type = {k for k, v in (cfg.get("sensor_sigma_by_type") or {}).items() if v is not None}
        return {s.name: np.sqrt(np.diag(pf_scale.sensor_covariance(s, mech))).tolist() for s in sensors
                if getattr(s, "uses_qdd", False) and s.name not in listed and s.kind not in by_type}

    def __init__(self, mech, sensors, options, rng=None):
        super().__init__(mech, sensors, options, rng)
        opt = options
        self.follower = None  # built below, before any particle set (_set tells it of new ones)
        self._held, self._held_dropped = None, []  # readings held for the next update (weights.judge_held)
        self.g = g = mech.dof
        self.n = mech.n
        self.iz = mech.independent
        uni = opt.uniform
        self.z_lo, self.z_hi, self.angular, self.atlas = prior_box(mech, ranges(uni.z, g))
        self.integrator = get_integrator(opt.integrator)
        self.branches = np.array(uni.branches or self.atlas.labels.tolist(), dtype=np.int64)
        self.K = int(self.atlas.labels.max()) + 1
        self._label_codes = self.atlas.label_codes()
        order = np.argsort(self.atlas.codes)
        self._codes_sorted, self._codes_label = self.atlas.codes[order], self.atlas.labels[order]
        self.scales = pf_scale.mechanism_scales(mech, self.atlas)
        sa = opt.acceleration_sigma
        self.sigma_a = float(pf_scale.acceleration_sigma(self.scales) if sa is None else sa)
        zdr = ranges(uni.zd, g)
        self.zd_lo, self.zd_hi = pf_scale.velocity_range(self.scales) if zdr is None else zdr
        self.zdd_range = ranges(uni.zdd, g)
        self.N_track, self.N_init = particle_counts(opt.as_dict(), mech, sensors, self.particles_per_dof, len(self.branches))
        self.N = self.N_track
        self.adapted = opt.proposal == "adapted"
        regc = opt.regularisation
        self.reg_factor = float(regc.bandwidth) if regc.enabled else 0.0
        self._sensor_noise = {}
        self.counts = {"resamples": 0, "updates": 0, "recoveries": 0, "propagation_failures": 0, "branch_jumps": 0,
                       "locks": 0, "regularised": 0}
        self.recovery_reasons = {"likelihood": 0, "ess": 0, "propagation": 0, "gate": 0, "lock": 0, "jump": 0,
                                 "silence": 0, "bias": 0}
        self._ess_sum = 0.0
        self.ess_threshold = float(opt.resampling.ess_threshold)
        self.scheme = opt.resampling.scheme
        rec = opt.recovery
        self.recovery = bool(rec.enabled)
        self.ll_floor = float(rec.log_likelihood_floor)
        self.collapse_fraction = float(rec.ess_fraction)
        self.lost = LostDetector(rec.time)
        self.lock = LockDetector(rec.lock_nis if self.recovery else 0.0, rec.lock_time)
        self.bias = BiasDetector(rec.bias if self.recovery else 0.0, rec.bias_time)
        self.inject = float(rec.inject)
        an = uni.anneal
        self.anneal = pf_scale.anneal_time(g, len(self.branches), all(position_only(s) for s in sensors)) if an is None else float(an)
        self.branch_check = bool(opt.branch_check)
        self.default_gate = float(opt.gate)  # when update() is given no gates
        self._last_dt = float(opt.step)
        self._kernel = None
        self._acc_memo = None  # (arrays, qdd with noise) of _accelerations
        nt = opt.threads
        self.propagator = Propagator(self.integrator, mech, threads=None if nt is None else int(nt))
        self.inputs = ParticleInputs(self)  # a measured torque, unknown torques as input states (:mod:`.inputs`)
        self.follower = GaussianFollower(self)
        self._alloc()

    def reset(self, t: float, init: InitialState) -> None:
        """Draw the initial particle set at time t (``init`` option: uniform or gaussian)."""
        self.t = float(t)
        self._alloc()
        if self.options.init == "gaussian" and init is not None:
            self._init_gaussian(init)
        else:
            self._init_uniform()

    def predict(self, dt: float) -> None:
        """Lines 2-4: integrate every particle over dt (see the module docstring)."""
        if self.adapted and self._pending is not None and self.sigma_a > 0:  # no reading took the noise
            self._impulse(self.sigma_a * self.rng.standard_normal((self.N, self.g)), self._pending)
        extra = self.input_step(dt, None if self.adapted else self.v)  # + the inputs' B u (:mod:`.inputs`)
        self.prefetch_noise()
        st = self._propagate(dt, extra)
        if st is not self.propagator.last:  # a subclass's own proposal (vipf): its context, if any
            self.propagator.adopt(st.aux, self.N)
        self.advance_clock(dt)  # no accumulated rounding: readings are predicted at their stamp - t
        self._last_dt = float(dt)
        q, qd, qdd = st.q, st.qd, st.qdd
        ok = np.asarray(st.ok, dtype=bool)  # the propagator's: False where q, qd or qdd is not finite
        if st is not self.propagator.last and not (np.isfinite(q).all() and np.isfinite(qd).all() and np.isfinite(qdd).all()):
            ok = ok & np.isfinite(q).all(axis=1) & np.isfinite(qd).all(axis=1) & np.isfinite(qdd).all(axis=1)
        self.q, self.qd, self.qdd = q, qd, qdd
        self._fresh = True
        self._pending = float(dt) if self.adapted else None
        self.v = self._prior_noise(self.N) if not self.adapted else np.zeros((self.N, self.g))
        if self.sigma_a > 0:
            self._unique = self.N
        if not ok.all():
            self._replace_failed(ok)
        if self.branch_check:
            self._check_branches()
        self.follower.predict(dt)

    def _propagate(self, dt: float, extra=None) -> MBState:
        """The deterministic part of the proposal: every particle integrated over dt
        (subclasses change it, e.g. :class:`mbde_core.estimators.particle.vipf.VIParticleFilter`)."""
        return self.propagator.step(self.t, self.q, self.qd, self.qdd if self._fresh else None, dt, extra)

    def update(self, measurements, gates=None) -> UpdateResult:
        """Lines 5-14 (:meth:`_fuse`), then the Gaussian follower's turn (:mod:`.refine`)."""
        result = self._fuse(measurements, gates)
        self.follower.after_update(result, measurements, gates)
        return result

    def _fuse(self, measurements, gates=None) -> UpdateResult:
        """Line 5 (proposal and weights), lines 7-14 (normalise, ESS, resample, regularise); the
        recovery tests (:mod:`.recovery`: lost, locked, the stage's disturbances)."""
        self._distances = []  # (sensor, d^2) of the gated readings
        self._suspects = []   # readings held for the next update (:mod:`.weights`)
        self._suspect_fallback = True
        rd, rejected = likelihood.readings(self, measurements, gates, self._suspects)
        rd, late, rejected = weights.judge_held(self, rd, rejected, gates or {})
        if not rd:
            return UpdateResult(late, rejected, distances=self._distances)
        accepted = late + [x.m.sensor for x in rd]
        self.counts["updates"] += 1
        if self._propose:
            self._propose = False
            ll = recovery.fresh_start(self, rd)
            extra = [np.zeros_like(x.R) for x in rd]
        else:
            ll, extra = weights.adapted(self, rd)
            ll = np.where(np.isnan(ll), -np.inf, ll)
        self._vel_readings = [x.m for x in rd if velocity_linear(x.s) or position_only(x.s)]
        y = np.concatenate([x.y for x in rd])
        nis, e, logdet = likelihood.innovation_stats([x.y for x in rd], [x.C + x.R + e for x, e in zip(rd, extra)])
        result = UpdateResult(accepted, rejected, nis, int(y.size), y, e, logdet, distances=self._distances)
        underflow = not ll.max() >= self.ll_floor
        prior_logw = self.logw
        ess, w = weights.normalise(self, weights.temper(self, ll))
        collapse = ess is None or ess < self.collapse_fraction * self.N
        if self.recovery and self.lost(self.t, underflow or collapse):
            self._recover("likelihood" if underflow else "ess")
            rd2, _ = likelihood.readings(self, [x.m for x in rd], {})
            self._propose = False
            ll = recovery.fresh_start(self, rd2)
            if ll.max() >= self.ll_floor:  # else the new uniform set stays unweighted
                weights.normalise(self, ll)
            return result
        if self._inject_next is not None and recovery.injection_due(self, measurements):  # the stage's disturbance
            reason, share, ceiling, _ = self._inject_next  # (add_restart_hypotheses)
            self._inject_next = None
            # every reading of the slot proposes the fresh hypotheses and judges the groups,
            # also those the gate rejected against the old cloud (a restarted motion's encoder)
            off = [m for m in measurements if m.sensor in rejected]
            if off:
                self._log_evidence += lse(self.logw + plain_log_likelihood(likelihood.readings(self, off, {})[0], self.N))
            recovery.inject(self, list(measurements), prior_logw, share, reason)
            if ceiling is not None:
                recovery.cap_energy(self, ceiling)
            self._uniform_from = self.t  # the gate's grace, as after a uniform start: the fresh hypotheses converge
            w = self.weights()
            ess = effective_sample_size(w)
        elif self.lock(self.t, nis, int(y.size)):
            recovery.inject(self, [x.m for x in rd], prior_logw)
            w = self.weights()
            ess = effective_sample_size(w)
        else:
            dz = self.bias(self)
            if dz is not None and shift_inject(self, dz, [x.m for x in rd], prior_logw):
                w = self.weights()
                ess = effective_sample_size(w)
        if ess is not None and ess < self.ess_threshold * self.N and self._held is None:
            resampling.resample_set(self, w, ess)  # not while a reading is held: its likelihood is per particle
        return result

    # -- the estimate (paper 000 eqs. 19-20, :mod:`.outputs`) ----------------------------------
    def estimate(self) -> MechanismSnapshot:
        """The cloud's estimate, or the Gaussian follower's while it runs (:mod:`.refine`)."""
        return outputs.with_inputs(self, self.follower.publish(self.cloud_estimate()))

    def cloud_estimate(self) -> MechanismSnapshot:
        """The cloud's own estimate (eqs. 19-20), whatever the follower does."""
        return outputs.estimate(self)

    def particles(self):
        return outputs.particles(self)

    def diagnostics(self) -> dict:
        out = outputs.diagnostics(self)
        out["refine"] = self.follower.diagnostics()
        return out

    def _noise(self, name: str):
        """(Sigma_s (d, d), W (d, d)) of a sensor (:func:`.likelihood.noise`)."""
        return likelihood.noise(self, name)

    # -- the stage's disturbances --------------------------------------------------------------
    def rebase(self, t: float) -> None:
        shift = float(t) - self.t
        super().rebase(t)
        self.follower.rebase(t)
        self.lost.shift(shift)
        self.lock.shift(shift)
        self.bias.shift(shift)
        if self._uniform_from is not None:  # the gate's grace and the annealing keep their age
            self._uniform_from += shift
        if self._anneal_from is not None:
            self._anneal_from += shift

    def reacquire(self, inflation: float) -> None:
        """The stage's gate rejected every reading for a while: re-initialise (uniform prior)."""
        self._recover("gate")

    def add_restart_hypotheses(self, reason: str, ceiling: float | None = None) -> bool:
        """A jump back to the first stamp or a silence: fresh hypotheses join the cloud at
        the next update (:func:`.recovery.add_restart_hypotheses`); the follower is dropped."""
        self.follower.drop("restart")
        return recovery.add_restart_hypotheses(self, reason, ceiling)

    def attach_trust(self, monitor) -> None:
        """The stage's trust monitor class (a factory of fresh monitors): the follower is
        judged by its own (:mod:`.refine`)."""
        self.follower.trust_monitor = monitor

    def expect_steps(self, steps: int) -> None:
        """The caller will run about ``steps`` more steps (a replay knows its bag's length):
        the propagation backend may compile once if that pays (numba_kernels.backend)."""
        self.propagator.steps_left = max(int(steps), 0)
