"""Outputs of the particle filter: weights, moments, intervals, branch probabilities, snapshot.

Mixin of :class:`mbde_core.estimators.particle.filter.ParticleFilter` (uses its particle arrays q, qd,
qdd, v, label, logw and its mechanism). The weighted mean is eq. 19 of paper 000 with the
circular mean for angle coordinates (footnote 6: average the unit vectors, project back
on the circle); the covariance of [z, zd] is a sum of weighted outer products of the
deviations (angle deviations wrapped about the circular mean) plus the kernel of the
particle set (the covariance of one prediction's noise), symmetric positive definite by
construction; the branch probabilities are eq. 20, P(B = b_k) = sum of the weights of the
particles on b_k; ``interval(p)`` gives central p-intervals from weighted quantiles (0.95
for paper 000 Fig. 7). ``estimate()`` assembles the mean (z, zd, zdd) on the most probable
branch (or, when the mean does not assemble there, takes the heaviest particle's state).
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import fastpath, kinematics
from mbde_core.estimators.particle import compiled as pf_numba
from mbde_core.estimators.noise import kinematic_plant_noise
from mbde_core.estimators.particle.resampling import effective_sample_size
from mbde_core.sensors.base import wrap_angle
from mbde_core.types import MechanismSnapshot, ParticleCloud


def wsum(w: np.ndarray, X: np.ndarray) -> np.ndarray:
    """sum_i w_i X[i] (a weighted sum over particles) without BLAS: numpy's matmul hands
    these to a multithreaded BLAS whose worker threads, woken for every call, wait for a
    time slice on a busy machine (~5 ms per call at N = 1e5 against 0.1 ms here)."""
    return np.einsum("n,n...->...", w, X)


class ParticleOutputs:
    """Weights, moments and published outputs of a particle set (see the module docstring)."""

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
        a = self.angular
        if a.all():  # the circular mean only (no linear sum to overwrite)
            s, c = self._sincos(None)
            zm = np.arctan2(wsum(w, s), wsum(w, c))
        else:
            z = self.z
            zm = wsum(w, z)
            if a.any():
                s, c = self._sincos(z)
                zm[a] = np.arctan2(wsum(w, s), wsum(w, c))
        return zm, wsum(w, self.zd), wsum(w, self.zdd)

    def _sincos(self, z):
        """sin, cos (N, k) of the angle columns of z (None: the particles' z): the integrator computed them at the
        current q (its kernel context, ``self._aux``) when it knows them, the same values."""
        a = self.angular
        aux = self._aux
        if aux is None or aux.N != self.N:
            za = (self.z if z is None else z)[:, a]
            return np.sin(za), np.cos(za)
        rel = self.mech.rel_columns
        pairs = [aux.sincos(rel, c) for c in self.iz[a]]
        if len(pairs) == 1:  # one angle: its (N,) rows as (N, 1) views, no stacking
            return pairs[0][0][:, None], pairs[0][1][:, None]
        return np.stack([p[0] for p in pairs], axis=1), np.stack([p[1] for p in pairs], axis=1)

    def _sincos_all(self):
        """sin, cos (N, g) of z at the angle columns (zeros at the others; see _sincos)."""
        a = self.angular
        if a.all():
            return self._sincos(None)
        s, c = np.zeros((self.N, self.g)), np.zeros((self.N, self.g))
        if a.any():
            s[:, a], c[:, a] = self._sincos(None)
        return s, c

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
        P = np.einsum("ni,nj->ij", X, X)
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
        if pf_numba.enabled(self.N):  # the moments in two fused parallel passes (pf_numba)
            sc = self._sincos_all()
            (zm, zdm, zddm), P = pf_numba.moments(w, self.q, self.qd, self.qdd, self.v, sc[0], sc[1], self.iz,
                                                  self.angular, self.propagator.threads)
            P = P + self._kernel_covariance()
        else:
            zm, zdm, zddm = self.mean(w)
            P = self.covariance(w, (zm, zdm, zddm))
        probs = self.branch_probabilities(w)
        best = int(np.argmax(probs))
        on = self.label == best
        j = int(np.argmax(np.where(on, w, -1.0)))
        q, ok, qd, qdd = self._assemble_mean(zm, zdm, zddm, self.q[j])
        if ok and np.all(np.isfinite(q)) and self.atlas.codes_of(q[None])[0] == self._label_codes[best]:
            if qd is None:
                qd = kinematics.velocity(mech, q, zdm, t=self.t)
                qdd = kinematics.acceleration(mech, q, qd, zddm, t=self.t)
        else:  # the mean does not assemble on that branch: the heaviest particle's state
            q, qd = self.q[j].copy(), self.qd[j].copy()
            qdd = kinematics.acceleration(mech, q, qd, self.zdd[j], t=self.t)
        return MechanismSnapshot(stamp=self.t, q=np.array(q), qd=np.array(qd), qdd=np.array(qdd),
                                 z=zm, zd=zdm, zdd=zddm, cov=P, branch=best, branch_probabilities=probs)

    def _assemble_mean(self, zm, zdm, zddm, guess):
        """(q, ok, qd, qdd) of the mean state assembled from ``guess``: on the scalar
        kernels (one state: Newton as ``kinematics.solve_position`` of a small batch, then
        qd = R zd, qdd = R zdd + R'zd) when the mechanism has them and no drivers, else q
        by ``kinematics.solve_position`` and qd = qdd = None (the caller computes them)."""
        mech = self.mech
        K = fastpath.kernels(mech)
        if K is not None and not getattr(mech, "drivers", None):
            try:
                x, ok, tr, J = fastpath.s_position(mech, K, zm.tolist(), guess.tolist(), 30)
                if not ok:
                    return np.array(x), False, None, None
                qd = K.scalar.velocity(J, tr, zdm.tolist())
                return np.array(x), True, np.array(qd), np.array(K.scalar.acceleration(J, tr, x, list(qd), zddm.tolist()))
            except fastpath.SCALAR_ERRORS:
                pass  # singular or non-finite: the generic code decides
        q, ok = kinematics.solve_position(mech, zm, guess, t=self.t)
        return q, ok, None, None

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


