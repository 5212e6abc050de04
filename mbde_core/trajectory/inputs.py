"""Generalized-force inputs of a trajectory problem: unknown torques as states of the
least-squares problem, measured torques (known inputs with their noise) as factors.

Dynamics with inputs. The R-matrix dynamics are linear in the applied forces, so m
generalized forces u (m,) on the coordinates c_j of q (E (n, m) their unit columns) add

    zdd = f(z, zd) + G(z) u,   G = Mbar^-1 R^T E,   Mbar = R^T M R

(M constant in natural coordinates). Its derivative along z_k, with R_k' = dR/dz_k from
the model's complex step (:mod:`.model`):

    d(G u)/dz_k = Mbar^-1 (R_k'^T E u - (R_k'^T M R + R^T M R_k') G u).

Input states. With ``inputs`` (``auto``: one per force-limited independent coordinate of
the default-tuning rule, :func:`~mbde_core.estimators.options.rule.auto_inputs` -- a
scenario's motor, or ``rule.force_limits`` -- plus one per coordinate a known-input sensor
drives), the state of step i becomes x_i = [z_i, zd_i, zdd_i, u_i] (b = 3g + m), the
trajectory of u the unknowns of the least-squares problem (issue 42's smoother input
states), with the factors (whitened rows, cost 1/2 |r|^2):

- ``eom`` r = (zdd_i - f_i - G_i u_i) / sigma_a (:mod:`.factors`, dr/du = -G / sigma_a);
- ``input_walk`` r = (u_{i+1} - u_i) / sigma_w: a random walk, paper 004's input model
  (the per-step increment sigma_w; start: the rule's F w' dt, the increment of an input
  of size F (its limit) changing at the motion's rate w'; then estimated from the data,
  :mod:`.calibration`);
- ``input_prior`` r = (u_0 - u0bar) / sigma0 at the first step (sigma0 = the limit);
- ``input:<sensor>`` r = (u_i / gain - y) / sigma_y for every reading y of a known-input
  sensor on the channel's coordinate (:mod:`mbde_core.sensors.effort`): the measured
  torque with its noise and its representativeness of the step (:func:`reading_weights`).

All input rows are linear in the states.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mbde_core.errors import ConfigError
from mbde_core.estimators.options.rule import force_limits, input_rate, rule_scales
from mbde_core.trajectory.normal import RowBlock

SIGMA_FLOOR = 1e-3  # of the RMS of a known input's readings


@dataclass
class InputChannels:
    """m input channels: coordinate indices ``cols`` (m,) into q and their ``names``,
    ``limit`` (m,) (inf: none), ``sigma_w`` (m,) random-walk increment per step,
    ``sigma0`` (m,) prior at the first step, ``sensors`` {channel: [known-input sensors]}."""

    cols: list
    names: list
    limit: np.ndarray
    sigma_w: np.ndarray
    sigma0: np.ndarray
    sensors: dict = field(default_factory=dict)

    @property
    def m(self) -> int:
        return len(self.cols)

    def matrix(self, n: int) -> np.ndarray:
        """E (n, m): unit columns of the channels' coordinates."""
        E = np.zeros((n, self.m))
        E[self.cols, np.arange(self.m)] = 1.0
        return E

    def channel_of(self, sensor_name: str) -> int | None:
        for j, ss in self.sensors.items():
            if any(s.name == sensor_name for s in ss):
                return j
        return None


def no_inputs() -> InputChannels:
    return InputChannels([], [], np.zeros(0), np.zeros(0), np.zeros(0), {})


