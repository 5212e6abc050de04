"""VIPF: particle filter whose proposal is the stochastic variational integrator (paper 002 sec. 3).

Paper 002 (Schultz, Flasskamp & Murphey 2016) shows that a particle filter inherits the
statistical properties of the integrator that maps its particles forward: an explicit
Euler (RK1) proposal adds artificial diffusion (the particle cloud's phase-space area
grows, Fig. 2), which at low measurement rates leaves few particles near the truth and
drives resampling to a handful of unique particles (particle deprivation, Fig. 7). A
variational integrator is symplectic: without noise it preserves the cloud's area, so
the spread of the cloud is only the modelled noise.

Proposal (lines 2-4 of Algorithm 1 of paper 000, replaced): every particle is advanced
over dt by the stochastic discrete Euler-Lagrange step (paper 002 eqs. 5-6, in the
independent coordinates of the constrained mechanism, see
:mod:`mbde_core.engine.variational`)::

    midpoint (eq. 6):           z1 = z0 + h zd_mid + sigma dW1,   p1 = p0 + h F_mid + gamma dW2
    symplectic_euler (eq. 5):   z1 = z0 + h zd0 + sigma dW1,      p1 = p0 + h F(z1) + gamma dW2

with dW1, dW2 ~ N(0, dt I_g) independent per particle and step, ``noise.position`` =
sigma [z unit / sqrt(s)] and ``noise.velocity`` = gamma [z unit / s / sqrt(s)], the
momentum impulse being Mbar gamma dW2 (gamma is the diffusion of zd: the same number
for any mass scale; for the unit masses of the paper's examples it is its gamma on p).
The assembly branch of each particle is kept by its own position problems. Weights,
normalisation, ESS and resampling are those of :class:`~mbde_core.estimators.particle.filter.ParticleFilter`;
the default resampling is the paper's: the low-variance (systematic) sampler of
Probabilistic Robotics p. 110 at every update (``ess_threshold: 1``).

Everything else (initialisation, branch tracking, gating, recovery, outputs) is the PF's.
``acceleration_sigma`` (default 0 here) can still add the PF's acceleration noise on top.

The velocity noise gamma dW2 is a velocity impulse of variance gamma^2 h per step, the
same as the PF's acceleration noise v ~ N(0, sigma_a^2) applied as the impulse h v with
sigma_a = gamma / sqrt(h). ``proposal: prior`` draws it blindly inside the step (paper
002's filter, ``config/estimators/vipf.yaml`` and ``mbde bench vi``); ``proposal: adapted``
(the built-in default) integrates the noise-free VI step and lets the PF draw the impulse
given the readings (the locally optimal proposal of :mod:`.proposal`; the same target
density, importance weights corrected), which is what keeps a cloud of a few hundred
particles on a 2-DOF linkage: with the blind draw the five-bar with gyroscopes lost the
motion after every uniform start (clean RMSE 2.3 rad, 15 % of the readings gated).

Built-in defaults from the mechanism (as the PF's, :mod:`.scales`): ``noise.velocity:
null`` is gamma = sigma_a sqrt(h) with the PF's sigma_a rule; particle counts, the
uniform start's velocity range and annealing, the regularisation kernel and the lock
detector are the PF's. ``config/estimators/vipf.yaml`` holds paper 002's settings.
Measured limit: the first-order ``symplectic_euler`` at the pf rig's speeds (pf_sim, 37
rad/s at 5 ms) loses the crank with the derived settings (RMSE 40-90 deg from a start at
the truth: its per-step error trips the lock detector, whose injections do not help); with
paper 002's settings it tracks (< 4 deg, test_vipf.py). The default midpoint tracks with both.

When to use it (see the README): low measurement rates, long prediction horizons
(occlusions, dropped readings), conservative (undamped or lightly damped) mechanisms,
where an explicit integrator's artificial diffusion would spread the cloud. At a high
measurement rate with rk4 at the same step the two proposals track alike; rk4 is more
accurate per step for smooth motion, the VI is symplectic and preserves energy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mbde_core.engine.integrators import MBState
from mbde_core.errors import ConfigError
from mbde_core.estimators.particle import scales as pf_scale
from mbde_core.estimators.options.frozen import Options
from mbde_core.estimators.particle.filter import ParticleFilter, check_config
from mbde_core.estimators.particle.options import ParticleOptions, Resampling
from mbde_core.estimators.traits import Traits

VI_INTEGRATORS = ("midpoint", "symplectic_euler")


@dataclass(frozen=True)
class VINoise(Options):
    position: float = 0.01            # sigma on z [unit/sqrt(s)] (paper 002: sigma dW1 on q)
    velocity: float | None = None     # gamma on zd [unit/s/sqrt(s)]; None: sigma_a sqrt(h) (PF rule)


@dataclass(frozen=True)
class VIPFOptions(ParticleOptions):
    """The PF's options with the variational proposal; resampling at every update, as
    paper 002; the rest as the PF (mechanism-derived)."""

    integrator: str = "midpoint"               # midpoint (paper 002 eq. 6) | symplectic_euler (eq. 5)
    acceleration_sigma: float | None = 0.0     # the PF's acceleration noise, off: the noise is below
    resampling: Resampling = Resampling("systematic", 1.0)
    noise: VINoise = VINoise()


def check_vi_config(cfg: dict, file: str = "<config>", path: str = "vipf", g: int | None = None) -> None:
    """Validate the VIPF options (the PF's, restricted to the variational integrators)."""
    check_config(cfg, file, path, g)
    if cfg["integrator"] not in VI_INTEGRATORS:
        raise ConfigError(file, f"{path}.integrator", f"must be one of {', '.join(VI_INTEGRATORS)} (variational)")
    for key in ("position", "velocity"):
        value = cfg["noise"][key]
        if (value is None and key == "position") or (value is not None and not value >= 0):
            raise ConfigError(file, f"{path}.noise.{key}", f"must be >= 0{' (or null: derived)' if key == 'velocity' else ''}, got {value}")


class VIParticleFilter(ParticleFilter):
    """Particle filter with the stochastic variational proposal (see the module docstring).

    Parameters as :class:`ParticleFilter`; options :class:`VIPFOptions` (config/estimators/vipf.yaml).
    """

    name = "vipf"
    Options = VIPFOptions
    traits = Traits(input_states=True, known_inputs=True, noise_rule="particle", drivers=True, local=False)
    particles_per_dof = pf_scale.VIPF_PARTICLES_PER_DOF

    @classmethod
    def validate_config(cls, cfg, file, path):
        check_vi_config(cfg, file, path)

    def __init__(self, mech, sensors, options, rng=None):
        super().__init__(mech, sensors, options, rng)
        self.sigma_q = float(options.noise.position)
        gamma = options.noise.velocity
        self._sigma_a0 = self.sigma_a  # acceleration_sigma: the PF's noise on top
        if gamma is None:  # the PF's rule: gamma = sigma_a sqrt(h) (module docstring)
            gamma = pf_scale.acceleration_sigma(self.scales) * math.sqrt(self._last_dt)
        self.sigma_p = float(gamma)
        if self.adapted:
            self.sigma_a = math.sqrt(self._sigma_a0**2 + self.sigma_p**2 / self._last_dt)

    def _propagate(self, dt: float, extra=None) -> MBState:
        """The stochastic variational step of every particle (paper 002 eqs. 5-6); ``extra``:
        the PF's acceleration noise (``proposal: prior`` with acceleration_sigma > 0). With
        the adapted proposal the velocity noise is the PF's impulse drawn given the readings
        (module docstring): the step itself has none."""
        N, g = self.N, self.g
        root = math.sqrt(dt)
        s1 = self.sigma_q * root * self.rng.standard_normal((N, g)) if self.sigma_q > 0 else None
        blind = self.sigma_p > 0 and not self.adapted
        s2 = self.sigma_p * root * self.rng.standard_normal((N, g)) if blind else None
        state = MBState(self.q, self.qd, self.qdd if self._fresh else None, aux=self._aux)
        return self.integrator.step_noisy(self.mech, self.t, state, dt, s1, s2, extra_zdd=extra)

    def predict(self, dt: float) -> None:
        if self.adapted:  # gamma dW2 as the impulse dt v, v ~ N(0, gamma^2 / dt), plus sigma_a0
            self.sigma_a = math.sqrt(self._sigma_a0**2 + self.sigma_p**2 / dt)
        super().predict(dt)
        if self.sigma_q > 0 or self.sigma_p > 0:
            self._unique = self.N  # the copies of the last resampling have diffused

    def diagnostics(self) -> dict:
        out = super().diagnostics()
        out["noise"] = {"position": self.sigma_q, "velocity": self.sigma_p}
        return out


def cloud_statistics(z: np.ndarray, zd: np.ndarray, w: np.ndarray | None = None):
    """(area, eigenvalues) of a particle cloud in the (z, zd) plane of one coordinate.

    z, zd: (N,); w: weights (N,) or None (equal). area = pi sqrt(det C) of the weighted
    covariance C (the 1-sigma ellipse; symplectic maps preserve phase-space area, so a
    noise-free VI keeps it, paper 002 Fig. 2); eigenvalues of C ascending.
    """
    X = np.stack([z, zd], axis=1)
    w = np.full(len(z), 1.0 / len(z)) if w is None else np.asarray(w, float) / np.sum(w)
    m = w @ X
    D = X - m
    C = (D.T * w) @ D
    return float(math.pi * math.sqrt(max(np.linalg.det(C), 0.0))), np.linalg.eigvalsh(C)
