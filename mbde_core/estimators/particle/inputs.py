"""Generalized-force inputs of the particle filters (PF, VI-PF): a measured motor torque
as a known input, and unknown torques as per-particle random-walk input states.

The R-matrix dynamics are linear in the applied forces (paper 003 eq. 3): a generalized
force Q_u = E u (E (n, k): the unit columns of the inputs' coordinates) adds

    zdd_u = B(z) u,   B = dzdd/du = Mbar^-1 R^T E,   Mbar = R^T M R,

to the independent accelerations (the Kalman observers' input gain,
:mod:`~mbde_core.estimators.kalman.input_states`). Each particle i carries its own inputs
u_i (k,) = [unknown ones, known ones]; zdd_u,i = B(z_i) u_i is computed at the start of
a step and applied as an acceleration held over the step (the integrators' ``extra_zdd``,
which the numpy RK4, the compiled RK4 kernels and the variational steps all take), and
at the particle's current configuration for the readings of accelerations (accelerometers)
and the published zdd. Holding B over the step makes the error of zd O(dt^2 |dB/dt| u):
1e-5 rad/s per 5 ms step for 1 N m on the issue-42 slider-crank at 20 rad/s.

- **Known inputs** (``SensorSet.inputs``, :mod:`mbde_core.sensors.effort`): the stage
  holds each reading (:mod:`~mbde_core.estimators.stage.inputs`) and gives the filter the
  value u_m and its variance var_m (the reading's noise and the hold's error) before every
  prediction; each particle draws u_i = u_m + sqrt(var_m) eps_i, eps_i ~ N(0, 1), for the
  step: the torque's uncertainty enters as process noise per particle (the particle form of
  the Kalman observers' G var G^T, G = dt B). A stale reading comes with the variance of the
  largest torque seen, so the particles spread as if the torque were unknown.
- **Input states** (option ``inputs``: ``auto``, the default -- the rule's one per force-limited
  independent coordinate, :func:`~mbde_core.estimators.options.rule.auto_inputs` -- or a
  list of {coordinate, psd, sigma0, initial, limit} as the Kalman observers'): a random
  walk per particle, u_i <- u_i + sqrt(psd dt) eps_i, reflected into [-limit, limit] (a
  motor cannot exceed its torque limit); psd = (F w')^2 step from the limit F and the step
  (the ADE-KF's per-step increment F w' step as a density). A speed controller that
  saturates swings its torque across the whole range within a few readings, faster than
  the walk: with the rate ``input_jump_rate`` [1/s] a particle redraws its inputs uniformly
  within the limits at a step (a jump; the mixture proposal of a jump-Markov input, cf.
  Doucet, Gordon & Krishnamurthy 2001), and the readings weigh the jumped particles as any
  other. The first set (uniform or Gaussian start) draws u ~ U(-limit, limit) (N(initial,
  sigma0) without a finite limit).

The per-particle inputs follow the particles through resampling and the replacement of
failed propagations; a set whose size changed otherwise (the lock's injection of fresh
hypotheses) draws them afresh (:meth:`ParticleInputs.rows`).
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import kinematics

INPUT_JUMP_RATE = 2.0  # 1/s: a particle redraws its unknown inputs within their limits twice a second


class ParticleInputs:
    """The inputs of a particle filter ``pf`` (module doc): ``ku`` unknown ones (the
    ``inputs`` option, resolved to InputSpecs), ``km`` known ones (its sensors'
    ``inputs``); U (N, ku) the unknown per particle, K (N, km) the known per particle for
    the current step."""

    def __init__(self, pf):
        mech = pf.mech
        self.pf = pf
        specs = tuple(getattr(pf.options, "inputs", ()) or ())
        self.specs = specs
        self.known = list(getattr(pf.sensors, "inputs", ()))
        self.ku, self.km = len(specs), len(self.known)
        self.k = self.ku + self.km
        cols = [mech.coordinate_index(s.coordinate) for s in specs] + [int(s.coordinate) for s in self.known]
        self.cols = cols
        self.E = np.zeros((mech.n, self.k))
        self.E[cols, np.arange(self.k)] = 1.0
        self.psd = np.array([float(s.psd) for s in specs])
        self.sigma0 = np.array([float(s.sigma0) for s in specs])
        self.initial = np.array([float(s.initial) for s in specs])
        self.limit = np.array([float(s.limit) for s in specs])
        self.jump_rate = float(getattr(pf.options, "input_jump_rate", 0.0) or 0.0)
        self.value = np.zeros(self.km)  # the held known inputs (set_known)
        self.var = np.array([s.force_variance() for s in self.known])
        self.U = np.zeros((0, self.ku))
        self.K = np.zeros((0, self.km))
        self.jumps = 0
        self._memo = None

    def __bool__(self) -> bool:
        return self.k > 0

    # -- the per-particle inputs ---------------------------------------------------------------
    def draw(self, N: int) -> np.ndarray:
        """(N, ku) unknown inputs of fresh particles: uniform within the limits (module doc)."""
        rng = self.pf.rng
        finite = np.isfinite(self.limit)
        u = self.initial + self.sigma0 * rng.standard_normal((N, self.ku))
        if finite.any():
            lim = np.where(finite, self.limit, 1.0)
            u = np.where(finite, lim * (2.0 * rng.random((N, self.ku)) - 1.0), u)
        return u

    def new_set(self, N: int) -> None:
        """A new particle set of N (uniform or Gaussian start, recovery): fresh inputs."""
        self.U = self.draw(N)
        self.K = np.tile(self.value, (N, 1))

    def rows(self, N: int) -> None:
        """Make U hold N rows (a new set of another size draws them afresh)."""
        if self.U.shape[0] != N:
            self.U = self.draw(N)
        if self.K.shape[0] != N:
            self.K = np.tile(self.value, (N, 1))

    def take(self, idx) -> None:
        """Gather the inputs with the particles (resampling: the rows idx)."""
        if self.U.shape[0] and np.size(idx) and int(np.max(idx)) < self.U.shape[0]:
            self.U = self.U[idx]
        if self.K.shape[0] and np.size(idx) and int(np.max(idx)) < self.K.shape[0]:
            self.K = self.K[idx]

    def copy_rows(self, bad, donors) -> None:
        """Particles ``bad`` replaced by copies of ``donors`` (failed propagations)."""
        for name in ("U", "K"):
            a = getattr(self, name)
            if a.shape[0] > int(np.max(np.concatenate([bad, donors]))):
                a = a.copy()
                a[bad] = a[donors]
                setattr(self, name, a)

    def set_known(self, values, variances) -> None:
        """The stage's held known inputs and their variances for the next step."""
        self.value = np.asarray(values, dtype=float).reshape(self.km)
        self.var = np.maximum(np.asarray(variances, dtype=float).reshape(self.km), 0.0)

    def step(self, N: int, dt: float) -> None:
        """Before a prediction over dt: the unknown inputs walk (reflected into their
        limits, jumps at ``jump_rate``) and each particle draws its known inputs."""
        rng = self.pf.rng
        self.rows(N)
        if self.ku:
            U = self.U + np.sqrt(self.psd * dt) * rng.standard_normal((N, self.ku))
            if self.jump_rate > 0:
                jump = rng.random(N) < -np.expm1(-self.jump_rate * dt)
                if jump.any():
                    U[jump] = self.draw(int(jump.sum()))
                    self.jumps += int(jump.sum())
            self.U = reflect(U, self.limit)
        if self.km:
            self.K = self.value + np.sqrt(self.var) * rng.standard_normal((N, self.km))

    # -- their accelerations -------------------------------------------------------------------
    def forces(self) -> np.ndarray:
        """(N, k) the inputs of every particle [U, K]."""
        return np.hstack([self.U, self.K])

    def accel(self, q) -> np.ndarray:
        """(N, g) zdd_u = B(z) u of every particle at its configuration q (N, n)
        (memoised on the identity of q and of the inputs)."""
        memo = self._memo
        if memo is not None and memo[0] is q and memo[1] is self.U and memo[2] is self.K:
            return memo[3]
        N = q.shape[0]
        self.rows(N)
        mech = self.pf.mech
        R = kinematics.r_matrix(mech, q)
        Rt = np.swapaxes(R, -1, -2)
        B = np.linalg.solve(Rt @ mech.M @ R, Rt @ self.E)  # (N, g, k)
        out = np.einsum("igk,ik->ig", B, self.forces())
        self._memo = (q, self.U, self.K, out)
        return out

    def estimate(self, w) -> tuple[np.ndarray, np.ndarray]:
        """(mean (k,), covariance (k, k)) of the inputs under the weights w (N,)."""
        X = self.forces()
        if X.shape[0] != w.shape[0]:
            return np.concatenate([np.zeros(self.ku), self.value]), np.diag(np.concatenate([self.sigma0**2, self.var]))
        m = w @ X
        D = X - m
        return m, (D.T * w) @ D

    def names(self) -> list:
        """The unknown inputs' coordinates, then the known ones' sensors."""
        mech = self.pf.mech
        return [mech.coordinate_names[c] for c in self.cols[: self.ku]] + [s.name for s in self.known]


def reflect(u, limit) -> np.ndarray:
    """u reflected into [-limit, limit] (per column; inf: unchanged): the walk bounces off
    the limits instead of piling up on them."""
    finite = np.isfinite(limit)
    if not finite.any():
        return u
    L = np.where(finite, limit, 1.0)
    y = np.mod(u + L, 4.0 * L)  # the triangle wave of period 4L
    return np.where(finite, L - np.abs(y - 2.0 * L), u)