def resolve_inputs(spec, mech, sensors, cfg: dict, dt: float, context=None, file: str = "<config>",
                   path: str = "smoother.inputs") -> InputChannels:
    """The input channels of option ``spec`` (``auto`` | ``none`` | a list of coordinate
    names or {coordinate, limit, psd}) for a mechanism, its sensors (known inputs always
    make a channel) and the rule's context (a scenario's motor: force limits, speed)."""
    names = list(mech.coordinate_names)
    chans: dict[int, dict] = {}
    if spec == "auto":
        lim = force_limits(mech, cfg, context)
        for k, F in enumerate(lim):
            if F > 0:
                chans[int(mech.independent[k])] = {"limit": float(F)}
    elif spec not in ("none", None) and spec != []:
        if not isinstance(spec, list):
            raise ConfigError(file, path, f"auto, none or a list of coordinates, got {spec!r}")
        for k, item in enumerate(spec):
            entry = {"coordinate": item} if isinstance(item, str) else item
            if not isinstance(entry, dict) or entry.get("coordinate") not in names:
                raise ConfigError(file, f"{path}[{k}]", f"a coordinate name (coordinates: {', '.join(names)})")
            extra = set(entry) - {"coordinate", "limit", "psd"}
            if extra:
                raise ConfigError(file, f"{path}[{k}].{sorted(extra)[0]}", "unknown key (coordinate, limit, psd)")
            chans[names.index(entry["coordinate"])] = {k2: float(v) for k2, v in entry.items() if k2 != "coordinate"}
    for s in getattr(sensors, "inputs", []):
        chans.setdefault(int(s.coordinate), {}).setdefault("sensors", []).append(s)
    if not chans:
        return no_inputs()
    sc = rule_scales(mech, cfg, context)
    w = input_rate(sc)
    cols = sorted(chans)
    limit, sigma_w, sigma0, by = [], [], [], {}
    for j, c in enumerate(cols):
        ch = chans[c]
        F = ch.get("limit", math.inf)
        scale = F if math.isfinite(F) else _force_scale(mech, sc, c)
        limit.append(F)
        sigma0.append(scale)
        sigma_w.append(math.sqrt(ch["psd"] * dt) if "psd" in ch else scale * w * dt)
        if ch.get("sensors"):
            by[j] = ch["sensors"]
    return InputChannels(cols, [names[c] for c in cols], np.array(limit), np.array(sigma_w), np.array(sigma0), by)


def _force_scale(mech, sc, col: int) -> float:
    """A generalized force's scale on coordinate ``col`` without a declared limit: the
    known forces' RMS acceleration times the reduced mass of the nearest independent
    coordinate (the rule's m_z a_g), at least 1e-3."""
    ind = list(np.asarray(mech.independent))
    k = ind.index(col) if col in ind else 0
    return max(float(sc.m_z[k] * sc.a_g[k]), 1e-3)


# -- the dynamics' input terms ---------------------------------------------------------------
def input_terms(M, R, dR, E, U):
    """(G (N, g, m), G u (N, g), d(G u)/dz (N, g, g)) at N steps: R (N, n, g), dR (N, n, g,
    g) with dR[..., k] = dR/dz_k, E (n, m), U (N, m) (module docstring)."""
    MR = np.einsum("ij,njk->nik", M, R)
    Mbar = np.einsum("nig,nih->ngh", R, MR)
    RE = np.einsum("nig,im->ngm", R, E)
    G = np.linalg.solve(Mbar, RE)
    GU = np.einsum("ngm,nm->ng", G, U)
    EU = U @ E.T  # (N, n)
    g = R.shape[2]
    dGU = np.empty((R.shape[0], g, g))
    for k in range(g):
        dRk = dR[..., k]
        dMbar = np.einsum("nig,nih->ngh", dRk, MR)
        dMbar = dMbar + np.swapaxes(dMbar, 1, 2)
        rhs = np.einsum("nig,ni->ng", dRk, EU) - np.einsum("ngh,nh->ng", dMbar, GU)
        dGU[:, :, k] = np.linalg.solve(Mbar, rhs[..., None])[..., 0]
    return G, GU, dGU


