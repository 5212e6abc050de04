"""PF: SIR particle filter over the dynamic state and the assembly branch (paper 000, Algorithm 1).

Each particle i carries a full multibody state on its own assembly branch: q, qd (n,)
(hence z = q[independent], zd), the model acceleration f(z, zd) (as qdd), the drawn
acceleration noise v (g,) so that zdd = f(z, zd) + v (eqs. 11, 13), its branch label B
and a log-weight. Everything is stored as (N, ...) arrays and every step is vectorised
over particles (no Python loop over particles).

Algorithm 1 (MBD_SIR), one filter step t -> t + dt (``predict`` then ``update``):

1. lines 2-4, ``predict``: x_{t+1} <- numerical integration of x_t with zdd_t = f(x_t) + v_t
   (eq. 14; the engine integrator named by ``integrator``: ``rk4`` as in the paper,
   ``euler``, ``trapezoidal``, or the variational ``midpoint`` / ``symplectic_euler`` of
   paper 002 sec. 3, which add no artificial diffusion and so reduce particle
   deprivation), then a new acceleration sample zdd_{t+1} = f(x_{t+1}) + v_{t+1},
   v ~ N(0, sigma_a^2 I) (eq. 13). The branch B is not changed: the position problem of
   the integrator starts from each particle's own predicted q. Particles whose position
   problem fails are dropped and replaced by copies of surviving particles with their
   weights split (the weighted set is unchanged), counted in ``propagation_failures``.
2. line 5, ``update``: log w_i += log p(o_t | zdd_i, x_i, B_i) = -1/2 r_i^T Sigma_s^-1 r_i
   (eq. 10, constants dropped), r_i = o_t - h(q_i, qd_i, qdd_i) with angle channels
   wrapped; any mix of sensors (all readings of the step are multiplied in), h batched
   over (N, n). Sigma_s: ``sensor_sigma`` by sensor name, else ``sensor_sigma_by_type``,
   else the sensor's noise model (paper 000 Table 1 inflates the gyro's 0.3 deg/s to
   1 deg/s against sample impoverishment).
3. lines 7-10: normalisation in log space (log-sum-exp), so no underflow can empty the
   filter; line 11: ESS = 1 / sum w_i^2; lines 12-14: selective resampling when
   ESS < ``resampling.ess_threshold`` N with the ``resampling.scheme`` of
   :mod:`resampling` (systematic by default).

Initialisation (``init``): ``uniform`` (eq. 22, the default): z ~ U(``uniform.z``) (angles:
the whole circle by default), zd ~ U(``uniform.zd``), zdd ~ U(``uniform.zdd``) (empty:
f(x) + v), B ~ U(``uniform.branches``) (empty: every branch of the mechanism), placed by
the branch atlas of :mod:`pf_init`; ``gaussian``: z ~ N(z0, sigma_z), zd ~ N(zd0,
sigma_zd) around the given InitialState, on its branch (or its q hint's, or uniform).

Two additions to the paper make the uniform start reliable (measured in ``mbde bench
pf``: with the paper's 100 particles alone about half of the runs lock onto a wrong
crank angle or branch, because the gyro signal of the first 0.1 s pins the crank angle
to ~0.5 deg, far below the spacing of 100 particles on the circle):

- ``uniform.particles`` (default 3000): a uniform (re)initialisation draws this many
  particles; every resampling of an enlarged set shrinks it by KLD-sampling (Fox 2003):
  to max(``particles``, n_KLD(k)) with k the number of occupied (z, zd, B) bins of the
  resampled set (bins KLD_BIN_Z x KLD_BIN_ZD, error bound KLD_EPSILON at 99 %), so
  once the posterior has concentrated (after ~0.1 s on pf_sim) the filter runs with
  ``particles`` again;
- ``uniform.velocity_proposal`` (default true): at the first update after a uniform
  (re)initialisation, each particle's zd is drawn from p(zd | z, B, o) of the readings
  that are linear in qd (gyroscopes) instead of the velocity prior, and weighted by
  p(o | z, B) (importance sampling with the locally optimal proposal, see
  :meth:`ParticleFilter._velocity_proposal`): every particle then agrees with the
  first reading, whatever its z and B, instead of one in a thousand.

Outputs (``estimate``): the weighted mean of eq. 19 with the circular mean for angle
coordinates (footnote 6: average the unit vectors, project back on the circle), the
weighted covariance of [z, zd] (angle deviations wrapped about the circular mean), the
branch probabilities P(B = b_k) = sum of the weights of the particles on b_k (eq. 20)
and the most probable branch; q, qd, qdd of the snapshot are the mean (z, zd, zdd)
assembled on that branch. ``interval(p)`` gives the central p-interval of z and zd
(weighted quantiles; 0.95 for Fig. 7), ``particles()`` the weighted particle set
(mbde_msgs/ParticleSet), ``diagnostics()`` ESS, unique particles, resamplings and
recoveries.

Recovery: the filter is *lost* at an update when every particle's log-likelihood of
the readings is below ``recovery.log_likelihood_floor`` (default -745: exp() underflows
to 0 for all of them, every hypothesis is more than ~38 sigma off) or the ESS before
resampling is below ``recovery.ess_fraction`` N. Weights live in log space, so a lost
update still ranks the particles and the filter often comes back by itself (unmodelled
friction does this on the rig); when more than half of the updates of the last
``recovery.time`` seconds were lost (0: at the first lost update) it re-initialises
from the uniform prior (whatever ``init`` says), re-weights with the current readings,
and counts it in ``diagnostics()`` (``recovery.enabled: false`` disables this; a set of
which no particle survives the propagation is always re-initialised).

Branch check (``branch_check``): after each prediction the orientation signature of
every particle's q is compared with its label; a particle whose position problem
converged on the other assembly (possible only near singular configurations) is
relabelled and counted in ``branch_jumps``.

Gating (``gate``, a chi-square probability per reading, 0 = off; default 0.999999 as the
Kalman observers', with the stage's adaptive scale, see :mod:`pf_gate`; or the stage's gates): the
likelihood gate of :mod:`pf_gate` (the Mahalanobis gate of the Kalman observers for a
particle predictive density) rejects outliers; the NIS of each update uses the
particle-predicted mean and covariance of the readings (S = their weighted covariance +
Sigma_s). Re-acquisition (:meth:`reacquire`, when the stage's gate keeps rejecting):
re-initialisation from the uniform prior, counted in ``recoveries`` (reason ``gate``).
"""
from __future__ import annotations

