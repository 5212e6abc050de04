"""PF: particle filter over the dynamic state and the assembly branch (paper 000, Algorithm 1).

Each particle i carries a full multibody state on its own assembly branch: q, qd (n,)
(hence z = q[independent], zd), the model acceleration (qdd), the acceleration noise v
(g,) with zdd = f(z, zd) + v (paper 000 eqs. 11, 13), its branch label B and a
log-weight; everything is (N, ...) arrays, every step vectorised over particles.

One step t -> t + dt (``predict`` then ``update``), Algorithm 1 with the additions that
make it work on any linkage of up to 3 DOF (``mbde bench pf --only multidof``):

1. lines 2-4, ``predict``: every particle integrated over dt (eq. 14; ``integrator``:
   ``rk4`` as in the paper, ``euler``, ``trapezoidal``, or the variational ``midpoint`` /
   ``symplectic_euler`` of paper 002 sec. 3), on its own branch (the position problem
   starts from its own q); failed position problems are replaced by copies of surviving
   particles with their weights split (``propagation_failures``). Large sets run in
   fixed chunks on a thread pool (:mod:`pf_parallel`; results independent of the
   thread count).
2. line 5, ``update``: the noise of the step is drawn *given the readings* --
   ``proposal: adapted`` (default; :mod:`pf_proposal`: the locally optimal proposal of
   Doucet, Godsill & Andrieu 2000, exact for gyroscopes) -- and the weights multiply the
   evidence of the readings; ``proposal: prior`` is the paper's blind draw v ~ N(0,
   sigma_a^2) (eq. 13) and likelihood weights (eq. 10). Any mix of sensors; Sigma_s:
   ``sensor_sigma`` by name, else ``sensor_sigma_by_type``, else the sensor's noise model.
3. lines 7-14: normalisation in log space (log-sum-exp), ESS = 1 / sum w_i^2, selective
   resampling when ESS < ``resampling.ess_threshold`` N (:mod:`resampling`, systematic by
   default); a set enlarged by a uniform (re)initialisation shrinks to ``particles`` by
   KLD-sampling (Fox 2003: n = n_KLD(k) for the k occupied (z, zd, B) bins, bound
   KLD_EPSILON at 99 %); then the copies are regularised (:mod:`pf_regularise`, the
   post-regularised PF of Musso, Oudjane & Le Gland 2001, kernel moves that keep each
   particle assembled on its branch and consistent with the velocity readings).

Initialisation (``init``): ``uniform`` (eq. 22, the default): z ~ U(``uniform.z``) (angles:
the circle), zd ~ U(``uniform.zd``), B ~ U(``uniform.branches``), placed by the branch atlas
of :mod:`pf_init`, with ``uniform.particles`` particles (dimension-aware, :mod:`pf_scale`);
the first update draws z from the position readings (encoders: iterated-EKF proposal per
particle) and zd from the velocity readings (gyroscopes: Kalman conditional given z),
importance-weighted (:mod:`pf_proposal`). ``gaussian``: z ~ N(z0, sigma_z), zd ~ N(zd0,
sigma_zd) around the given InitialState, on its branch (or its q hint's, or uniform).

Defaults from the mechanism (:mod:`pf_scale`): sigma_a = 0.1 x RMS model acceleration at
rest, the velocity range from the potential-energy bound, 100 particles per DOF while
tracking; paper 000's Table 1 values are config/estimators/pf_table1.yaml.

Recovery (:mod:`pf_lock`): *lost* (every likelihood underflowing or ESS < 5 % N for most
of ``recovery.time``): re-initialisation from the uniform prior; *locked* (mean NIS per
degree of freedom above ``recovery.lock_nis`` for ``recovery.lock_time``): fresh uniform
particles proposed from the readings are injected with ``recovery.inject`` of the
weight, and the readings decide. Branch check (``branch_check``): a particle whose
position problem converged on another assembly (near singular configurations) is
relabelled (``branch_jumps``). Gating (``gate``, 0 = off; :mod:`pf_gate`); stage
re-acquisition (:meth:`reacquire`): uniform re-initialisation (reason ``gate``).

Outputs (:mod:`pf_outputs`): weighted mean (eq. 19, circular for angles), covariance of
[z, zd] (PSD by construction), branch probabilities (eq. 20), ``interval(p)``,
``particles()`` (mbde_msgs/ParticleSet), ``diagnostics()``.
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.engine import dynamics, kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.errors import ConfigError
from mbde_core.estimators import pf_proposal as prop
from mbde_core.estimators import pf_regularise as reg
from mbde_core.estimators import pf_scale
from mbde_core.estimators.base import Estimator, InitialState, UpdateResult
from mbde_core.estimators.chi2 import chi2_ppf
from mbde_core.estimators.pf_config import DEFAULTS, LOG_UNDERFLOW, check_config, ranges
from mbde_core.estimators.pf_gate import kernel_whitening, predictive_d2
from mbde_core.estimators.pf_init import atlas_for, sample_uniform
from mbde_core.estimators.pf_lock import LockDetector, LostDetector
from mbde_core.estimators.pf_outputs import ParticleOutputs, wsum
from mbde_core.estimators.pf_parallel import Propagator
from mbde_core.estimators.resampling import effective_sample_size, resample

__all__ = ["ParticleFilter", "check_config", "DEFAULTS", "LOG_UNDERFLOW"]


class _Reading:
    """One accepted reading and the cloud's predictions of it."""

    __slots__ = ("m", "s", "pred", "r", "R", "W", "C", "y")

    def __init__(self, m, s, pred, r, R, W, C, y):
        self.m, self.s, self.pred, self.r, self.R, self.W, self.C, self.y = m, s, pred, r, R, W, C, y


