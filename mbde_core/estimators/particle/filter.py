"""PF: particle filter over the dynamic state and the assembly branch (paper 000, Algorithm 1).

Each particle i carries a full multibody state on its own assembly branch: q, qd (n,)
(hence z = q[independent], zd), the model acceleration (qdd), the acceleration noise v
(g,) with zdd = f(z, zd) + v (paper 000 eqs. 11, 13), its branch label B and a
log-weight; everything is (N, ...) arrays, every step vectorised over particles.

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
   chunks on a thread pool (:mod:`pf_parallel`; bit-identical for any thread count); rk4
   runs on numba when compiled or worth compiling (``expect_steps``: numba_kernels.backend).
2. line 5, ``update`` (:mod:`pf_update`): the noise of the step is drawn *given the
   readings* -- ``proposal: adapted`` (default; :mod:`pf_proposal`: the locally optimal
   proposal, Doucet, Godsill & Andrieu 2000 sec. II-D, Pitt & Shephard 1999's full
   adaptation; exact for gyroscopes) -- and the weights multiply the evidence of the
   readings; ``proposal: prior`` is the paper's blind draw v ~ N(0, sigma_a^2) (eq. 13)
   with likelihood weights (eq. 10). Any mix of sensors; Sigma_s: ``sensor_sigma`` by
   name, else ``sensor_sigma_by_type``, else the sensor's noise model (pf_scale).
3. lines 7-14: normalisation in log space (log-sum-exp), ESS = 1 / sum w_i^2, selective
   resampling when ESS < ``resampling.ess_threshold`` N (:mod:`pf_resample`); a set
   enlarged by a uniform start or a lock injection shrinks to ``particles`` by
   KLD-sampling (Fox 2003); the copies are then regularised (:mod:`pf_regularise`: the
   post-regularised PF of Musso, Oudjane & Le Gland 2001, its kernel moves kept assembled
   on each particle's branch and conditioned on the last readings).

Initialisation (``init``): ``uniform`` (eq. 22, the default): z ~ U(``uniform.z``) (angles:
the circle), zd ~ U(``uniform.zd``), B ~ U(``uniform.branches``), placed by the branch atlas
of :mod:`pf_init`, with ``uniform.particles`` particles (dimension-aware: K 48^g unless the
readings give z, :mod:`pf_scale`); the first update draws z from the position readings
(encoders: iterated-EKF proposal per particle) and zd from the velocity readings
(gyroscopes: the Kalman conditional given z), importance-weighted (:mod:`pf_proposal`);
for ``uniform.anneal`` seconds the likelihood is tempered (ll x beta, beta 0.1 -> 1;
annealed importance sampling, Neal 2001; the annealed PF of Deutscher, Blake & Reid 2000)
so that the modes of a multi-DOF posterior are explored before the weights commit.
``gaussian``: z ~ N(z0, sigma_z), zd ~ N(zd0, sigma_zd) around the given InitialState, on
its branch (or its q hint's, or uniform).

Defaults from the mechanism and its sensors (:mod:`pf_scale`, rules in pf.yaml): sigma_a =
0.5 x RMS model acceleration at rest, the velocity range from the potential-energy bound,
300 particles per DOF while tracking (vipf too), accelerometers' sigma widened as the Kalman observers'; paper 000's
Table 1 values are config/estimators/pf_table1.yaml.

Recovery (:mod:`pf_lock`): *lost* (every likelihood underflowing or ESS < 5 % N for most
of ``recovery.time``): re-initialisation from the uniform prior; *locked* (the NIS of the
weighted mean prediction, per degree of freedom, above ``recovery.lock_nis`` over
``recovery.lock_time``): fresh uniform particles proposed from the readings are
injected with ``recovery.inject`` of the weight, with velocity readings also a copy of
the cloud with its velocities re-drawn from them, each group weighted by its evidence, and
the readings decide (:mod:`pf_inject`; cf. Augmented MCL, Thrun, Burgard & Fox 2005). The
stage's disturbances (a jump back to the first stamp, a silence) inject the same way
(:meth:`add_restart_hypotheses`), but a silence the cloud could not bridge (spread like the
prior) is a fresh start (:mod:`pf_inject`). Branch check (``branch_check``): a particle whose
position problem converged on another assembly (near singular configurations) is relabelled
(``branch_jumps``). Gating (``gate``, 0 = off; :mod:`pf_gate`); stage re-acquisition
(:meth:`reacquire`): uniform re-initialisation (reason ``gate``). In the
first second after a uniform start or an injection (:mod:`pf_update`'s grace) a reading
over the gate waits for the next one to tell outlier from news (:mod:`pf_hold`), and the
readings the noise proposal moves to (gyroscopes, accelerometers) are fused with a robust
likelihood, a mixture with a flat outlier component (``pf_hold.robust``; cf. the beam
model's p_rand, Thrun, Burgard & Fox 2005 sec. 6.3): a wide cloud predicts an outlier
within its gate, and the particles that happen to explain it must not take the weight.

Outputs (:mod:`pf_outputs`): weighted mean (eq. 19, circular for angles), covariance of
[z, zd] (PSD by construction), branch probabilities (eq. 20), ``interval(p)``,
``particles()`` (mbde_msgs/ParticleSet), ``diagnostics()``. Once the cloud has one mode a
Gaussian observer (``refine``, default the UKF) is seeded from it and, while the two agree,
``estimate()`` publishes the follower's state and covariance with the cloud's branch
probabilities (:mod:`pf_refine`: near rest the cloud's mean is 1.2-2.8x further from the
truth than a UKF's; the cloud itself stays in ``cloud_estimate()``).

References: Blanco-Claraco et al. 2014 (paper 000: Algorithm 1, eqs. 10-22); Gordon,
Salmond & Smith 1993 (bootstrap filter); Doucet, Godsill & Andrieu 2000 (optimal and
linearised proposals); Pitt & Shephard 1999 (auxiliary/fully adapted PF); Musso, Oudjane
& Le Gland 2001 (regularised PF); Fox 2003 (KLD-sampling); Neal 2001 (annealed importance
sampling); Deutscher, Blake & Reid 2000 (annealed PF); Thrun, Burgard & Fox 2005
(Probabilistic Robotics: low-variance resampling, Augmented MCL).
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.engine import kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.estimators.particle import proposal as prop
from mbde_core.estimators.particle import scales as pf_scale
from mbde_core.estimators.base import Estimator, InitialState
from mbde_core.estimators.particle.options import (LOG_UNDERFLOW, ParticleOptions, check_config, check_run,
                                                   particle_counts, ranges)
from mbde_core.estimators.particle.prior import prior_box, sample_uniform
from mbde_core.estimators.particle.lock import LockDetector, LostDetector
from mbde_core.estimators.particle.outputs import ParticleOutputs
from mbde_core.estimators.particle.propagate import Propagator
from mbde_core.estimators.particle.resample import ParticleResampling
from mbde_core.estimators.particle.inject import ParticleInjection
from mbde_core.estimators.particle.refine import GaussianFollower, follower_options
from mbde_core.estimators.particle.update import ParticleUpdate
from mbde_core.estimators.traits import Traits

__all__ = ["ParticleFilter", "ParticleOptions", "check_config", "LOG_UNDERFLOW"]


class ParticleFilter(GaussianFollower, ParticleInjection, ParticleUpdate, ParticleResampling, ParticleOutputs, Estimator):
    """Particle filter over (z, zd, zdd, B) (see the module docstring).

    Parameters: mech (the filter's model), sensors (SensorSet), config (options, see
    ``DEFAULTS`` and config/estimators/pf.yaml), rng (numpy Generator: all randomness).
    State arrays (N particles): q, qd, qdd (N, n), v (N, g), label (N,), logw (N,).
    """

    name = "pf"
    traits = Traits(cost=3.0, color=(0.12, 0.47, 0.71, 1.0), slot=1, tunable=("acceleration_sigma",),
                    noise_rule="particle", drivers=True, local=False)  # drivers: every kinematic problem is
    # solved at the filter's time; not local: it re-acquires globally by itself (uniform re-initialisation)
    Options = ParticleOptions
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

    def __init__(self, mech, sensors, options, rng=None):
        super().__init__(mech, sensors, options, rng)
        opt = options
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
                                 "silence": 0}
        self._ess_sum = 0.0
        self.ess_threshold = float(opt.resampling.ess_threshold)
        self.scheme = opt.resampling.scheme
        rec = opt.recovery
        self.recovery = bool(rec.enabled)
        self.ll_floor = float(rec.log_likelihood_floor)
        self.collapse_fraction = float(rec.ess_fraction)
        self.lost = LostDetector(rec.time)
        self.lock = LockDetector(rec.lock_nis if self.recovery else 0.0, rec.lock_time)
        self.inject = float(rec.inject)
        an = uni.anneal
        self.anneal = pf_scale.anneal_time(g) if an is None else float(an)
        self.branch_check = bool(opt.branch_check)
        self.default_gate = float(opt.gate)  # when update() is given no gates
        self._last_dt = float(opt.step)
        self._kernel = None
        self._acc_memo = None  # (arrays, qdd with noise) of _accelerations
        nt = opt.threads
        self.propagator = Propagator(self.integrator, mech, threads=None if nt is None else int(nt))
        self._init_follower()
        self._alloc()

    def expect_steps(self, steps: int) -> None:
        """The caller will run about ``steps`` more steps (a replay knows its bag's length):
        the propagation backend may compile once if that pays (numba_kernels.backend)."""
        self.propagator.steps_left = max(int(steps), 0)

    def _alloc(self):
        N, n, g = self.N, self.n, self.g
        self.q, self.qd, self.qdd = np.zeros((N, n)), np.zeros((N, n)), np.zeros((N, n))
        self.v = np.zeros((N, g))
        self.label = np.zeros(N, dtype=np.int64)
        self.logw = np.full(N, -math.log(N))
        self.ess_before = float(N)
        self._unique = self._unique_resampled = N
        self.lost.restart(self.t)
        self.lock.restart(self.t)
        self._propose = False
        self._anneal_from = None  # time of the last uniform (re)initialisation while annealing
        self._uniform_from = None  # time of the last uniform (re)initialisation
        self._inject_next = None   # (reason, share, ceiling, asked at): fresh hypotheses (add_restart_hypotheses)
        self._fresh_ceiling = None  # energy ceiling of a fresh start after a silence (add_restart_hypotheses)
        self._pending = None    # dt of the last prediction whose noise is not drawn yet (adapted)
        self._fresh = True      # qdd is the model's at (q, qd)
        self._vel_readings = []  # velocity-linear readings of the last update (regularisation)
        self.propagator.drop()

    @property
    def _aux(self):
        return self.propagator.context(self.N)

    @_aux.setter
    def _aux(self, value):
        if value is None:
            self.propagator.drop()

    # -- sensor noise -----------------------------------------------------------------------
    def _noise(self, name: str):
        """(Sigma_s (d, d), W (d, d)) with W^T W = Sigma_s^-1 (whitening) for one sensor."""
        if name not in self._sensor_noise:
            s = self.sensors[name]
            by_name = self.options.sensor_sigma
            by_type = self.options.sensor_sigma_by_type.as_dict().get(s.kind)
            if name in by_name:
                R = np.eye(s.dim) * float(by_name[name]) ** 2
            elif by_type is not None:
                R = np.eye(s.dim) * float(by_type) ** 2
            else:  # the noise model (accelerometers: plus the model-error term of pf_scale)
                R = pf_scale.sensor_covariance(s, self.mech)
            self._sensor_noise[name] = (R, np.linalg.inv(np.linalg.cholesky(R)))
        return self._sensor_noise[name]

    # -- initialisation ------------------------------------------------------------------------
    def reset(self, t: float, init: InitialState) -> None:
        """Draw the initial particle set at time t (``init`` option: uniform or gaussian)."""
        self.t = float(t)
        self._alloc()
        if self.options.init == "gaussian" and init is not None:
            self._init_gaussian(init)
        else:
            self._init_uniform()

    def _draw_uniform(self, M: int):
        """(q, zd, labels) of M particles from the uniform prior (eq. 22) at the filter's time."""
        z, q, labels = sample_uniform(self.atlas, M, self.z_lo, self.z_hi, self.branches, self.rng, t=self.t)
        zd = self.zd_lo + (self.zd_hi - self.zd_lo) * self.rng.random((M, self.g))
        return q, zd, labels

    def _set(self, q, zd, labels):
        """Install a new particle set with equal weights."""
        mech = self.mech
        self.N = q.shape[0]
        self.q = q
        self.qd = kinematics.velocity(mech, q, zd, t=self.t)
        self.qdd = prop.model_accelerations(mech, self.t, q, self.qd)
        self.label = np.asarray(labels, dtype=np.int64)
        self.v = self._prior_noise(self.N)
        self.logw = np.full(self.N, -math.log(self.N))
        self._unique = self.N
        self._fresh, self._pending = True, None
        self.propagator.drop()
        held, self._held = getattr(self, "_held", None), None  # a new set cannot judge it (pf_hold)
        if held is not None:
            self._held_dropped = getattr(self, "_held_dropped", []) + held.names
        self.lost.restart(self.t)
        self.lock.restart(self.t)
        self._new_cloud()

    def _prior_noise(self, N):
        if self.zdd_range is not None:
            lo, hi = self.zdd_range
            return lo + (hi - lo) * self.rng.random((N, self.g)) - self.qdd[:N, self.iz]
        if self.adapted or self.sigma_a == 0.0:
            return np.zeros((N, self.g))
        return self.sigma_a * self.rng.standard_normal((N, self.g))

    def _init_uniform(self):
        self._set(*self._draw_uniform(self.N_init))
        self._propose = True
        self._anneal_from = self.t
        self._uniform_from = self.t  # the gate waits GATE_GRACE (pf_update)

    def _init_gaussian(self, init: InitialState):
        N, g = self.N_track, self.g
        z0 = np.asarray(init.z, dtype=float).reshape(g)
        zd0 = np.asarray(init.zd, dtype=float).reshape(g)
        sz = np.broadcast_to(np.asarray(init.sigma_z, dtype=float), (g,))
        szd = np.broadcast_to(np.asarray(init.sigma_zd, dtype=float), (g,))
        branch = init.branch
        if branch is None and init.q_hint is not None:
            lab = self._labels_of_codes(self.atlas.codes_of(np.asarray(init.q_hint, float)[None]))[0]
            branch = int(lab) if lab >= 0 else None
        labels = np.full(N, int(branch), dtype=np.int64) if branch is not None else self.branches[self.rng.integers(0, self.branches.size, N)]
        z, q = np.empty((N, g)), np.empty((N, self.n))
        todo = np.arange(N)
        for _ in range(50):
            z[todo] = z0 + sz * self.rng.standard_normal((todo.size, g))
            qq, ok = self.atlas.assemble(z[todo], labels[todo], self.rng, t=self.t)
            q[todo[ok]] = qq[ok]
            todo = todo[~ok]
            if todo.size == 0:
                break
        else:
            raise ValueError(f"the gaussian initial state z = {z0.tolist()} cannot be assembled on branch {branch}")
        self._set(q, zd0 + szd * self.rng.standard_normal((N, g)), labels)

    def _labels_of_codes(self, codes):
        pos = np.clip(np.searchsorted(self._codes_sorted, codes), 0, self._codes_sorted.size - 1)
        return np.where(self._codes_sorted[pos] == codes, self._codes_label[pos], -1)

    def _recover(self, reason: str):
        """Re-initialise from the uniform prior (counted)."""
        self.counts["recoveries"] += 1
        self.recovery_reasons[reason] += 1
        self._init_uniform()

    def rebase(self, t: float) -> None:
        shift = float(t) - self.t
        super().rebase(t)
        self.lost.shift(shift)
        self.lock.shift(shift)
        if self._uniform_from is not None:  # the gate's grace and the annealing keep their age
            self._uniform_from += shift
        if self._anneal_from is not None:
            self._anneal_from += shift

    def reacquire(self, inflation: float) -> None:
        """The stage's gate rejected every reading for a while: re-initialise (uniform prior)."""
        self._recover("gate")

    # -- Algorithm 1: prediction ---------------------------------------------------------------
    def predict(self, dt: float) -> None:
        """Lines 2-4: integrate every particle over dt (see the module docstring)."""
        if self.adapted and self._pending is not None and self.sigma_a > 0:  # no reading took the noise
            self._impulse(self.sigma_a * self.rng.standard_normal((self.N, self.g)), self._pending)
        extra = None if self.adapted else self.v
        st = self._propagate(dt, extra)
        if st is not self.propagator.last:  # a subclass's own proposal (vipf): its context, if any
            self.propagator.adopt(st.aux, self.N)
        self.t += dt
        self._last_dt = float(dt)
        q, qd, qdd = st.q, st.qd, st.qdd
        ok = np.asarray(st.ok, dtype=bool)
        if not ok.all() or not (np.isfinite(q).all() and np.isfinite(qd).all() and np.isfinite(qdd).all()):
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
        self._follow_predict(dt)

    def _propagate(self, dt: float, extra=None) -> MBState:
        """The deterministic part of the proposal: every particle integrated over dt
        (subclasses change it, e.g. :class:`mbde_core.estimators.particle.vipf.VIParticleFilter`)."""
        return self.propagator.step(self.t, self.q, self.qd, self.qdd if self._fresh else None, dt, extra)

    def _impulse(self, v, dt, Rc=None):
        """Apply the acceleration noise v (N, g) of the last step as its velocity impulse
        (Rc: the columns of R at q, if known)."""
        Rc = prop.r_columns(self.mech, self.q, self._aux) if Rc is None else Rc
        self.qd = self.qd + prop.velocity_impulse(Rc, dt * v)
        self.v = v
        self._fresh, self._pending = False, None

    def _replace_failed(self, ok):
        bad = np.nonzero(~ok)[0]
        self.counts["propagation_failures"] += int(bad.size)
        good = np.nonzero(ok)[0]
        if good.size == 0:  # nothing left to copy: always re-initialised (even with recovery off)
            self._recover("propagation")
            return
        lw = self.logw[good]
        p = np.exp(lw - lw.max())
        cdf = np.cumsum(p)
        cdf /= cdf[-1]
        donors = good[np.minimum(np.searchsorted(cdf, self.rng.random(bad.size), side="right"), good.size - 1)]
        extra = np.bincount(donors, minlength=self.N)
        logw = self.logw.copy()
        logw[good] -= np.log1p(extra[good])  # donor weight shared with its copies
        self.q, self.qd, self.qdd, self.v = (np.array(a) for a in (self.q, self.qd, self.qdd, self.v))
        for arr in (self.q, self.qd, self.qdd, self.v):
            arr[bad] = arr[donors]
        self._aux = None  # q edited
        self.label = self.label.copy()
        self.label[bad] = self.label[donors]
        logw[bad] = logw[donors]
        self.logw = logw

    def _check_branches(self):
        codes = self.atlas.codes_of(self.q)
        moved = (codes != self._label_codes[self.label]) & (codes >= 0)
        if moved.any():
            new = self._labels_of_codes(codes[moved])
            idx = np.nonzero(moved)[0][new >= 0]
            if idx.size:
                self.label = self.label.copy()
                self.label[idx] = new[new >= 0]
                self.counts["branch_jumps"] += int(idx.size)
