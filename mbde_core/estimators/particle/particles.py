"""The particle set of the particle filter: its arrays, its weights, and how a set is drawn,
installed and edited (paper 000 Algorithm 1; eq. 22 for the uniform prior).

Each particle i carries a full multibody state on its own assembly branch: q, qd (n,)
(hence z = q[independent], zd), the model acceleration qdd, the acceleration noise v (g,)
with zdd = f(z, zd) + v (paper 000 eqs. 11, 13), its branch label and a log-weight; every
array is (N, ...) and replaced (never edited in place) when the set changes, so memos keyed
on their identity stay valid. :class:`ParticleSet` is the base of
:class:`~mbde_core.estimators.particle.filter.ParticleFilter`:

- a uniform (re)initialisation draws z ~ U(``uniform.z``) (angles: the circle), zd ~
  U(``uniform.zd``), the branch ~ U(``uniform.branches``), placed by the branch atlas of
  :mod:`.prior` (:meth:`ParticleSet._init_uniform`); ``init: gaussian`` draws z ~ N(z0,
  sigma_z), zd ~ N(zd0, sigma_zd) around the given initial state on its branch (or its q
  hint's, or uniform) (:meth:`ParticleSet._init_gaussian`);
- failed position problems of a step are replaced by copies of surviving particles with
  their weights split (``propagation_failures``, :meth:`ParticleSet._replace_failed`);
- a particle whose position problem converged on another assembly (near singular
  configurations) is relabelled (``branch_check``, ``branch_jumps``,
  :meth:`ParticleSet._check_branches`);
- the acceleration noise of a step is applied as the velocity impulse it causes
  (:meth:`ParticleSet._impulse`, :mod:`.proposal`);
- the generalized-force inputs (a measured torque, unknown torques as input states) add
  the acceleration B(z) u of each particle's inputs (``inputs``, :mod:`.inputs`):
  :meth:`ParticleSet.input_step` before a step, ``accel_noise`` (v plus it) wherever the
  step's acceleration is read.
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.engine import kinematics, thread_pools
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.particle import compiled as pf_compiled
from mbde_core.estimators.particle import normals
from mbde_core.estimators.particle import proposal as prop
from mbde_core.estimators.particle.prior import sample_uniform


class ParticleSet:
    """The weighted particle set (see the module docstring). State arrays (N particles):
    q, qd, qdd (N, n), v (N, g), label (N,), logw (N,)."""

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
        """(N, g) drawn accelerations f(z, zd) + v (+ B u of the inputs)."""
        return self.qdd[:, self.iz] + self.accel_noise

    @property
    def accel_noise(self) -> np.ndarray:
        """(N, g) what the particles' accelerations add to the model's f(z, zd): the
        acceleration noise v and the inputs' B(z) u (:mod:`.inputs`)."""
        ins = getattr(self, "inputs", None)
        return self.v + ins.accel(self.q) if ins else self.v

    def input_step(self, dt: float, extra):
        """Before a prediction over dt: the inputs' walk and draws (:meth:`.inputs.
        ParticleInputs.step`); returns ``extra`` (the step's acceleration noise or None)
        plus the inputs' B(z) u at the step's start (held over the step)."""
        ins = getattr(self, "inputs", None)
        if not ins:
            return extra
        ins.step(self.N, dt)
        a = ins.accel(self.q)
        return a if extra is None else extra + a

    def prefetch_noise(self) -> None:
        """Before a propagation: the next update's proposal noise drawn ahead on a pool
        thread when the compiled update on several threads will take it (:mod:`.normals`:
        the same numbers, the same stream)."""
        if self.adapted and self.sigma_a > 0 and self.propagator.threads > 1 and pf_compiled.update_enabled(self.N):
            self.normals_ahead.prefetch(self.rng, self.N * self.g)

    @property
    def normals_ahead(self) -> normals.Ahead:
        """The filter's normals drawn ahead (:mod:`.normals`), made at first use."""
        ahead = self.__dict__.get("_normals_ahead")
        if ahead is None:
            ahead = self._normals_ahead = normals.Ahead()
        return ahead

    def set_known_inputs(self, values, variances) -> None:
        """The stage's held known inputs (a measured torque) and their variances for the
        next step (each particle draws its own, :mod:`.inputs`); the Gaussian follower
        gets them too while it runs (seeded, it holds [z, zd, inputs])."""
        ins = getattr(self, "inputs", None)
        if ins and ins.km:
            ins.set_known(values, variances)
        fol = getattr(self, "follower", None)
        if fol is not None and fol.following and fol.est.traits.known_inputs:
            fol.est.set_known_inputs(values, variances)

    @property
    def _aux(self):
        return self.propagator.context(self.N)

    @_aux.setter
    def _aux(self, value):
        if value is None:
            self.propagator.drop()

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
        self._estimate_cache = None  # the last cloud estimate and its key (outputs.estimate)
        self.propagator.drop()


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
        if getattr(self, "inputs", None):
            self.inputs.new_set(self.N)
        self.logw = np.full(self.N, -math.log(self.N))
        self._unique = self.N
        self._fresh, self._pending = True, None
        self.propagator.drop()
        held, self._held = getattr(self, "_held", None), None  # a new set cannot judge it (:mod:`.weights`)
        if held is not None:
            self._held_dropped = getattr(self, "_held_dropped", []) + held.names
        self.lost.restart(self.t)
        self.lock.restart(self.t)
        if self.follower is not None:
            self.follower.new_cloud()


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
        self._uniform_from = self.t  # the gate waits GATE_GRACE (:mod:`.likelihood`)


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


    def _impulse(self, v, dt, Rc=None):
        """Apply the acceleration noise v (N, g) of the last step as its velocity impulse
        (Rc: the columns of R at q, if known)."""
        nt = self.propagator.threads
        Rc = prop.r_columns(self.mech, self.q, self._aux, threads=nt) if Rc is None else Rc
        if pf_compiled.for_set(self) and self.qd.dtype == np.float64:
            self.qd = pf_compiled.impulse(self.qd, Rc, dt * v, nt)
        else:
            self.qd = prop.impulse_velocities(self.qd, Rc, dt * v, nt)
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
        if getattr(self, "inputs", None):
            self.inputs.copy_rows(bad, donors)
        logw[bad] = logw[donors]
        self.logw = logw


    def _check_branches(self):
        codes = np.empty(self.N, dtype=np.int64)

        def run(lo, hi):
            codes[lo:hi] = self.atlas.codes_of(self.q[lo:hi])

        thread_pools.rows(run, self.N, self.propagator.threads, ns_per_row=8.0)  # 8 ns a particle (four-bar)
        moved = (codes != self._label_codes[self.label]) & (codes >= 0)
        if moved.any():
            new = self._labels_of_codes(codes[moved])
            idx = np.nonzero(moved)[0][new >= 0]
            if idx.size:
                self.label = self.label.copy()
                self.label[idx] = new[new >= 0]
                self.counts["branch_jumps"] += int(idx.size)