def _velocity_linear(s) -> bool:
    return bool(getattr(s, "uses_qd", False)) and not s.uses_qdd


def _position_only(s) -> bool:
    return not getattr(s, "uses_qd", False) and not s.uses_qdd


class ParticleFilter(ParticleOutputs, Estimator):
    """Particle filter over (z, zd, zdd, B) (see the module docstring).

    Parameters: mech (the filter's model), sensors (SensorSet), config (options, see
    ``DEFAULTS`` and config/estimators/pf.yaml), rng (numpy Generator: all randomness).
    State arrays (N particles): q, qd, qdd (N, n), v (N, g), label (N,), logw (N,).
    """

    name = "pf"
    tracks_branches = True
    SUPPORTS_DRIVERS = True  # every kinematic problem is solved at the filter's time
    USES_COMMON = False  # no Kalman plant noise / transition Jacobian
    LOCAL = False  # re-acquires globally by itself (uniform re-initialisation)
    KLD_BIN_Z = 0.02        # [rad] for angles (x length scale for lengths)
    KLD_BIN_ZD = 0.2        # [rad/s] (x length scale for lengths)
    KLD_EPSILON = 0.05
    KLD_QUANTILE = 2.326    # z_{1 - delta}, delta = 0.01
    ANNEAL_START = 0.1      # tempering exponent of the first update after a uniform start
    WILD_SIGMAS = 10.0      # an adapted noise beyond this many sigma_a falls back to its prior
    DEFAULTS = DEFAULTS

    @staticmethod
    def validate_config(cfg, file, path):
        check_config(cfg, file, path)

    def __init__(self, mech, sensors, config, rng=None):
        super().__init__(mech, sensors, config, rng)
        cfg = config
        check_config(cfg, "<config>", "pf", mech.dof)
        self.g = g = mech.dof
        self.n = mech.n
        self.iz = mech.independent
        self.angular = np.isin(self.iz, mech.rel_columns)
        self.integrator = get_integrator(cfg["integrator"])
        uni = cfg["uniform"]
        zr = ranges(uni["z"], g, "<config>", "pf.uniform.z")
        if zr is None:
            z0 = mech.q0[self.iz]
            zr = (np.where(self.angular, -np.pi, z0 - mech.length_scale), np.where(self.angular, np.pi, z0 + mech.length_scale))
        self.z_lo, self.z_hi = zr
        nodes = 72 if g == 1 else max(4, int(round(400 ** (1.0 / g))))
        self.atlas = atlas_for(mech, self.z_lo, self.z_hi, self.angular, nodes)
        self.branches = np.array(uni["branches"] or self.atlas.labels.tolist(), dtype=np.int64)
        unknown = sorted(set(self.branches.tolist()) - set(self.atlas.labels.tolist()))
        if unknown:
            raise ConfigError("<config>", "pf.uniform.branches",
                              f"branch label(s) {unknown} do not exist for {mech.name} (found {self.atlas.labels.tolist()})")
        self.K = int(self.atlas.labels.max()) + 1
        self._label_codes = self.atlas.label_codes()
        order = np.argsort(self.atlas.codes)
        self._codes_sorted, self._codes_label = self.atlas.codes[order], self.atlas.labels[order]
        self.scales = pf_scale.mechanism_scales(mech, self.atlas)
        sa = cfg["acceleration_sigma"]
        self.sigma_a = float(pf_scale.acceleration_sigma(self.scales) if sa is None else sa)
        zdr = ranges(uni["zd"], g, "<config>", "pf.uniform.zd")
        self.zd_lo, self.zd_hi = pf_scale.velocity_range(self.scales) if zdr is None else zdr
        self.zdd_range = ranges(uni["zdd"], g, "<config>", "pf.uniform.zdd")
        n_track = cfg.get("particles")
        self.N_track = self.N = int(pf_scale.tracking_particles(g) if n_track is None else n_track)
        n_init = uni.get("particles")
        if n_init is None:
            n_init = pf_scale.initial_particles(g, len(self.branches), list(sensors))
        self.N_init = max(int(n_init), self.N_track)
        self.adapted = cfg.get("proposal", "adapted") == "adapted"
        regc = cfg.get("regularisation", DEFAULTS["regularisation"])
        self.reg_factor = float(regc["bandwidth"]) if regc.get("enabled", True) else 0.0
        self._sensor_noise = {}
        self.counts = {"resamples": 0, "updates": 0, "recoveries": 0, "propagation_failures": 0, "branch_jumps": 0,
                       "locks": 0, "regularised": 0}
        self.recovery_reasons = {"likelihood": 0, "ess": 0, "propagation": 0, "gate": 0, "lock": 0}
        self._ess_sum = 0.0
        self.ess_threshold = float(cfg["resampling"]["ess_threshold"])
        self.scheme = cfg["resampling"]["scheme"]
        rec = cfg["recovery"]
        self.recovery = bool(rec["enabled"])
        self.ll_floor = float(rec["log_likelihood_floor"])
        self.collapse_fraction = float(rec["ess_fraction"])
        self.lost = LostDetector(rec["time"])
        self.lock = LockDetector(rec.get("lock_nis", 0.0) if self.recovery else 0.0, rec.get("lock_time", 1.0))
        self.inject = float(rec.get("inject", 0.5))
        an = uni.get("anneal")
        self.anneal = pf_scale.anneal_time(g) if an is None else float(an)
        self.branch_check = bool(cfg.get("branch_check", True))
        self.default_gate = float(cfg.get("gate", 0.0) or 0.0)  # when update() is given no gates
        self._last_dt = float(cfg.get("step", 0.005))
        self._kernel = None
        nt = cfg.get("threads")
        self.propagator = Propagator(self.integrator, mech, threads=None if nt is None else int(nt))
        self._alloc()

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
            by_name = self.config.get("sensor_sigma") or {}
            by_type = self.config.get("sensor_sigma_by_type") or {}
            if name in by_name:
                R = np.eye(s.dim) * float(by_name[name]) ** 2
            elif by_type.get(s.kind) is not None:
                R = np.eye(s.dim) * float(by_type[s.kind]) ** 2
            else:  # the noise model (accelerometers: plus the model-error term of pf_scale)
                R = pf_scale.sensor_covariance(s, self.mech)
            self._sensor_noise[name] = (R, np.linalg.inv(np.linalg.cholesky(R)))
        return self._sensor_noise[name]

    # -- initialisation ------------------------------------------------------------------------
    def reset(self, t: float, init: InitialState) -> None:
        """Draw the initial particle set at time t (``init`` option: uniform or gaussian)."""
        self.t = float(t)
        self._alloc()
        if self.config["init"] == "gaussian" and init is not None:
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
        self.lost.restart(self.t)
        self.lock.restart(self.t)

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

    def _temper(self, ll):
        """The annealed likelihood of the first ``uniform.anneal`` seconds after a uniform
        (re)initialisation: ll x beta, beta rising linearly from ANNEAL_START to 1."""
        T = self.anneal
        if self._anneal_from is None or not T > 0:
            return ll
        beta = (self.t - self._anneal_from) / T
        if beta >= 1.0:
            self._anneal_from = None
            return ll
        return ll * max(beta, self.ANNEAL_START)

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

    def _propagate(self, dt: float, extra=None) -> MBState:
        """The deterministic part of the proposal: every particle integrated over dt
        (subclasses change it, e.g. :class:`mbde_core.estimators.vipf.VIParticleFilter`)."""
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

    def _accelerations(self):
        """qdd of every particle including its acceleration noise: R (f + v) + R'zd."""
        zdd = self.qdd[:, self.iz] + self.v
        return kinematics.acceleration(self.mech, self.q, self.qd, zdd, t=self.t)

    # -- Algorithm 1: update -------------------------------------------------------------------
    def _readings(self, measurements, gates):
        """The cloud's predictions of each reading; gated readings are rejected."""
        if gates is None:  # not driven by a stage: the ``gate`` option
            gates = {}
            if self.default_gate > 0:
                gates = {s.name: float(chi2_ppf(self.default_gate, s.dim)) for s in self.sensors}
        w = self.weights()
        n_eff = 1.0 / float(np.einsum("n,n->", w, w))
        qdd_full = None
        out, rejected = [], []
        for m in measurements:
            s = self.sensors[m.sensor]
            if s.uses_qdd and qdd_full is None:
                qdd_full = self._accelerations()
            qdd = qdd_full if s.uses_qdd else self.qdd
            lag = float(m.stamp) - self.t
            if abs(lag) > 1e-9 and not s.uses_qdd:  # a reading of the slot, not of its time
                q = self.q + lag * self.qd + (0.5 * lag * lag) * qdd
                pred = s.h(q, self.qd + lag * qdd, qdd)
            else:
                pred = s.h(self.q, self.qd, qdd)  # (N, d)
            R, W = self._noise(m.sensor)
            value = np.asarray(m.value, dtype=float)
            mean = wsum(w, pred)
            if s.angular.any():
                mean = np.where(s.angular, np.arctan2(wsum(w, np.sin(pred)), wsum(w, np.cos(pred))), mean)
            dev = s.residual(pred, mean[None, :])
            C = np.einsum("n,ni,nj->ij", w, dev, dev)
            r = s.residual(value[None, :], pred)
            limit = gates.get(m.sensor)
            if limit is not None and limit > 0:
                Wg = kernel_whitening(R, C, n_eff)
                eg = r @ Wg.T
                if not predictive_d2(-0.5 * np.einsum("ij,ij->i", eg, eg), self.logw, pred, s.residual, Wg, limit) <= limit:
                    rejected.append(m.sensor)
                    continue
            out.append(_Reading(m, s, pred, r, R, W, C, s.residual(value, mean)))
        return out, rejected

    def log_likelihood(self, measurements, gates=None):
        """Per-particle log-likelihood of the readings at the current states (eq. 10),
        with gating: (ll (N,), accepted names, rejected names, innovations, their S)."""
        rd, rejected = self._readings(measurements, gates)
        ll = np.zeros(self.N)
        for x in rd:
            e = x.r @ x.W.T
            ll -= 0.5 * np.einsum("ij,ij->i", e, e)
        return ll, [x.m.sensor for x in rd], rejected, [x.y for x in rd], [x.C + x.R for x in rd]

    def _adapted_weights(self, rd):
        """log-evidence (N,) of the readings, drawing the step's noise (pf_proposal), and the
        noise term of each reading's predictive covariance."""
        N, g = self.N, self.g
        dt = self._pending or 0.0
        if not (self.adapted and self.sigma_a > 0):
            ll = np.zeros(N)
            for x in rd:
                e = x.r @ x.W.T
                ll -= 0.5 * np.einsum("ij,ij->i", e, e)
            return ll, [np.zeros_like(x.R) for x in rd]
        Rc = prop.r_columns(self.mech, self.q, self._aux)
        qdd_full = None
        yws, Gws, extra = [], [], []
        w = self.weights()
        s2 = self.sigma_a**2
        for x in rd:
            if x.s.uses_qdd and qdd_full is None:
                qdd_full = self._accelerations()
            G = prop.noise_jacobian(x.s, self.q, self.qd, qdd_full if x.s.uses_qdd else self.qdd, Rc, dt)
            yws.append(x.r @ x.W.T)
            Gws.append(np.einsum("ij,njg->nig", x.W, G))
            extra.append(s2 * np.einsum("n,ndg,nkg->dk", w, G, G))
        yw, Gw = np.concatenate(yws, axis=1), np.concatenate(Gws, axis=1)
        bad = ~(np.isfinite(yw).all(axis=1) & np.isfinite(Gw).all(axis=(1, 2)))
        if bad.any():
            yw[bad], Gw[bad] = 0.0, 0.0
        v, ll = prop.adapted_noise(self.sigma_a, yw, Gw, self.rng)
        ll[bad] = -np.inf
        # a reading that only an absurd noise could explain (an outlier, a particle far off)
        # must not drag the state: such particles draw v from its prior (their weight is
        # ~exp(-50) of the others' anyway)
        wild = bad | ~(np.abs(v).max(axis=1) <= self.WILD_SIGMAS * self.sigma_a)
        if wild.any():
            v[wild] = self.sigma_a * self.rng.standard_normal((int(wild.sum()), g))
        if dt > 0:
            self._impulse(v, dt, Rc)
        else:
            self.v, self._pending = v, None
        return ll, extra

    def _fresh_weights(self, rd):
        """Weights (N,) of a freshly drawn uniform set at its first readings: position and
        velocity proposals (pf_proposal), then the other readings' evidence."""
        uni = self.config["uniform"]
        ll = np.zeros(self.N)
        used = set()
        pos = [x for x in rd if _position_only(x.s)]
        if pos and uni.get("position_proposal", True):
            sigma0 = np.maximum((self.z_hi - self.z_lo) / math.sqrt(12.0), 1e-9)  # the prior's own spread
            q, lp = prop.position_proposal(self.mech, self.sensors, self._noise, self.atlas, self.q, self.label,
                                           sigma0, self.t, self.rng, [x.m for x in pos])
            zd = self.qd[:, self.iz]
            self.q, self.qd = q, kinematics.velocity(self.mech, q, zd, t=self.t)
            ll += lp
            used |= {x.m.sensor for x in pos}
        vel = [x for x in rd if _velocity_linear(x.s)]
        if vel and uni.get("velocity_proposal", True):
            zd, lv = prop.velocity_proposal(self.mech, self.sensors, self._noise, self.q, self.zd_lo, self.zd_hi,
                                            self.t, self.rng, [x.m for x in vel])
            self.qd = kinematics.velocity(self.mech, self.q, zd, t=self.t)
            ll += lv
            used |= {x.m.sensor for x in vel}
        if used:
            self.qdd = prop.model_accelerations(self.mech, self.t, self.q, self.qd)
            self._fresh = True
            self.propagator.drop()
        rest = [m for m in (x.m for x in rd) if m.sensor not in used]
        if rest:
            rd2, _ = self._readings(rest, {})
            ll2, _ = self._adapted_weights(rd2)
            ll = ll + ll2
        return np.where(np.isnan(ll), -np.inf, ll)

    def update(self, measurements, gates=None) -> UpdateResult:
        """Line 5 (proposal and weights), lines 7-14 (normalise, ESS, resample, regularise)."""
        rd, rejected = self._readings(measurements, gates)
        if not rd:
            return UpdateResult([], rejected)
        accepted = [x.m.sensor for x in rd]
        self.counts["updates"] += 1
        if self._propose:
            self._propose = False
            ll = self._fresh_weights(rd)
            extra = [np.zeros_like(x.R) for x in rd]
        else:
            ll, extra = self._adapted_weights(rd)
            ll = np.where(np.isnan(ll), -np.inf, ll)
        self._vel_readings = [x.m for x in rd if _velocity_linear(x.s) or _position_only(x.s)]
        y = np.concatenate([x.y for x in rd])
        S = prop.block_diag([x.C + x.R + e for x, e in zip(rd, extra)])
        try:
            Ls = np.linalg.cholesky(S)
            e = np.linalg.solve(Ls, y)
            nis = float(e @ e)
            logdet = float(2.0 * np.log(np.diagonal(Ls)).sum())
        except np.linalg.LinAlgError:
            nis, e, logdet = None, None, None
        result = UpdateResult(accepted, rejected, nis, int(y.size), y, e, logdet)
        underflow = not ll.max() >= self.ll_floor
        ess, w = self._normalise(self._temper(ll))
        collapse = ess is None or ess < self.collapse_fraction * self.N
        if self.recovery and self.lost(self.t, underflow or collapse):
            self._recover("likelihood" if underflow else "ess")
            rd2, _ = self._readings([x.m for x in rd], {})
            self._propose = False
            ll = self._fresh_weights(rd2)
            if ll.max() >= self.ll_floor:  # else the new uniform set stays unweighted
                self._normalise(ll)
            return result
        if self.lock(self.t, nis, int(y.size)):
            self._inject([x.m for x in rd])
            w = self.weights()
            ess = effective_sample_size(w)
        if ess is not None and ess < self.ess_threshold * self.N:
            self._resample(w, ess)
        return result

    def _normalise(self, ll):
        """Lines 7-11: log w += ll, normalised in log space; (ESS, w) or (None, None) when
        every weight is exactly zero (the prior weights then stay)."""
        logw = self.logw + ll
        top = logw.max()
        if not np.isfinite(top):
            return None, None
        e = np.exp(logw - top)
        total = float(np.sum(e))
        self.logw = logw - (top + math.log(total))
        w = e / total
        self._w = w
        ess = effective_sample_size(w)
        self.ess_before = ess
        self._ess_sum += ess
        return ess, w

    def _inject(self, measurements):
        """The lock's remedy (pf_lock): add fresh uniform particles proposed from the
        readings with ``recovery.inject`` of the total weight."""
        self.counts["locks"] += 1
        self.recovery_reasons["lock"] += 1
        old = (self.q, self.qd, self.qdd, self.v, self.label, self.logw, self._fresh)
        M = max(self.N_init // 2, 1)
        lost = (list(self.lost.hist), self.lost.since)  # the injection does not restart the lost test
        self._set(*self._draw_uniform(M))
        self.lost.hist.extend(lost[0])
        self.lost.since = lost[1]
        rd, _ = self._readings(measurements, {})
        ll = self._fresh_weights(rd)
        top = ll.max()
        a = self.inject
        if not np.isfinite(top):
            lw_new = np.full(M, -np.inf)
        else:
            lw_new = ll - (top + math.log(np.sum(np.exp(ll - top)))) + math.log(a)
        new = (self.q, self.qd, self.qdd, self.v, self.label)
        self.q, self.qd, self.qdd, self.v, self.label = (np.concatenate([o, n]) for o, n in zip(old[:5], new))
        self.N = self.q.shape[0]
        self.logw = np.concatenate([old[5] + math.log(1.0 - a) if a < 1 else np.full(len(old[5]), -np.inf), lw_new])
        self._fresh = False  # the old particles' qdd may be stale: recompute at the next step
        self._unique = self.N
        self.propagator.drop()
        self.lock.restart(self.t)

    def _kernel_floor(self) -> np.ndarray:
        """The regularisation kernel's floor (pf_regularise.kernel_floor), cached per step."""
        key = (self._last_dt, self.sigma_a)
        if getattr(self, "_floor", None) is None or self._floor[0] != key:
            scale = np.where(self.angular, 1.0, self.mech.length_scale)
            self._floor = (key, reg.kernel_floor(self.g, self._last_dt, self.sigma_a, self.KLD_BIN_Z * scale,
                                                 self.KLD_BIN_ZD * scale))
        return self._floor[1]

    def _kld_size(self, idx) -> int:
        """Particles needed for the resampled set idx (KLD-sampling bound on its occupied bins)."""
        scale = np.where(self.angular, 1.0, self.mech.length_scale)
        zb = np.floor(self.z[idx] / (self.KLD_BIN_Z * scale)).astype(np.int64)
        zdb = np.floor(self.zd[idx] / (self.KLD_BIN_ZD * scale)).astype(np.int64)
        keys = np.hstack([zb, zdb, self.label[idx, None]])
        # one int64 per row (a hash of the bin; collisions only merge bins: k is a lower bound)
        h = np.zeros(keys.shape[0], dtype=np.uint64)
        for col in keys.T:
            h = h * np.uint64(1000003) + col.astype(np.uint64)
        k = len(np.unique(h))
        if k <= 1:
            return 1
        a = 2.0 / (9.0 * (k - 1))
        return int(math.ceil((k - 1) / (2.0 * self.KLD_EPSILON) * (1.0 - a + math.sqrt(a) * self.KLD_QUANTILE) ** 3))

    def _resample(self, w, ess):
        """Lines 12-14, then the regularisation of the copies (pf_regularise). A set
        enlarged by a uniform (re)initialisation shrinks towards ``particles`` by
        KLD-sampling: n = clip(n_KLD(occupied bins), particles, N)."""
        C = None
        if self.reg_factor > 0:
            zm = np.empty((self.K, self.g))
            dev = np.empty((self.N, self.g))
            for b in np.unique(self.label):
                sel = self.label == b
                wb = w[sel] / max(w[sel].sum(), 1e-300)
                zb = self.z[sel]
                m = wb @ zb
                if self.angular.any():
                    m[self.angular] = np.arctan2(wb @ np.sin(zb[:, self.angular]), wb @ np.cos(zb[:, self.angular]))
                d = zb - m
                d[:, self.angular] = (d[:, self.angular] + np.pi) % (2 * np.pi) - np.pi
                dev[sel] = d
            floor = self._kernel_floor()
            C = reg.branch_covariances(dev, self.zd, w, self.label, self.K, floor)
        idx = resample(self.scheme, w, self.rng)
        n = self.N
        if n > self.N_track:
            n = int(min(n, max(self.N_track, self._kld_size(idx))))
            if n < self.N:
                idx = resample(self.scheme, w, self.rng, n)
        self.q, self.qd, self.qdd, self.v = self.q[idx], self.qd[idx], self.qdd[idx], self.v[idx]
        self.propagator.take(idx)
        self.label = self.label[idx]
        self._unique = self._unique_resampled = int(np.count_nonzero(np.bincount(idx, minlength=self.N)))
        self.N = n
        self.logw = np.full(n, -math.log(n))
        self.counts["resamples"] += 1
        if C is not None:
            move = reg.duplicates(idx)
            h = reg.bandwidth(n, self.g, self.reg_factor)
            moved = reg.regularise(self, move, C, h, self._vel_readings)
            if moved:
                self.counts["regularised"] += moved
                self._aux = None
                self._fresh = False
