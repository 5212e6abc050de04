"""Resampling of the particle filter: Algorithm 1 lines 12-14 of paper 000, KLD-sampling, regularisation.

Mixin of :class:`mbde_core.estimators.particle.filter.ParticleFilter`. Selective resampling with the
scheme of :mod:`resampling`; a set enlarged by a uniform (re)initialisation or a lock
injection shrinks towards ``particles`` by KLD-sampling (Fox 2003: n = n_KLD(k) for the k
occupied (z, zd, B) bins of the resampled set, bound KLD_EPSILON on the Kullback-Leibler
divergence with probability 1 - delta, z_{1-delta} = KLD_QUANTILE); then the copies are
moved by the kernel of :mod:`pf_regularise` (Musso, Oudjane & Le Gland 2001).
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.estimators.particle import regularise as reg
from mbde_core.estimators.particle.resampling import resample


class ParticleResampling:
    """Resampling, KLD-sampling and regularisation (see the module docstring)."""

    KLD_BIN_Z = 0.02        # [rad] for angles (x length scale for lengths)
    KLD_BIN_ZD = 0.2        # [rad/s] (x length scale for lengths)
    KLD_EPSILON = 0.05
    KLD_QUANTILE = 2.326    # z_{1 - delta}, delta = 0.01

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
            dev = np.empty((self.N, self.g))
            for b in np.unique(self.label):
                sel = self.label == b
                wb = w[sel] / max(w[sel].sum(), 1e-300)
                zb = self.z[sel]
                m = np.einsum("n,nk->k", wb, zb)
                if self.angular.any():
                    a = self.angular
                    m[a] = np.arctan2(np.einsum("n,nk->k", wb, np.sin(zb[:, a])), np.einsum("n,nk->k", wb, np.cos(zb[:, a])))
                d = zb - m
                d[:, self.angular] = (d[:, self.angular] + np.pi) % (2 * np.pi) - np.pi
                dev[sel] = d
            C = reg.branch_covariances(dev, self.zd, w, self.label, self.K, self._kernel_floor())
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