import collections
import math

import numpy as np
import scipy.stats

from mbde_core.engine import dynamics, kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.errors import ConfigError
from mbde_core.estimators.base import Estimator, InitialState, UpdateResult
from mbde_core.estimators.noise import kinematic_plant_noise
from mbde_core.estimators.pf_gate import kernel_whitening, predictive_d2
from mbde_core.estimators.pf_init import atlas_for, sample_uniform
from mbde_core.estimators.resampling import SCHEMES, effective_sample_size, resample
from mbde_core.expr import ExpressionError, evaluate_value
from mbde_core.sensors.base import wrap_angle
from mbde_core.types import MechanismSnapshot, ParticleCloud

PF_INTEGRATORS = ("rk4", "euler", "trapezoidal", "midpoint", "symplectic_euler")
INIT_MODES = ("uniform", "gaussian")
SENSOR_TYPES = ("encoder", "gyroscope", "accelerometer", "slider_position", "imu")
LOG_UNDERFLOW = -745.0  # log of the smallest positive double (4.9e-324)


def _ranges(value, g: int | None, file: str, where: str):
    """Parse a range option: [] (default: None), [lo, hi] (every coordinate) or one
    [lo, hi] pair per independent coordinate. Returns (lo (g,), hi (g,)) or None; with
    g None (DOF unknown) only the form is checked and g is taken from the value."""
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return None

    def num(x, path):
        try:
            v = float(evaluate_value(x, None))
        except (ExpressionError, TypeError, ValueError) as exc:
            raise ConfigError(file, path, f"expected a number, got {x!r} ({exc})") from None
        if not math.isfinite(v):
            raise ConfigError(file, path, f"must be finite, got {v}")
        return v

    form = f"expected [lo, hi] or a list of {g if g is not None else 'g'} [lo, hi] pairs, got {value!r}"
    if not isinstance(value, (list, tuple)):
        raise ConfigError(file, where, form)
    if len(value) == 2 and not any(isinstance(v, (list, tuple)) for v in value):
        pairs, single = [value] * (g or 1), True
    elif all(isinstance(v, (list, tuple)) and len(v) == 2 for v in value) and (g is None or len(value) == g):
        pairs, single = list(value), False
    else:
        raise ConfigError(file, where, form)
    lo, hi = [], []
    for k, (a, b) in enumerate(pairs):
        path = where if single else f"{where}[{k}]"
        a, b = num(a, path), num(b, path)
        if not b >= a:
            raise ConfigError(file, path, f"needs lo <= hi, got [{a:g}, {b:g}]")
        lo.append(a)
        hi.append(b)
    return np.array(lo), np.array(hi)


def check_config(cfg: dict, file: str = "<config>", path: str = "pf", g: int | None = None) -> None:
    """Validate PF options (ConfigError naming file and key path). g: DOF if known."""
    n = cfg.get("particles")
    if not (isinstance(n, (int, float)) and n == int(n) and n >= 1):
        raise ConfigError(file, f"{path}.particles", f"must be an integer >= 1, got {n!r}")
    if cfg["integrator"] not in PF_INTEGRATORS:
        raise ConfigError(file, f"{path}.integrator", f"must be one of {', '.join(PF_INTEGRATORS)}")
    if not cfg["acceleration_sigma"] >= 0:
        raise ConfigError(file, f"{path}.acceleration_sigma", f"must be >= 0, got {cfg['acceleration_sigma']}")
    if cfg["init"] not in INIT_MODES:
        raise ConfigError(file, f"{path}.init", f"must be one of {', '.join(INIT_MODES)}")
    for key, value in cfg["sensor_sigma_by_type"].items():
        if value is not None and not value > 0:
            raise ConfigError(file, f"{path}.sensor_sigma_by_type.{key}", f"must be > 0 (or null), got {value}")
    res = cfg["resampling"]
    if res["scheme"] not in SCHEMES:
        raise ConfigError(file, f"{path}.resampling.scheme", f"must be one of {', '.join(SCHEMES)}")
    if not 0.0 <= res["ess_threshold"] <= 1.0:
        raise ConfigError(file, f"{path}.resampling.ess_threshold", f"a fraction of the particle count in [0, 1], got {res['ess_threshold']}")
    rec = cfg["recovery"]
    if not 0.0 <= rec["ess_fraction"] <= 1.0:
        raise ConfigError(file, f"{path}.recovery.ess_fraction", f"a fraction in [0, 1], got {rec['ess_fraction']}")
    if not rec["time"] >= 0:
        raise ConfigError(file, f"{path}.recovery.time", f"must be >= 0, got {rec['time']}")
    if not rec["log_likelihood_floor"] < 0:
        raise ConfigError(file, f"{path}.recovery.log_likelihood_floor", f"must be < 0, got {rec['log_likelihood_floor']}")
    uni = cfg["uniform"]
    for key in ("z", "zd", "zdd"):
        _ranges(uni[key], g, file, f"{path}.uniform.{key}")
    br = uni["branches"]
    if not isinstance(br, (list, tuple)) or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in br):
        raise ConfigError(file, f"{path}.uniform.branches", f"expected a list of branch labels (integers >= 0), got {br!r}")