# -- rows ------------------------------------------------------------------------------------
def walk_rows(X, g: int, sigma_w) -> RowBlock:
    """``input_walk``: (u_{i+1} - u_i) / sigma_w between consecutive steps (linear)."""
    N, b = X.shape
    m = b - 3 * g
    w = 1.0 / np.asarray(sigma_w, dtype=float)
    K = max(N - 1, 0)
    r = (X[1:, 3 * g:] - X[:-1, 3 * g:]) * w
    A = np.zeros((m, b))
    A[:, 3 * g:] = -np.diag(w)
    return RowBlock("input_walk", np.arange(K), r, np.broadcast_to(A, (K, m, b)), np.broadcast_to(-A, (K, m, b)),
                    linear=True)


def prior_rows(X, g: int, mean, sigma0) -> RowBlock:
    """``input_prior``: (u_0 - mean) / sigma0 (linear)."""
    b = X.shape[1]
    m = b - 3 * g
    w = 1.0 / np.asarray(sigma0, dtype=float)
    Ji = np.zeros((1, m, b))
    Ji[0, :, 3 * g:] = np.diag(w)
    return RowBlock("input_prior", np.array([0]), ((X[0, 3 * g:] - mean) * w)[None], Ji, linear=True)


def measured_rows(X, g: int, channel: int, rows, gain: float, w) -> RowBlock:
    """``input:<sensor>``: w_k (u_channel / gain - y_k) at the readings' steps (linear);
    rows: the sensor's SensorRows (values y (K, 1)); w (K,): per-reading weights
    (:func:`reading_weights`)."""
    b = X.shape[1]
    idx = rows.idx
    r = (X[idx, 3 * g + channel] / gain - rows.values[:, 0]) * w
    Ji = np.zeros((idx.size, 1, b))
    Ji[:, 0, 3 * g + channel] = w / gain
    return RowBlock("input:" + rows.name, idx, r[:, None], Ji, linear=True)


def reading_weights(rows, steps_per_reading: float) -> np.ndarray:
    """(K,) 1 / sigma_k of a known input's readings y (in the reading's unit): the reading's
    noise (its whitening; floored at SIGMA_FLOOR of the readings' RMS, so a noise-free
    control signal stays a finite weight) and its representativeness: a reading samples
    the input at one instant, the input state u_i is the force over the grid step that the
    integration scheme sees, which differs from it by up to half the input's change over a
    step -- sigma_k = hypot(sigma_y, max(|y_k - y_k-1|, |y_k+1 - y_k|) / (2 R)), R the
    readings per grid step (steps_per_reading 1 / R) (a saturating speed controller's
    torque jumps between readings: without this term the hard integrator rows and the
    pinned torque contradict each other there)."""
    y = rows.values[:, 0] if rows.values.size else np.zeros(0)
    K = y.size
    if K == 0:
        return np.zeros(0)
    floor = SIGMA_FLOOR * max(float(np.sqrt(np.mean(y**2))), 1e-12)
    W = float(rows.whiten[0, 0])
    sig = max(1.0 / W if np.isfinite(W) and W > 0 else 0.0, floor)
    dy = np.abs(np.diff(y))
    jump = np.maximum(np.concatenate([[0.0], dy]), np.concatenate([dy, [0.0]])) if K > 1 else np.zeros(1)
    return 1.0 / np.hypot(sig, jump * min(float(steps_per_reading), 1.0) / 2.0)


def inverse_dynamics_guess(G, f, zdd, limit) -> np.ndarray:
    """u (N, m) that best explains zdd - f by G u (least squares per step), clipped to the
    limits: the initial guess of the input states."""
    Gt = np.swapaxes(G, 1, 2)
    A = Gt @ G
    A = A + 1e-12 * np.einsum("nii->n", A)[:, None, None] * np.eye(G.shape[2])[None]
    u = np.linalg.solve(A, Gt @ (zdd - f)[..., None])[..., 0]
    return np.clip(u, -limit, limit)