class ParticleFilter(Estimator):
    """SIR particle filter over (z, zd, zdd, B) (see the module docstring).

    Parameters: mech (the filter's model), sensors (SensorSet), config (options, see
    ``DEFAULTS`` and config/estimators/pf.yaml), rng (numpy Generator: all randomness).
    State arrays (N particles): q, qd, qdd (N, n), v (N, g), label (N,), logw (N,).
    """

    name = "pf"
    tracks_branches = True
    SUPPORTS_DRIVERS = True  # every kinematic problem is solved at the filter's time
    USES_COMMON = False  # no Kalman plant noise / transition Jacobian
    LOCAL = False  # re-acquires globally by itself (uniform re-initialisation)
    # KLD-sampling (Fox 2003) of an enlarged set at resampling: bins of the (z, zd, B) space,
    # bound epsilon on the K-L divergence with probability 1 - delta (z_{1-delta} = 2.326)
    KLD_BIN_Z = 0.02        # [rad] for angles (x length scale for lengths)
    KLD_BIN_ZD = 0.2        # [rad/s] (x length scale for lengths)
    KLD_EPSILON = 0.05
    KLD_QUANTILE = 2.326
    DEFAULTS = {
        "particles": 100,                 # N (paper 000 Table 1)
        "integrator": "rk4",              # rk4 | euler | trapezoidal | midpoint | symplectic_euler
        "acceleration_sigma": 8.0,        # sigma_a on zdd [rad/s^2 for angles]; 1 m/s^2 / L1 (Table 1)
        "sensor_sigma": {},               # sensor name -> assumed standard deviation [SI]
        "sensor_sigma_by_type": {         # per sensor type; null: the sensor's noise model
            "encoder": None,
            "gyroscope": math.radians(1.0),  # Table 1: 1 deg/s
            "accelerometer": None,
            "slider_position": None,
            "imu": None,
        },
        "init": "uniform",                # uniform (eq. 22) | gaussian (around the given initial state)
        "uniform": {
            "z": [],                      # [lo, hi] or g pairs; []: angles [-pi, pi), others q0 +/- longest body
            "zd": [-40.0, 40.0],          # [unit/s]
            "zdd": [],                    # [unit/s^2]; []: f(z, zd) + N(0, sigma_a^2)
            "branches": [],               # labels; []: every branch found
            "velocity_proposal": True,    # draw zd from the first readings (see module docstring)
            "particles": 3000,            # particles of a uniform (re)initialisation (0: ``particles``)
        },
        "initial_sigma": {"z": 0.05, "zd": 0.5},  # gaussian init: standard deviations [unit], [unit/s]
        "resampling": {"scheme": "systematic", "ess_threshold": 0.5},
        "recovery": {"enabled": True, "log_likelihood_floor": LOG_UNDERFLOW, "ess_fraction": 0.05, "time": 0.5},
        "branch_check": True,             # relabel particles whose q left their branch (counted)
    }

    @staticmethod
    def validate_config(cfg, file, path):
        check_config(cfg, file, path)

    def __init__(self, mech, sensors, config, rng=None):
        super().__init__(mech, sensors, config, rng)
        cfg = config
        check_config(cfg, "<config>", "pf", mech.dof)
        self.N_track = self.N = int(cfg["particles"])
        self.N_init = max(int(cfg["uniform"].get("particles") or 0), self.N_track)
        self.g = g = mech.dof
        self.n = mech.n
        self.iz = mech.independent
        self.angular = np.isin(self.iz, mech.rel_columns)
        self.integrator = get_integrator(cfg["integrator"])
        self.sigma_a = float(cfg["acceleration_sigma"])
        uni = cfg["uniform"]
        zr = _ranges(uni["z"], g, "<config>", "pf.uniform.z")
        if zr is None:
            z0 = mech.q0[self.iz]
            zr = (np.where(self.angular, -np.pi, z0 - mech.length_scale), np.where(self.angular, np.pi, z0 + mech.length_scale))
        self.z_lo, self.z_hi = zr
        self.zd_lo, self.zd_hi = _ranges(uni["zd"], g, "<config>", "pf.uniform.zd") or (np.zeros(g), np.zeros(g))
        self.zdd_range = _ranges(uni["zdd"], g, "<config>", "pf.uniform.zdd")
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
        self._codes_sorted = self.atlas.codes[order]
        self._codes_label = self.atlas.labels[order]
        self._sensor_noise = {}
        self.counts = {"resamples": 0, "updates": 0, "recoveries": 0, "propagation_failures": 0, "branch_jumps": 0}
        self.recovery_reasons = {"likelihood": 0, "ess": 0, "propagation": 0, "gate": 0}
        self._ess_sum = 0.0
        self.ess_threshold = float(cfg["resampling"]["ess_threshold"])
        self.scheme = cfg["resampling"]["scheme"]
        rec = cfg["recovery"]
        self.recovery = bool(rec["enabled"])
        self.ll_floor = float(rec["log_likelihood_floor"])
        self.collapse_fraction = float(rec["ess_fraction"])
        self.collapse_time = float(rec["time"])
        self.branch_check = bool(cfg.get("branch_check", True))
        self.default_gate = float(cfg.get("gate", 0.0) or 0.0)  # when update() is given no gates
        self._last_dt = float(cfg.get("step", 0.005))
        self._kernel = None
        self._alloc()

    def _alloc(self):
        N, n, g = self.N, self.n, self.g
        self.q = np.zeros((N, n))
        self.qd = np.zeros((N, n))
        self.qdd = np.zeros((N, n))
        self.v = np.zeros((N, g))
        self.label = np.zeros(N, dtype=np.int64)
        self.logw = np.full(N, -math.log(N))
        self.ess_before = float(N)
        self._unique = N
        self._unique_resampled = N
        self._lost_hist = collections.deque()
        self._since_init = self.t
        self._propose = False
        self._aux = None  # the integrator's kernel context at q (MBState.aux), reused next step

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
            else:
                R = np.asarray(s.covariance(), dtype=float)
            L = np.linalg.cholesky(R)
            self._sensor_noise[name] = (R, np.linalg.inv(L))
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

    def _finish_init(self, q, zd):
        mech = self.mech
        self.q = q
        self._aux = None
        self.qd = kinematics.velocity(mech, q, zd, t=self.t)
        self.qdd = np.ascontiguousarray(dynamics.evaluate(mech, self.t, q, self.qd).qdd)
        if self.zdd_range is not None:
            lo, hi = self.zdd_range
            zdd0 = lo + (hi - lo) * self.rng.random((self.N, self.g))
            self.v = zdd0 - self.qdd[:, self.iz]
        else:
            self.v = self._draw_noise()
        self.logw = np.full(self.N, -math.log(self.N))
        self._unique = self.N
        self._lost_hist = collections.deque()
        self._since_init = self.t
        self.label = np.asarray(self.label, dtype=np.int64)

    def _init_uniform(self):
        self.N = N = self.N_init
        g = self.g
        z, q, labels = sample_uniform(self.atlas, N, self.z_lo, self.z_hi, self.branches, self.rng, t=self.t)
        zd = self.zd_lo + (self.zd_hi - self.zd_lo) * self.rng.random((N, g))
        self.label = labels
        self._finish_init(q, zd)
        self._propose = bool(self.config["uniform"].get("velocity_proposal", False))

    def _init_gaussian(self, init: InitialState):
        self.N = N = self.N_track
        g = self.g
        z0 = np.asarray(init.z, dtype=float).reshape(g)
        zd0 = np.asarray(init.zd, dtype=float).reshape(g)
        sz = np.broadcast_to(np.asarray(init.sigma_z, dtype=float), (g,))
        szd = np.broadcast_to(np.asarray(init.sigma_zd, dtype=float), (g,))
        branch = init.branch
        if branch is None and init.q_hint is not None:
            lab = self._labels_of_codes(self.atlas.codes_of(np.asarray(init.q_hint, float)[None]))[0]
            branch = int(lab) if lab >= 0 else None
        labels = np.full(N, int(branch), dtype=np.int64) if branch is not None else self.branches[self.rng.integers(0, self.branches.size, N)]
        z = np.empty((N, g))
        q = np.empty((N, self.n))
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
        zd = zd0 + szd * self.rng.standard_normal((N, g))
        self.label = labels
        self._finish_init(q, zd)

    def _draw_noise(self):
        if self.sigma_a == 0.0:
            return np.zeros((self.N, self.g))
        return self.sigma_a * self.rng.standard_normal((self.N, self.g))

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
        self._since_init += shift
        self._lost_hist = collections.deque((a + shift, lost) for a, lost in self._lost_hist)

    def reacquire(self, inflation: float) -> None:
        """The stage's gate rejected every reading for a while: re-initialise (uniform prior)."""
        self._recover("gate")

    # -- Algorithm 1 ---------------------------------------------------------------------------
    def predict(self, dt: float) -> None:
        """Lines 2-4: integrate every particle over dt, then draw its new acceleration noise."""
        st = self._propagate(dt)
        self.t += dt
        self._last_dt = float(dt)
        q, qd, qdd = st.q, st.qd, st.qdd
        self._aux = st.aux
        ok = np.asarray(st.ok, dtype=bool)
        if not ok.all() or not (np.isfinite(q).all() and np.isfinite(qd).all() and np.isfinite(qdd).all()):
            ok = ok & np.isfinite(q).all(axis=1) & np.isfinite(qd).all(axis=1) & np.isfinite(qdd).all(axis=1)
        self.q, self.qd, self.qdd = q, qd, qdd
        self.v = self._draw_noise()
        if self.sigma_a > 0:
            self._unique = self.N
        if not ok.all():
            self._replace_failed(ok)
        if self.branch_check:
            self._check_branches()

    def _propagate(self, dt: float) -> MBState:
        """The proposal: every particle integrated over dt with its acceleration noise
        (subclasses change it, e.g. :class:`mbde_core.estimators.vipf.VIParticleFilter`)."""
        return self.integrator.step(self.mech, self.t, MBState(self.q, self.qd, self.qdd, aux=self._aux), dt, extra_zdd=self.v)

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
        self.logw[good] -= np.log1p(extra[good])  # donor weight shared with its copies
        for arr in (self.q, self.qd, self.qdd, self.v):
            arr[bad] = arr[donors]
        self._aux = None  # q edited in place
        self.label[bad] = self.label[donors]
        self.logw[bad] = self.logw[donors]
        self._w = None  # edited in place

    def _check_branches(self):
        codes = self.atlas.codes_of(self.q)
        moved = (codes != self._label_codes[self.label]) & (codes >= 0)
        if moved.any():
            new = self._labels_of_codes(codes[moved])
            idx = np.nonzero(moved)[0][new >= 0]
            if idx.size:
                self.label[idx] = new[new >= 0]
                self.counts["branch_jumps"] += int(idx.size)

    def _accelerations(self):
        """qdd of every particle including its acceleration noise: R (f + v) + R'zd."""
        zdd = self.qdd[:, self.iz] + self.v
        return kinematics.acceleration(self.mech, self.q, self.qd, zdd, t=self.t)

    def log_likelihood(self, measurements, gates=None):
        """Per-particle log-likelihood of the readings (eq. 10), with gating and moments.

        Returns (ll (N,), accepted names, rejected names, stacked innovation y of the
        accepted readings against the predicted mean, its covariance S).
        """
        if gates is None:  # not driven by a stage: the ``gate`` option
            gates = {}
            if self.default_gate > 0:
                gates = {s.name: float(scipy.stats.chi2.ppf(self.default_gate, s.dim)) for s in self.sensors}
        N = self.N
        ll = np.zeros(N)
        w = self.weights()
        qdd_full = None
        accepted, rejected, ys, Ss = [], [], [], []
        self._distances = []  # (sensor, d^2) of the gated readings (UpdateResult.distances)
        n_eff = 1.0 / float(w @ w)
        for m in measurements:
            s = self.sensors[m.sensor]
            if s.uses_qdd and qdd_full is None:
                qdd_full = self._accelerations()
            pred = s.h(self.q, self.qd, qdd_full if s.uses_qdd else self.qdd)  # (N, d)
            R, W = self._noise(m.sensor)
            value = np.asarray(m.value, dtype=float)
            mean = w @ pred
            ang = s.angular
            if ang.any():
                mean = np.where(ang, np.arctan2(w @ np.sin(pred), w @ np.cos(pred)), mean)
            dev = s.residual(pred, mean[None, :])
            S = (dev.T * w) @ dev + R
            y = s.residual(value, mean)
            r = s.residual(value[None, :], pred)
            e = r @ W.T
            ll_m = -0.5 * np.einsum("ij,ij->i", e, e)
            limit = gates.get(m.sensor)
            if limit is not None and limit > 0:
                Wg = kernel_whitening(R, S - R, n_eff)
                eg = r @ Wg.T
                d2 = predictive_d2(-0.5 * np.einsum("ij,ij->i", eg, eg), self.logw, pred, s.residual, Wg)
                self._distances.append((m.sensor, d2))
                if not d2 <= limit:
                    rejected.append(m.sensor)
                    continue
            ll += ll_m
            accepted.append(m.sensor)
            ys.append(y)
            Ss.append(S)
        return ll, accepted, rejected, ys, Ss

    def _velocity_linear(self, name: str) -> bool:
        s = self.sensors[name]
        return bool(getattr(s, "uses_qd", False)) and not s.uses_qdd

    def _velocity_proposal(self, measurements) -> np.ndarray:
        """Redraw every particle's zd from p(zd | z, B, o) and return log p(o | z, B) (N,).

        For readings linear in qd (gyroscopes; any sensor by its Jacobian at the prior
        mean), h = h0 + H (zd - m0) with H = dh/dqd R. With the uniform velocity prior
        moment-matched by N(m0, P0) (m0 the range centre, P0 = diag(width^2 / 12)) the
        Kalman formulas give the exact conditional N(m0 + K y, P0 - K H P0) with
        S = H P0 H^T + Sigma_s, K = P0 H^T S^-1, y = o - h0, and the marginal likelihood
        N(y; 0, S) that becomes the particle's weight; velocities outside the uniform
        range get weight 0 (eq. 22).
        """
        mech, N, g = self.mech, self.N, self.g
        m0 = 0.5 * (self.zd_lo + self.zd_hi)
        var = (self.zd_hi - self.zd_lo) ** 2 / 12.0
        R = kinematics.r_matrix(mech, self.q)  # (N, n, g)
        qd0 = kinematics.velocity(mech, self.q, np.broadcast_to(m0, (N, g)), t=self.t)
        ys, Hs, Ss = [], [], []
        for m in measurements:
            s = self.sensors[m.sensor]
            h0 = s.h(self.q, qd0)
            Hqd = s.jacobians(self.q, qd0)[1]  # (N, d, n)
            ys.append(s.residual(np.asarray(m.value, float)[None, :], h0))
            Hs.append(np.einsum("ndi,nik->ndk", Hqd, R))
            Ss.append(self._noise(m.sensor)[0])
        y = np.concatenate(ys, axis=1)            # (N, D)
        H = np.concatenate(Hs, axis=1)            # (N, D, g)
        bad = ~(np.isfinite(y).all(axis=1) & np.isfinite(H).all(axis=(1, 2)))
        if bad.any():  # a non-finite reading model: no information, weight 0 below
            y[bad], H[bad] = 0.0, 0.0
        Sig = _block_diag(Ss)                     # (D, D)
        PHt = var[None, :, None] * np.swapaxes(H, 1, 2)  # (N, g, D)
        S = H @ PHt + Sig                         # (N, D, D)
        L = np.linalg.cholesky(S)
        Kt = np.linalg.solve(S, np.swapaxes(PHt, 1, 2))  # (N, D, g) = K^T
        K = np.swapaxes(Kt, 1, 2)
        mean = m0 + np.einsum("ngd,nd->ng", K, y)
        cov = np.diag(var)[None] - K @ np.swapaxes(PHt, 1, 2)
        cov = 0.5 * (cov + np.swapaxes(cov, 1, 2)) + 1e-18 * np.eye(g)
        Lc = np.linalg.cholesky(cov)
        zd = mean + np.einsum("ngk,nk->ng", Lc, self.rng.standard_normal((N, g)))
        e = np.linalg.solve(L, y[..., None])[..., 0]
        ll = -0.5 * np.einsum("nd,nd->n", e, e) - np.log(np.abs(np.diagonal(L, axis1=1, axis2=2))).sum(axis=1)
        inside = np.all((zd >= self.zd_lo - 1e-12) & (zd <= self.zd_hi + 1e-12), axis=1) & np.isfinite(ll) & ~bad
        ll = np.where(inside, ll - ll[inside].max() if inside.any() else ll, -np.inf)
        # rejected draws (outside the prior's support, or a non-finite reading model) keep a
        # prior velocity: weight 0, but a harmless state until the next resampling
        prior = self.zd_lo + (self.zd_hi - self.zd_lo) * self.rng.random((N, g))
        zd = np.where(inside[:, None], zd, prior)
        self.qd = kinematics.velocity(mech, self.q, zd, t=self.t)
        self.qdd = np.ascontiguousarray(dynamics.evaluate(mech, self.t, self.q, self.qd).qdd)
        if self.zdd_range is not None:
            lo, hi = self.zdd_range
            self.v = lo + (hi - lo) * self.rng.random((N, g)) - self.qdd[:, self.iz]
        return ll

    def _weigh(self, measurements, gates):
        """Log-likelihood of the readings (N,), with the velocity proposal after a uniform init."""
        prop = None
        if self._propose:
            self._propose = False
            vel = [m for m in measurements if self._velocity_linear(m.sensor)]
            if vel:
                prop = self._velocity_proposal(vel)
                _, acc_v, _, ys_v, Ss_v = self.log_likelihood(vel, {})  # moments for the NIS
                measurements = [m for m in measurements if not self._velocity_linear(m.sensor)]
        ll, accepted, rejected, ys, Ss = self.log_likelihood(measurements, gates)
        if prop is not None:
            ll = ll + prop
            accepted, ys, Ss = acc_v + accepted, ys_v + ys, Ss_v + Ss
        return ll, accepted, rejected, ys, Ss

    def update(self, measurements, gates=None) -> UpdateResult:
        """Line 5 (weights), lines 7-10 (normalise in log space), 11-14 (ESS, resampling)."""
        ll, accepted, rejected, ys, Ss = self._weigh(measurements, gates)
        if not accepted:
            return UpdateResult([], rejected, distances=self._distances)
        ll = np.where(np.isnan(ll), -np.inf, ll)
        self.counts["updates"] += 1
        y = np.concatenate(ys)
        S = _block_diag(Ss)
        try:
            nis = float(y @ np.linalg.solve(S, y))
            e = np.linalg.solve(np.linalg.cholesky(S), y)
        except np.linalg.LinAlgError:
            nis, e = None, None
        result = UpdateResult(accepted, rejected, nis, int(y.size), y, e, distances=self._distances)
        underflow = not ll.max() >= self.ll_floor
        logw = self.logw + ll
        top = logw.max()
        ess = None
        if np.isfinite(top):
            e = np.exp(logw - top)
            total = float(np.sum(e))
            logw -= top + math.log(total)
            self.logw = logw
            w = e / total
            self._w = w
            ess = effective_sample_size(w)
            self.ess_before = ess
            self._ess_sum += ess
        # else: every weight is exactly zero: nothing to normalise, the prior weights stay
        collapse = ess is None or ess < self.collapse_fraction * self.N
        if self.recovery and self._is_lost(underflow or collapse):
            self._recover("likelihood" if underflow else "ess")
            ll = self._weigh([m for m in measurements if m.sensor in accepted], {})[0]
            ll = np.where(np.isnan(ll), -np.inf, ll)
            if ll.max() >= self.ll_floor:  # else the new uniform set stays unweighted
                logw = self.logw + ll
                top = logw.max()
                self.logw = logw - (top + math.log(np.sum(np.exp(logw - top))))
            return result
        if ess is not None and ess < self.ess_threshold * self.N:
            self._resample(w, ess)
        return result

    def _is_lost(self, lost_now: bool) -> bool:
        """True when more than half of the updates of the last ``recovery.time`` seconds
        (at least that long after the last (re)initialisation) were lost."""
        T = self.collapse_time
        if T <= 0:
            return lost_now
        hist = self._lost_hist
        hist.append((self.t, lost_now))
        while hist and hist[0][0] < self.t - T - 1e-12:
            hist.popleft()
        if self.t - self._since_init < T - 1e-12:
            return False
        return 2 * sum(flag for _, flag in hist) > len(hist)

    def _kld_size(self, idx) -> int:
        """Particles needed for the resampled set idx (KLD-sampling bound on its occupied bins)."""
        scale = np.where(self.angular, 1.0, self.mech.length_scale)
        zb = np.floor(self.z[idx] / (self.KLD_BIN_Z * scale)).astype(np.int64)
        zdb = np.floor(self.zd[idx] / (self.KLD_BIN_ZD * scale)).astype(np.int64)
        keys = np.hstack([zb, zdb, self.label[idx, None]])
        k = len(np.unique(keys, axis=0))
        if k <= 1:
            return 1
        a = 2.0 / (9.0 * (k - 1))
        return int(math.ceil((k - 1) / (2.0 * self.KLD_EPSILON) * (1.0 - a + math.sqrt(a) * self.KLD_QUANTILE) ** 3))

    def _resample(self, w, ess):
        """Lines 12-14. A set enlarged by a uniform (re)initialisation shrinks towards
        ``particles`` by KLD-sampling: n = clip(n_KLD(occupied bins), particles, N)."""
        idx = resample(self.scheme, w, self.rng)
        n = self.N
        if n > self.N_track:
            n = int(min(n, max(self.N_track, self._kld_size(idx))))
            if n < self.N:
                idx = resample(self.scheme, w, self.rng, n)
        self.q, self.qd, self.qdd, self.v = self.q[idx], self.qd[idx], self.qdd[idx], self.v[idx]
        self._aux = None if self._aux is None else self._aux.take(idx)
        self.label = self.label[idx]
        self._unique = self._unique_resampled = int(np.count_nonzero(np.bincount(idx, minlength=self.N)))
        self.N = n
        self.logw = np.full(n, -math.log(n))
        self.counts["resamples"] += 1

    # -- outputs -------------------------------------------------------------------------------
    @property
    def logw(self) -> np.ndarray:
        """(N,) normalised log-weights (assigning one resets the cached weights)."""
        return self._logw

    @logw.setter
    def logw(self, value):
        self._logw = value
        self._w = None

    def weights(self) -> np.ndarray:
        """(N,) normalised weights (computed once per change of the log-weights)."""
        if self._w is None:
            w = np.exp(self._logw - self._logw.max())
            self._w = w / w.sum()
        return self._w

    @property
    def z(self) -> np.ndarray:
        """(N, g) independent coordinates (angles as integrated, not wrapped)."""
        return self.q[:, self.iz]

    @property
    def zd(self) -> np.ndarray:
        return self.qd[:, self.iz]

    @property
    def zdd(self) -> np.ndarray:
        """(N, g) drawn accelerations f(z, zd) + v."""
        return self.qdd[:, self.iz] + self.v

    def mean(self, w=None):
        """Weighted means (z, zd, zdd) (g,) each; circular mean for angle coordinates (footnote 6)."""
        w = self.weights() if w is None else w
        z = self.z
        zm = w @ z
        if self.angular.any():
            a = self.angular
            s, c = self._sincos(z)
            zm[a] = np.arctan2(w @ s, w @ c)
        return zm, w @ self.zd, w @ self.zdd

    def _sincos(self, z):
        """sin, cos (N, k) of the angle columns of z: the integrator computed them at the
        current q (its kernel context, ``self._aux``) when it knows them, the same values."""
        a = self.angular
        aux = self._aux
        if aux is None or aux.N != self.N:
            return np.sin(z[:, a]), np.cos(z[:, a])
        rel = self.mech.rel_columns
        pairs = [aux.sincos(rel, c) for c in self.iz[a]]
        return np.stack([p[0] for p in pairs], axis=1), np.stack([p[1] for p in pairs], axis=1)

    def deviations(self, zm=None, w=None) -> np.ndarray:
        """(N, g) z - mean with angle deviations wrapped to [-pi, pi)."""
        if zm is None:
            zm = self.mean(w)[0]
        d = self.z - zm
        if self.angular.all():
            return wrap_angle(d)
        if self.angular.any():
            d[:, self.angular] = wrap_angle(d[:, self.angular])
        return d

    def covariance(self, w=None, means=None) -> np.ndarray:
        """(2g, 2g) covariance of [z, zd]: symmetric positive definite by construction.

        Weighted outer products of the deviations X (angle deviations wrapped about the
        circular mean), Y = sqrt(w) X, P = Y^T Y (PSD), symmetrised, plus the kernel of
        the particle set: the covariance of one prediction's acceleration noise over the
        last step dt, sigma_a^2 dt [[dt^3/3, dt^2/2], [dt^2/2, dt]] per coordinate (Van
        Loan; positive definite for sigma_a > 0), i.e. the covariance of the kernel
        density sum_i w_i N(x_i, Q) that the particles stand for -- never singular, even
        when every particle is a copy of one.
        """
        w = self.weights() if w is None else w
        zm, zdm, _ = self.mean(w) if means is None else means
        g = self.g
        X = np.empty((self.N, 2 * g))
        X[:, :g] = self.deviations(zm, w)
        np.subtract(self.zd, zdm, out=X[:, g:])
        X *= np.sqrt(w)[:, None]
        P = X.T @ X
        P = 0.5 * (P + P.T)
        return P + self._kernel_covariance()

    def _kernel_covariance(self) -> np.ndarray:
        """(2g, 2g) covariance of one prediction's noise over the last step (see covariance)."""
        key = (self._last_dt, self.sigma_a)
        if self._kernel is None or self._kernel[0] != key:
            dt = self._last_dt
            q = self.sigma_a ** 2 * dt
            if not q > 0:  # no acceleration noise: a floor at 1e-12 of the state's scale
                q = 1e-12
            self._kernel = (key, kinematic_plant_noise(self.g, dt, q))
        return self._kernel[1]

    def interval(self, p: float = 0.95):
        """Central p-interval of z and zd from weighted quantiles: {'z': (lo, hi), 'zd': (lo, hi)}.

        Angle coordinates: quantiles of the wrapped deviation from the circular mean,
        added back to the mean (lo may be < -pi, hi > pi).
        """
        w = self.weights()
        zm, zdm, _ = self.mean(w)
        a = (1.0 - p) / 2.0
        out = {}
        for key, X, centre in (("z", self.deviations(zm, w), zm), ("zd", self.zd - zdm, zdm)):
            lo, hi = np.empty(self.g), np.empty(self.g)
            for k in range(self.g):  # loop over coordinates (g), not particles
                order = np.argsort(X[:, k], kind="stable")
                c = np.cumsum(w[order])
                c /= c[-1]
                xs = X[order, k]
                lo[k] = xs[min(np.searchsorted(c, a, side="left"), xs.size - 1)]
                hi[k] = xs[min(np.searchsorted(c, 1.0 - a, side="left"), xs.size - 1)]
            out[key] = (centre + lo, centre + hi)
        return out

    def branch_probabilities(self, w=None) -> np.ndarray:
        """(K,) P(B = k) = sum of the weights of the particles on branch k (eq. 20)."""
        w = self.weights() if w is None else w
        return np.bincount(self.label, weights=w, minlength=self.K)[: self.K]

    def ess(self) -> float:
        return effective_sample_size(self.weights())

    def unique(self) -> int:
        """Distinct particles: copies made by resampling stay identical until the next
        prediction diffuses them (acceleration noise sigma_a > 0)."""
        return int(self._unique)

    def estimate(self) -> MechanismSnapshot:
        mech = self.mech
        w = self.weights()
        zm, zdm, zddm = self.mean(w)
        P = self.covariance(w, (zm, zdm, zddm))
        probs = self.branch_probabilities(w)
        best = int(np.argmax(probs))
        on = self.label == best
        j = int(np.argmax(np.where(on, w, -1.0)))
        q, ok = kinematics.solve_position(mech, zm, self.q[j], t=self.t)
        if ok and np.all(np.isfinite(q)) and self.atlas.codes_of(q[None])[0] == self._label_codes[best]:
            qd = kinematics.velocity(mech, q, zdm, t=self.t)
            qdd = kinematics.acceleration(mech, q, qd, zddm, t=self.t)
        else:  # the mean does not assemble on that branch: the heaviest particle's state
            q, qd = self.q[j].copy(), self.qd[j].copy()
            qdd = kinematics.acceleration(mech, q, qd, self.zdd[j], t=self.t)
        return MechanismSnapshot(stamp=self.t, q=np.array(q), qd=np.array(qd), qdd=np.array(qdd),
                                 z=zm, zd=zdm, zdd=zddm, cov=P, branch=best, branch_probabilities=probs)

    def particles(self) -> ParticleCloud:
        w = self.weights()
        z = self.z.copy()
        if self.angular.any():
            z[:, self.angular] = wrap_angle(z[:, self.angular])
        return ParticleCloud(stamp=self.t, z=z, zd=self.zd.copy(), branch=self.label.copy(), weight=w.copy(),
                             ess=effective_sample_size(w), unique=self.unique())

    def diagnostics(self) -> dict:
        w = self.weights()
        upd = max(self.counts["updates"], 1)
        return {
            "particles": self.N,
            "integrator": self.integrator.name,
            "ess": effective_sample_size(w),
            "ess_before_resampling": self.ess_before,
            "mean_ess_before_resampling": self._ess_sum / upd,
            "unique": self.unique(),
            "unique_after_last_resampling": int(self._unique_resampled),
            "branch_probabilities": self.branch_probabilities(w).tolist(),
            **self.counts,
            "recovery_reasons": dict(self.recovery_reasons),
        }


def _block_diag(blocks):
    size = sum(b.shape[0] for b in blocks)
    out = np.zeros((size, size))
    k = 0
    for b in blocks:
        d = b.shape[0]
        out[k : k + d, k : k + d] = b
        k += d
    return out
